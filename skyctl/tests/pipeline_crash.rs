//! kill -9 of a running build (and of its commands), at several points, then a rebuild:
//! outputs byte-identical to a clean build, and a store that passes `skyctl store check`.

mod common;

use std::os::unix::process::CommandExt;
use std::time::Duration;

use common::*;

/// Nodes that write their outputs in pieces, with pauses, so a kill can land mid-write.
fn slow_pipeline() -> String {
    let mut s = String::new();
    for i in 0..6 {
        let input = if i == 0 {
            "in.txt".to_string()
        } else {
            format!("out/n{}", i - 1)
        };
        s += &format!(
            "[[command]]\nname = \"n{i}\"\nrun = \"mkdir -p out && head -c 3 {input} > out/n{i} && sleep 0.12 && echo step{i} >> out/n{i}\"\ninputs = [\"{input}\"]\noutputs = [\"out/n{i}\"]\n\n"
        );
    }
    for i in 0..3 {
        s += &format!(
            "[[command]]\nname = \"side{i}\"\nrun = \"mkdir -p side && sleep 0.08 && cat in.txt > side/s{i} && echo {i} >> side/s{i}\"\ninputs = [\"in.txt\"]\noutputs = [\"side/s{i}\"]\n\n"
        );
    }
    s += "[[release.publish]]\nfrom = \"out/n5\"\nto = \"final.txt\"\n\n[[release.publish]]\nfrom = \"side/s2\"\nto = \"side/\"\n";
    s
}

fn workspace() -> Ws {
    let ws = Ws::new();
    ws.write("pipeline.toml", &slow_pipeline());
    ws.write("in.txt", "abcdef\n");
    ws
}

#[test]
fn kill_9_at_several_points_then_rebuild_matches_a_clean_build() {
    let reference = workspace();
    let r = reference.build(&[]);
    assert_eq!(r.code, 0, "{}", r.stderr);

    let ws = workspace();
    for delay_ms in [30u64, 150, 280, 420, 560, 700, 900] {
        let mut child = ws
            .cmd(&["build", "-j", "2"])
            .process_group(0)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(delay_ms));
        // The whole group: skyctl and the commands it started.
        let _ = std::process::Command::new("kill")
            .args(["-9", "--", &format!("-{}", child.id())])
            .status();
        let _ = child.wait();
        // Every kill leaves a store that checks clean (temp files do not count).
        let check = ws.run(&["store", "check"]);
        assert_eq!(
            check.status.code(),
            Some(0),
            "after kill at {delay_ms} ms: {}",
            String::from_utf8_lossy(&check.stdout)
        );
    }
    let run = ws.build(&[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(snapshot(&ws.p("out")), snapshot(&reference.p("out")));
    assert_eq!(snapshot(&ws.p("side")), snapshot(&reference.p("side")));
    assert_eq!(
        snapshot(&ws.p("site/public")),
        snapshot(&reference.p("site/public"))
    );
    assert!(!snapshot(&ws.p("site/public")).is_empty());
    assert_eq!(ws.run(&["store", "check"]).status.code(), Some(0));
    assert_eq!(ws.build(&[]).count("executed"), 0);
    // No staging trees left beside the release.
    let leftovers: Vec<_> = std::fs::read_dir(ws.p("site"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty());
}

/// A build killed between starting a command and noting it in its journal
/// (`.skyctl/state-v1/children.log`) leaves a command the journal does not name. The next
/// build must end it by the mark every child carries before it makes that output anew, or
/// the orphan's late write lands in the new output.
#[test]
fn a_command_the_killed_build_never_noted_is_ended_before_its_node_runs_again() {
    let ws = Ws::new();
    ws.write(
        "pipeline.toml",
        "[[command]]\nname = \"slow\"\nrun = \"mkdir -p out && echo first > out/x && sleep 0.6 && echo late >> out/x\"\noutputs = [\"out/x\"]\n",
    );
    let mut child = ws
        .cmd(&["build"])
        .process_group(0)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Kill once the command is under way (its first line written).
    let t0 = std::time::Instant::now();
    while !ws.p("out/x").exists() {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "the command never started"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_millis(100));
    let _ = std::process::Command::new("kill")
        .args(["-9", "--", &format!("-{}", child.id())])
        .status();
    let _ = child.wait();
    // As if the kill had come before the child was noted: the journal names nobody.
    let journal = ws.p(".skyctl/state-v1/children.log");
    assert!(
        journal.exists(),
        "a build with a running child keeps a journal"
    );
    std::fs::write(&journal, "").unwrap();

    let run = ws.build(&[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.executed(), ["slow"]);
    assert_eq!(
        std::fs::read_to_string(ws.p("out/x")).unwrap(),
        "first\nlate\n"
    );
    // Nothing of the killed build writes afterwards either.
    std::thread::sleep(Duration::from_millis(700));
    assert_eq!(
        std::fs::read_to_string(ws.p("out/x")).unwrap(),
        "first\nlate\n"
    );
    assert!(
        !journal.exists(),
        "a build that ended normally leaves no journal"
    );
}
