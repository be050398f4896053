//! The one error type of sky-infer.

use std::fmt;

/// Everything that can go wrong while loading a model, building a sequence or answering.
#[derive(Debug, Clone, PartialEq)]
pub enum InferError {
    /// A required GGUF metadata key or config field is missing.
    MissingKey {
        /// Where the key was looked up (file or config name).
        source: String,
        /// The key.
        key: String,
    },
    /// A metadata key or config field has the wrong type or an unusable value.
    BadValue {
        /// The key or field.
        key: String,
        /// What is wrong with it.
        message: String,
    },
    /// A required tensor is missing.
    MissingTensor {
        /// GGUF tensor name.
        name: String,
    },
    /// A tensor has the wrong shape.
    BadShape {
        /// GGUF tensor name.
        name: String,
        /// Expected PyTorch-order shape.
        expected: Vec<usize>,
        /// Shape found.
        found: Vec<usize>,
    },
    /// A tensor could not be decoded to f32 (unsupported type, short data).
    BadTensor {
        /// GGUF tensor name.
        name: String,
        /// What is wrong.
        message: String,
    },
    /// The file is a GGUF or checkpoint, but not a Laya decision model.
    NotDecisionModel {
        /// Why.
        message: String,
    },
    /// A question or request is malformed (the request interface maps this to a 400/422).
    BadRequest {
        /// JSON path of the offending value, e.g. `questions.route.criteria`.
        path: String,
        /// What is wrong and how to fix it.
        message: String,
    },
    /// A token id is outside the vocabulary.
    TokenOutOfRange {
        /// Position in the sequence.
        position: usize,
        /// The id.
        id: u32,
        /// Vocabulary size.
        vocab: usize,
    },
    /// Reading a file failed (only with the `std-fs` feature).
    Io {
        /// The path.
        path: String,
        /// The OS message.
        message: String,
    },
    /// The caller asked the work to stop ([`crate::engine::Engine::stop`]).
    Cancelled,
    /// A lower-level parser (GGUF, tokenizer, checkpoint) refused the input.
    Upstream {
        /// Which component.
        component: &'static str,
        /// Its message.
        message: String,
    },
}

impl fmt::Display for InferError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InferError::MissingKey { source, key } => {
                write!(f, "{source}: required key `{key}` is missing")
            }
            InferError::BadValue { key, message } => write!(f, "`{key}`: {message}"),
            InferError::MissingTensor { name } => write!(f, "required tensor `{name}` is missing"),
            InferError::BadShape {
                name,
                expected,
                found,
            } => write!(
                f,
                "tensor `{name}` has shape {found:?}, expected {expected:?} (PyTorch order)"
            ),
            InferError::BadTensor { name, message } => write!(f, "tensor `{name}`: {message}"),
            InferError::NotDecisionModel { message } => {
                write!(f, "not a Laya decision model: {message}")
            }
            InferError::BadRequest { path, message } => write!(f, "{path}: {message}"),
            InferError::TokenOutOfRange {
                position,
                id,
                vocab,
            } => write!(
                f,
                "token id {id} at position {position} is outside the vocabulary of {vocab}"
            ),
            InferError::Io { path, message } => write!(f, "{path}: {message}"),
            InferError::Upstream { component, message } => write!(f, "{component}: {message}"),
            InferError::Cancelled => write!(f, "stopped: cancelled by the caller"),
        }
    }
}

impl std::error::Error for InferError {}

/// Shorthand for results of this crate.
pub type Result<T> = std::result::Result<T, InferError>;

pub(crate) fn bad_request(path: impl Into<String>, message: impl Into<String>) -> InferError {
    InferError::BadRequest {
        path: path.into(),
        message: message.into(),
    }
}
