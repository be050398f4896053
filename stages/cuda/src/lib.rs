//! sky-cuda: the CUDA reference kernels of the kernel goldens, their compilation for the
//! Tesla K80 (Kepler, `compute_37` PTX assembled for `sm_37`), and a harness that runs them on
//! whatever GPU the CUDA driver offers.
//!
//! Nothing here links against CUDA: NVRTC ([`nvrtc`]) and the driver ([`driver`]) are opened
//! with `dlopen` when used, so a binary built on a machine without CUDA runs everywhere and
//! finds the compiler or the GPU only where one is. The toolchain is CUDA 11.8 from PyPI
//! (`nvidia-cuda-nvrtc-cu11`, `nvidia-cuda-nvcc-cu11`; pinned in `stages/cuda/toolchain.txt`),
//! the last release that still targets Kepler.
//!
//! - [`SOURCES`]: the `.cu` files (one per kernel family, `stages/cuda/kernels/`), embedded.
//! - [`compile()`]: one source to PTX (NVRTC) and an `sm_37` cubin (`ptxas`); an error names
//!   the source file and line, also for what only `ptxas` rejects (mapped through the PTX
//!   line table).
//! - [`run_cuda`]: the harness: golden inputs in, output files the verifier reads out.
//!
//! PTX is forward compatible: the driver JIT-compiles `compute_37` PTX for newer GPUs, so the
//! PTX a K80 runs is also what a lent modern GPU runs.

pub mod compile;
pub mod driver;
pub mod error;
pub mod harness;
pub mod nvrtc;
pub mod ptxas;
pub mod toolchain;

pub use compile::{compile, Compiled};
pub use error::{Error, Result};
pub use harness::run_cuda;
pub use toolchain::Toolchain;

/// A GPU architecture to compile for: the virtual one NVRTC generates PTX for (`compute_NN`)
/// and the real one `ptxas` assembles that PTX for (`sm_NN`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arch {
    /// `compute_NN`.
    pub ptx: &'static str,
    /// `sm_NN`.
    pub sm: &'static str,
}

macro_rules! arch {
    ($n:literal) => {
        Arch {
            ptx: concat!("compute_", $n),
            sm: concat!("sm_", $n),
        }
    };
}

impl Arch {
    /// Kepler GK210, the Tesla K80: what the kernels are written for and the pipeline checks.
    pub const K80: Arch = arch!(37);

    /// Every architecture the pinned CUDA 11.8 NVRTC and ptxas compile for, oldest first (a
    /// later GPU whose driver will not JIT-compile the K80's PTX gets PTX of its own).
    pub const ALL: [Arch; 16] = [
        arch!(35),
        arch!(37),
        arch!(50),
        arch!(52),
        arch!(53),
        arch!(60),
        arch!(61),
        arch!(62),
        arch!(70),
        arch!(72),
        arch!(75),
        arch!(80),
        arch!(86),
        arch!(87),
        arch!(89),
        arch!(90),
    ];

    /// The architecture called `sm_NN`, if the toolchain knows it.
    pub fn from_sm(name: &str) -> Option<Arch> {
        Arch::ALL.into_iter().find(|a| a.sm == name)
    }
}

/// One CUDA source file: its file name under `stages/cuda/kernels/`, its text, and the
/// `extern "C"` kernels it defines.
#[derive(Debug, Clone, Copy)]
pub struct Source {
    /// File name, e.g. `q3k.cu`.
    pub name: &'static str,
    /// The source text (embedded at build time).
    pub text: &'static str,
    /// Kernel entry points.
    pub kernels: &'static [&'static str],
}

impl Source {
    /// The file name without `.cu` (the PTX and cubin are named after it).
    pub fn stem(&self) -> &'static str {
        self.name.strip_suffix(".cu").unwrap_or(self.name)
    }
}

/// Every kernel family, one `.cu` each.
pub const SOURCES: [Source; 5] = [
    Source {
        name: "q3k.cu",
        text: include_str!("../kernels/q3k.cu"),
        kernels: &["q3k_dequant", "q3k_matvec"],
    },
    Source {
        name: "rope.cu",
        text: include_str!("../kernels/rope.cu"),
        kernels: &["rope_neox_partial"],
    },
    Source {
        name: "norm.cu",
        text: include_str!("../kernels/norm.cu"),
        kernels: &["rms_norm_heads", "gated_rms_norm"],
    },
    Source {
        name: "moe.cu",
        text: include_str!("../kernels/moe.cu"),
        kernels: &["moe_route", "moe_shared_gate"],
    },
    Source {
        name: "ssm.cu",
        text: include_str!("../kernels/ssm.cu"),
        kernels: &["ssm_delta_rule", "ssm_conv1d_silu"],
    },
];
