//! Every file skyctl reads is read one bounded way (`sky_fs`): a FIFO, a device (through a
//! symlink too) or a huge file given where a small file of a kind belongs is refused at once,
//! naming the path and what it is or the limit it is over, never waited on or read whole.
//! Each case here hung or read gigabytes before.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Runs skyctl in `dir` with `env`, killing it after 60 s (a hang fails the test).
fn skyctl_env(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_skyctl"));
    cmd.args(args)
        .current_dir(dir)
        .env_remove("SKYCTL_STORE")
        .env_remove("SKYCTL_REMOTE_CACHE")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("running skyctl");
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

/// stderr of a run that must exit with `code` and say `want`.
fn refused_env(dir: &Path, args: &[&str], env: &[(&str, &str)], code: i32, want: &str) {
    let o = skyctl_env(dir, args, env);
    let err = String::from_utf8_lossy(&o.stderr);
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(code), "skyctl {args:?}: {err}{out}");
    assert!(
        err.contains(want) || out.contains(want),
        "skyctl {args:?}: wanted {want:?} in:\n{err}{out}"
    );
}

fn refused(dir: &Path, args: &[&str], want: &str) {
    refused_env(dir, args, &[], 2, want);
}

fn mkfifo(p: &Path) {
    let _ = std::fs::remove_file(p);
    let status = Command::new("mkfifo").arg(p).status().expect("mkfifo");
    assert!(status.success());
}

/// A 3 GiB sparse file (no disk used).
fn sparse(p: &Path) {
    let _ = std::fs::remove_file(p);
    let f = std::fs::File::create(p).unwrap();
    f.set_len(3 << 30).unwrap();
}

fn zero_link(p: &Path) {
    let _ = std::fs::remove_file(p);
    std::os::unix::fs::symlink("/dev/zero", p).unwrap();
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// An s1-pico checkpoint at `dir/rel`.
fn checkpoint(dir: &Path, rel: &str) -> PathBuf {
    let o = skyctl_env(dir, &["random", "s1-pico", rel], &[]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    dir.join(rel)
}

/// A workspace whose model's f16 variant has a policy rule (resolving it reads the
/// checkpoint before the inputs are scanned).
fn workspace() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("pipeline.toml"),
        r#"
[policy.p]
type = "f16"
[[policy.p.rule]]
match = "*"
type = "f32"

[[model]]
name = "m"
source = "models/m"
policy = "p"
"#,
    )
    .unwrap();
    checkpoint(dir.path(), "models/m");
    dir
}

const REQUEST: &str =
    r#"{"state": "hi", "questions": {"q": {"type": "noul", "instructions": "Is it?"}}}"#;

#[test]
fn a_fifo_among_a_checkpoints_files_is_refused_by_every_command() {
    for rel in [
        "config.json",
        "encoder/config.json",
        "tokenizer/tokenizer.json",
        "rl_agent_config.json",
    ] {
        let ws = workspace();
        let dir = ws.path();
        std::fs::write(dir.join("r.json"), REQUEST).unwrap();
        let file = dir.join("models/m").join(rel);
        mkfifo(&file);
        for cmd in ["graph", "status", "build"] {
            refused(dir, &[cmd], rel);
        }
        let want = format!("models/m/{rel}: not a regular file (a FIFO)");
        refused(dir, &["convert", "models/m", "out.gguf"], &want);
        refused(dir, &["ask", "models/m", "--request", "r.json"], &want);
    }
}

#[test]
fn a_tokenizer_that_is_a_device_or_huge_is_refused_unread() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("r.json"), REQUEST).unwrap();
    let ck = checkpoint(d, "ck");
    let tok = ck.join("tokenizer/tokenizer.json");
    zero_link(&tok);
    let want = "ck/tokenizer/tokenizer.json: not a regular file (a character device); a \
                tokenizer file must be one";
    refused(d, &["convert", "ck", "out.gguf"], want);
    refused(d, &["ask", "ck", "--request", "r.json"], want);
    sparse(&tok);
    let want = "ck/tokenizer/tokenizer.json: 3 GiB is over the 64 MiB limit for a tokenizer file";
    refused(d, &["convert", "ck", "out.gguf"], want);
    refused(d, &["ask", "ck", "--request", "r.json"], want);
}

