//! Failures as types and what the commands say after one (issue 27 item 2; issue 26 items 6,
//! 7, 9): the `failure.kind` of `--json` events for real failures, `status` and `explain`
//! after a failed build, skips that name the failed node, up-to-date nodes counted as cached
//! after a failure, and the stray file of a command that missed its declared output.

mod common;

use common::*;

fn event<'a>(run: &'a BuildRun, node: &str) -> &'a serde_json::Value {
    run.events
        .iter()
        .find(|e| e["event"] == "finished" && e["node"] == node)
        .unwrap_or_else(|| panic!("no finished event for {node}: {:?}", run.events))
}

/// One node per kind of failure, and one that depends on a failed node.
const FAILING: &str = r#"
[[command]]
name = "miss"
run = "echo x > build/SHA256SUM"
outputs = ["build/SHA256SUMS"]

[[command]]
name = "bad"
run = "echo oops >&2; exit 3"
outputs = ["out/bad"]

[[command]]
name = "after-bad"
run = "cp out/bad out/after"
inputs = ["out/bad"]
outputs = ["out/after"]

[[command]]
name = "notours"
run = "echo a > out/mine"
outputs = ["out/mine"]

[[command]]
name = "mutate"
run = "echo more >> src.txt; echo b > out/m"
inputs = ["src.txt"]
outputs = ["out/m"]
"#;

