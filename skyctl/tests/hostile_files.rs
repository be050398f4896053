//! Hostile inputs cost bounded work: a model path that is a device, a FIFO or a huge file that
//! is not a GGUF, and a request that never ends, are refused at once with the path named (exit
//! 2), never read to the end, never waited on.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Runs skyctl, killing it after 60 s (a hang is a failure, not a slow test).
fn skyctl(dir: &Path, args: &[&str]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_skyctl"))
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("running skyctl");
    let start = Instant::now();
    while child.try_wait().expect("wait").is_none() {
        if start.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("skyctl {args:?} hung");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("output")
}

fn refused(dir: &Path, args: &[&str], want: &str) {
    let o = skyctl(dir, args);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "skyctl {args:?}: {err}");
    assert!(err.contains(want), "skyctl {args:?}: {err}");
}

fn request(dir: &Path) -> PathBuf {
    let p = dir.join("request.json");
    std::fs::write(
        &p,
        r#"{"state": "hi", "questions": {"q": {"type": "noul", "instructions": "Is it?"}}}"#,
    )
    .unwrap();
    p
}

#[test]
fn model_paths_that_are_not_regular_files_are_refused_unopened() {
    let dir = tempfile::tempdir().unwrap();
    let req = request(dir.path());
    let req = req.to_str().unwrap();
    refused(
        dir.path(),
        &["inspect", "/dev/zero"],
        "/dev/zero: not a regular file (a character device)",
    );
    refused(
        dir.path(),
        &["ask", "/dev/zero", "--request", req],
        "/dev/zero: not a regular file (a character device)",
    );
    // A FIFO with no writer: opening it would block for ever.
    let fifo = dir.path().join("model.gguf");
    let status = Command::new("mkfifo").arg(&fifo).status().expect("mkfifo");
    assert!(status.success());
    let fifo = fifo.to_str().unwrap();
    refused(dir.path(), &["inspect", fifo], "not a regular file");
    refused(
        dir.path(),
        &["ask", fifo, "--request", req],
        "not a regular file",
    );
    refused(dir.path(), &["bench", fifo, "--q8"], "not a regular file");
}

#[test]
fn a_huge_file_that_is_not_a_gguf_is_refused_by_its_magic() {
    let dir = tempfile::tempdir().unwrap();
    let req = request(dir.path());
    // 4 GiB, sparse: reading it whole would cost seconds and gigabytes.
    let big = dir.path().join("big.gguf");
    let f = std::fs::File::create(&big).unwrap();
    f.set_len(4 << 30).unwrap();
    drop(f);
    let big = big.to_str().unwrap();
    refused(
        dir.path(),
        &["ask", big, "--request", req.to_str().unwrap()],
        "GGUF",
    );
    refused(dir.path(), &["inspect", big], "GGUF");
}

#[test]
fn a_request_that_never_ends_is_cut_at_its_limit() {
    let dir = tempfile::tempdir().unwrap();
    let model = root().join("models/s1-pico");
    let model = model.to_str().unwrap();
    refused(
        dir.path(),
        &["ask", model, "--request", "/dev/zero"],
        "/dev/zero: not a regular file (a character device); a request must be one",
    );
    // A stream (standard input here) is read up to the limit and no further.
    let mut child = Command::new(env!("CARGO_BIN_EXE_skyctl"))
        .args(["ask", model, "--request", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || {
        let chunk = vec![b' '; 1 << 20];
        // Past the limit; the writes fail once skyctl stops reading and exits.
        for _ in 0..80 {
            if std::io::Write::write_all(&mut stdin, &chunk).is_err() {
                break;
            }
        }
    });
    let o = child.wait_with_output().unwrap();
    writer.join().unwrap();
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("standard input: a request larger than 64 MiB"),
        "{err}"
    );
}
