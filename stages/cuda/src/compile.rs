//! One kernel source to PTX (`compute_37` for the K80, or another [`Arch`]) and a cubin.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::nvrtc::Nvrtc;
use crate::toolchain::Toolchain;
use crate::{ptxas, Arch};

/// What [`compile()`] wrote.
#[derive(Debug, Clone)]
pub struct Compiled {
    /// `<out>/<stem>.ptx`.
    pub ptx: PathBuf,
    /// `<out>/<stem>.<sm_NN>.cubin`.
    pub cubin: PathBuf,
}

/// Compile the CUDA source `src`, called `label` in messages (the path as the user wrote it),
/// into `out_dir` for `arch`: `<stem>.ptx` for its `compute_NN` and `<stem>.<sm_NN>.cubin`
/// from `ptxas`. A source that architecture cannot run is [`Error::Compile`] at its source
/// line.
pub fn compile(
    tc: &Toolchain,
    nvrtc: &Nvrtc,
    label: &str,
    src: &str,
    out_dir: &Path,
    arch: Arch,
) -> Result<Compiled> {
    let ptx = nvrtc.compile(label, src, arch.ptx)?;
    let ptx = relative_file_names(&ptx, label);
    let stem = Path::new(label)
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("kernel");
    let ptx_path = out_dir.join(format!("{stem}.ptx"));
    let cubin = out_dir.join(format!("{stem}.{}.cubin", arch.sm));
    std::fs::write(&ptx_path, &ptx).map_err(|e| Error::io(&ptx_path, e))?;
    ptxas::assemble(&tc.ptxas, &ptx_path, &cubin, label, arch.sm)?;
    Ok(Compiled {
        ptx: ptx_path,
        cubin,
    })
}

/// NVRTC writes the source's absolute path (its working directory joined with the name) into
/// the PTX `.file` directive; put `label` back so the PTX is the same from every clone.
fn relative_file_names(ptx: &str, label: &str) -> String {
    let mut out = String::with_capacity(ptx.len());
    for line in ptx.split_inclusive('\n') {
        let t = line.trim_start();
        match t
            .strip_prefix(".file")
            .and_then(|r| r.split_whitespace().next())
        {
            Some(index) => out.push_str(&format!("\t.file\t{index} \"{label}\"\n")),
            None => out.push_str(line),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_directives_lose_the_working_directory() {
        let ptx = "\t.loc\t1 9 0\n}\n\t.file\t1 \"/home/x/ws/k/rope.cu\"\n";
        assert_eq!(
            relative_file_names(ptx, "k/rope.cu"),
            "\t.loc\t1 9 0\n}\n\t.file\t1 \"k/rope.cu\"\n"
        );
    }
}
