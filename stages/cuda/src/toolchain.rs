//! Where the CUDA toolchain is: NVRTC's shared library and `ptxas`, as the PyPI packages
//! `nvidia-cuda-nvrtc-cu11` and `nvidia-cuda-nvcc-cu11` install them into a Python virtual
//! environment (`<venv>/lib/python3.X/site-packages/nvidia/...`), and which versions they are.
//!
//! The pin file (`stages/cuda/toolchain.txt`, pip requirement lines `name==version`) is what
//! `.ci/run` installs and what the compile node's key covers; [`Toolchain::check_pin`] refuses
//! a toolchain of another version, so a cached PTX always comes from the pinned compiler.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// The two tools and the installed package versions.
#[derive(Debug, Clone)]
pub struct Toolchain {
    /// `libnvrtc.so.*`.
    pub nvrtc: PathBuf,
    /// The `ptxas` executable.
    pub ptxas: PathBuf,
    /// The `site-packages` directory they were found in.
    pub site_packages: PathBuf,
}

/// The NVRTC library in `dir`: `libnvrtc.so*`, not `libnvrtc-builtins` (NVRTC opens that
/// one itself, from beside it).
fn find_nvrtc(dir: &Path) -> Option<PathBuf> {
    let mut names: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("libnvrtc.so"))
        })
        .collect();
    names.sort();
    names.pop()
}

impl Toolchain {
    /// Find the toolchain in the virtual environment `venv` (the directory holding `bin/` and
    /// `lib/`).
    pub fn from_venv(venv: &Path) -> Result<Toolchain> {
        let lib = venv.join("lib");
        let mut pythons: Vec<PathBuf> = std::fs::read_dir(&lib)
            .map_err(|e| {
                Error::Toolchain(format!(
                    "no Python virtual environment at `{}` ({e}); create it and install the \
                     packages of stages/cuda/toolchain.txt (.ci/run does both)",
                    venv.display()
                ))
            })?
            .filter_map(|e| e.ok())
            .map(|e| e.path().join("site-packages"))
            .filter(|p| p.join("nvidia").is_dir())
            .collect();
        pythons.sort();
        let missing = || {
            Error::Toolchain(format!(
                "`{}` has no CUDA packages; install them with `{}/bin/pip install -r \
                 stages/cuda/toolchain.txt` (.ci/run does)",
                venv.display(),
                venv.display()
            ))
        };
        let site = pythons.pop().ok_or_else(missing)?;
        let nvidia = site.join("nvidia");
        let nvrtc = find_nvrtc(&nvidia.join("cuda_nvrtc/lib")).ok_or_else(|| {
            Error::Toolchain(format!(
                "no libnvrtc.so under `{}` (package nvidia-cuda-nvrtc-cu11)",
                nvidia.join("cuda_nvrtc/lib").display()
            ))
        })?;
        let ptxas = nvidia.join("cuda_nvcc/bin/ptxas");
        if !ptxas.is_file() {
            return Err(Error::Toolchain(format!(
                "no ptxas at `{}` (package nvidia-cuda-nvcc-cu11)",
                ptxas.display()
            )));
        }
        Ok(Toolchain {
            nvrtc,
            ptxas,
            site_packages: site,
        })
    }

    /// The installed version of the pip package `name` (from its `.dist-info` directory).
    pub fn installed_version(&self, name: &str) -> Option<String> {
        let prefix = format!("{}-", name.replace('-', "_"));
        std::fs::read_dir(&self.site_packages)
            .ok()?
            .filter_map(|e| e.ok())
            .filter_map(|e| e.file_name().into_string().ok())
            .find_map(|n| {
                n.strip_prefix(&prefix)?
                    .strip_suffix(".dist-info")
                    .map(str::to_string)
            })
    }

    /// Check every `name==version` line of the pin file text `pin` (from `pin_label`) against
    /// the installed packages.
    pub fn check_pin(&self, pin: &str, pin_label: &str) -> Result<()> {
        for line in pin.lines() {
            let line = line.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let Some((name, want)) = line.split_once("==") else {
                return Err(Error::Toolchain(format!(
                    "{pin_label}: `{line}` is not `package==version`"
                )));
            };
            let (name, want) = (name.trim(), want.trim());
            match self.installed_version(name) {
                Some(have) if have == want => {}
                Some(have) => {
                    return Err(Error::Toolchain(format!(
                        "{name} {have} is installed in `{}`, but {pin_label} pins {want}; \
                         install the pinned version (pip install -r {pin_label})",
                        self.site_packages.display()
                    )))
                }
                None => {
                    return Err(Error::Toolchain(format!(
                        "{name} is not installed in `{}` ({pin_label} pins {want})",
                        self.site_packages.display()
                    )))
                }
            }
        }
        Ok(())
    }
}
