//! The crate's one error type.

use std::path::PathBuf;

/// Everything that can go wrong reading a Laya checkpoint or converting it.
///
/// Every variant names its subject: the file, the JSON key, or the tensor.
#[derive(Debug, thiserror::Error)]
pub enum LayaError {
    /// An I/O failure on a named file or directory.
    #[error("{path}: {source}")]
    Io {
        /// The file being read or written.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The caller asked the conversion to stop ([`crate::convert_until`]).
    #[error("stopped: cancelled by the caller")]
    Cancelled,
    /// A directory with none of a checkpoint's configs: not a Laya checkpoint at all.
    #[error(
        "{path}: not a Laya checkpoint (it has no encoder/config.json nor rl_agent_config.json; a checkpoint directory holds model.safetensors, encoder/, rl_agent_config.json and tokenizer/)"
    )]
    NotACheckpoint {
        /// The directory.
        path: PathBuf,
    },
    /// A file the Laya layout requires is not there.
    #[error("{path}: missing ({what})")]
    MissingFile {
        /// The path that was looked for.
        path: PathBuf,
        /// What the file is for.
        what: &'static str,
    },
    /// A JSON file that does not parse.
    #[error("{path}: invalid JSON: {source}")]
    Json {
        /// The file.
        path: PathBuf,
        /// The parser's error (with line and column).
        #[source]
        source: serde_json::Error,
    },
    /// A JSON key that is missing or has the wrong type or value.
    #[error("{path}: key {key:?}: {reason}")]
    ConfigKey {
        /// The file.
        path: PathBuf,
        /// The key (dotted for nested keys).
        key: String,
        /// What is wrong.
        reason: String,
    },
    /// A safetensors file whose header is malformed.
    #[error("{path}: not a valid safetensors file: {reason}")]
    Safetensors {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A tensor stored in a dtype the converter does not read.
    #[error(
        "tensor {name:?} in {path}: unsupported dtype {dtype} (only F32, F16 and BF16 are read)"
    )]
    UnsupportedDtype {
        /// Tensor name (PyTorch spelling).
        name: String,
        /// The safetensors file.
        path: PathBuf,
        /// The dtype found.
        dtype: String,
    },
    /// A tensor whose shape does not match the configs.
    #[error(
        "tensor {name:?}: shape {found:?} does not match the config, expected {expected:?} ({why})"
    )]
    Shape {
        /// Tensor name (PyTorch spelling).
        name: String,
        /// Shape found in the safetensors header.
        found: Vec<usize>,
        /// Shape the configs imply.
        expected: Vec<usize>,
        /// Which config values give the expected shape.
        why: String,
    },
    /// A tensor the configs require is not in the checkpoint.
    #[error("missing tensor {name:?} (expected shape {expected:?}) in {dir}")]
    MissingTensor {
        /// Tensor name (PyTorch spelling).
        name: String,
        /// Expected shape.
        expected: Vec<usize>,
        /// The checkpoint directory.
        dir: PathBuf,
    },
    /// A tensor that is not part of a Laya checkpoint.
    #[error("tensor {name:?} in {path} is not part of a Laya checkpoint of this config")]
    UnknownTensor {
        /// Tensor name.
        name: String,
        /// The safetensors file.
        path: PathBuf,
    },
    /// The same tensor name in two shards.
    #[error("tensor {name:?} appears in both {first} and {second}")]
    DuplicateTensor {
        /// Tensor name.
        name: String,
        /// First file.
        first: PathBuf,
        /// Second file.
        second: PathBuf,
    },
    /// A weight that is NaN or infinite, or becomes so in its target type (a value above
    /// 65504 in F16, a Q8_0 block whose scale overflows): [`sky_gguf::check_finite_in`].
    #[error("tensor {name:?}: value {value} at flat index {index} {reason} (refusing to convert; pass --allow-nonfinite to keep it)")]
    NonFinite {
        /// Tensor name (PyTorch spelling).
        name: String,
        /// Flat (row-major) index of the first bad value.
        index: usize,
        /// The value.
        value: f32,
        /// Why it is refused (`is not finite`, `overflows F16 to inf ...`).
        reason: String,
    },
    /// A tokenizer that cannot be used (wrong model type, bad vocab, bad GGUF tokenizer keys).
    #[error("{path}: tokenizer: {reason}")]
    Tokenizer {
        /// tokenizer.json, or the GGUF file / key the tokenizer was rebuilt from.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// An error from the GGUF layer.
    #[error("{what}: {source}")]
    Gguf {
        /// What was being done (tensor name, output path).
        what: String,
        /// The sky-gguf error.
        #[source]
        source: sky_gguf::Error,
    },
    /// An invalid argument (unknown preset, bad type-policy glob ...).
    #[error("{0}")]
    Invalid(String),
}

/// Shorthand for results of this crate.
pub type Result<T, E = LayaError> = std::result::Result<T, E>;

impl LayaError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> LayaError {
        LayaError::Io {
            path: path.into(),
            source,
        }
    }

    pub(crate) fn key(
        path: impl Into<PathBuf>,
        key: impl Into<String>,
        reason: impl Into<String>,
    ) -> LayaError {
        LayaError::ConfigKey {
            path: path.into(),
            key: key.into(),
            reason: reason.into(),
        }
    }

    #[cfg_attr(not(feature = "fs"), allow(dead_code))] // used by the file-system part
    pub(crate) fn gguf(what: impl Into<String>, source: sky_gguf::Error) -> LayaError {
        LayaError::Gguf {
            what: what.into(),
            source,
        }
    }
}
