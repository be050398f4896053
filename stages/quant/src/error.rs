//! The one error type of sky-quant.

/// Everything that can go wrong in sky-quant. Every message names its subject (site, line,
/// tensor shape, channel index) so that the caller can point the user at the bad input.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A buffer does not have the length its stated shape implies.
    #[error("{what}: expected {expected} values ({shape}), got {got}")]
    Shape {
        /// Which buffer (for example "weights", "activations of site encoder.0.attn.Wqkv").
        what: String,
        /// The shape in words, for example "rows 768 x k 256".
        shape: String,
        /// The length the shape implies.
        expected: usize,
        /// The length given.
        got: usize,
    },
    /// The inner dimension cannot be split into 32-value Q8_0 blocks.
    #[error("k = {k} is not a multiple of 32, so the rows cannot be split into Q8_0 blocks")]
    NotBlockAligned {
        /// The offending inner dimension.
        k: usize,
    },
    /// A value that must be finite is NaN or infinite.
    #[error("{what}: non-finite value {value} at index {index}")]
    NonFinite {
        /// Which buffer.
        what: String,
        /// Flat index of the value.
        index: usize,
        /// The value itself.
        value: f32,
    },
    /// An outlier column index is out of range or repeated.
    #[error("outlier column {col} is invalid for k = {k}: {reason}")]
    BadOutlier {
        /// The column index.
        col: u32,
        /// The inner dimension.
        k: usize,
        /// Why it is rejected ("out of range", "listed twice").
        reason: &'static str,
    },
    /// `outlier_ratio` must be a finite number above 1.
    #[error("outlier_ratio must be a finite number above 1 (a channel is an outlier when it exceeds ratio x median), got {0}")]
    BadRatio(f32),
    /// A calibration channel magnitude is negative or not finite.
    #[error(
        "channel magnitude {value} at channel {channel} is invalid: magnitudes are finite and >= 0"
    )]
    BadMagnitude {
        /// The channel index.
        channel: usize,
        /// The value.
        value: f32,
    },
    /// The same site was observed with two different channel counts.
    #[error("site {site}: observed with {got} input channels, but earlier with {expected}")]
    SiteWidth {
        /// The site name.
        site: String,
        /// The channel count recorded first.
        expected: usize,
        /// The channel count now.
        got: usize,
    },
    /// A site cannot be observed: empty name or no input channel.
    #[error("site {site:?} with {k} input channels: a site needs a name and at least one channel")]
    InvalidSite {
        /// The site name given.
        site: String,
        /// The channel count given.
        k: usize,
    },
    /// A calibration file could not be parsed or is inconsistent.
    #[error("calibration file: {0}")]
    CalibrationFormat(String),
    /// A prompt set (JSONL) has a bad line.
    #[error("prompt set, line {line}: {reason}")]
    PromptLine {
        /// 1-based line number.
        line: usize,
        /// What is wrong with it.
        reason: String,
    },
    /// A prompt set contains no prompt at all.
    #[error("prompt set has no usable prompt (every line is empty); give at least one JSON decision request per line")]
    NoPrompts,
    /// Q8_0 bytes do not match the stated shape.
    #[error("Q8_0 data for rows {rows} x k {k}: expected {expected} bytes, got {got}")]
    Q8Bytes {
        /// Rows (output features).
        rows: usize,
        /// Inner dimension (input features).
        k: usize,
        /// Expected byte count (rows * k / 32 * 34).
        expected: usize,
        /// Given byte count.
        got: usize,
    },
    /// A Q8_0 block scale is NaN or infinite.
    #[error("Q8_0 data: block {block} of row {row} has a non-finite scale (f16 bits {bits:#06x})")]
    Q8Scale {
        /// Row index.
        row: usize,
        /// Block index within the row.
        block: usize,
        /// The raw f16 bits.
        bits: u16,
    },
    /// A forced kernel path is not supported by this CPU (or this build target).
    #[error("kernel path {0} is not available on this CPU/target")]
    KernelUnavailable(&'static str),
}

/// Result alias of sky-quant.
pub type Result<T> = std::result::Result<T, Error>;
