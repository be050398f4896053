//! Issue 53, classes 9 and 10, against the real binary.
//!
//! Class 9, stores that are not ours to write: a workspace built by root serves another user
//! (a no-op `build` and `verify` read the state and store and write nothing); what such a user
//! cannot do is said in words; a build under umask 777 leaves a `.skyctl` the next build can use.
//!
//! Class 10, interrupts at every point: SIGINT during an upload to a server that never reads
//! the body ends the build at once; SIGINT or SIGTERM during `random`, `convert` or
//! `golden gen` leaves no `.skyctl-tmp-*` file; SIGHUP ends a build's nodes before skyctl
//! exits with 129.
//!
//! Every wait is bounded: a process that outlives its deadline is killed and the test fails.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{skyctl_bin, Ws};

/// Wait for `child` at most `limit`; killed (and the test failed with `what`) past it.
fn wait_bounded(child: &mut Child, limit: Duration, what: &str) -> (ExitStatus, Duration) {
    let t0 = Instant::now();
    loop {
        if let Some(s) = child.try_wait().expect("waiting") {
            return (s, t0.elapsed());
        }
        if t0.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what}: still running after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn signal(child: &Child, sig: &str) {
    let _ = Command::new("kill")
        .args([&format!("-{sig}"), &child.id().to_string()])
        .status();
}

/// Wait (bounded) until `cond` holds.
fn until(limit: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !cond() {
        assert!(t0.elapsed() < limit, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn temps_under(dir: &Path) -> Vec<String> {
    walkdir::WalkDir::new(dir)
        .into_iter()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(".skyctl-tmp-"))
        .map(|e| e.path().display().to_string())
        .collect()
}

// ---- class 9 -------------------------------------------------------------------------------

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// `skyctl ARGS` in `ws` as user nobody (65534).
fn as_nobody(ws: &Ws, args: &[&str]) -> std::process::Output {
    Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            skyctl_bin(),
        ])
        .args(args)
        .current_dir(ws.path())
        .env_remove("SKYCTL_STORE")
        .output()
        .expect("running setpriv")
}

/// Everything under the workspace readable (and folders listable) by others.
fn world_readable(dir: &Path) {
    for e in walkdir::WalkDir::new(dir).into_iter().flatten() {
        let mode = e.metadata().map(|m| m.permissions().mode()).unwrap_or(0);
        let add = if e.file_type().is_dir() { 0o755 } else { 0o644 };
        let _ = std::fs::set_permissions(e.path(), std::fs::Permissions::from_mode(mode | add));
    }
}

const READ_ONLY_PIPELINE: &str = r#"
[[command]]
name = "a"
run = "mkdir -p out && cat in.txt > out/a.txt"
inputs = ["in.txt"]
outputs = ["out/a.txt"]

[[golden]]
name = "k"
kind = "kernels"
"#;

#[test]
fn another_user_is_served_by_a_store_it_cannot_write() {
    // Fails, never skips, where it cannot run (this suite runs as root, as CI does).
    assert!(
        is_root(),
        "needs root: it builds as root and reads as user nobody (setpriv)"
    );
    let ws = Ws::new();
    ws.write("pipeline.toml", READ_ONLY_PIPELINE);
    ws.write("in.txt", "one\n");
    let out = ws.run(&["verify"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(ws.build(&[]).code, 0);
    world_readable(ws.path());
    let state = ws.p(".skyctl/state-v1");
    let before = common::snapshot(&ws.p(".skyctl"));
    // A no-op build and a verify of what is built: served, nothing written.
    for args in [&["build"][..], &["verify"]] {
        let out = as_nobody(&ws, args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{args:?} as nobody: {stderr}");
        assert!(!stderr.contains("Permission denied"), "{args:?}: {stderr}");
    }
    assert_eq!(
        common::snapshot(&ws.p(".skyctl")),
        before,
        "nothing written"
    );
    // A build that has to run a node says why it cannot, in words.
    ws.write("in.txt", "two\n");
    world_readable(ws.path());
    let out = as_nobody(&ws, &["build"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "the state at `{}` is read-only for this user (owned by root); the build needs to write the outputs of node `a`",
            state.display()
        )),
        "{stderr}"
    );
    assert_eq!(
        common::snapshot(&ws.p(".skyctl")),
        before,
        "nothing written"
    );
    // The owner builds on as before.
    assert_eq!(ws.build(&[]).executed(), vec!["a".to_string()]);
}

/// A workspace this user cannot write, never built: no `.skyctl` can be made, and the message
/// says so in words rather than "Permission denied".
#[test]
fn another_user_cannot_make_the_first_store_and_is_told_why() {
    assert!(
        is_root(),
        "needs root: it builds as root and reads as user nobody (setpriv)"
    );
    let ws = Ws::new();
    ws.write("pipeline.toml", READ_ONLY_PIPELINE);
    ws.write("in.txt", "one\n");
    world_readable(ws.path());
    let out = as_nobody(&ws, &["build"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(
        stderr.trim_end(),
        format!(
            "skyctl: the state at `{}` is read-only for this user (owned by root); the build needs to write a new store, as nothing was built here yet: run it as the owner of the workspace (a build that only serves what is built, a no-op build or `verify`, works read-only)",
            ws.path().display()
        )
    );
    assert!(!ws.p(".skyctl").exists());
}

#[test]
fn a_build_under_umask_777_leaves_a_usable_skyctl() {
    let ws = Ws::new();
    ws.write("pipeline.toml", READ_ONLY_PIPELINE);
    ws.write("in.txt", "one\n");
    let status = Command::new("sh")
        .args(["-c", "umask 777; exec \"$0\" build a", skyctl_bin()])
        .current_dir(ws.path())
        .env_remove("SKYCTL_STORE")
        .status()
        .expect("sh");
    assert!(status.success(), "{status}");
    for dir in [
        ".skyctl",
        ".skyctl/state-v1",
        ".skyctl/store-v2",
        ".skyctl/store-v2/blobs",
    ] {
        let mode = std::fs::metadata(ws.p(dir)).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o755, "{dir}: {mode:o}");
    }
    for e in walkdir::WalkDir::new(ws.p(".skyctl")).into_iter().flatten() {
        let mode = e.metadata().unwrap().permissions().mode();
        assert_eq!(mode & 0o444, 0o444, "{}: {mode:o}", e.path().display());
    }
    // The next build works, and (as another user) so does a no-op one.
    let run = ws.build(&["a"]);
    assert_eq!(run.code, 0, "{run:?}");
    if is_root() {
        world_readable(ws.path());
        let out = as_nobody(&ws, &["build", "a"]);
        assert_eq!(out.status.code(), Some(0), "{out:?}");
    }
}

// ---- class 10: uploads ---------------------------------------------------------------------

/// A cache server that answers every GET and HEAD with 404 and accepts a PUT's headers but
/// never reads its body (it holds the connection). `put` is set when a PUT arrives.
fn deaf_server(put: Arc<AtomicBool>) -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = l.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for conn in l.incoming().flatten() {
            let put = put.clone();
            std::thread::spawn(move || {
                let mut w = match conn.try_clone() {
                    Ok(w) => w,
                    Err(_) => return,
                };
                let mut r = BufReader::new(conn);
                loop {
                    let mut head = Vec::new();
                    loop {
                        let mut line = String::new();
                        match r.read_line(&mut line) {
                            Ok(0) | Err(_) => return,
                            Ok(_) => {}
                        }
                        if line == "\r\n" {
                            break;
                        }
                        head.push(line);
                    }
                    if head.first().is_some_and(|l| l.starts_with("PUT ")) {
                        put.store(true, Ordering::SeqCst);
                        std::thread::sleep(Duration::from_secs(300));
                        return;
                    }
                    let _ = w.write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n");
                }
            });
        }
    });
    port
}

#[test]
fn sigint_ends_a_build_uploading_to_a_server_that_never_reads() {
    let put = Arc::new(AtomicBool::new(false));
    let port = deaf_server(put.clone());
    let ws = Ws::new();
    ws.write(
        "pipeline.toml",
        "[[command]]\nname = \"big\"\nrun = \"head -c 20000000 /dev/urandom > big.bin\"\noutputs = [\"big.bin\"]\n",
    );
    let mut child = ws
        .cmd(&[
            "build",
            "--remote-cache",
            &format!("http://127.0.0.1:{port}"),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    let waited = Instant::now();
    while !put.load(Ordering::SeqCst) {
        if waited.elapsed() > Duration::from_secs(30) || child.try_wait().ok().flatten().is_some() {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the build never started its upload");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    // Let the body fill the socket buffers, so the upload blocks in its write.
    std::thread::sleep(Duration::from_millis(500));
    signal(&child, "INT");
    let (status, took) = wait_bounded(
        &mut child,
        Duration::from_secs(10),
        "SIGINT during an upload",
    );
    assert_eq!(status.code(), Some(130), "{status}");
    assert!(took < Duration::from_secs(5), "took {took:?}");
}

// ---- class 10: direct tools ----------------------------------------------------------------

/// Run `args` (in `cwd`), and send `sig` the moment a `.skyctl-tmp-*` file appears under
/// `out` (the tool is mid-write); it must exit with 128 + the signal and leave no temp file.
/// `false` when the tool finished before a temp file was seen.
fn signal_mid_write(cwd: &Path, args: &[&str], out: &Path, sig: &str) -> bool {
    let mut child = Command::new(skyctl_bin())
        .args(args)
        .current_dir(cwd)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    let t0 = Instant::now();
    let mut seen = false;
    while !seen {
        if child.try_wait().expect("waiting").is_some() {
            return false;
        }
        if t0.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{args:?}: still running after 60 s");
        }
        seen = !temps_under(out).is_empty();
    }
    signal(&child, sig);
    let (status, _) = wait_bounded(&mut child, Duration::from_secs(20), "a direct tool");
    let left = temps_under(out);
    assert!(
        left.is_empty(),
        "{args:?}: {sig} mid-write left {left:?} ({status})"
    );
    let want = if sig == "INT" { 130 } else { 143 };
    assert_eq!(
        status.code(),
        Some(want),
        "{args:?}: {status} (signal {:?})",
        status.signal()
    );
    true
}

/// [`signal_mid_write`] until one run is caught mid-write (at most `tries`), then at fixed
/// delays too (a signal before or between writes).
fn no_temp_left(cwd: &Path, args: &[&str], out: &Path, sig: &str, tries: usize) {
    let caught = (0..tries).any(|_| {
        let _ = std::fs::remove_dir_all(out);
        signal_mid_write(cwd, args, out, sig)
    });
    assert!(
        caught,
        "{args:?}: no run was caught mid-write in {tries} tries"
    );
    for ms in [5, 30, 100] {
        let _ = std::fs::remove_dir_all(out);
        let mut child = Command::new(skyctl_bin())
            .args(args)
            .current_dir(cwd)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn");
        std::thread::sleep(Duration::from_millis(ms));
        signal(&child, sig);
        let (status, _) = wait_bounded(&mut child, Duration::from_secs(60), "a direct tool");
        let left = temps_under(out);
        assert!(
            left.is_empty(),
            "{args:?} {sig} after {ms} ms left {left:?} ({status})"
        );
    }
}

#[test]
fn sigint_or_sigterm_during_random_leaves_no_temp_file() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("m");
    let args = ["random", "s1-micro", out.to_str().unwrap()];
    no_temp_left(dir.path(), &args, &out, "INT", 5);
    no_temp_left(dir.path(), &args, &out, "TERM", 5);
}

#[test]
fn sigint_during_convert_leaves_no_temp_file() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("m");
    let out = Command::new(skyctl_bin())
        .args(["random", "s1-micro", model.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    // `convert` writes into an existing folder: made again before each run.
    let gguf_dir = dir.path().join("out");
    let dest = gguf_dir.join("m.gguf");
    let args = ["convert", model.to_str().unwrap(), dest.to_str().unwrap()];
    let caught = (0..5).any(|_| {
        let _ = std::fs::remove_dir_all(&gguf_dir);
        std::fs::create_dir_all(&gguf_dir).unwrap();
        signal_mid_write(dir.path(), &args, &gguf_dir, "INT")
    });
    assert!(caught, "no convert was caught mid-write");
}

#[test]
fn sigint_during_golden_gen_leaves_no_temp_file() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("gold");
    let args = ["golden", "gen", out.to_str().unwrap()];
    no_temp_left(dir.path(), &args, &out, "INT", 20);
}

// ---- class 10: SIGHUP ----------------------------------------------------------------------

#[test]
fn sighup_ends_the_nodes_before_skyctl_exits_129() {
    let ws = Ws::new();
    ws.write(
        "pipeline.toml",
        "[[command]]\nname = \"slow\"\nrun = \"touch started; sleep 30; echo late > late.txt\"\noutputs = [\"late.txt\"]\n",
    );
    let mut child = ws
        .cmd(&["build"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let started = ws.p("started");
    let t0 = Instant::now();
    while !started.exists() {
        if t0.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the node never started");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    signal(&child, "HUP");
    let (status, _) = wait_bounded(&mut child, Duration::from_secs(10), "SIGHUP");
    assert_eq!(status.code(), Some(129), "{status}");
    // No process of the node is left to write into the workspace.
    let gone = || {
        let out = Command::new("pgrep")
            .args(["-f", "sleep 30; echo late"])
            .output();
        out.map(|o| o.stdout.is_empty()).unwrap_or(true)
    };
    until(Duration::from_secs(5), "the node's shell ended", gone);
    std::thread::sleep(Duration::from_secs(3));
    assert!(!ws.p("late.txt").exists(), "the node went on writing");
}
