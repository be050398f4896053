//! A node that runs skyctl on its own workspace (issue 53, class 8): `build`, `clean`, `gc`
//! or `verify` as a node's argv is refused where it is declared; one hidden in a shell string
//! fails its node at once with the reason, never waits for the lock its own build holds.

mod common;

use common::Ws;

/// `skyctl build --json` in `ws` with `SKY` naming the binary; killed (failing the test) after
/// 60 s, so a deadlock fails instead of hanging the suite.
fn build_bounded(ws: &Ws) -> common::BuildRun {
    let mut child = ws
        .cmd(&["build", "--json"])
        .env("SKY", common::skyctl_bin())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if t0.elapsed() > std::time::Duration::from_secs(60) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("a build whose node runs skyctl on its workspace hung for 60 s");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    common::parse_build(child.wait_with_output().unwrap())
}

#[test]
fn skyctl_build_clean_gc_or_verify_as_a_node_is_refused_at_its_declaration() {
    for sub in ["build", "clean", "gc", "verify"] {
        let ws = Ws::new();
        ws.write(
            "pipeline.toml",
            &format!("[[command]]\nname = \"inner\"\nrun = [\"skyctl\", \"{sub}\"]\n"),
        );
        let e = ws.fails(&["build"], 2);
        assert!(
            e.contains(&format!(
                "pipeline.toml:3:7: command `inner`: `skyctl {sub}` cannot run as a node"
            )),
            "{sub}: {e}"
        );
    }
}

#[test]
fn a_node_running_skyctl_on_its_own_workspace_fails_at_once_with_the_reason() {
    for (sub, what) in [
        ("build", "workspace"),
        ("gc", "store"),
        ("clean", "workspace"),
    ] {
        let ws = Ws::new();
        ws.write(
            "pipeline.toml",
            &format!(
                "[[command]]\nname = \"inner\"\nrun = \"\\\"$SKY\\\" {sub}\"\nenv = [\"SKY\"]\noutputs = [\"never\"]\n"
            ),
        );
        let run = build_bounded(&ws);
        assert_eq!(run.code, 1, "{sub}: {run:?}");
        let failed = run
            .events
            .iter()
            .find(|e| e["event"] == "finished" && e["node"] == "inner")
            .unwrap_or_else(|| panic!("{sub}: no event for the node: {run:?}"));
        assert_eq!(failed["status"], "failed", "{sub}: {failed}");
        let log = failed["log_tail"].as_str().unwrap_or_default();
        let root = ws.path().canonicalize().unwrap();
        let locked = if what == "workspace" {
            root
        } else {
            root.join(".skyctl/store-v2")
        };
        assert!(
            log.contains(&format!(
                "skyctl: {what} `{}` is locked by the build this command runs inside",
                locked.display()
            )),
            "{sub}: {log}"
        );
    }
}
