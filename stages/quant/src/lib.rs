//! sky-quant: calibration, outlier-aware Q8_0 quantization and the int8 matmul kernels.
//!
//! The residual stream of the small Laya encoders has a few "massive" channels (~20x the
//! others). Inside a Q8_0 block such a channel sets the scale of the 31 others, and its weight
//! rounding error is amplified 20x. As in LLM.int8() (Dettmers et al., 2022), the input
//! channels whose calibrated magnitude stands far above the rest are computed in f32 with
//! exact weight columns, while everything else stays an int8 x int8 product.
//!
//! - [`Calibration`] collects the per-channel max |x| of every matrix product ("site") during
//!   a forward pass over [`CALIBRATION_PROMPTS`] (or a JSONL set, [`parse_prompt_set`]) and
//!   writes it as deterministic JSON.
//! - [`select_outliers`] picks the channels above `ratio x median` (at most k/16).
//! - [`quantize_q8_exact_cols`] / [`quantize_for_file`] write standard Q8_0 bytes whose block
//!   scales represent the outlier weights exactly; [`quantize_q8_0`] is plain ggml Q8_0.
//!   The GGUF metadata that records outliers is described in [`q8`].
//! - [`Q8Matrix::matmul`] is the int8 product ([`ActQuant::Q8`] or [`ActQuant::Q8x2`]
//!   activations) on the fastest [`KernelPath`] of the CPU, with a scalar path always built.
//!
//! The crate has no threads and no file I/O, and builds for `wasm32-unknown-unknown`.
//!
//! ```
//! use sky_quant::{ActQuant, Calibration, Q8Matrix, Scratch, OUTLIER_RATIO};
//!
//! let (n, k, rows) = (2, 64, 3);
//! let mut x = vec![0.5f32; n * k];
//! x[7] = 30.0; // a massive channel
//! let w = vec![0.01f32; rows * k];
//!
//! let mut calib = Calibration::new();
//! calib.observe("layer.0.Wqkv", &x, n, k)?;
//! let outliers = calib.outliers("layer.0.Wqkv", OUTLIER_RATIO)?.unwrap_or_default();
//! assert_eq!(outliers, vec![7]);
//!
//! let m = Q8Matrix::quantize(&w, rows, k, &outliers)?;
//! let mut out = vec![0f32; n * rows];
//! m.matmul(&x, n, &mut out, ActQuant::Q8x2, &mut Scratch::new())?;
//! assert!((out[0] - (63.0 * 0.5 + 30.0) * 0.01).abs() < 1e-3);
//! # Ok::<(), sky_quant::Error>(())
//! ```

#![deny(missing_docs)]

mod calib;
pub mod cpu;
mod error;
mod kernels;
mod matmul;
mod outliers;
mod prompts;
pub mod q8;

pub use calib::{Calibration, CALIBRATION_FORMAT};
pub use cpu::{IsaEnvError, IsaLevel};
pub use error::{Error, Result};
pub use kernels::KernelPath;
pub use matmul::{matmul_f32_ref, ActQuant, Q8Matrix, Scratch};
pub use outliers::{max_outliers, median, select_outliers, OUTLIER_RATIO};
pub use prompts::{calibration_prompts, parse_prompt_set, PromptRequest, CALIBRATION_PROMPTS};
pub use q8::{
    dequantize_q8_0, outlier_key, outlier_weights_key, quantize_for_file, quantize_q8_0,
    quantize_q8_exact_cols, META_CALIBRATION_DIGEST, META_OUTLIERS_PREFIX, META_OUTLIER_RATIO,
    META_OUTLIER_WEIGHTS_PREFIX, Q8_0_BLOCK_BYTES, QK8_0,
};
