//! `ptxas`: PTX to a cubin for a real architecture. Its errors name a PTX line; the PTX's
//! line table (`.loc FILE LINE COL`, present because NVRTC compiled with line information)
//! maps that back to the CUDA source line.

use std::path::Path;
use std::process::Command;

use crate::error::{Error, Result};

/// Assemble the PTX file `ptx_path` (compiled from `source`) for `arch` into `cubin_path`.
pub fn assemble(
    ptxas: &Path,
    ptx_path: &Path,
    cubin_path: &Path,
    source: &str,
    arch: &'static str,
) -> Result<()> {
    // ptxas opens the CUDA source the PTX line table names (`.file 1 "kernels/x.cu"`),
    // relative to its working directory, and writes that file's modification time into the
    // cubin: run in an empty folder, the cubin depends on the PTX alone, in every clone.
    let empty = tempfile::tempdir()
        .map_err(|e| Error::Toolchain(format!("cannot make an empty folder for ptxas: {e}")))?;
    let absolute = |p: &Path| std::path::absolute(p).map_err(|e| Error::io(p, e));
    let out = Command::new(absolute(ptxas)?)
        .current_dir(empty.path())
        .arg(format!("-arch={arch}"))
        .arg("-o")
        .arg(absolute(cubin_path)?)
        .arg(absolute(ptx_path)?)
        .output()
        .map_err(|e| Error::Toolchain(format!("cannot run `{}`: {e}", ptxas.display())))?;
    if out.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let ptx = sky_fs::read_to_string(ptx_path, sky_fs::SOURCE)
        .map_err(|e| Error::io(ptx_path, e.into()))?;
    Err(locate(&stderr, &ptx, source, arch))
}

/// The first `ptxas <file>, line N; error : MESSAGE` of `stderr`, at the source line the
/// PTX line table gives for PTX line N.
fn locate(stderr: &str, ptx: &str, source: &str, arch: &'static str) -> Error {
    let first = stderr.lines().find_map(|l| {
        let (_, rest) = l.split_once(", line ")?;
        let (n, rest) = rest.split_once(';')?;
        let msg = rest
            .trim()
            .strip_prefix("error")?
            .trim_start()
            .strip_prefix(':')?;
        Some((n.trim().parse::<usize>().ok()?, msg.trim()))
    });
    match first {
        Some((ptx_line, msg)) => Error::Compile {
            file: source.to_string(),
            line: source_line(ptx, ptx_line).unwrap_or(0),
            message: format!("{msg} (PTX line {ptx_line})"),
            stage: "ptxas",
            arch,
        },
        None => Error::Compile {
            file: source.to_string(),
            line: 0,
            message: stderr.trim().replace('\n', "; "),
            stage: "ptxas",
            arch,
        },
    }
}

/// The source line of the last `.loc` at or before PTX line `ptx_line` (1-based).
pub fn source_line(ptx: &str, ptx_line: usize) -> Option<u32> {
    ptx.lines()
        .take(ptx_line)
        .filter_map(|l| {
            let mut it = l.trim_start().strip_prefix(".loc")?.split_whitespace();
            let _file = it.next()?;
            it.next()?.parse::<u32>().ok()
        })
        .filter(|&line| line > 0)
        .last()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ptx_line_maps_to_the_last_loc_before_it() {
        let ptx =
            ".version 7.8\n\t.loc\t1 9 0\n\tmov.u32 %r1, 0;\n\t.loc\t1 16 5\n\tnanosleep.u32 5;\n";
        assert_eq!(source_line(ptx, 5), Some(16));
        assert_eq!(source_line(ptx, 3), Some(9));
        assert_eq!(source_line(ptx, 1), None);
        let e = locate(
            "ptxas /tmp/b.ptx, line 5; error   : Instruction 'nanosleep' requires .target sm_70 or higher\n\
             ptxas fatal   : Ptx assembly aborted due to errors\n",
            ptx,
            "k/rope.cu",
            "sm_37",
        );
        assert_eq!(
            e.to_string(),
            "k/rope.cu:16: error: Instruction 'nanosleep' requires .target sm_70 or higher \
             (PTX line 5) (ptxas, sm_37)"
        );
    }
}
