//! One module per subcommand: its clap arguments and a short handler.

pub mod ask;
pub mod bench;
pub mod build;
pub mod calibrate;
pub mod clean;
pub mod convert;
pub mod explain;
pub mod gc;
pub mod golden;
pub mod graph;
pub mod init;
pub mod inspect;
pub mod kernels;
pub mod quantize;
pub mod random;
pub mod status;
pub mod store;
pub mod tune;
pub mod verify;

/// The compute-path flags shared by `skyctl ask` and `skyctl bench` (flatten with
/// `#[command(flatten)]`).
#[derive(clap::Args, Debug, Clone, Default, PartialEq)]
pub struct ComputeFlags {
    /// Int8 matrix products with two-pass (Q8x2, ~15-bit) activations; a float model is
    /// quantized at load around its calibrated outlier channels (calibrated on the built-in
    /// prompts). A Q8_0 file runs in int8 without this flag.
    #[arg(long, conflicts_with = "q8_fast")]
    pub q8: bool,
    /// Int8 with single-pass Q8 activations: fastest, least accurate.
    #[arg(long)]
    pub q8_fast: bool,
    /// Plain round-to-nearest int8, no outlier channels in f32 (with --q8/--q8-fast, or on a
    /// Q8_0 file: ignore its outlier metadata).
    #[arg(long)]
    pub no_calib: bool,
}

impl ComputeFlags {
    /// The path these flags select.
    pub fn path(&self) -> crate::ops::compute::ComputePath {
        use crate::ops::compute::Compute;
        let compute = if self.q8_fast {
            Compute::Q8Fast
        } else if self.q8 {
            Compute::Q8
        } else {
            Compute::F32
        };
        crate::ops::compute::ComputePath {
            compute,
            no_calib: self.no_calib,
        }
    }
}
