//! The crate's one error type.

use std::path::PathBuf;

/// Everything that can go wrong reading, writing or converting GGUF data.
///
/// Parse errors carry the byte offset (from the start of the file) where the bad item starts.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An I/O failure on a named file.
    // The I/O error is part of the message, not a `source`, so that `{:#}` chains do not
    // print it twice.
    #[error("{path}: {err}")]
    Io {
        /// The file being read or written.
        path: PathBuf,
        /// The underlying error.
        err: std::io::Error,
    },
    /// An I/O failure on a writer without a path.
    #[error("write failed: {0}")]
    Write(std::io::Error),
    /// The file ended before an item was complete.
    #[error("truncated file: {what} at byte {offset} needs {needed} bytes, only {available} left")]
    Truncated {
        /// What was being read.
        what: String,
        /// Byte offset of the item.
        offset: u64,
        /// Bytes the item needs.
        needed: u64,
        /// Bytes left in the file.
        available: u64,
    },
    /// The first four bytes are not `GGUF`.
    #[error(
        "not a GGUF file: magic at byte 0 is {} ({:?}), expected 47 47 55 46 (\"GGUF\")",
        hex_bytes(found),
        String::from_utf8_lossy(found)
    )]
    BadMagic {
        /// The four bytes found.
        found: [u8; 4],
    },
    /// A version other than 2 or 3.
    #[error("unsupported GGUF version {version} at byte 4 (only versions 2 and 3 are read){hint}")]
    UnsupportedVersion {
        /// The version found.
        version: u32,
        /// Extra explanation (e.g. a byte-swapped file).
        hint: &'static str,
    },
    /// A count (keys, tensors, array items, string bytes) larger than the rest of the file could hold.
    #[error("{what} at byte {offset} is {count}, more than the {available} bytes left in the file could hold")]
    CountTooLarge {
        /// What was counted.
        what: String,
        /// Byte offset of the count.
        offset: u64,
        /// The count found.
        count: u64,
        /// Bytes left after the count.
        available: u64,
    },
    /// A metadata value type id outside 0..=12.
    #[error("{what} at byte {offset}: unknown metadata value type {id}")]
    BadValueType {
        /// Where the type id was found (key name).
        what: String,
        /// Byte offset of the type id.
        offset: u64,
        /// The id found.
        id: u32,
    },
    /// Arrays nested deeper than [`crate::MAX_ARRAY_DEPTH`].
    #[error("metadata key {key:?}: arrays nested deeper than {max} levels at byte {offset}")]
    TooDeep {
        /// The key holding the array.
        key: String,
        /// Byte offset of the innermost array header.
        offset: u64,
        /// The limit.
        max: usize,
    },
    /// A string that is not UTF-8.
    #[error(
        "{what} at byte {offset} is not valid UTF-8 (bad byte at string position {valid_up_to})"
    )]
    BadUtf8 {
        /// Which string (key name, tensor name, value of key ...).
        what: String,
        /// Byte offset of the string's bytes.
        offset: u64,
        /// Length of the valid prefix.
        valid_up_to: usize,
    },
    /// The same metadata key appears twice.
    #[error("duplicate metadata key {key:?} at byte {offset}")]
    DuplicateKey {
        /// The key.
        key: String,
        /// Byte offset of the second occurrence.
        offset: u64,
    },
    /// The same tensor name appears twice.
    #[error("duplicate tensor name {name:?} at byte {offset}")]
    DuplicateTensor {
        /// The name.
        name: String,
        /// Byte offset of the second occurrence.
        offset: u64,
    },
    /// `general.alignment` of the wrong type, zero, or not a power of two.
    #[error("bad general.alignment at byte {offset}: {reason}")]
    BadAlignment {
        /// Byte offset of the value.
        offset: u64,
        /// What is wrong with it.
        reason: String,
    },
    /// A tensor descriptor that does not describe a valid tensor.
    #[error("tensor {name:?} (descriptor at byte {offset}): {reason}")]
    BadTensor {
        /// Tensor name.
        name: String,
        /// Byte offset of the descriptor.
        offset: u64,
        /// What is wrong.
        reason: String,
    },
    /// A tensor whose data lies (partly) past the end of the file.
    #[error("tensor {name:?}: data at bytes {start}..{end} lies past the end of the file ({file_len} bytes)")]
    TensorOutOfBounds {
        /// Tensor name.
        name: String,
        /// Absolute start of its data.
        start: u64,
        /// Absolute end of its data.
        end: u64,
        /// File length.
        file_len: u64,
    },
    /// A tensor offset that is not a multiple of the alignment.
    #[error("tensor {name:?}: offset {offset} (relative to the data section) is not a multiple of the alignment {alignment}")]
    MisalignedTensor {
        /// Tensor name.
        name: String,
        /// Its offset in the data section.
        offset: u64,
        /// The file's alignment.
        alignment: u64,
    },
    /// A ggml type id whose byte size is not known.
    #[error("{what}: ggml type {id} has no known byte size")]
    UnknownType {
        /// Where it was found.
        what: String,
        /// The type id.
        id: u32,
    },
    /// A row (or element count) that does not split into whole blocks.
    #[error("{what}: {len} values do not split into blocks of {block} ({ty})")]
    NotBlockMultiple {
        /// Where (tensor name, function).
        what: String,
        /// The length given.
        len: u64,
        /// The block size needed.
        block: u64,
        /// Type name.
        ty: String,
    },
    /// Data whose length does not match what its shape and type need.
    #[error("{what}: expected {expected} bytes, got {actual}")]
    LengthMismatch {
        /// Which data.
        what: String,
        /// Expected byte count.
        expected: u64,
        /// Actual byte count.
        actual: u64,
    },
    /// A type that has no f32 conversion (only F32, F16, BF16, Q8_0 have one).
    #[error("{what}: no f32 conversion for ggml type {ty}")]
    NotConvertible {
        /// Where.
        what: String,
        /// Type name.
        ty: String,
    },
    /// An arithmetic overflow computing a size.
    #[error("{what}: size overflows 64 bits")]
    Overflow {
        /// Which size.
        what: String,
    },
    /// Writer input that cannot be written (bad alignment, too many dims ...).
    #[error("{0}")]
    Invalid(String),
    /// A value that does not survive its target type finite ([`crate::check_finite_in`]):
    /// NaN or infinite already, rounded to infinity by F16 or BF16, or a Q8_0 block whose
    /// f16 scale overflows.
    #[error("tensor {tensor:?}: value {value:e} at flat index {index} {reason}")]
    NotFinite {
        /// The tensor (or metadata key) being written.
        tensor: String,
        /// The flat (row-major) index of the first bad value (for a Q8_0 scale: the block's
        /// largest value, which sets the scale).
        index: usize,
        /// The value.
        value: f32,
        /// Why it is refused ("is not finite", "overflows F16 to inf (max 65504)" ...).
        reason: String,
    },
}

/// Shorthand for results of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// `47 47 55 46`.
fn hex_bytes(b: &[u8]) -> String {
    b.iter()
        .map(|x| format!("{x:02x}"))
        .collect::<Vec<_>>()
        .join(" ")
}
