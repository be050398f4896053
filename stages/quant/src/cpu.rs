//! The instruction-set levels the kernels are built for, and the `SKYCTL_ISA` cap on them.
//!
//! Every kernel path of this crate and of sky-infer computes the same bits (the portable
//! scalar path is the definition), so the level changes speed only. `SKYCTL_ISA` limits every
//! kernel to a level or below: `scalar`, `avx2` (AVX2 + FMA), `avx-vnni` (AVX2 + FMA +
//! AVX-VNNI), `avx512` (AVX-512F; the int8 kernels also need AVX-512BW and VNNI, else they take
//! the best lower path), `neon` (aarch64 NEON; the int8 kernels use `sdot` where the CPU has
//! the dot-product extension), or `auto` (the default: the best this CPU has). It lets one machine
//! stand in for a smaller one, and a bisection pin one path.

use std::fmt;
use std::sync::OnceLock;

/// The environment variable that caps the kernels' instruction set.
pub const ISA_ENV: &str = "SKYCTL_ISA";

/// An instruction-set level, lowest first (the derived order is "at most").
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum IsaLevel {
    /// Portable Rust: no vector instructions of its own.
    Scalar,
    /// x86-64 AVX2 + FMA.
    Avx2,
    /// x86-64 AVX2 + FMA + AVX-VNNI (the 256-bit `vpdpbusd`).
    AvxVnni,
    /// x86-64 AVX-512F (and, for the int8 kernels, AVX-512BW + VNNI).
    Avx512,
    /// aarch64 NEON (part of the base architecture; the int8 kernels also use the dot-product
    /// extension where the CPU has it). Ordered after the x86 levels only so that the order
    /// stays total: no CPU has both.
    Neon,
}

/// `SKYCTL_ISA` names a level this CPU lacks, or no level at all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IsaEnvError {
    /// Not one of the names.
    Unknown(String),
    /// A level this CPU (or build target) cannot run.
    Unavailable(IsaLevel),
    /// Not text at all.
    Env(sky_env::EnvError),
}

