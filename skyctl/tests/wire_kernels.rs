//! End to end: kernel golden suites through `skyctl verify` (golden_gen -> kernel_harness ->
//! golden_kernels): the built-in CPU harness, the CPU harness run as a shell command, and a
//! harness whose output has one corrupted byte.

use std::path::{Path, PathBuf};
use std::process::Command;

struct Ws(tempfile::TempDir);

impl Ws {
    fn new(pipeline: &str) -> Ws {
        let ws = Ws(tempfile::tempdir().unwrap());
        std::fs::write(ws.p("pipeline.toml"), pipeline).unwrap();
        std::fs::write(ws.p("broken-harness.sh"), BROKEN).unwrap();
        ws
    }

    fn p(&self, rel: &str) -> PathBuf {
        self.0.path().join(rel)
    }

    fn run(&self, args: &[&str]) -> (i32, String, String) {
        self.run_with(args, &[])
    }

    /// `run` with `env` set on top of this process's environment.
    fn run_with(&self, args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
        let out = Command::new(env!("CARGO_BIN_EXE_skyctl"))
            .args(args)
            .current_dir(self.0.path())
            .env_remove("SKYCTL_STORE")
            .envs(env.iter().copied())
            .output()
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    fn report(&self, suite: &str) -> serde_json::Value {
        serde_json::from_slice(
            &std::fs::read(self.p(&format!("build/golden/{suite}.json"))).unwrap(),
        )
        .unwrap()
    }
}

/// Runs the CPU harness, then flips one bit of the last byte of `ssm_recur_y.bin` (the top
/// byte of its last f32: sign or exponent).
const BROKEN: &str = r#"set -e
"$1" kernels run --impl cpu "$2" "$3"
f="$3/ssm_recur_y.bin"
size=$(wc -c < "$f")
b=$(od -An -tu1 -j $((size - 1)) -N1 "$f" | tr -d ' ')
printf "\\$(printf %o $((b ^ 64)))" | dd of="$f" bs=1 seek=$((size - 1)) conv=notrunc 2>/dev/null
"#;

const GOOD: &str = r#"
[[golden]]
name = "kernels-inproc"
kind = "kernels"

[[golden]]
name = "kernels-cpu"
kind = "kernels"
generator = "qwen35moe"
harness = "{skyctl} kernels run --impl cpu {inputs} {outputs}"
"#;

const BAD: &str = r#"
[[golden]]
name = "kernels-broken"
kind = "kernels"
harness = "sh broken-harness.sh {skyctl} {inputs} {outputs}"
sources = ["broken-harness.sh"]
"#;

fn row<'a>(stdout: &'a str, suite: &str) -> &'a str {
    stdout
        .lines()
        .find(|l| l.split_whitespace().next() == Some(suite))
        .unwrap_or_else(|| panic!("no row for {suite} in:\n{stdout}"))
}

