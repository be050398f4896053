//! Where a direct tool (`convert`, `random`, `golden`, `quantize`, `calibrate`, `tune`) may write the
//! path it is given: by the build's own rule ([`sky_dag::writable::may_write`]: never in
//! version control's folder, at any depth), and never over, inside or around a file or folder
//! the tool reads. The paths are compared where they land: the output's folder resolved
//! (symlinks followed) plus its name, against each input resolved.

use std::path::Path;

use sky_dag::writable::{may_write, resolved, Protected};

/// Refuse `out` (the file or folder `tool` writes) when skyctl may not write it, or when it is
/// or lies inside one of `reads`: the paths the tool reads, each with what it is in messages
/// ("the checkpoint"). An input that does not exist is skipped (reading it fails on its own).
/// An output holding an input is left to the writer: a tool writes files into an output
/// folder (never replacing it whole), and refuses to replace a folder with a file.
pub fn check(tool: &str, out: &Path, reads: &[(&Path, &str)]) -> anyhow::Result<()> {
    let target = resolved(out);
    let inputs: Vec<(&Path, &str, std::path::PathBuf)> = reads
        .iter()
        .filter_map(|&(p, what)| Some((p, what, p.canonicalize().ok()?)))
        .collect();
    let protected: Vec<Protected> = inputs
        .iter()
        .map(|(_, what, real)| Protected::new(real, *what).may_be_held())
        .collect();
    let Err(refusal) = may_write(&target, &protected) else {
        return Ok(());
    };
    match inputs.iter().find(|(.., real)| *real == refusal.path) {
        Some((p, what, _)) => anyhow::bail!(
            "{tool}: the output `{}` {} {what} `{}`, which {tool} reads; write it elsewhere",
            out.display(),
            refusal.relation,
            p.display()
        ),
        None => anyhow::bail!(
            "{tool}: the output `{}` {refusal}, which is not skyctl's to write; write it elsewhere",
            out.display()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_output_over_or_inside_an_input_or_in_git_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let ck = dir.path().join("ck");
        std::fs::create_dir_all(&ck).unwrap();
        std::fs::write(ck.join("model.safetensors"), b"x").unwrap();
        let reads = [(ck.as_path(), "the checkpoint")];
        let e = check("convert", &ck.join("model.safetensors"), &reads).unwrap_err();
        assert!(
            e.to_string().contains("lies inside the checkpoint")
                && e.to_string()
                    .ends_with("which convert reads; write it elsewhere"),
            "{e}"
        );
        // Through `..` and a symlink to the same folder.
        std::os::unix::fs::symlink("ck", dir.path().join("alias")).unwrap();
        assert!(check("convert", &dir.path().join("alias/x.gguf"), &reads).is_err());
        assert!(check("convert", &ck.join("sub/../y.gguf"), &reads).is_err());
        let file = ck.join("model.safetensors");
        let e = check("golden record", &file, &[(file.as_path(), "the model")]).unwrap_err();
        assert!(e.to_string().contains("` is the model `"), "{e}");
        let e = check("golden gen", &dir.path().join("r/.git/hooks"), &[]).unwrap_err();
        assert!(
            e.to_string()
                .contains("lies inside version control's folder"),
            "{e}"
        );
        check("convert", &dir.path().join("out.gguf"), &reads).unwrap();
        check("convert", &dir.path().join("ck2/out.gguf"), &reads).unwrap();
    }
}