impl fmt::Display for IsaEnvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let have: Vec<&str> = IsaLevel::available().iter().map(|l| l.name()).collect();
        match self {
            IsaEnvError::Unknown(v) => write!(
                f,
                "{ISA_ENV}={v:?} is not an instruction set: use one of {}, auto",
                IsaLevel::ALL.map(IsaLevel::name).join(", ")
            ),
            IsaEnvError::Unavailable(l) => write!(
                f,
                "{ISA_ENV}={}: this CPU cannot run it (it has {})",
                l.name(),
                have.join(", ")
            ),
            IsaEnvError::Env(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for IsaEnvError {}

impl IsaLevel {
    /// Every level, lowest first.
    pub const ALL: [IsaLevel; 5] = [
        IsaLevel::Scalar,
        IsaLevel::Avx2,
        IsaLevel::AvxVnni,
        IsaLevel::Avx512,
        IsaLevel::Neon,
    ];

    /// The name `SKYCTL_ISA` takes and reports print.
    pub fn name(self) -> &'static str {
        match self {
            IsaLevel::Scalar => "scalar",
            IsaLevel::Avx2 => "avx2",
            IsaLevel::AvxVnni => "avx-vnni",
            IsaLevel::Avx512 => "avx512",
            IsaLevel::Neon => "neon",
        }
    }

    /// The level of a name (`auto` is not a level: see [`IsaLevel::from_env`]).
    pub fn parse(name: &str) -> Option<IsaLevel> {
        IsaLevel::ALL.into_iter().find(|l| l.name() == name)
    }

    /// Whether this CPU (and build target) runs the level's base instructions.
    pub fn is_available(self) -> bool {
        match self {
            IsaLevel::Scalar => true,
            #[cfg(target_arch = "x86_64")]
            IsaLevel::Avx2 => is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma"),
            #[cfg(target_arch = "x86_64")]
            IsaLevel::AvxVnni => {
                IsaLevel::Avx2.is_available() && is_x86_feature_detected!("avxvnni")
            }
            #[cfg(target_arch = "x86_64")]
            IsaLevel::Avx512 => {
                IsaLevel::Avx2.is_available() && is_x86_feature_detected!("avx512f")
            }
            // NEON is part of the aarch64 base architecture.
            IsaLevel::Neon => cfg!(target_arch = "aarch64"),
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }

    /// The levels this CPU runs, lowest first.
    pub fn available() -> Vec<IsaLevel> {
        IsaLevel::ALL
            .into_iter()
            .filter(|l| l.is_available())
            .collect()
    }

    /// The highest level this CPU runs.
    pub fn best() -> IsaLevel {
        IsaLevel::ALL
            .into_iter()
            .rev()
            .find(|l| l.is_available())
            .unwrap_or(IsaLevel::Scalar)
    }

    /// `SKYCTL_ISA` read and checked: `None` when unset, empty or `auto`.
    pub fn from_env() -> Result<Option<IsaLevel>, IsaEnvError> {
        match sky_env::Var::get(ISA_ENV).text("an instruction set name or auto") {
            Ok(Some(v)) => IsaLevel::from_setting(&v),
            Ok(None) => Ok(None),
            Err(e) => Err(IsaEnvError::Env(e)),
        }
    }

    /// A `SKYCTL_ISA` value checked against this CPU.
    pub fn from_setting(value: &str) -> Result<Option<IsaLevel>, IsaEnvError> {
        let v = value.trim();
        if v.is_empty() || v == "auto" {
            return Ok(None);
        }
        let level = IsaLevel::parse(v).ok_or_else(|| IsaEnvError::Unknown(v.to_string()))?;
        if !level.is_available() {
            return Err(IsaEnvError::Unavailable(level));
        }
        Ok(Some(level))
    }

    /// The level the kernels run at in this process: `SKYCTL_ISA` when it names a level this
    /// CPU runs, else the best one. Read once. (The command line refuses a bad value before
    /// anything runs; a library caller with one gets the best level.)
    pub fn current() -> IsaLevel {
        static CURRENT: OnceLock<IsaLevel> = OnceLock::new();
        *CURRENT.get_or_init(|| {
            IsaLevel::from_env()
                .ok()
                .flatten()
                .unwrap_or_else(IsaLevel::best)
        })
    }
}

impl fmt::Display for IsaLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The CPU's model name as the OS reports it (`/proc/cpuinfo` on Linux), for the reports that
/// put timings next to the machine that made them; `"unknown"` where it cannot be read.
pub fn cpu_model() -> String {
    #[cfg(target_os = "linux")]
    if let Ok(text) = std::fs::read_to_string("/proc/cpuinfo") {
        for line in text.lines() {
            if let Some((key, value)) = line.split_once(':') {
                if key.trim() == "model name" {
                    return value.trim().to_string();
                }
            }
        }
    }
    "unknown".to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_parse_and_check_the_cpu() {
        assert_eq!(IsaLevel::from_setting("auto"), Ok(None));
        assert_eq!(IsaLevel::from_setting(""), Ok(None));
        assert_eq!(IsaLevel::from_setting("scalar"), Ok(Some(IsaLevel::Scalar)));
        let err = IsaLevel::from_setting("sse9").unwrap_err();
        assert_eq!(err, IsaEnvError::Unknown("sse9".into()));
        assert!(err
            .to_string()
            .contains("scalar, avx2, avx-vnni, avx512, neon, auto"));
        for level in IsaLevel::ALL {
            match IsaLevel::from_setting(level.name()) {
                Ok(got) => assert_eq!(got, Some(level)),
                Err(e) => {
                    assert!(!level.is_available());
                    assert_eq!(e, IsaEnvError::Unavailable(level));
                }
            }
        }
        assert!(IsaLevel::available().contains(&IsaLevel::best()));
        assert!(IsaLevel::Scalar < IsaLevel::Avx2 && IsaLevel::AvxVnni < IsaLevel::Avx512);
        // Each architecture's vector level is available on it, and the other's is not.
        assert_eq!(IsaLevel::Neon.is_available(), cfg!(target_arch = "aarch64"));
        if cfg!(target_arch = "aarch64") {
            assert_eq!(IsaLevel::best(), IsaLevel::Neon);
            assert_eq!(IsaLevel::available(), [IsaLevel::Scalar, IsaLevel::Neon]);
        }
    }
}
