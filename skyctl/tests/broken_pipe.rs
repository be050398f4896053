//! Output to a closed pipe (`skyctl graph | head -1`): quiet, recognised by the write's
//! `io::ErrorKind::BrokenPipe` (issue 27 item 6), for commands that print with `outln!` and
//! for those that write through a locked stdout. The exit code is still the command's
//! outcome: `skyctl verify | true` with a failing suite exits 1, not 0.

mod common;

use std::process::Stdio;

use common::*;

/// Run `args` with stdout a pipe whose read end is already closed: every write fails.
fn to_closed_pipe(ws: &Ws, args: &[&str]) -> (Option<i32>, String) {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = ws
        .cmd(args)
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn printing_to_a_closed_pipe_exits_quietly_with_status_0() {
    let ws = Ws::new();
    ws.write(
        "pipeline.toml",
        "[[command]]\nname = \"a\"\nrun = \"echo a > out/a\"\noutputs = [\"out/a\"]\n",
    );
    for args in [
        &["graph", "--format", "json"][..],
        &["graph"],
        &["explain", "a"],
    ] {
        let (code, stderr) = to_closed_pipe(&ws, args);
        assert_eq!(code, Some(0), "skyctl {args:?}: {stderr}");
        assert_eq!(stderr, "", "skyctl {args:?}");
    }
    // Nothing is built yet: `a` is stale, and a closed pipe does not hide it.
    let (code, stderr) = to_closed_pipe(&ws, &["status"]);
    assert_eq!(code, Some(1), "{stderr}");
    // A build still runs to the end (its events are only lost), and says how it went.
    let (code, _) = to_closed_pipe(&ws, &["build", "--json"]);
    assert_eq!(code, Some(0));
    assert_eq!(ws.read("out/a"), "a\n");
    let (code, stderr) = to_closed_pipe(&ws, &["status"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(stderr, "");
}

/// Issue 32 class 12: the reader going away never turns a failure into success. A failing
/// suite, a damaged store and a stale node each exit 1 with stdout a closed pipe, as they do
/// with stdout read to the end.
#[test]
fn a_closed_pipe_keeps_the_failure_exit_code() {
    let ws = Ws::new();
    ws.write(
        "pipeline.toml",
        "[[command]]\nname = \"a\"\nrun = \"echo a > out/a\"\noutputs = [\"out/a\"]\n\
         [[golden]]\nname = \"k\"\nkind = \"kernels\"\nharness = \"exit 7\"\n",
    );
    for args in [&["verify"][..], &["verify", "--json"], &["status"]] {
        let (code, stderr) = to_closed_pipe(&ws, args);
        assert_eq!(code, Some(1), "skyctl {args:?}: {stderr}");
    }
    let (code, _) = to_closed_pipe(&ws, &["build", "a"]);
    assert_eq!(code, Some(0));
    // Empty one blob of the store: `store check` finds it.
    let blobs = ws.p(".skyctl/store-v2/blobs");
    let blob = walk_files(&blobs).into_iter().next().expect("a blob");
    std::fs::write(&blob, "").unwrap();
    assert_eq!(ws.run(&["store", "check"]).status.code(), Some(1));
    let (code, stderr) = to_closed_pipe(&ws, &["store", "check"]);
    assert_eq!(code, Some(1), "{stderr}");
}

/// The regular files under `dir`, sorted.
fn walk_files(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}
