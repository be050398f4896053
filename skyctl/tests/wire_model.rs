//! End to end: a model converted by `skyctl build` (kind `convert`) and checked by
//! `skyctl verify` (kind `golden_model`) against the float64 PyTorch goldens of s1-pico.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn copy_dir(from: &Path, to: &Path) {
    for e in walkdir::WalkDir::new(from) {
        let e = e.unwrap();
        let dst = to.join(e.path().strip_prefix(from).unwrap());
        if e.file_type().is_dir() {
            std::fs::create_dir_all(&dst).unwrap();
        } else {
            std::fs::copy(e.path(), &dst).unwrap();
        }
    }
}

struct Ws(tempfile::TempDir);

impl Ws {
    /// s1-pico, the first `n` cases with their f64 records, and `pipeline`.
    fn new(n: usize, pipeline: &str) -> Ws {
        let ws = Ws(tempfile::tempdir().unwrap());
        copy_dir(&repo().join("models/s1-pico"), &ws.p("models/s1-pico"));
        let take = |rel: &str| -> String {
            let text = std::fs::read_to_string(repo().join(rel)).unwrap();
            text.lines().take(n).map(|l| format!("{l}\n")).collect()
        };
        std::fs::create_dir_all(ws.p("golden/pico")).unwrap();
        std::fs::write(
            ws.p("golden/pico/cases.jsonl"),
            take("fixtures/laya-ref/cases.jsonl"),
        )
        .unwrap();
        std::fs::write(
            ws.p("golden/pico/expected.jsonl"),
            take("fixtures/laya-ref/goldens/s1-pico.f64.jsonl"),
        )
        .unwrap();
        std::fs::write(ws.p("pipeline.toml"), pipeline).unwrap();
        ws
    }

    fn p(&self, rel: &str) -> PathBuf {
        self.0.path().join(rel)
    }

    fn run(&self, args: &[&str]) -> (i32, String, String) {
        let out: Output = Command::new(env!("CARGO_BIN_EXE_skyctl"))
            .args(args)
            .current_dir(self.0.path())
            .env_remove("SKYCTL_STORE")
            .output()
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// Node ids that `skyctl build --json ARGS` executed, and the exit code.
    fn build(&self, args: &[&str]) -> (i32, Vec<String>, String) {
        let mut all = vec!["build", "--json"];
        all.extend_from_slice(args);
        let (code, stdout, stderr) = self.run(&all);
        let mut executed: Vec<String> = stdout
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|e| e["event"] == "finished" && e["status"] == "executed")
            .map(|e| e["node"].as_str().unwrap_or_default().to_string())
            .collect();
        executed.sort();
        (code, executed, format!("{stdout}{stderr}"))
    }

    fn report(&self, suite: &str) -> serde_json::Value {
        let bytes = std::fs::read(self.p(&format!("build/golden/{suite}.json"))).unwrap();
        serde_json::from_slice(&bytes).unwrap()
    }
}

const MODEL: &str = r#"
[[model]]
name = "pico"
source = "models/s1-pico"
variants = ["f16"]

[[golden]]
name = "pico-f16"
kind = "model"
model = "pico"
variant = "f16"
cases = "golden/pico/cases.jsonl"
expected = "golden/pico/expected.jsonl"
tolerance = 1e-3
"#;

const TIGHT: &str = r#"
[[golden]]
name = "pico-tight"
kind = "model"
model = "pico"
cases = "golden/pico/cases.jsonl"
expected = "golden/pico/expected.jsonl"
tolerance = 1e-12
"#;

/// The table row of `suite` in verify's stdout.
fn row<'a>(stdout: &'a str, suite: &str) -> &'a str {
    stdout
        .lines()
        .find(|l| l.split_whitespace().next() == Some(suite))
        .unwrap_or_else(|| panic!("no row for {suite} in:\n{stdout}"))
}

