//! sky-laya: Laya decision-model checkpoints (a ModernBERT encoder plus a small transformer
//! decision head) and their conversion to one GGUF file.
//!
//! - [`LayaCheckpoint::open`] reads a Laya directory: `encoder/config.json`
//!   ([`EncoderConfig`]), `rl_agent_config.json` ([`AgentConfig`], temperatures included),
//!   `tokenizer/` ([`LayaTokenizer`]) and memory-mapped safetensors weights (f32, f16 or
//!   bf16, single file or sharded), checking every shape against the configs;
//!   [`LayaCheckpoint::from_files`] does the same on files in memory ([`CheckpointFiles`]).
//! - [`gguf_name`] maps PyTorch tensor names to llama.cpp's; [`TypePolicy`] picks each
//!   tensor's ggml type; [`convert`] writes the GGUF file atomically.
//! - [`tokenizer_from_gguf`] rebuilds the exact Hugging Face tokenizer from a converted file.
//! - [`random::write_random`] writes a preset-size checkpoint with random weights.
//!
//! The format part (configs and their limits, tensor names, the type policy, the tokenizer
//! to and from GGUF) builds always. The default `fs` feature adds the file-system part
//! (checkpoints with safetensors weights, [`convert`], [`random`]) and with it safetensors,
//! rayon and sky-fs; the browser build (sky-web on wasm32) goes without.
//!
//! ```no_run
//! use sky_laya::{convert, ConvertOptions, LayaCheckpoint};
//! let ckpt = LayaCheckpoint::open("models/s1-pico")?;
//! let summary = convert(&ckpt, &ConvertOptions::default(), "s1-pico.gguf".as_ref())?;
//! assert_eq!(summary.tensors.len(), 33);
//! # Ok::<(), sky_laya::LayaError>(())
//! ```

// The format part: built always (the browser engine links it through sky-infer).
pub mod config;
pub mod error;
pub mod names;
pub mod policy;
pub mod tokenizer;

// The file-system part: safetensors weights, conversion, random checkpoints.
#[cfg(feature = "fs")]
pub mod checkpoint;
#[cfg(feature = "fs")]
pub mod convert;
#[cfg(feature = "fs")]
pub mod random;
#[cfg(feature = "fs")]
mod rng;
#[cfg(feature = "fs")]
mod stream;

#[cfg(feature = "fs")]
pub use checkpoint::{expected_tensors, CheckpointFiles, LayaCheckpoint, SourceDtype, TensorEntry};
pub use config::{
    temperature_bucket_key, AgentConfig, ConfigIssue, EncoderConfig, ModelNumbers, QUESTION_TYPES,
};
#[cfg(feature = "fs")]
pub use convert::{
    build_writer, convert, convert_until, ConvertOptions, ConvertSummary, ConvertedTensor,
};
pub use error::{LayaError, Result};
pub use names::{gguf_name, is_dropped, is_head_tensor};
pub use policy::{
    glob_match, parse_type, policy_type_name, policy_type_names, TypePolicy, POLICY_TYPES,
};
pub use tokenizer::{
    systemone_template, tokenizer_from_gguf, tokenizer_json_from_gguf, LayaTokenizer,
};
