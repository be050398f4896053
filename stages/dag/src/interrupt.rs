//! SIGINT, SIGTERM and SIGHUP during a build: stop starting nodes, end every running child's
//! whole process group, and let the build finish what it records (a killed node records
//! nothing), so the store stays consistent and the command exits with 128 + the signal (130,
//! 143, 129) once its children are gone. SIGHUP (a closed terminal or SSH session) is treated
//! as SIGTERM: without it skyctl died at once while its nodes' process groups, which the
//! hangup does not reach, went on writing into the workspace.
//!
//! [`install`] is for the front end's build commands. [`install_for_tool`] is for every other
//! command (a direct tool such as `convert`, `random`, `golden gen`): on any of the three
//! signals it removes the temp files of the files it is writing
//! ([`sky_fs::remove_live_temps`]), ends its children's groups, and exits with 128 + the
//! signal, as the default disposition would have, minus the `.skyctl-tmp-*` file left beside
//! the output. Children run in process groups of their own ([`crate::process::Child`]), so a
//! terminal's Ctrl-C reaches only skyctl, and skyctl ends them.

use std::path::Path;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Mutex;

/// A `/proc` file (`stat`, `environ`): it reports no size, so its read is cut here.
const PROC: sky_fs::Limit = sky_fs::Limit::new("a /proc file", 16 << 20);

/// The signal that asked the build to stop (0: none).
static REQUESTED: AtomicI32 = AtomicI32::new(0);

/// Process groups of running children (their leaders' pids).
static RUNNING: Mutex<Vec<i32>> = Mutex::new(Vec::new());

/// Where the running children are noted (`pid starttime` lines), so that the next build ends
/// the process groups a build killed with SIGKILL left behind (they would otherwise go on
/// writing into outputs that the next build is making anew).
static JOURNAL: Mutex<Option<Journal>> = Mutex::new(None);

/// The variable every child of a build carries, its value the workspace's journal path. A
/// build killed between starting a child and noting it leaves a child the journal does not
/// name; the next build finds it by this mark (see [`track_children`]).
pub const CHILD_OF_VAR: &str = "SKYCTL_CHILD_OF";

struct Journal {
    path: std::path::PathBuf,
    /// The file exists from before the first child starts until the build ends normally, so
    /// its presence says "a build may have left children running".
    created: bool,
}

/// Note children in `path` from now on, after ending the groups a previous build left
/// running: those it noted there (checked by start time) and, when it did not end normally,
/// every process that carries its mark ([`CHILD_OF_VAR`]).
pub fn track_children(path: &std::path::Path) {
    end_leftovers(path);
    let _ = std::fs::remove_file(path);
    *journal() = Some(Journal {
        path: path.to_path_buf(),
        created: false,
    });
}

/// End what the build that kept the journal at `path` left running (nothing when the file
/// is absent: that build ended normally, or never started a child).
fn end_leftovers(path: &std::path::Path) {
    let mut leftovers = Vec::new();
    if let Ok(text) = sky_fs::read_to_string(path, sky_fs::STATE) {
        for line in text.lines() {
            let mut parts = line.split(' ');
            let (Some(pid), Some(start)) = (parts.next(), parts.next()) else {
                continue;
            };
            let Ok(pid) = pid.parse::<i32>() else {
                continue;
            };
            // Only the very process we noted: a pid can be reused, its start time cannot.
            if start_time(pid).as_deref() == Some(start) {
                if let Some(p) = rustix::process::Pid::from_raw(pid) {
                    let _ = rustix::process::kill_process_group(p, rustix::process::Signal::KILL);
                    leftovers.push(pid);
                }
            }
        }
        leftovers.extend(kill_marked(path.as_os_str()));
        wait_gone(&leftovers);
    }
}

/// The build ended normally: no child of it runs, nothing to note.
pub fn untrack_children() {
    if let Some(j) = journal().take() {
        let _ = std::fs::remove_file(j.path);
    }
}

fn journal() -> std::sync::MutexGuard<'static, Option<Journal>> {
    JOURNAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// The mark of the build this process runs inside ([`CHILD_OF_VAR`]: the journal path of that
/// build's workspace), when a node of a build started it.
pub fn parent_build() -> Option<std::path::PathBuf> {
    // Any bytes: the mark is a path, compared as it was set.
    sky_env::Var::get(CHILD_OF_VAR)
        .os()
        .filter(|v| !v.is_empty())
        .map(std::path::PathBuf::from)
}

