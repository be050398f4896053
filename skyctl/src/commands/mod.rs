//! One module per subcommand: its clap arguments and a short handler.

pub mod ask;
pub mod bench;
pub mod build;
pub mod calibrate;
pub mod clean;
pub mod convert;
pub mod cuda;
pub mod embed;
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
pub mod worker;

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

/// Where the calibration of a quantizing command comes from, and its outlier ratio (flatten
/// with `#[command(flatten)]`; `skyctl quantize` and `skyctl tune`).
#[derive(clap::Args, Debug, Clone)]
pub struct CalibrationFlags {
    /// A calibration file from `skyctl calibrate`.
    #[arg(long, value_name = "FILE", conflicts_with = "prompts")]
    pub calibration: Option<std::path::PathBuf>,
    /// Calibrate on this JSONL prompt set (default: the twelve built-in prompts).
    #[arg(long, value_name = "FILE")]
    pub prompts: Option<std::path::PathBuf>,
    /// A channel is an outlier when its calibrated max |x| exceeds this times the median.
    #[arg(long, value_name = "R", default_value_t = sky_infer::int8::OUTLIER_RATIO)]
    pub outlier_ratio: f32,
}

impl CalibrationFlags {
    /// The calibration of `model` these flags select, with the notes to show.
    pub fn load(
        &self,
        model: &std::path::Path,
    ) -> anyhow::Result<(sky_quant::Calibration, Vec<String>)> {
        crate::ops::calibrate::calibration_for(
            model,
            self.calibration.as_deref(),
            self.prompts.as_deref(),
        )
    }
}