#[test]
fn cpu_harnesses_pass() {
    let ws = Ws::new(GOOD);
    let (code, stdout, stderr) = ws.run(&["verify"]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    for (suite, path) in [("kernels-inproc", "cpu"), ("kernels-cpu", "harness")] {
        let r = row(&stdout, suite);
        assert!(
            r.contains(path) && r.contains("19 files") && r.ends_with("pass"),
            "{r}"
        );
        let rep = ws.report(suite);
        assert_eq!(
            (rep["passed"].clone(), rep["files"].clone()),
            (true.into(), 19.into())
        );
    }
    // Same goldens, same outputs, whichever way the CPU harness ran.
    let gold =
        |s: &str| std::fs::read(ws.p(&format!("build/golden/{s}/gold/ssm_recur_y.bin"))).unwrap();
    assert_eq!(gold("kernels-inproc"), gold("kernels-cpu"));
    let out =
        |s: &str| std::fs::read(ws.p(&format!("build/golden/{s}/out/ssm_recur_y.bin"))).unwrap();
    assert_eq!(out("kernels-inproc"), out("kernels-cpu"));
    // Nothing left behind by the harness runs but the declared outputs.
    let mut left: Vec<String> = std::fs::read_dir(ws.p("build/golden/kernels-cpu"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, vec!["gold", "out"]);
    // A second verify runs nothing (the harness is volatile, but cached).
    let (code, stdout, _) = ws.run(&["verify", "--json"]);
    assert_eq!(code, 0);
    let executed = stdout
        .lines()
        .filter(|l| l.contains(r#""status":"executed""#))
        .count();
    assert_eq!(executed, 0, "{stdout}");
    assert_eq!(
        stdout
            .lines()
            .filter(|l| l.starts_with(r#"{"golden":"#))
            .count(),
        2,
        "{stdout}"
    );
}

#[test]
fn a_corrupted_output_file_fails_verify_and_is_named() {
    let ws = Ws::new(&format!("{GOOD}{BAD}"));
    let (code, stdout, stderr) = ws.run(&["verify"]);
    assert_eq!(code, 1, "{stdout}{stderr}");
    let r = row(&stdout, "kernels-broken");
    assert!(
        r.contains("ssm_recur_y[") && r.ends_with("FAIL (1 of 19 files)"),
        "{r}"
    );
    assert!(row(&stdout, "kernels-cpu").ends_with("pass"), "{stdout}");
    assert!(
        stderr.contains("golden `kernels-broken` failed: 1 of 19 output files failed: ssm_recur_y"),
        "{stderr}"
    );
    let rep = ws.report("kernels-broken");
    assert_eq!(rep["failing"], serde_json::json!(["ssm_recur_y"]));
    // The last element is the one that was corrupted.
    let n = rep["check"]["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == "ssm_recur_y")
        .unwrap()["elements"]
        .as_u64()
        .unwrap();
    assert_eq!(rep["worst"], format!("ssm_recur_y[{}]", n - 1));
}

#[test]
fn a_failing_harness_command_fails_verify() {
    let ws = Ws::new(
        "[[golden]]\nname = \"k\"\nkind = \"kernels\"\nharness = \"echo 'cannot reach the GPU host' >&2; exit 7\"\n",
    );
    let (code, stdout, stderr) = ws.run(&["verify"]);
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(
        stderr.contains("harness exited with status 7: cannot reach the GPU host"),
        "{stderr}"
    );
    assert!(row(&stdout, "k").ends_with("not run"), "{stdout}");
    assert!(!Path::new(&ws.p("build/golden/k/out")).exists());
}

#[test]
fn harness_naming_a_command_is_rejected_with_a_hint() {
    let ws = Ws::new("[[command]]\nname = \"gpu\"\nrun = \"true\"\n[[golden]]\nname = \"k\"\nkind = \"kernels\"\nharness = \"gpu\"\n");
    let (code, _, stderr) = ws.run(&["verify"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("pipeline.toml:7:") && stderr.contains("`harness` is the shell command"),
        "{stderr}"
    );
}

#[test]
fn committed_goldens_at_path_are_checked_without_a_generator() {
    let ws = Ws::new("[[golden]]\nname = \"k\"\nkind = \"kernels\"\npath = \"golden/k\"\n");
    let (code, _, stderr) = ws.run(&["golden", "gen", "golden/k"]);
    assert_eq!(code, 0, "{stderr}");
    let (code, stdout, stderr) = ws.run(&["verify", "--json"]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    let nodes: Vec<&str> = stdout
        .lines()
        .filter(|l| l.contains(r#""status":"executed""#))
        .collect();
    assert_eq!(nodes.len(), 2, "run + check, no gen node: {stdout}");
    assert!(!ws.p("build/golden/k/gold").exists());
    assert_eq!(ws.report("k")["check"]["golden_dir"], "golden/k");
    // `path` and `generator` together are ambiguous.
    std::fs::write(ws.p("pipeline.toml"), "[[golden]]\nname = \"k\"\nkind = \"kernels\"\npath = \"golden/k\"\ngenerator = \"qwen35moe\"\n").unwrap();
    let (code, _, stderr) = ws.run(&["verify"]);
    assert_eq!(code, 2);
    assert!(
        stderr.contains("give either `path` (committed goldens) or `generator`"),
        "{stderr}"
    );
}

#[test]
fn a_harness_sees_its_declared_environment_and_nothing_else() {
    // The harness runs only when it sees DECLARED=one and no SECRET.
    let ws = Ws::new(
        r#"
[[golden]]
name = "k"
kind = "kernels"
harness = "test \"$DECLARED\" = one && test -z \"$SECRET\" && {skyctl} kernels run --impl cpu {inputs} {outputs}"
env = ["DECLARED"]
"#,
    );
    let (code, stdout, stderr) = ws.run_with(&["verify"], &[("DECLARED", "one"), ("SECRET", "s")]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert_eq!(ws.report("k")["passed"], true);
    // The value is part of the harness's key: another value runs it again (and here fails it).
    let (code, stdout, stderr) = ws.run_with(&["verify", "--json"], &[("DECLARED", "two")]);
    assert_eq!(code, 1, "{stdout}{stderr}");
    let run = stdout
        .lines()
        .find(|l| l.contains(r#""event":"finished","node":"golden/k/run""#))
        .unwrap_or_else(|| panic!("no finished event for the harness run: {stdout}"));
    assert!(
        run.contains(r#""why":{"reason":"params_changed","field":"env"}"#)
            && run.contains(r#""error":"harness exited with status 1""#),
        "{run}"
    );
}

#[test]
fn env_needs_a_harness_command_and_variable_names() {
    let cases = [
        (
            "[[golden]]\nname = \"k\"\nkind = \"kernels\"\nenv = [\"LD_LIBRARY_PATH\"]\n",
            "pipeline.toml:4:",
            "`env` is passed to the `harness` command",
        ),
        (
            "[[golden]]\nname = \"k\"\nkind = \"kernels\"\nharness = \"true\"\nenv = [\"PATH\"]\n",
            "pipeline.toml:5:",
            "`PATH` is not a variable name to pass",
        ),
        (
            "[[golden]]\nname = \"k\"\nkind = \"kernels\"\nharness = \"true\"\nenv = [\"A=1\"]\n",
            "pipeline.toml:5:",
            "`A=1` is not a variable name to pass",
        ),
    ];
    for (pipeline, at, message) in cases {
        let ws = Ws::new(pipeline);
        let (code, _, stderr) = ws.run(&["verify"]);
        assert_eq!(code, 2, "{pipeline}: {stderr}");
        assert!(
            stderr.contains(at) && stderr.contains(message),
            "{pipeline}: {stderr}"
        );
    }
}
