//! The crate's one error type.

use std::path::PathBuf;

/// Everything that can go wrong reading, writing, generating or checking golden vectors.
///
/// Every variant names its subject: the file (path or golden name) and, for parse errors, the
/// byte offset of the offending item.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An I/O failure on a named file or directory.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory being read or written.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The `PNGOLDEN1 <name> <dtype> <count> seed=0x<hex>` header line is malformed.
    #[error("{file}: bad PNGOLDEN1 header at byte {offset}: {reason}")]
    BadHeader {
        /// The file (path or label) being parsed.
        file: String,
        /// Byte offset (from the start of the file) of the offending field.
        offset: usize,
        /// What is wrong and what was expected.
        reason: String,
    },
    /// The payload length differs from `count × sizeof(dtype)`.
    #[error(
        "{file}: payload after the header (byte {offset}) is {found} bytes, but the header \
         declares {count} × {dtype} = {expected} bytes{hint}"
    )]
    PayloadSize {
        /// The file (path or label) being parsed.
        file: String,
        /// Byte offset where the payload starts.
        offset: usize,
        /// The declared element count.
        count: u64,
        /// The declared element type.
        dtype: crate::dtype::Dtype,
        /// Expected payload bytes (`None` when `count × size` overflows).
        expected: String,
        /// Payload bytes present.
        found: u64,
        /// " (trailing bytes)" or " (truncated)".
        hint: &'static str,
    },
    /// A well-formed file whose header disagrees with what the golden table requires.
    #[error("{file}: {field} is {found}, expected {expected}")]
    Mismatch {
        /// The file (path or label).
        file: String,
        /// Which header field disagrees (`name`, `dtype`, `count`, `seed`).
        field: &'static str,
        /// What the table requires.
        expected: String,
        /// What the file holds.
        found: String,
    },
    /// A golden (trusted) file holds NaN or Inf, so nothing can be judged against it.
    #[error(
        "{file}: golden value at element {index} is not finite ({value}); regenerate the goldens"
    )]
    NonFiniteGolden {
        /// The golden file.
        file: String,
        /// Index of the first non-finite element.
        index: usize,
        /// The value found.
        value: f32,
    },
    /// A file name the golden table does not know.
    #[error("unknown golden file name {name:?} (see sky_kernels::FILES for the table)")]
    UnknownFile {
        /// The name asked for.
        name: String,
    },
}

/// Result alias for this crate.
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }
}