#[test]
fn build_then_verify_passes_and_a_second_build_does_nothing() {
    let ws = Ws::new(5, MODEL);
    let (code, executed, out) = ws.build(&[]);
    assert_eq!(code, 0, "{out}");
    for node in ["golden/pico-f16", "pico/convert.f16"] {
        assert!(
            executed.iter().any(|n| n == node),
            "{node} not in {executed:?}: {out}"
        );
    }
    let bytes = std::fs::read(ws.p("build/pico/pico.f16.gguf")).unwrap();
    let gguf = sky_gguf::GgufFile::parse(&bytes).unwrap();
    assert_eq!(
        gguf.get("general.name").and_then(|v| v.as_str()),
        Some("pico")
    );

    let (code, stdout, stderr) = ws.run(&["verify"]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    let r = row(&stdout, "pico-f16");
    for cell in ["f32", "5 cases", "pass"] {
        assert!(r.contains(cell), "{cell} missing from {r:?}");
    }
    let rep = ws.report("pico-f16");
    assert_eq!(rep["passed"], true);
    assert_eq!(rep["model"], "build/pico/pico.f16.gguf");
    let err = rep["max_abs_err"].as_f64().unwrap();
    assert!(err > 0.0 && err <= 1e-3, "{err}");
    assert!(r.contains(&format!("{err:.3e}")), "{r}");

    let (code, executed, out) = ws.build(&[]);
    assert_eq!((code, executed.len()), (0, 0), "{executed:?} {out}");

    // --json: one report line per suite.
    let (code, stdout, _) = ws.run(&["verify", "--json"]);
    assert_eq!(code, 0);
    let reports: Vec<serde_json::Value> = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| v.get("golden").cloned())
        .collect();
    assert_eq!(reports, vec![rep]);
}

#[test]
fn too_tight_tolerance_fails_and_the_table_names_the_worst_case() {
    let ws = Ws::new(5, &format!("{MODEL}{TIGHT}"));
    let (code, stdout, stderr) = ws.run(&["verify"]);
    assert_eq!(code, 1, "{stdout}{stderr}");
    let rep = ws.report("pico-tight");
    assert_eq!(rep["passed"], false);
    let worst = rep["worst_case"].as_str().unwrap();
    let r = row(&stdout, "pico-tight");
    assert!(r.contains(worst) && r.ends_with("FAIL"), "{r}");
    assert!(row(&stdout, "pico-f16").ends_with("pass"), "{stdout}");
    // The node's one-line error says the same.
    assert!(
        stderr.contains("golden `pico-tight` failed: max |dp|") && stderr.contains(worst),
        "{stderr}"
    );
    // A failing suite is never cached as a success: verify fails again.
    let (code, stdout, _) = ws.run(&["verify", "pico-tight"]);
    assert_eq!(code, 1);
    assert!(row(&stdout, "pico-tight").contains(worst));
}

#[test]
fn a_broken_checkpoint_fails_convert_and_the_suite_is_not_run() {
    let ws = Ws::new(2, MODEL);
    assert_eq!(ws.run(&["verify"]).0, 0);
    std::fs::write(ws.p("models/s1-pico/rl_agent_config.json"), "{}").unwrap();
    let (code, stdout, stderr) = ws.run(&["verify"]);
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(
        stderr.contains("pico/convert.f16") && stderr.contains("models/s1-pico"),
        "{stderr}"
    );
    // The report of the earlier, passing run is still on disk: the table must not show it.
    assert_eq!(ws.report("pico-f16")["passed"], true);
    assert!(row(&stdout, "pico-f16").ends_with("not run"), "{stdout}");
}

#[test]
fn a_model_exported_by_a_command_converts_to_the_same_bytes() {
    let exported = Ws::new(
        1,
        r#"
[[command]]
name = "export-pico"
run = "cp -R models/s1-pico build/export/pico"
inputs = ["models/s1-pico"]
outputs = ["build/export/pico/"]

[[model]]
name = "pico"
export = "export-pico"
variants = ["f16"]
"#,
    );
    let (code, executed, out) = exported.build(&["pico"]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(executed, vec!["export-pico", "pico/convert.f16"], "{out}");
    let direct = Ws::new(1, MODEL);
    let (code, _, out) = direct.build(&["pico/convert.f16"]);
    assert_eq!(code, 0, "{out}");
    let file = "build/pico/pico.f16.gguf";
    assert_eq!(
        std::fs::read(exported.p(file)).unwrap(),
        std::fs::read(direct.p(file)).unwrap(),
        "same checkpoint and name, any folder: same GGUF"
    );
}