/// A child is about to start: make sure the journal exists, and return the mark the child
/// must carry (none outside a tracked build).
pub(crate) fn before_spawn() -> Option<std::ffi::OsString> {
    let mut journal = journal();
    let j = journal.as_mut()?;
    if !j.created {
        j.created = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&j.path)
            .is_ok();
    }
    Some(j.path.clone().into_os_string())
}

/// SIGKILL every other process whose environment holds `CHILD_OF_VAR=mark`, with its process
/// group (children run in groups of their own); the pids it signalled.
fn kill_marked(mark: &std::ffi::OsStr) -> Vec<i32> {
    use std::os::unix::ffi::OsStrExt;
    let mut needle = format!("{CHILD_OF_VAR}=").into_bytes();
    needle.extend_from_slice(mark.as_bytes());
    let me = std::process::id() as i32;
    let own_group = rustix::process::getpgrp();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut killed = Vec::new();
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        if pid == me {
            continue;
        }
        // Other users' processes are not readable, and not ours to end.
        let Ok(environ) = sky_fs::read(&entry.path().join("environ"), PROC) else {
            continue;
        };
        if !environ.split(|&b| b == 0).any(|kv| kv == needle.as_slice()) {
            continue;
        }
        let Some(p) = rustix::process::Pid::from_raw(pid) else {
            continue;
        };
        if let Ok(group) = rustix::process::getpgid(Some(p)) {
            if group != own_group {
                let _ = rustix::process::kill_process_group(group, rustix::process::Signal::KILL);
            }
        }
        let _ = rustix::process::kill_process(p, rustix::process::Signal::KILL);
        killed.push(pid);
    }
    killed
}

/// Wait (two seconds at most) until the signalled processes are gone: a dying one must not
/// write into an output the build is about to make.
fn wait_gone(pids: &[i32]) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    for &pid in pids {
        while std::time::Instant::now() < deadline && is_alive(pid) {
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
    }
}

/// Whether `pid` still runs (a zombie has stopped running).
fn is_alive(pid: i32) -> bool {
    let Ok(stat) = sky_fs::read_to_string(Path::new(&format!("/proc/{pid}/stat")), PROC) else {
        return false;
    };
    let state = stat
        .rfind(')')
        .and_then(|i| stat[i + 1..].trim_start().chars().next());
    !matches!(state, Some('Z' | 'X') | None)
}

/// Field 22 of `/proc/<pid>/stat`: the start time, in clock ticks since boot.
fn start_time(pid: i32) -> Option<String> {
    let stat = sky_fs::read_to_string(Path::new(&format!("/proc/{pid}/stat")), PROC).ok()?;
    // The command name (field 2) may hold spaces and parentheses; fields follow the last ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split(' ').nth(19).map(str::to_string)
}

fn note_child(pid: i32) {
    let journal = journal();
    if let (Some(j), Some(start)) = (journal.as_ref(), start_time(pid)) {
        use std::io::Write;
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&j.path)
        {
            let _ = f.write_all(format!("{pid} {start}\n").as_bytes());
        }
    }
}

/// The signals that stop a build or a tool.
const STOPS: [i32; 3] = [
    signal_hook::consts::SIGINT,
    signal_hook::consts::SIGTERM,
    signal_hook::consts::SIGHUP,
];

/// For a command that is not a build: on SIGINT, SIGTERM or SIGHUP, remove the temp files of
/// what it is writing, end its children's groups and exit with 128 + the signal (once per
/// process; later calls do nothing). The work happens on signal-hook's thread, not in the
/// signal handler.
pub fn install_for_tool() -> std::io::Result<()> {
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    let mut result = Ok(());
    INSTALLED.call_once(|| match signal_hook::iterator::Signals::new(STOPS) {
        Ok(mut signals) => {
            std::thread::spawn(move || {
                if let Some(sig) = signals.forever().next() {
                    REQUESTED.store(sig, Ordering::SeqCst);
                    kill_children(rustix::process::Signal::TERM);
                    sky_fs::remove_live_temps();
                    std::process::exit(128 + sig);
                }
            });
        }
        Err(e) => result = Err(e),
    });
    result
}

