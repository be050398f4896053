//! The one error type of sky-infer.

use std::sync::Arc;

/// The error of another crate (GGUF, tokenizer, checkpoint, the OS) kept as a
/// [`std::error::Error::source`], shared so [`InferError`] stays `Clone`.
pub type Source = Arc<dyn std::error::Error + Send + Sync>;

/// Everything that can go wrong while loading a model, building a sequence or answering.
#[derive(Debug, Clone, thiserror::Error)]
pub enum InferError {
    /// A required GGUF metadata key or config field is missing.
    #[error("{origin}: required key `{key}` is missing")]
    MissingKey {
        /// Where the key was looked up (file or config name).
        origin: String,
        /// The key.
        key: String,
    },
    /// A metadata key or config field has the wrong type or an unusable value.
    #[error("`{key}`: {message}")]
    BadValue {
        /// The key or field.
        key: String,
        /// What is wrong with it.
        message: String,
    },
    /// A required tensor is missing.
    #[error("required tensor `{name}` is missing")]
    MissingTensor {
        /// GGUF tensor name.
        name: String,
    },
    /// A tensor has the wrong shape.
    #[error("tensor `{name}` has shape {found:?}, expected {expected:?} (PyTorch order)")]
    BadShape {
        /// GGUF tensor name.
        name: String,
        /// Expected PyTorch-order shape.
        expected: Vec<usize>,
        /// Shape found.
        found: Vec<usize>,
    },
    /// A tensor could not be decoded to f32 (unsupported type, short data).
    #[error("tensor `{name}`: {message}")]
    BadTensor {
        /// GGUF tensor name.
        name: String,
        /// What is wrong.
        message: String,
    },
    /// The file is a GGUF or checkpoint, but not a Laya decision model.
    #[error("not a Laya decision model: {message}")]
    NotDecisionModel {
        /// Why.
        message: String,
    },
    /// A question or request is malformed (the request interface maps this to a 400/422).
    #[error("{path}: {message}")]
    BadRequest {
        /// JSON path of the offending value, e.g. `questions.route.criteria`.
        path: String,
        /// What is wrong and how to fix it.
        message: String,
    },
    /// A token id is outside the vocabulary.
    #[error("token id {id} at position {position} is outside the vocabulary of {vocab}")]
    TokenOutOfRange {
        /// Position in the sequence.
        position: usize,
        /// The id.
        id: u32,
        /// Vocabulary size.
        vocab: usize,
    },
    /// Reading a file failed (only with the `std-fs` feature).
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: String,
        /// The OS error (or what was wrong with the bytes read).
        #[source]
        source: Source,
    },
    /// A forward pass produced a NaN or infinite score (the model's weights are finite, checked
    /// at load, but its activations overflowed): no answer is given rather than a made-up one.
    #[error("{what}: value {value} at index {index} is not finite (the model overflows on this input; no answer)")]
    NonFinite {
        /// What was computed, e.g. `scores of case "c2"`.
        what: String,
        /// Index of the first bad value.
        index: usize,
        /// The value.
        value: f32,
    },
    /// The caller asked the work to stop ([`crate::engine::Engine::stop`]).
    #[error("stopped: cancelled by the caller")]
    Cancelled,
    /// A lower-level parser (GGUF, tokenizer, checkpoint, an int8 kernel) refused the input.
    #[error("{component}: {}{source}", at.as_deref().map(|a| format!("{a}: ")).unwrap_or_default())]
    Upstream {
        /// Which component.
        component: &'static str,
        /// The file or item it was working on, when known.
        at: Option<String>,
        /// Its error.
        #[source]
        source: Source,
    },
}

impl InferError {
    /// `component` refused the input with `e` (an error, or a message).
    pub fn upstream(
        component: &'static str,
        e: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> InferError {
        InferError::Upstream {
            component,
            at: None,
            source: Arc::from(e.into()),
        }
    }

    /// Reading `path` failed with `e` (an error, or a message).
    pub fn io(
        path: impl Into<String>,
        e: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> InferError {
        InferError::Io {
            path: path.into(),
            source: Arc::from(e.into()),
        }
    }

    /// An upstream error located in `at` (a file); other errors as they are.
    pub fn at(self, at: impl Into<String>) -> InferError {
        match self {
            InferError::Upstream {
                component, source, ..
            } => InferError::Upstream {
                component,
                at: Some(at.into()),
                source,
            },
            other => other,
        }
    }
}

/// Shorthand for results of this crate.
pub type Result<T> = std::result::Result<T, InferError>;

pub(crate) fn bad_request(path: impl Into<String>, message: impl Into<String>) -> InferError {
    InferError::BadRequest {
        path: path.into(),
        message: message.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    #[test]
    fn upstream_and_io_errors_keep_their_source() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "No such file");
        let e = InferError::io("m/config.json", io);
        assert_eq!(e.to_string(), "m/config.json: No such file");
        assert_eq!(
            e.source().map(|s| s.to_string()).as_deref(),
            Some("No such file")
        );
        // The OS error itself, for a caller that wants its kind.
        let InferError::Io { source, .. } = &e else {
            panic!("{e:?}")
        };
        let kind = source.downcast_ref::<std::io::Error>().map(|s| s.kind());
        assert_eq!(kind, Some(std::io::ErrorKind::NotFound));

        let e = InferError::upstream("gguf", "bad magic").at("m.gguf");
        assert_eq!(e.to_string(), "gguf: m.gguf: bad magic");
        assert_eq!(
            e.source().map(|s| s.to_string()).as_deref(),
            Some("bad magic")
        );
        assert_eq!(InferError::upstream("laya", "x").to_string(), "laya: x");
    }
}
