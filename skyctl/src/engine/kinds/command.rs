//! `command`: run an external program.
//!
//! Params (built by `graph.rs` from a `[[command]]`): `run` (argv; a shell string is already
//! `["sh", "-c", s]`), `cwd` (workspace-relative), `env` (declared variables and their values,
//! null when unset), `outputs` (as written). The child gets a clean environment: PATH, HOME
//! and the declared variables only; stdin is closed; stdout and stderr go, interleaved, to the
//! node log. An argv[0] of `skyctl` means this very binary, so a pipeline can call the direct
//! tools (`skyctl convert ...`) without depending on PATH.

use std::process::Stdio;

use anyhow::{bail, Context};

use super::{StageCtx, StageKind};

/// The `command` kind.
pub struct Command;

impl StageKind for Command {
    fn name(&self) -> &'static str {
        "command"
    }

    fn version(&self) -> u32 {
        1
    }

    fn run(&self, ctx: &mut StageCtx<'_>) -> anyhow::Result<()> {
        let argv: Vec<String> = ctx.params["run"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        let Some((prog, args)) = argv.split_first() else {
            bail!("node `{}`: empty command", ctx.node);
        };
        let cwd = ctx
            .workspace
            .join(ctx.params["cwd"].as_str().unwrap_or("."));
        let program = if prog == "skyctl" {
            std::env::current_exe().context("locating the skyctl binary")?
        } else {
            resolve(prog, std::env::var_os("PATH").as_deref(), &cwd)
        };
        let mut cmd = std::process::Command::new(&program);
        // argv[0] as written, as a PATH lookup would give it (multi-call binaries use it).
        std::os::unix::process::CommandExt::arg0(&mut cmd, prog);
        cmd.args(args)
            .current_dir(&cwd)
            .env_clear()
            .stdin(Stdio::null());
        for var in ["PATH", "HOME"] {
            if let Some(v) = std::env::var_os(var) {
                cmd.env(var, v);
            }
        }
        if let Some(env) = ctx.params["env"].as_object() {
            for (k, v) in env {
                if let Some(v) = v.as_str() {
                    cmd.env(k, v);
                }
            }
        }
        // One pipe for both streams keeps their interleaving. CLOEXEC keeps it out of the
        // children that other workers spawn meanwhile (they would hold the write end open).
        let (read, write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
            .context("creating a pipe for the node log")?;
        cmd.stdout(std::process::Stdio::from(write.try_clone()?))
            .stderr(std::process::Stdio::from(write));
        let mut child = cmd.spawn().with_context(|| {
            format!(
                "node `{}`: cannot run `{prog}` in `{}`",
                ctx.node,
                cwd.display()
            )
        })?;
        // Our copies of the write end live in `cmd`; drop it so reading ends when the child does.
        drop(cmd);
        use std::io::Read;
        let read_result = std::fs::File::from(read).read_to_end(ctx.log);
        let status = child.wait().context("waiting for the command")?;
        read_result.context("reading the command output")?;
        if !status.success() {
            match status.code() {
                Some(c) => bail!("`{}` exited with status {c}", argv.join(" ")),
                None => bail!("`{}` was killed by a signal ({status})", argv.join(" ")),
            }
        }
        Ok(())
    }
}

/// The file `execvp` would run for `prog` with this `PATH` (relative entries and the empty
/// entry are taken from the child's working directory `cwd`, as the child would), or `prog`
/// itself when nothing matches (spawning then reports "not found"). Why: std's `Command` falls
/// back from `posix_spawn` to `fork` + `exec` for a bare program name once `PATH` is set
/// explicitly, and a fork copies this process's page tables for every node it runs.
fn resolve(
    prog: &str,
    path: Option<&std::ffi::OsStr>,
    cwd: &std::path::Path,
) -> std::path::PathBuf {
    if prog.contains('/') {
        return prog.into();
    }
    for dir in path.map(std::env::split_paths).into_iter().flatten() {
        let candidate = cwd.join(dir).join(prog);
        let executable = rustix::fs::access(&candidate, rustix::fs::Access::EXEC_OK).is_ok()
            && candidate.is_file();
        if executable {
            return candidate;
        }
    }
    prog.into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolve_finds_what_execvp_would_run() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        std::fs::create_dir_all(&a).unwrap();
        std::fs::create_dir_all(&b).unwrap();
        let write = |p: &std::path::Path, mode: u32| {
            std::fs::write(p, "#!/bin/sh\n").unwrap();
            std::fs::set_permissions(p, std::os::unix::fs::PermissionsExt::from_mode(mode))
                .unwrap();
        };
        write(&a.join("tool"), 0o644); // not executable: skipped
        write(&b.join("tool"), 0o755);
        let path = std::env::join_paths([a.clone(), b.clone()]).unwrap();
        assert_eq!(resolve("tool", Some(&path), dir.path()), b.join("tool"));
        // Relative PATH entries are relative to the child's working directory.
        let rel = std::ffi::OsString::from("b");
        assert_eq!(resolve("tool", Some(&rel), dir.path()), b.join("tool"));
        assert_eq!(
            resolve("./x/tool", Some(&path), dir.path()),
            std::path::PathBuf::from("./x/tool")
        );
        assert_eq!(
            resolve("missing", Some(&path), dir.path()),
            std::path::PathBuf::from("missing")
        );
        assert_eq!(
            resolve("tool", None, dir.path()),
            std::path::PathBuf::from("tool")
        );
    }
}