/// Handle SIGINT, SIGTERM and SIGHUP from now on (once per process; later calls do nothing).
pub fn install() -> std::io::Result<()> {
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    let mut result = Ok(());
    INSTALLED.call_once(|| {
        let signals = signal_hook::iterator::Signals::new(STOPS);
        match signals {
            Ok(mut signals) => {
                std::thread::spawn(move || {
                    for sig in signals.forever() {
                        REQUESTED.store(sig, Ordering::SeqCst);
                        kill_children(rustix::process::Signal::TERM);
                        // What ignores SIGTERM gets SIGKILL a moment later.
                        std::thread::sleep(std::time::Duration::from_secs(2));
                        kill_children(rustix::process::Signal::KILL);
                    }
                });
            }
            Err(e) => result = Err(e),
        }
    });
    result
}

/// The signal that asked the build to stop, if one did.
pub fn requested() -> Option<i32> {
    match REQUESTED.load(Ordering::SeqCst) {
        0 => None,
        s => Some(s),
    }
}

fn running() -> std::sync::MutexGuard<'static, Vec<i32>> {
    RUNNING.lock().unwrap_or_else(|p| p.into_inner())
}

/// Note a child process group (its leader's pid); `false` when a stop was already requested
/// (the caller then ends it at once).
pub(crate) fn register(pid: i32) -> bool {
    note_child(pid);
    running().push(pid);
    requested().is_none()
}

/// The child has been waited for.
pub(crate) fn unregister(pid: i32) {
    running().retain(|&p| p != pid);
}

/// Send `sig` to every running child's process group.
pub(crate) fn kill_children(sig: rustix::process::Signal) {
    for &pid in running().iter() {
        if let Some(pid) = rustix::process::Pid::from_raw(pid) {
            let _ = rustix::process::kill_process_group(pid, sig);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;

    /// `sleep 30` in a process group of its own, carrying `mark` as a build's child would.
    fn sleeper(mark: Option<&std::path::Path>) -> std::process::Child {
        let mut cmd = std::process::Command::new("sleep");
        cmd.arg("30").process_group(0);
        if let Some(m) = mark {
            cmd.env(CHILD_OF_VAR, m);
        }
        let child = cmd.spawn().unwrap();
        wait_for_environment(child.id());
        child
    }

    /// `spawn` returns once exec has released the parent, but the kernel sets the new
    /// program's environment bounds a moment later; until then `/proc/<pid>/environ` reads
    /// empty and the mark cannot be seen (a CI run caught that window). A real build looks
    /// for marks only when the next build starts, long after its children's exec.
    fn wait_for_environment(pid: u32) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let environ = format!("/proc/{pid}/environ");
        while std::fs::read(&environ).map_or(true, |e| e.is_empty()) {
            assert!(
                std::time::Instant::now() < deadline,
                "{environ} stayed empty"
            );
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    fn running(child: &mut std::process::Child) -> bool {
        child.try_wait().unwrap().is_none()
    }

    #[test]
    fn a_child_started_but_never_noted_is_ended_by_its_mark() {
        let dir = tempfile::tempdir().unwrap();
        let journal = dir.path().join("children.log");
        let other = dir.path().join("other/children.log");
        // A build killed between starting the child and noting it: the journal exists, empty.
        std::fs::write(&journal, "").unwrap();
        let mut ours = sleeper(Some(&journal));
        let mut another_workspace = sleeper(Some(&other));
        let mut unmarked = sleeper(None);
        end_leftovers(&journal);
        let status = ours.wait().unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(9), "{status}");
        assert!(running(&mut another_workspace) && running(&mut unmarked));
        for mut c in [another_workspace, unmarked] {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    #[test]
    fn without_a_journal_nothing_is_looked_for() {
        let dir = tempfile::tempdir().unwrap();
        let journal = dir.path().join("children.log");
        let mut ours = sleeper(Some(&journal));
        end_leftovers(&journal);
        assert!(
            running(&mut ours),
            "the last build ended normally: nothing to end"
        );
        let _ = ours.kill();
        let _ = ours.wait();
    }

    #[test]
    fn a_noted_child_is_ended_with_its_group() {
        let dir = tempfile::tempdir().unwrap();
        let journal = dir.path().join("children.log");
        // No mark: only the journal names it (a child of a build before marks existed).
        let mut noted = sleeper(None);
        let pid = noted.id() as i32;
        let start = start_time(pid).unwrap();
        std::fs::write(&journal, format!("{pid} {start}\n")).unwrap();
        end_leftovers(&journal);
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(noted.wait().unwrap().signal(), Some(9));
    }
}
