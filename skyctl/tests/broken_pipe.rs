//! Output to a closed pipe (`skyctl graph | head -1`): a quiet exit 0, recognised by the
//! write's `io::ErrorKind::BrokenPipe` (issue 27 item 6), for commands that print with
//! `outln!` and for those that write through a locked stdout.

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
        &["status"],
        &["explain", "a"],
    ] {
        let (code, stderr) = to_closed_pipe(&ws, args);
        assert_eq!(code, Some(0), "skyctl {args:?}: {stderr}");
        assert_eq!(stderr, "", "skyctl {args:?}");
    }
    // A build still runs to the end (its events are only lost), and says how it went.
    let (code, _) = to_closed_pipe(&ws, &["build", "--json"]);
    assert_eq!(code, Some(0));
    assert_eq!(ws.read("out/a"), "a\n");
}
