//! sky-infer: the inference engine for Laya decision models (ModernBERT encoder + decision
//! head), following the Python Laya runtime on every point where llama.cpp differs (state
//! truncation to `max_len`, `json.dumps` rendering, `[MASK]` scrubbing, erf GELU, float32 HF
//! RoPE angles, float32 softmax with clamped temperatures).
//!
//! - [`engine::Engine`]: model + tokenizer + temperatures; [`engine::Engine::systemone`]
//!   answers a `/v1/systemone` request, [`engine::Engine::run_case`] one golden case.
//! - [`load`]: from GGUF bytes ([`load::engine_from_gguf`], no filesystem, builds for
//!   wasm32) or, with the default `std-fs` feature, from a `.gguf` file or Laya directory
//!   ([`load::open`]).
//! - [`sequence`]: `build_sequence` exactly as Laya (ids and markers equal the reference).
//! - [`model::Model`] + [`forward::forward`] with a reusable [`forward::Workspace`]: the
//!   allocation-free pass; an observer sees every matmul input by site name (calibration).
//! - [`weights::Weight`]: f32 (transposed for the kernel) or an external [`weights::MatmulKernel`].
//! - [`kernels`]: matmul with AVX-512 / AVX2+FMA micro-kernels chosen at run time, scalar fallback.
//! - [`golden::check_golden`]: one model golden suite -> [`golden::GoldenReport`].
//!
//! ```no_run
//! use sky_infer::forward::Workspace;
//! let engine = sky_infer::load::open("models/s1-pico".as_ref())?;
//! let request = serde_json::json!({"state": "I was charged twice.",
//!     "questions": {"angry": {"type": "noul", "instructions": "Is the customer angry?"}}});
//! let response = engine.systemone(&mut Workspace::new(), &request)?;
//! println!("{}", response["answers"]["angry"]["noul"]);
//! # Ok::<(), sky_infer::InferError>(())
//! ```

pub mod answer;
pub mod calibrate;
pub mod config;
pub mod engine;
pub mod error;
pub mod forward;
pub mod golden;
pub mod int8;
pub mod kernels;
pub mod load;
pub mod model;
pub mod pyjson;
pub mod sequence;
pub mod threads;
pub mod weights;

pub use config::{ModelConfig, QType, Temperatures};
pub use error::{InferError, Result};
pub use model::{Model, TensorSource};
