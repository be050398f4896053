//! The one way the engine and its kinds run a child process: a clean environment (PATH, HOME,
//! what the caller declares, and during a build [`crate::interrupt::CHILD_OF_VAR`]), stdin
//! closed, stdout and stderr interleaved into the node log.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};

use anyhow::Context;

/// The umask skyctl started with, when [`clamp_umask`] changed it (`u32::MAX`: unchanged).
static STARTED_UMASK: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(u32::MAX);

/// Make what skyctl itself creates (`.skyctl`, its state, store folders and files) readable
/// whatever the umask: the umask keeps only its group and other write bits (022 at most),
/// so a umask of 777 no longer leaves a `.skyctl` of mode 000 that every later build fails
/// on. Files written through [`sky_fs`] are 0644 anyway; this covers the folders and the
/// appended logs. The commands that nodes run get the umask skyctl started with. Call once,
/// first thing.
pub fn clamp_umask() {
    use rustix::fs::Mode;
    let started = rustix::process::umask(Mode::from_bits_truncate(0o022));
    let clamped = started & Mode::from_bits_truncate(0o022);
    rustix::process::umask(clamped);
    if clamped != started {
        STARTED_UMASK.store(started.bits(), std::sync::atomic::Ordering::Relaxed);
    }
}

/// The declared variables that are set (a declared but unset one stays unset), as
/// [`Child::env`] takes them.
pub fn set_vars(declared: &BTreeMap<String, Option<String>>) -> Vec<(String, String)> {
    declared
        .iter()
        .filter_map(|(k, v)| Some((k.clone(), v.clone()?)))
        .collect()
}

/// Variables the engine that runs this process hands every child, whatever a node declares
/// (a Slurm job's GPU assignment: `CUDA_VISIBLE_DEVICES` and its neighbours). Not part of any
/// key: they say which device, not what is computed. Set once, before any node runs.
static ENGINE_VARS: std::sync::OnceLock<Vec<(String, String)>> = std::sync::OnceLock::new();

/// Set [`ENGINE_VARS`] (a second call changes nothing).
pub fn set_engine_vars(vars: Vec<(String, String)>) {
    let _ = ENGINE_VARS.set(vars);
}

/// A program to run for a node.
pub struct Child<'a> {
    /// The executable (resolve a bare name with [`resolve`]).
    pub program: &'a Path,
    /// argv[0] as written (multi-call binaries use it).
    pub arg0: &'a str,
    /// The other arguments.
    pub args: &'a [String],
    /// Working directory.
    pub cwd: &'a Path,
    /// Declared variables, on top of PATH and HOME.
    pub env: &'a [(String, String)],
}

impl Child<'_> {
    /// Run to completion with both output streams appended to `log`; the exit status is the
    /// caller's to judge. An error means the program could not be started or read.
    pub fn run(&self, log: &mut Vec<u8>) -> anyhow::Result<ExitStatus> {
        let mut cmd = std::process::Command::new(self.program);
        std::os::unix::process::CommandExt::arg0(&mut cmd, self.arg0);
        // A group of its own: a stopped build ends the child and everything it started
        // ([`crate::interrupt`]).
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        cmd.args(self.args)
            .current_dir(self.cwd)
            .env_clear()
            .stdin(Stdio::null());
        for var in ["PATH", "HOME"] {
            if let Some(v) = sky_env::Var::get(var).os() {
                cmd.env(var, v);
            }
        }
        for (k, v) in self.env {
            cmd.env(k, v);
        }
        for (k, v) in ENGINE_VARS.get().map(Vec::as_slice).unwrap_or_default() {
            cmd.env(k, v);
        }
        let started = STARTED_UMASK.load(std::sync::atomic::Ordering::Relaxed);
        if started != u32::MAX {
            let mode = rustix::fs::Mode::from_bits_truncate(started);
            // SAFETY: runs in the forked child before exec; umask(2) is async-signal-safe,
            // allocates nothing and takes no lock.
            unsafe {
                std::os::unix::process::CommandExt::pre_exec(&mut cmd, move || {
                    rustix::process::umask(mode);
                    Ok(())
                });
            }
        }
        // Set last, so no declared variable hides it.
        if let Some(mark) = crate::interrupt::before_spawn() {
            cmd.env(crate::interrupt::CHILD_OF_VAR, mark);
        }
        // One pipe for both streams keeps their interleaving. CLOEXEC keeps it out of the
        // children that other workers spawn meanwhile (they would hold the write end open).
        let (read, write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
            .context("creating a pipe for the node log")?;
        cmd.stdout(Stdio::from(write.try_clone()?))
            .stderr(Stdio::from(write));
        let mut child = cmd
            .spawn()
            .with_context(|| format!("cannot run `{}` in `{}`", self.arg0, self.cwd.display()))?;
        // Our copies of the write end live in `cmd`; drop it so reading ends when the child does.
        drop(cmd);
        let pid = child.id() as i32;
        if !crate::interrupt::register(pid) {
            crate::interrupt::kill_children(rustix::process::Signal::TERM);
        }
        use std::io::Read;
        let read_result = std::fs::File::from(read).read_to_end(log);
        let status = child.wait();
        crate::interrupt::unregister(pid);
        let status = status.context("waiting for the command")?;
        read_result.context("reading the command output")?;
        Ok(status)
    }
}

/// "exited with status N" or "was killed by a signal (...)".
pub fn describe_failure(status: ExitStatus) -> String {
    match status.code() {
        Some(c) => format!("exited with status {c}"),
        None => format!("was killed by a signal ({status})"),
    }
}

/// The file `execvp` would run for `prog` with this `PATH` (relative entries and the empty
/// entry are taken from the child's working directory `cwd`, as the child would), or `prog`
/// itself when nothing matches (spawning then reports "not found"). Why: std's `Command` falls
/// back from `posix_spawn` to `fork` + `exec` for a bare program name once `PATH` is set
/// explicitly, and a fork copies this process's page tables for every node it runs.
pub fn resolve(prog: &str, path: Option<&std::ffi::OsStr>, cwd: &Path) -> PathBuf {
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
