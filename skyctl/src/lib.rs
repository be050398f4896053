//! skyctl: a declarative, content-hashed build tool for small on-device decision models.
//!
//! The binary is thin: [`cli`] parses arguments and hands each subcommand to one function in
//! [`commands`]. The model work lives in the stage crates under `stages/` (GGUF container,
//! Laya checkpoints and tokenizer, inference engine, quantization, kernel references); this
//! crate owns orchestration.

pub mod cli;
pub mod commands;
pub mod engine;
pub mod golden_table;
pub mod pipeline_args;
pub mod progress;
