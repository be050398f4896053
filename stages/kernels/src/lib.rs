//! sky-kernels: CPU reference implementations of the seven qwen35moe GPU kernels, the
//! PNGOLDEN1 golden-vector format, the golden generator, the CPU harness and the verifier.
//!
//! Specification: the golden README (seed `002_47a935cf701aeeb0`) says what the files are;
//! `spec/kernel-goldens.md` says how every value is computed. Main items:
//!
//! - [`format`]: [`GoldenFile`] reader (strict) and writer (deterministic, atomic).
//! - [`rng`]: the xorshift32 stream; [`suite`]: the table of files ([`FILES`]), the draw plan
//!   ([`Inputs::draw`]), the reference outputs ([`Outputs::compute`]), [`generate`] and the
//!   CPU harness [`run_cpu`].
//! - the kernels: [`q3k`] (Q3_K dequant + mat-vec), [`rope`] (partial NEOX RoPE), [`norm`]
//!   (QK RMSNorm, gated RMSNorm), [`moe`] (routing + shared gate), [`ssm`] (delta-rule
//!   recurrence, conv1d + SiLU).
//! - [`check()`]: compare a candidate directory with the goldens, giving a
//!   [`CheckReport`] (serde-serializable).
//!
//! Every kernel computes in f64 from its f32 inputs and rounds each output once to f32, with
//! `exp`/`sin`/`cos` from [`detmath`] (no platform libm), so the goldens are byte-identical
//! on every machine.
//!
//! ```no_run
//! # fn main() -> sky_kernels::Result<()> {
//! let golden = std::path::Path::new("golden/kernels");
//! sky_kernels::generate(golden)?;                       // the 40 PNGOLDEN1 files
//! sky_kernels::run_cpu(golden, std::path::Path::new("out"))?; // a harness: inputs -> outputs
//! let report = sky_kernels::check(golden, std::path::Path::new("out"))?;
//! assert!(report.passed);
//! # Ok(())
//! # }
//! ```

pub mod check;
pub mod detmath;
pub mod error;
pub mod format;
pub mod moe;
pub mod norm;
pub mod q3k;
pub mod rng;
pub mod rope;
pub mod ssm;
pub mod suite;

#[cfg(test)]
mod broken;

pub use check::{check, CheckReport, FileReport, Status, FLOOR_FRACTION};
pub use error::{Error, Result};
pub use format::{Dtype, GoldenFile, Payload, SEED};
pub use suite::{
    file_spec, generate, golden_set, input_files, output_files, run_cpu, set_digest, FileSpec,
    GeneratedFile, Inputs, Kernel, Outputs, Role, Tolerance, FILES,
};
