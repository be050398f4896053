//! SIGINT and SIGTERM during a build: stop starting nodes, end every running child's whole
//! process group, and let the build finish what it records (a killed node records nothing),
//! so the store stays consistent and the command exits with 128 + the signal (130, 143).
//!
//! [`install`] is for the front end's build commands; without it the default dispositions
//! stand (a direct tool is killed as usual). Children run in process groups of their own
//! ([`crate::process::Child`]), so a terminal's Ctrl-C reaches only skyctl, and skyctl ends
//! them.

use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Mutex;

/// The signal that asked the build to stop (0: none).
static REQUESTED: AtomicI32 = AtomicI32::new(0);

/// Process groups of running children (their leaders' pids).
static RUNNING: Mutex<Vec<i32>> = Mutex::new(Vec::new());

/// Where the running children are noted (`pid starttime` lines), so that the next build ends
/// the process groups a build killed with SIGKILL left behind (they would otherwise go on
/// writing into outputs that the next build is making anew).
static JOURNAL: Mutex<Option<std::path::PathBuf>> = Mutex::new(None);

/// Note children in `path` from now on, after ending the groups a previous process noted there
/// and left running.
pub fn track_children(path: &std::path::Path) {
    if let Ok(text) = std::fs::read_to_string(path) {
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
                }
            }
        }
    }
    let _ = std::fs::remove_file(path);
    *JOURNAL.lock().unwrap_or_else(|p| p.into_inner()) = Some(path.to_path_buf());
}

/// The build ended normally: no child of it runs, nothing to note.
pub fn untrack_children() {
    if let Some(p) = JOURNAL.lock().unwrap_or_else(|p| p.into_inner()).take() {
        let _ = std::fs::remove_file(p);
    }
}

/// Field 22 of `/proc/<pid>/stat`: the start time, in clock ticks since boot.
fn start_time(pid: i32) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses; fields follow the last ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split(' ').nth(19).map(str::to_string)
}

fn note_child(pid: i32) {
    let journal = JOURNAL.lock().unwrap_or_else(|p| p.into_inner());
    if let (Some(path), Some(start)) = (journal.as_ref(), start_time(pid)) {
        use std::io::Write;
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
        {
            let _ = f.write_all(format!("{pid} {start}\n").as_bytes());
        }
    }
}

/// Handle SIGINT and SIGTERM from now on (once per process; later calls do nothing).
pub fn install() -> std::io::Result<()> {
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    let mut result = Ok(());
    INSTALLED.call_once(|| {
        let signals = signal_hook::iterator::Signals::new([
            signal_hook::consts::SIGINT,
            signal_hook::consts::SIGTERM,
        ]);
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
