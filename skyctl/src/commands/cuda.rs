//! `skyctl cuda compile`: the CUDA reference kernels (`stages/cuda/kernels/*.cu`) to PTX for
//! `compute_37` with NVRTC and to `sm_37` cubins with `ptxas` (the Tesla K80), the compile
//! node of the project pipeline; `--arch` compiles the same sources for a later GPU. NVRTC is
//! opened at run time from the Python virtual environment the CUDA 11.8 PyPI packages are
//! installed in (skyctl links no CUDA library).

use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context;

use crate::outcome::Outcome;

/// Arguments of `skyctl cuda`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(subcommand)]
    pub command: Command,
}

/// `skyctl cuda` subcommands.
#[derive(clap::Subcommand, Debug)]
pub enum Command {
    /// Compile CUDA sources to PTX (compute_37) and assemble them for sm_37 (Tesla K80), or
    /// for --arch: OUT/<stem>.ptx and OUT/<stem>.<SM>.cubin per source. A source that does
    /// not compile for the architecture fails with its file:line.
    Compile {
        /// The GPU architecture: PTX for its compute_NN, cubins for it (the K80 by default;
        /// a later one where a driver cannot JIT-compile the K80's PTX).
        #[arg(long, value_name = "SM", default_value = sky_cuda::Arch::K80.sm, value_parser = parse_arch)]
        arch: sky_cuda::Arch,
        /// The Python virtual environment holding nvidia-cuda-nvrtc-cu11 and
        /// nvidia-cuda-nvcc-cu11.
        #[arg(long, value_name = "DIR", default_value = ".venv")]
        venv: PathBuf,
        /// Pip requirements (`package==version` lines) the installed toolchain must match.
        #[arg(long, value_name = "FILE")]
        pin: Option<PathBuf>,
        /// Directory to write the PTX and cubins into (created if missing).
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
        /// The .cu files, or directories (every `*.cu` in them, by name).
        #[arg(required = true)]
        sources: Vec<PathBuf>,
    },
}

/// Run `skyctl cuda`.
pub fn run(args: Args) -> anyhow::Result<Outcome> {
    match args.command {
        Command::Compile {
            arch,
            venv,
            pin,
            out,
            sources,
        } => compile(arch, &venv, pin.as_deref(), &out, &sources),
    }
}

/// `sm_NN` as an [`sky_cuda::Arch`] the toolchain knows.
fn parse_arch(name: &str) -> Result<sky_cuda::Arch, String> {
    sky_cuda::Arch::from_sm(name).ok_or_else(|| {
        let known: Vec<&str> = sky_cuda::Arch::ALL.iter().map(|a| a.sm).collect();
        format!("the CUDA 11.8 toolchain compiles for {}", known.join(", "))
    })
}

fn compile(
    arch: sky_cuda::Arch,
    venv: &Path,
    pin: Option<&Path>,
    out: &Path,
    sources: &[PathBuf],
) -> anyhow::Result<Outcome> {
    let mut reads: Vec<(&Path, &str)> = vec![(venv, "the toolchain venv")];
    reads.extend(sources.iter().map(|s| (s.as_path(), "a kernel source")));
    crate::ops::out_path::check("cuda compile", out, &reads)?;
    let sources = expand_dirs(sources)?;
    let tc = sky_cuda::Toolchain::from_venv(venv)?;
    if let Some(pin) = pin {
        let text =
            sky_fs::read_to_string(pin, sky_fs::TEXT).context("reading the toolchain pin")?;
        tc.check_pin(&text, &pin.display().to_string())?;
    }
    let nvrtc = sky_cuda::nvrtc::Nvrtc::open(&tc.nvrtc)?;
    let (major, minor) = nvrtc.version()?;
    std::fs::create_dir_all(out).with_context(|| format!("creating `{}`", out.display()))?;
    let mut report = format!(
        "NVRTC {major}.{minor}, {}: {} -> {}\n",
        tc.ptxas.display(),
        arch.ptx,
        arch.sm
    );
    let mut errors = Vec::new();
    for src in &sources {
        let label = src.to_string_lossy();
        let text = match sky_fs::read_to_string(src, sky_fs::SOURCE) {
            Ok(t) => t,
            Err(e) => {
                errors.push(e.to_string());
                continue;
            }
        };
        match sky_cuda::compile(&tc, &nvrtc, &label, &text, out, arch) {
            Ok(c) => report.push_str(&format!(
                "{label}: {} {}\n",
                c.ptx.display(),
                c.cubin.display()
            )),
            Err(e) => errors.push(e.to_string()),
        }
    }
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(report.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => return Err(e.into()),
        _ => {}
    }
    if errors.is_empty() {
        return Ok(Outcome::Success);
    }
    // Every failing source on its own line; the closing line (what a failed pipeline node
    // shows) repeats the first.
    #[allow(clippy::print_stderr)]
    for e in &errors[1..] {
        eprintln!("{e}");
    }
    anyhow::bail!(
        "{} of {} CUDA sources do not compile for {}; first: {}",
        errors.len(),
        sources.len(),
        arch.sm,
        errors[0]
    )
}

/// Each directory among `sources` replaced by the `*.cu` files in it, sorted by name.
fn expand_dirs(sources: &[PathBuf]) -> anyhow::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for s in sources {
        if !s.is_dir() {
            out.push(s.clone());
            continue;
        }
        let mut found: Vec<PathBuf> = std::fs::read_dir(s)
            .with_context(|| format!("listing `{}`", s.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "cu") && p.is_file())
            .collect();
        if found.is_empty() {
            anyhow::bail!("`{}` holds no .cu file", s.display());
        }
        found.sort();
        out.extend(found);
    }
    Ok(out)
}
