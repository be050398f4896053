//! The seams between the remote cache's semantics ([`super::RemoteCache`]) and the wire: a
//! [`Transport`] moves bytes to and from `<base>/cas/<digest>` and `<base>/ac/<key>`, and a
//! [`Signer`] signs and checks action records. The engine names no HTTP, TLS or crypto crate:
//! the HTTP client (`sky-remote`) implements these traits, and [`super::memory`] is an
//! in-memory stand-in for tests.

use std::path::Path;

use crate::key::Digest;

/// Why a request did not give a usable answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// The server answered with this status (not 2xx, not 404).
    Status(u16),
    /// No answer: connection refused, timeout, TLS, a body cut short.
    Transport(String),
    /// An answer, but not the right bytes (digest mismatch, too large).
    Content(String),
}

/// The result of a `GET` or `HEAD`: `None` is a miss (a 404).
pub type Found<T> = std::result::Result<Option<T>, Failure>;

/// The five calls the remote cache makes; `path` is `cas/<hex>` or `ac/<hex>`. Nothing here
/// decides what a failure means for the build, nor prints: that is the cache's job.
pub trait Transport: Send + Sync {
    /// Whether the remote has `path`.
    fn head(&self, path: &str) -> std::result::Result<bool, Failure>;
    /// A small object (an action record) into memory; more than `limit` bytes is a
    /// [`Failure::Content`].
    fn get_small(&self, path: &str, limit: u64) -> Found<Vec<u8>>;
    /// A blob into the new file `dest`, which must hash to `want` (else [`Failure::Content`])
    /// and be no larger than `limit` bytes. Returns the size. `dest` may be left behind on
    /// error: the caller removes it.
    fn get_blob(&self, path: &str, dest: &Path, want: &Digest, limit: u64) -> Found<u64>;
    /// Store the content of `file` under `path`; returns the bytes sent.
    fn put_file(&self, path: &str, file: &Path) -> std::result::Result<u64, Failure>;
    /// Store `bytes` under `path`; returns the bytes sent.
    fn put_bytes(&self, path: &str, bytes: &[u8]) -> std::result::Result<u64, Failure>;
}

/// Signs action records and checks their signatures (a keyed MAC).
pub trait Signer: Send + Sync {
    /// The tag of `message`.
    fn sign(&self, message: &[u8]) -> Vec<u8>;
    /// Whether `tag` is the tag of `message` (compared in constant time).
    fn verify(&self, message: &[u8], tag: &[u8]) -> bool;
}

/// The reason phrase of an HTTP status code, for messages ("" when not a common one).
pub fn reason(code: u16) -> &'static str {
    match code {
        400 => "Bad Request",
        401 => "Unauthorized",
        402 => "Payment Required",
        403 => "Forbidden",
        405 => "Method Not Allowed",
        406 => "Not Acceptable",
        407 => "Proxy Authentication Required",
        408 => "Request Timeout",
        409 => "Conflict",
        410 => "Gone",
        411 => "Length Required",
        412 => "Precondition Failed",
        413 => "Payload Too Large",
        414 => "URI Too Long",
        415 => "Unsupported Media Type",
        416 => "Range Not Satisfiable",
        417 => "Expectation Failed",
        418 => "I'm a teapot",
        421 => "Misdirected Request",
        422 => "Unprocessable Entity",
        423 => "Locked",
        424 => "Failed Dependency",
        426 => "Upgrade Required",
        428 => "Precondition Required",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        451 => "Unavailable For Legal Reasons",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        505 => "HTTP Version Not Supported",
        506 => "Variant Also Negotiates",
        507 => "Insufficient Storage",
        508 => "Loop Detected",
        510 => "Not Extended",
        511 => "Network Authentication Required",
        300 => "Multiple Choices",
        301 => "Moved Permanently",
        302 => "Found",
        303 => "See Other",
        304 => "Not Modified",
        307 => "Temporary Redirect",
        308 => "Permanent Redirect",
        _ => "",
    }
}
