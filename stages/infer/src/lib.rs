//! sky-infer: the inference engine for Laya decision models.
//!
//! Main types: [`Model`] (weights in forward layout, built from GGUF-named tensors),
//! [`forward::Workspace`] + [`forward::forward`] (the allocation-free pass),
//! [`kernels`] (matmul with AVX-512 / AVX2 / scalar paths).

pub mod answer;
pub mod config;
pub mod engine;
pub mod load;
pub mod pyjson;
pub mod sequence;
pub mod error;
pub mod forward;
pub mod golden;
pub mod kernels;
pub mod model;
pub mod weights;
pub mod int8;
pub mod calibrate;

pub use config::{ModelConfig, QType, Temperatures};
pub use error::{InferError, Result};
pub use model::{Model, TensorSource};
