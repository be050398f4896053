//! The crate's error type.

use std::path::PathBuf;

/// What can go wrong compiling or running the CUDA kernels.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The CUDA toolchain (NVRTC, ptxas) is missing or not the pinned version.
    #[error("CUDA toolchain: {0}")]
    Toolchain(String),
    /// A kernel source does not compile (NVRTC) or assemble (ptxas) for the target.
    #[error("{file}:{line}: error: {message} ({stage}, {arch})")]
    Compile {
        /// The source file as named on the command line.
        file: String,
        /// 1-based source line (0 when the compiler gave none).
        line: u32,
        /// The compiler's message.
        message: String,
        /// `nvrtc` or `ptxas`.
        stage: &'static str,
        /// The architecture compiled for.
        arch: &'static str,
    },
    /// No usable CUDA driver or GPU on this machine.
    #[error("no CUDA GPU: {0}")]
    NoGpu(String),
    /// A CUDA driver call failed.
    #[error("CUDA driver: {call} failed with {code} ({name})")]
    Driver {
        /// The driver function.
        call: &'static str,
        /// The `CUresult`.
        code: i32,
        /// The driver's name for it.
        name: String,
    },
    /// A PTX file the harness needs is missing or unusable.
    #[error("{path}: {reason}")]
    Ptx {
        /// The PTX file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// File I/O.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// Reading golden inputs or writing outputs.
    #[error(transparent)]
    Kernels(#[from] sky_kernels::Error),
}

impl Error {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Error {
        Error::Io {
            path: path.into(),
            source,
        }
    }
}

/// Result with [`Error`].
pub type Result<T> = std::result::Result<T, Error>;