#[test]
fn golden_check_refuses_special_goldens_and_reads_candidates_only_as_far_as_their_header() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let o = skyctl_env(d, &["golden", "gen", "g"], &[]);
    assert_eq!(o.status.code(), Some(0));
    let copy = |to: &str| {
        std::fs::create_dir_all(d.join(to)).unwrap();
        for e in std::fs::read_dir(d.join("g")).unwrap().flatten() {
            std::fs::copy(e.path(), d.join(to).join(e.file_name())).unwrap();
        }
    };
    copy("c");
    // The golden itself a FIFO: the suite cannot be checked (2).
    copy("g2");
    mkfifo(&d.join("g2/q3k_matvec_output.bin"));
    refused(
        d,
        &["golden", "check", "g2", "c"],
        "g2/q3k_matvec_output.bin: not a regular file (a FIFO); a PNGOLDEN1 file must be one",
    );
    // A candidate a FIFO: that file fails (1), the others are checked.
    let cand = d.join("c/q3k_matvec_output.bin");
    mkfifo(&cand);
    refused_env(
        d,
        &["golden", "check", "g", "c"],
        &[],
        1,
        "c/q3k_matvec_output.bin: not a regular file (a FIFO)",
    );
    // A 3 GiB candidate whose header declares 24 values: refused by its size, unread.
    let gold = std::fs::read(d.join("g/q3k_matvec_output.bin")).unwrap();
    let header_len = gold.iter().position(|&b| b == b'\n').unwrap() + 1;
    assert!(gold.starts_with(b"PNGOLDEN1 q3k_matvec_output f32 24 "));
    std::fs::remove_file(&cand).unwrap();
    std::fs::write(&cand, &gold[..header_len]).unwrap();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&cand)
        .unwrap()
        .set_len(3 << 30)
        .unwrap();
    let start = Instant::now();
    refused_env(
        d,
        &["golden", "check", "g", "c"],
        &[],
        1,
        "but the header declares 24 × f32 = 96 bytes (trailing bytes)",
    );
    assert!(start.elapsed() < Duration::from_secs(20));
}

#[test]
fn files_named_on_the_command_line_or_in_the_environment_are_bounded() {
    let ws = workspace();
    let d = ws.path();
    let fifo = d.join("fifo");
    mkfifo(&fifo);
    let big = d.join("big");
    sparse(&big);
    let ck = checkpoint(d, "ck");
    let ck = s(&ck);

    // --manifest
    refused(
        d,
        &["graph", "--manifest", s(&fifo)],
        "not a regular file (a FIFO); a pipeline manifest must be one",
    );
    refused(
        d,
        &["graph", "--manifest", s(&big)],
        "3 GiB is over the 4 MiB limit for a pipeline manifest",
    );
    // SKYCTL_REMOTE_CACHE_CA
    for (ca, what) in [(s(&fifo), "a FIFO"), ("/dev/zero", "a character device")] {
        refused_env(
            d,
            &["status"],
            &[
                ("SKYCTL_REMOTE_CACHE", "http://127.0.0.1:9"),
                ("SKYCTL_REMOTE_CACHE_CA", ca),
            ],
            2,
            &format!("SKYCTL_REMOTE_CACHE_CA: {ca}: not a regular file ({what}); a CA bundle"),
        );
    }
    // quantize --calibration, tune --cases: FIFOs
    let f = s(&fifo);
    refused(
        d,
        &["quantize", ck, "q.gguf", "--calibration", f],
        &format!("{f}: not a regular file (a FIFO); a calibration file must be one"),
    );
    refused(
        d,
        &[
            "tune",
            ck,
            "--cases",
            f,
            "--tolerance",
            "0.1",
            "--out",
            "p.toml",
        ],
        &format!("{f}: not a regular file (a FIFO); a cases file must be one"),
    );
    // --prompts, --policy, golden record --cases: /dev/zero
    let z = "/dev/zero: not a regular file (a character device)";
    refused(
        d,
        &["calibrate", ck, "cal.json", "--prompts", "/dev/zero"],
        &format!("{z}; a prompt set must be one"),
    );
    refused(
        d,
        &["quantize", ck, "q.gguf", "--policy", "/dev/zero"],
        &format!("{z}; a policy file must be one"),
    );
    refused(
        d,
        &[
            "golden",
            "record",
            ck,
            "--cases",
            "/dev/zero",
            "--out",
            "e.jsonl",
        ],
        &format!("{z}; a cases file must be one"),
    );
    // A 3 GiB cases file: refused by its size.
    refused(
        d,
        &[
            "tune",
            ck,
            "--cases",
            s(&big),
            "--tolerance",
            "0.1",
            "--out",
            "p.toml",
        ],
        "3 GiB is over the 64 MiB limit for a cases file",
    );
}
