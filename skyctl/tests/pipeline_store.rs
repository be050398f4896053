//! The store and the workspace: how outputs are materialized (hard link, reflink or copy), that
//! commands cannot write through a hard link into the store, and filling an empty `--store`
//! from an up-to-date workspace. Real binary, real files, real processes.

mod common;

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use common::*;

fn workspace() -> Ws {
    let ws = Ws::new();
    ws.write("pipeline.toml", TWO_COMMANDS);
    ws.write("in.txt", "hello\n");
    ws
}

fn blob(store: &Path, content: &[u8]) -> PathBuf {
    let d = blake3::hash(content).to_hex().to_string();
    store.join("store-v2/blobs").join(&d[..2]).join(&d[2..])
}

/// Whether `dir`'s file system can reflink (then outputs are clones, not hard links).
fn reflinks(dir: &Path) -> bool {
    let (a, b) = (dir.join(".probe-a"), dir.join(".probe-b"));
    std::fs::write(&a, "x").unwrap();
    let ok = std::process::Command::new("cp")
        .arg("--reflink=always")
        .arg(&a)
        .arg(&b)
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    let _ = std::fs::remove_file(&a);
    let _ = std::fs::remove_file(&b);
    ok
}

fn store_check(ws: &Ws, store: &Path) {
    let out = ws
        .cmd(&["store", "check"])
        .env("SKYCTL_STORE", store)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn materialized_outputs_share_the_read_only_blob_unless_reflinked() {
    let ws = workspace();
    let run = ws.build(&[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let store = ws.p(".skyctl");
    let content = std::fs::read(ws.p("out/a.txt")).unwrap();
    let blob_a = blob(&store, &content);
    let clones = reflinks(ws.path());
    let check_linked = |what: &str| {
        let (out, b) = (
            std::fs::metadata(ws.p("out/a.txt")).unwrap(),
            std::fs::metadata(&blob_a).unwrap(),
        );
        assert_eq!(b.mode() & 0o222, 0, "blob is writable ({what})");
        if clones {
            assert_ne!(out.ino(), b.ino(), "{what}");
        } else {
            assert_eq!(out.ino(), b.ino(), "{what}: output is not the blob's inode");
            assert_eq!(out.mode() & 0o222, 0, "{what}: linked output is writable");
        }
    };
    // Put into the store after the run...
    check_linked("after the run");
    // ...and materialized from the store after `clean`.
    assert_eq!(ws.run(&["clean"]).status.code(), Some(0));
    let run = ws.build(&[]);
    assert_eq!(run.count("executed"), 0);
    assert_eq!(run.with_status("restored"), vec!["a", "b"]);
    check_linked("after a restore");
    assert_eq!(std::fs::read(ws.p("out/a.txt")).unwrap(), content);
    // The release tree never shares an inode with the store.
    let released = std::fs::metadata(ws.p("site/public/b.txt")).unwrap();
    let blob_b = std::fs::metadata(blob(&store, b"HELLO\nA\n")).unwrap();
    assert_ne!(released.ino(), blob_b.ino());
    assert_eq!(released.nlink(), 1);
    store_check(&ws, &store);
}

#[test]
fn a_command_writing_its_output_in_place_does_not_touch_the_store() {
    let ws = Ws::new();
    // Appends to (and rewrites) its output where it stands: a hard link to the blob, had the
    // output not been removed before the run.
    ws.write(
        "pipeline.toml",
        r#"
[[command]]
name = "w"
run = "mkdir -p out && chmod u+w out/x.txt 2>/dev/null; date +%N >> out/x.txt; cp in.txt out/y.txt"
inputs = ["in.txt"]
outputs = ["out/x.txt", "out/y.txt"]
volatile = true
"#,
    );
    ws.write("in.txt", "one\n");
    assert_eq!(ws.build(&[]).code, 0);
    let store = ws.p(".skyctl");
    let first = std::fs::read(ws.p("out/x.txt")).unwrap();
    let first_blob = blob(&store, &first);
    assert_eq!(std::fs::read(&first_blob).unwrap(), first);
    for _ in 0..2 {
        let run = ws.build(&["--rerun", "w"]);
        assert_eq!(run.executed(), vec!["w"], "{}", run.stderr);
        // A fresh file each time: one line, never the old content plus a line.
        assert_eq!(ws.read("out/x.txt").lines().count(), 1);
    }
    assert_eq!(std::fs::read(&first_blob).unwrap(), first);
    assert_eq!(std::fs::read(blob(&store, b"one\n")).unwrap(), b"one\n");
    store_check(&ws, &store);
}

#[test]
fn a_command_modifying_its_input_in_place_fails_and_the_store_heals() {
    let ws = workspace();
    assert_eq!(ws.build(&[]).code, 0);
    let store = ws.p(".skyctl");
    // `b` now appends to its input (as root, read-only modes do not stop it).
    let p = ws.read("pipeline.toml").replace(
        "tr a-z A-Z < out/a.txt",
        "chmod u+w out/a.txt; echo extra >> out/a.txt; tr a-z A-Z < out/a.txt",
    );
    ws.write("pipeline.toml", &p);
    let run = ws.build(&[]);
    assert_eq!(run.code, 1);
    let err = run
        .events
        .iter()
        .find(|e| e["node"] == "b" && e["event"] == "finished")
        .and_then(|e| e["error"].as_str().map(str::to_string))
        .unwrap_or_default();
    assert!(
        err.contains("modified its input `out/a.txt` in place"),
        "{err}"
    );
    // Whatever the write reached, the store holds no corrupted blob (the workspace file it
    // changed is reported as such, and restored by the next build).
    let check = ws.run(&["store", "check"]);
    assert!(
        !String::from_utf8_lossy(&check.stdout).contains("blob content hashes to"),
        "{}",
        String::from_utf8_lossy(&check.stdout)
    );
    // Back to a well-behaved `b`: `a` is re-run or restored, and the store checks clean.
    ws.write("pipeline.toml", TWO_COMMANDS);
    let run = ws.build(&[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(ws.read("out/a.txt"), "hello\na\n");
    assert_eq!(ws.read("site/public/b.txt"), "HELLO\nA\n");
    store_check(&ws, &store);
}

#[test]
fn an_empty_store_is_filled_from_an_up_to_date_workspace_for_a_second_clone() {
    let a = workspace();
    let run = a.build(&[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.count("executed"), 2);
    // `a` is up to date; point it at an empty store: nothing runs, the store gets everything.
    let shared = tempfile::tempdir().unwrap();
    let build_with = |ws: &Ws| {
        parse_build(
            ws.cmd(&["build", "--json", "--store"])
                .arg(shared.path())
                .output()
                .unwrap(),
        )
    };
    let run = build_with(&a);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.count("executed"), 0, "{:?}", run.executed());
    assert_eq!(run.with_status("cached"), vec!["a", "b"]);
    store_check(&a, shared.path());
    // A second clone in another folder, pointed at that store: zero nodes executed.
    let b = workspace();
    let run = build_with(&b);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.count("executed"), 0, "{:?}", run.executed());
    assert_eq!(run.with_status("restored"), vec!["a", "b"]);
    assert_eq!(snapshot(&a.p("out")), snapshot(&b.p("out")));
    assert_eq!(snapshot(&a.p("site/public")), snapshot(&b.p("site/public")));
    assert!(!snapshot(&b.p("site/public")).is_empty());
    // Back on its own store, `a` still runs nothing (its records are there).
    assert_eq!(a.build(&[]).count("executed"), 0);
    // A workspace output edited by hand is not put into a store: its node re-runs instead.
    let other = tempfile::tempdir().unwrap();
    std::fs::remove_file(a.p("out/b.txt")).unwrap();
    std::fs::write(a.p("out/b.txt"), "edited\n").unwrap();
    let run = parse_build(
        a.cmd(&["build", "--json", "--store"])
            .arg(other.path())
            .output()
            .unwrap(),
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.executed(), vec!["b"]);
    assert_eq!(a.read("out/b.txt"), "HELLO\nA\n");
    store_check(&a, other.path());
}

#[test]
fn gc_after_filling_keeps_what_the_last_build_used() {
    let a = workspace();
    assert_eq!(a.build(&[]).code, 0);
    let shared = tempfile::tempdir().unwrap();
    let run = parse_build(
        a.cmd(&["build", "--json", "--store"])
            .arg(shared.path())
            .output()
            .unwrap(),
    );
    assert_eq!(run.count("executed"), 0);
    let out = a
        .cmd(&["gc", "--keep-last", "1", "--store"])
        .arg(shared.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("removed 0 action records"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    store_check(&a, shared.path());
    let b = workspace();
    let run = parse_build(
        b.cmd(&["build", "--json", "--store"])
            .arg(shared.path())
            .output()
            .unwrap(),
    );
    assert_eq!(run.count("executed"), 0, "{:?}", run.executed());
}