#[test]
fn json_events_carry_a_machine_readable_failure_kind() {
    let ws = Ws::new();
    ws.write("pipeline.toml", FAILING);
    ws.write("src.txt", "source\n");
    ws.write("out/mine", "a user's file\n");
    let run = ws.build(&["--keep-going"]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert_eq!((run.count("failed"), run.count("skipped")), (4, 1));

    let miss = event(&run, "miss");
    assert_eq!(miss["status"], "failed");
    assert_eq!(miss["failure"]["kind"], "missing_output");
    assert_eq!(miss["failure"]["path"], "build/SHA256SUMS");
    // Issue 26 item 9: what it wrote instead is named (and left alone).
    assert_eq!(
        miss["failure"]["strays"],
        serde_json::json!(["build/SHA256SUM"])
    );
    assert_eq!(
        miss["error"],
        "declared output `build/SHA256SUMS` was not written; `build/SHA256SUM` appeared during the run and is not declared (left as it is: remove it, or fix the name)"
    );
    assert!(ws.p("build/SHA256SUM").exists());

    let bad = event(&run, "bad");
    assert_eq!(bad["failure"]["kind"], "stage_error");
    let message = bad["failure"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("exited with status 3"), "{bad}");
    assert_eq!(bad["error"], bad["failure"]["message"]);
    assert!(bad["log_tail"]
        .as_str()
        .unwrap_or_default()
        .contains("oops"));

    let skipped = event(&run, "after-bad");
    assert_eq!(skipped["status"], "skipped");
    assert_eq!(
        skipped["failure"],
        serde_json::json!({"kind": "dependency_failed", "node": "bad"})
    );
    assert_eq!(skipped["error"], "depends on `bad`, which failed");

    let notours = event(&run, "notours");
    assert_eq!(
        notours["failure"],
        serde_json::json!({"kind": "output_not_ours", "path": "out/mine"})
    );
    assert_eq!(ws.read("out/mine"), "a user's file\n");

    let mutate = event(&run, "mutate");
    assert_eq!(
        mutate["failure"],
        serde_json::json!({"kind": "input_changed", "path": "src.txt"})
    );
    assert_eq!(
        mutate["error"],
        "modified its input `src.txt` in place (inputs are read-only: write a declared output instead)"
    );
}

const TWO: &str = r#"
[[command]]
name = "a-bad"
run = "exit 1"
outputs = ["out/a"]

[[command]]
name = "b-ok"
run = "echo ok > out/b"
outputs = ["out/b"]

[[command]]
name = "c-dep"
run = "cp out/a out/c"
inputs = ["out/a"]
outputs = ["out/c"]
"#;

/// Issue 26 item 6: after a failure, `status` and `explain` say the node failed in the last
/// build and why, instead of "new node" and "never built here"; a success clears it.
#[test]
fn status_and_explain_say_a_node_failed_in_the_last_build() {
    let ws = Ws::new();
    ws.write("pipeline.toml", TWO);
    let run = ws.build(&["--keep-going"]);
    assert_eq!(run.code, 1, "{}", run.stderr);

    let out = ws.run(&["status"]);
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let line = text
        .lines()
        .find(|l| l.contains("a-bad"))
        .unwrap_or_default()
        .to_string();
    assert!(
        line.starts_with("stale")
            && line.contains("failed in the last build (stage_error): ")
            && line.contains("exited with status 1"),
        "{text}"
    );
    assert!(!line.contains("new node"), "{text}");

    let out = ws.run(&["status", "--json"]);
    let a: serde_json::Value = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["node"] == "a-bad")
        .unwrap_or_default();
    assert_eq!(a["why"]["reason"], "failed_last_build", "{a}");
    assert_eq!(a["why"]["failure"]["kind"], "stage_error", "{a}");

    let out = ws.run(&["explain", "a-bad"]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        text.contains("last key none (failed in the last build)"),
        "{text}"
    );
    assert!(
        text.contains("last run FAILED (stage_error): ") && text.contains("exited with status 1"),
        "{text}"
    );
    assert!(!text.contains("never built here"), "{text}");

    // Fixed: it builds, and nothing says it failed any more.
    ws.write(
        "pipeline.toml",
        &TWO.replace("run = \"exit 1\"", "run = \"echo a > out/a\""),
    );
    let run = ws.build(&[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let text = String::from_utf8_lossy(&ws.run(&["explain", "a-bad"]).stdout).into_owned();
    assert!(
        !text.contains("FAILED") && !text.contains("failed"),
        "{text}"
    );
    assert!(!ws.p(".skyctl/state-v1/failures.json").exists());
}

/// Issue 26 item 7: after a failure (no `--keep-going`), an up-to-date node is reported as
/// cached, not skipped, and a skip names the node that failed.
#[test]
fn after_a_failure_up_to_date_nodes_are_cached_and_skips_say_why() {
    let ws = Ws::new();
    ws.write("pipeline.toml", TWO);
    let run = ws.build(&["--keep-going", "-j", "1"]);
    assert_eq!(run.with_status("executed"), ["b-ok"]);

    let run = ws.build(&["-j", "1"]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert_eq!(run.with_status("failed"), ["a-bad"]);
    assert_eq!(run.with_status("cached"), ["b-ok"], "{:?}", run.events);
    assert_eq!(run.with_status("skipped"), ["c-dep"]);
    assert_eq!((run.count("cached"), run.count("skipped")), (1, 1));
    assert_eq!(event(&run, "c-dep")["failure"]["node"], "a-bad");

    // The same in words.
    let out = ws.run(&["build", "-j", "1"]);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        stderr.contains("skipped   c-dep: depends on `a-bad`, which failed"),
        "{stderr}"
    );
    assert!(!stderr.contains("skipped   b-ok"), "{stderr}");
    assert!(
        stderr.contains("0 executed, 1 cached, 1 failed, 1 skipped"),
        "{stderr}"
    );
}

/// A node that is neither up to date nor behind the failed node: skipped because the build
/// stopped, and it says after which failure.
#[test]
fn a_skip_after_the_build_stopped_names_the_failure() {
    let ws = Ws::new();
    ws.write("pipeline.toml", TWO);
    let run = ws.build(&["-j", "1"]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    let b = event(&run, "b-ok");
    assert_eq!(b["status"], "skipped", "{:?}", run.events);
    assert_eq!(
        b["failure"],
        serde_json::json!({"kind": "stopped_after_failure", "node": "a-bad"})
    );
    assert_eq!(
        b["error"],
        "the build stopped after `a-bad` failed (--keep-going builds what does not depend on it)"
    );
}

/// A node stopped by SIGTERM fails as `cancelled`, not as a stage error.
#[test]
fn a_node_stopped_by_a_signal_is_cancelled() {
    use std::io::BufRead;
    let ws = Ws::new();
    ws.write(
        "pipeline.toml",
        "[[command]]\nname = \"slow\"\nrun = \"sleep 30; echo done > o\"\noutputs = [\"o\"]\n",
    );
    let mut child = ws
        .cmd(&["build", "--json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Signal once the node has started (its `started` event is out), not after a guess.
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let mut events = Vec::new();
    for line in lines.by_ref() {
        let line = line.unwrap();
        let started = line.contains("\"event\":\"started\"");
        events.push(line);
        if started {
            break;
        }
    }
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    events.extend(lines.map_while(Result::ok));
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(143));
    let slow: serde_json::Value = events
        .iter()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|e| e["event"] == "finished" && e["node"] == "slow")
        .unwrap_or_else(|| panic!("no finished event: {events:?}"));
    assert_eq!(slow["status"], "failed");
    assert_eq!(slow["failure"]["kind"], "cancelled", "{slow}");
}

/// A run that fails after writing its output, then the edit reverted: the output comes back
/// from the store, said to be built before (not "missing or modified", which blames the user).
#[test]
fn a_reverted_edit_after_a_failed_run_is_restored_as_built_before() {
    let ws = Ws::new();
    ws.write(
        "pipeline.toml",
        r#"
[[command]]
name = "check"
run = "cp in.txt out/report.txt; grep -q ok in.txt"
inputs = ["in.txt"]
outputs = ["out/report.txt"]
"#,
    );
    ws.write("in.txt", "ok\n");
    assert_eq!(ws.build(&[]).code, 0);
    ws.write("in.txt", "bad\n");
    let failed = ws.build(&[]);
    assert_eq!(failed.code, 1, "{}", failed.stderr);
    assert_eq!(ws.read("out/report.txt"), "bad\n");
    ws.write("in.txt", "ok\n");
    let status = ws.run(&["status"]);
    let said = String::from_utf8_lossy(&status.stdout);
    assert!(said.contains("built before"), "{said}");
    let run = ws.build(&[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let e = event(&run, "check");
    assert_eq!(e["status"], "restored", "{e}");
    assert_eq!(e["why"]["reason"], "built_before", "{e}");
    assert_eq!(e["why"]["path"], "out/report.txt", "{e}");
    assert_eq!(ws.read("out/report.txt"), "ok\n");
}
