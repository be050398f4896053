//! Issue 24, items 8 and 10: a store entry replaced by another kind of file (a FIFO, a
//! directory, a symlink, a regular file) never hangs a command, is never trusted, is reported by
//! `store check`, and the next `build` or `gc` repairs it. Every skyctl run here is a child
//! with a kill timeout: a hang fails the test instead of blocking the suite.

mod common;

use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use common::*;

const A: &[u8] = b"hello\na\n";
const B: &[u8] = b"HELLO\nA\n";

/// The longest any command here may take before it counts as hung.
const HANG: Duration = Duration::from_secs(60);

fn workspace() -> Ws {
    let ws = Ws::new();
    ws.write("pipeline.toml", TWO_COMMANDS);
    ws.write("in.txt", "hello\n");
    ws
}

/// Run skyctl; kill it and fail the test when it runs past [`HANG`].
fn run(ws: &Ws, args: &[&str]) -> Output {
    let mut child = ws
        .cmd(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawning skyctl");
    let start = Instant::now();
    loop {
        if child.try_wait().expect("waiting for skyctl").is_some() {
            return child.wait_with_output().expect("skyctl output");
        }
        if start.elapsed() > HANG {
            let _ = child.kill();
            let out = child.wait_with_output().expect("skyctl output");
            panic!(
                "skyctl {args:?} hung (killed after {HANG:?}); stderr: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Run skyctl expecting exit `code`; returns stdout + stderr.
fn expect(ws: &Ws, args: &[&str], code: i32) -> String {
    let out = run(ws, args);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(code), "skyctl {args:?}:\n{text}");
    text
}

fn build(ws: &Ws) -> BuildRun {
    parse_build(run(ws, &["build", "--json"]))
}

fn store(ws: &Ws) -> PathBuf {
    ws.p(".skyctl/store-v2")
}

fn blob(ws: &Ws, content: &[u8]) -> PathBuf {
    let d = blake3::hash(content).to_hex().to_string();
    store(ws).join("blobs").join(&d[..2]).join(&d[2..])
}

/// The kinds of file that can stand where another belongs.
#[derive(Clone, Copy, Debug)]
enum Kind {
    /// A regular file (with other content, where a file belongs).
    File,
    Dir,
    /// A symlink to `/etc/passwd` (a file) or `/tmp` (a folder).
    Symlink,
    Fifo,
}

const KINDS: [Kind; 4] = [Kind::File, Kind::Dir, Kind::Symlink, Kind::Fifo];

/// Replace whatever is at `p` by a `kind`.
fn replace(p: &Path, kind: Kind) {
    match std::fs::symlink_metadata(p) {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(p).unwrap(),
        Ok(_) => std::fs::remove_file(p).unwrap(),
        Err(_) => {}
    }
    match kind {
        Kind::File => std::fs::write(p, b"not what belongs here\n").unwrap(),
        Kind::Dir => {
            std::fs::create_dir(p).unwrap();
            std::fs::write(p.join("inside"), b"x").unwrap();
        }
        Kind::Symlink => std::os::unix::fs::symlink("/etc/passwd", p).unwrap(),
        Kind::Fifo => {
            let ok = std::process::Command::new("mkfifo")
                .arg(p)
                .status()
                .is_ok_and(|s| s.success());
            assert!(ok, "mkfifo {}", p.display());
        }
    }
}

fn what(kind: Kind) -> &'static str {
    match kind {
        Kind::File => "a regular file",
        Kind::Dir => "a directory",
        Kind::Symlink => "a symlink",
        Kind::Fifo => "a FIFO",
    }
}

fn built(ws: &Ws) {
    let run = build(ws);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(std::fs::read(ws.p("out/a.txt")).unwrap(), A);
    assert_eq!(std::fs::read(ws.p("site/public/b.txt")).unwrap(), B);
}

fn is_regular(p: &Path) -> bool {
    std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_file())
}

/// Item 8: a blob replaced by a FIFO hung `build` after `clean` for ever, and `gc` left it.
#[test]
fn i24_8_a_fifo_blob_never_hangs_a_build_and_gc_removes_it() {
    let ws = workspace();
    built(&ws);
    let a = blob(&ws, A);
    expect(&ws, &["clean"], 0);
    replace(&a, Kind::Fifo);
    let check = expect(&ws, &["store", "check"], 1);
    assert!(
        check.contains(&format!("{}: a FIFO, not a regular file", a.display())),
        "{check}"
    );
    // The build never opens it: it says why, drops it and runs the node again.
    let run = build(&ws);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.executed(), ["a"], "{run:?}");
    let said = format!(
        "{}{}",
        serde_json::Value::from(run.events.clone()),
        run.stderr
    );
    assert!(
        said.contains("blob is not a regular file: a FIFO; removed it; re-running it"),
        "{said}"
    );
    assert_eq!(std::fs::read(ws.p("out/a.txt")).unwrap(), A);
    assert!(is_regular(&a), "the re-run stored the blob again");
    assert!(expect(&ws, &["store", "check"], 0).contains("store ok"));

    // gc removes one too, without opening it.
    replace(&a, Kind::Fifo);
    let gc = expect(&ws, &["gc"], 0);
    assert!(gc.contains("repaired: 1 damaged blobs removed"), "{gc}");
    assert!(!a.exists() && std::fs::symlink_metadata(&a).is_err());
    assert!(expect(&ws, &["store", "check"], 0).contains("store ok"));
    built(&ws);
}

/// Item 10: each kind of file in a blob's place is reported by `store check` (a symlink to
/// `/etc/passwd` was "store ok"), and repaired by the next build that needs the blob and by `gc`
/// (a directory was never removed).
#[test]
fn i24_10_a_blob_replaced_by_any_kind_of_file_is_reported_and_repaired() {
    for kind in KINDS {
        // "noop": the workspace is up to date, so the build needs no blob; it still stores the
        // damaged one again from the workspace (a directory was never repaired).
        for repair in ["build", "gc", "noop"] {
            if repair == "noop" && matches!(kind, Kind::File) {
                // Other content in a regular file is found by hashing, which a no-op build
                // never does: `store check`, `gc` and every restore do.
                continue;
            }
            let ws = workspace();
            built(&ws);
            let a = blob(&ws, A);
            if repair != "noop" {
                expect(&ws, &["clean"], 0);
            }
            replace(&a, kind);
            let check = expect(&ws, &["store", "check"], 1);
            let said = match kind {
                Kind::File => format!("{}: blob content hashes to", a.display()),
                k => format!("{}: {}, not a regular file", a.display(), what(k)),
            };
            assert!(check.contains(&said), "{kind:?}: {check}");
            if repair == "build" {
                let run = build(&ws);
                assert_eq!(run.code, 0, "{kind:?}: {}", run.stderr);
                assert_eq!(run.executed(), ["a"], "{kind:?}: {run:?}");
            } else if repair == "noop" {
                let run = build(&ws);
                assert_eq!(run.code, 0, "{kind:?}: {}", run.stderr);
                assert!(run.executed().is_empty(), "{kind:?}: {run:?}");
            } else {
                let gc = expect(&ws, &["gc"], 0);
                assert!(
                    gc.contains("repaired: 1 damaged blobs removed"),
                    "{kind:?}: {gc}"
                );
                built(&ws);
            }
            assert_eq!(std::fs::read(ws.p("out/a.txt")).unwrap(), A, "{kind:?}");
            assert!(
                is_regular(&a),
                "{kind:?} {repair}: the blob is stored again"
            );
            let ok = expect(&ws, &["store", "check"], 0);
            assert!(ok.contains("store ok"), "{kind:?} {repair}: {ok}");
            assert!(
                std::fs::read("/etc/passwd").is_ok(),
                "a symlink is removed, never what it points at"
            );
        }
    }
}

/// Item 10: a store folder (`builds/`, `tmp/`, `actions/`, `blobs/`) or a lock (the store's or
/// the workspace state's), or the state folder, replaced by another kind of file left every
/// command stuck at exit 2 (a FIFO lock: blocked for ever). The next `build` (or `gc`) repairs
/// it and nothing wrong is published.
#[test]
fn i24_10_store_and_state_entries_of_the_wrong_kind_are_repaired() {
    let folders = [
        "store-v2/builds",
        "store-v2/tmp",
        "store-v2/actions",
        "store-v2/blobs",
        "state-v1",
    ];
    let files = ["store-v2/lock", "store-v2/id", "state-v1/lock"];
    let mut cases: Vec<(&str, Kind)> = Vec::new();
    for f in folders {
        cases.extend([(f, Kind::File), (f, Kind::Symlink), (f, Kind::Fifo)]);
    }
    for f in files {
        cases.extend([(f, Kind::Dir), (f, Kind::Symlink), (f, Kind::Fifo)]);
    }
    for (rel, kind) in cases {
        for first in ["build", "gc"] {
            let ws = workspace();
            built(&ws);
            let p = ws.p(".skyctl").join(rel);
            replace(&p, kind);
            // A symlinked folder points at a folder that must be left alone.
            if matches!(kind, Kind::Symlink) && !(rel.ends_with("lock") || rel.ends_with("id")) {
                std::fs::remove_file(&p).unwrap();
                std::os::unix::fs::symlink(ws.p("elsewhere"), &p).unwrap();
                ws.write("elsewhere/keep", "keep");
            }
            if first == "gc" && rel.starts_with("store-v2") {
                expect(&ws, &["gc"], 0);
            }
            ws.write("in.txt", "hello again\n");
            let run = build(&ws);
            assert_eq!(run.code, 0, "{rel} as {kind:?} ({first}): {}", run.stderr);
            assert_eq!(
                ws.read("site/public/b.txt"),
                "HELLO AGAIN\nA\n",
                "{rel} as {kind:?}"
            );
            let t = std::fs::symlink_metadata(&p).unwrap().file_type();
            if rel.ends_with("lock") || rel.ends_with("id") {
                assert!(t.is_file(), "{rel} as {kind:?}: {t:?}");
            } else {
                assert!(t.is_dir() && !t.is_fifo(), "{rel} as {kind:?}: {t:?}");
            }
            if matches!(kind, Kind::Symlink) && !(rel.ends_with("lock") || rel.ends_with("id")) {
                assert_eq!(ws.read("elsewhere/keep"), "keep");
            }
            let gc = expect(&ws, &["gc"], 0);
            assert!(gc.contains("removed"), "{gc}");
            let ok = expect(&ws, &["store", "check"], 0);
            assert!(ok.contains("store ok"), "{rel} as {kind:?}: {ok}");
        }
    }
}

/// Item 10: a log, a build record or a temp file replaced by a FIFO, a directory or a symlink
/// is reported by `store check`, never opened, and removed by `gc`.
#[test]
fn i24_10_odd_entries_among_logs_records_and_temps_are_reported_and_removed() {
    for sub in ["actions", "builds", "tmp"] {
        for kind in [Kind::Dir, Kind::Symlink, Kind::Fifo] {
            let ws = workspace();
            built(&ws);
            let p = store(&ws).join(sub).join("odd.log");
            replace(&p, kind);
            let check = expect(&ws, &["store", "check"], 1);
            let said = format!("{}: {}, not a regular file", p.display(), what(kind));
            assert!(check.contains(&said), "{sub} {kind:?}: {check}");
            // A build neither hangs on it nor trusts it.
            expect(&ws, &["build"], 0);
            let gc = expect(&ws, &["gc"], 0);
            assert!(
                gc.contains("repaired: 1 entries that were not regular files removed"),
                "{sub} {kind:?}: {gc}"
            );
            assert!(std::fs::symlink_metadata(&p).is_err(), "{sub} {kind:?}");
            assert!(expect(&ws, &["store", "check"], 0).contains("store ok"));
        }
    }
}

/// Item 10: a blob's fan-out folder replaced by another kind of file is reported, and the
/// next build stores the blob again (gc removes it).
#[test]
fn i24_10_a_fan_out_folder_of_the_wrong_kind_is_reported_and_repaired() {
    for kind in [Kind::File, Kind::Symlink, Kind::Fifo] {
        for repair in ["build", "gc"] {
            let ws = workspace();
            built(&ws);
            let a = blob(&ws, A);
            let fan = a.parent().unwrap().to_path_buf();
            expect(&ws, &["clean"], 0);
            std::fs::remove_dir_all(&fan).unwrap();
            replace(&fan, kind);
            let check = expect(&ws, &["store", "check"], 1);
            let said = format!("{}: {}, not a blob folder", fan.display(), what(kind));
            assert!(check.contains(&said), "{kind:?}: {check}");
            if repair == "gc" {
                let gc = expect(&ws, &["gc"], 0);
                assert!(
                    gc.contains("repaired: 1 damaged blobs removed"),
                    "{kind:?}: {gc}"
                );
            }
            built(&ws);
            assert!(
                is_regular(&a),
                "{kind:?} {repair}: the blob is stored again"
            );
            let ok = expect(&ws, &["store", "check"], 0);
            assert!(ok.contains("store ok"), "{kind:?} {repair}: {ok}");
        }
    }
}

/// Item 10: a node that deletes `.skyctl` while it runs left every later build refusing the
/// outputs ("already exists and was not made by skyctl"). The state and the store are made
/// again, and the next build is a no-op.
#[test]
fn i24_10_a_node_deleting_dot_skyctl_leaves_a_workspace_the_next_build_accepts() {
    let ws = Ws::new();
    let once = format!("{}.deleted-once", ws.path().display());
    ws.write(
        "pipeline.toml",
        &TWO_COMMANDS.replace(
            "run = \"tr a-z A-Z",
            &format!(
                "run = \"if [ ! -e '{once}' ]; then rm -rf .skyctl; touch '{once}'; fi; tr a-z A-Z"
            ),
        ),
    );
    ws.write("in.txt", "hello\n");
    let first = build(&ws);
    assert_eq!(first.code, 0, "{}", first.stderr);
    assert_eq!(first.executed(), ["a", "b"]);
    assert!(
        std::path::Path::new(&once).exists(),
        "the node deleted .skyctl"
    );
    let next = build(&ws);
    assert_eq!(next.code, 0, "{}", next.stderr);
    assert!(next.executed().is_empty(), "{next:?}");
    assert!(
        !next.stderr.contains("not made by skyctl"),
        "{}",
        next.stderr
    );
    assert_eq!(ws.read("site/public/b.txt"), "HELLO\nA\n");
    assert!(expect(&ws, &["store", "check"], 0).contains("store ok"));
    expect(&ws, &["gc"], 0);
    let _ = std::fs::remove_file(&once);
    // The store still serves a clean workspace without running anything.
    expect(&ws, &["clean"], 0);
    let restored = build(&ws);
    assert_eq!(restored.code, 0, "{}", restored.stderr);
    assert!(restored.executed().is_empty(), "{restored:?}");
    assert_eq!(ws.read("out/a.txt"), "hello\na\n");
}

/// Item 10: what cannot be repaired in place (the store folder itself, or `.skyctl`, replaced
/// by a file or a FIFO) is said in one line, naming what to delete; nothing hangs.
#[test]
fn i24_10_a_store_folder_of_the_wrong_kind_is_named_in_one_line() {
    for kind in [Kind::File, Kind::Fifo] {
        let ws = workspace();
        built(&ws);
        let root = store(&ws);
        std::fs::remove_dir_all(&root).unwrap();
        replace(&root, kind);
        for cmd in [&["build"][..], &["gc"], &["store", "check"]] {
            let out = run(&ws, cmd);
            assert_eq!(out.status.code(), Some(2), "{cmd:?} {kind:?}");
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(
                err,
                format!(
                    "skyctl: store `{p}`: is {w}, not a folder skyctl can use: delete it (`rm {p}`) and run again\n",
                    p = root.display(),
                    w = what(kind)
                ),
                "{cmd:?} {kind:?}"
            );
        }
        std::fs::remove_file(&root).unwrap();
        built(&ws);
    }
}

/// Item 10: a file of the workspace state replaced by a FIFO hung every build (its reader
/// blocked), by a directory failed every build at exit 2 (its writer refused). The state is a
/// cache: such an entry is dropped and the build goes on.
#[test]
fn i24_10_state_files_of_the_wrong_kind_are_dropped() {
    let names = [
        "graph.bin",
        "last-build.bin",
        "materials.log",
        "statcache",
        "outputs.log",
    ];
    for name in names {
        for kind in [Kind::Dir, Kind::Symlink, Kind::Fifo] {
            let ws = workspace();
            built(&ws);
            let p = ws.p(".skyctl/state-v1").join(name);
            replace(&p, kind);
            ws.write("in.txt", "hello again\n");
            let run = build(&ws);
            assert_eq!(run.code, 0, "{name} as {kind:?}: {}", run.stderr);
            assert_eq!(ws.read("site/public/b.txt"), "HELLO AGAIN\nA\n");
            let t = std::fs::symlink_metadata(&p).map(|m| m.file_type());
            assert!(
                t.is_err() || t.is_ok_and(|t| t.is_file()),
                "{name} as {kind:?}"
            );
            let again = build(&ws);
            assert!(again.executed().is_empty(), "{name} as {kind:?}: {again:?}");
        }
    }
}
