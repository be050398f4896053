//! Test helpers: a temp workspace and the real `skyctl` binary.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The binary under test.
pub fn skyctl_bin() -> &'static str {
    env!("CARGO_BIN_EXE_skyctl")
}

/// A workspace in a temp dir.
pub struct Ws {
    pub dir: tempfile::TempDir,
}

/// What a `--json` build printed.
#[derive(Debug)]
pub struct BuildRun {
    pub code: i32,
    pub events: Vec<serde_json::Value>,
    pub summary: serde_json::Value,
    pub stderr: String,
}

impl BuildRun {
    /// Ids of nodes with a given finished status.
    pub fn with_status(&self, status: &str) -> Vec<String> {
        let mut v: Vec<String> = self
            .events
            .iter()
            .filter(|e| e["event"] == "finished" && e["status"] == status)
            .map(|e| e["node"].as_str().unwrap_or_default().to_string())
            .collect();
        v.sort();
        v
    }
    pub fn executed(&self) -> Vec<String> {
        self.with_status("executed")
    }
    pub fn count(&self, what: &str) -> u64 {
        self.summary[what].as_u64().unwrap_or(u64::MAX)
    }
    /// The `why` of the node's started/finished event.
    pub fn why(&self, node: &str) -> serde_json::Value {
        self.events
            .iter()
            .find(|e| e["event"] == "finished" && e["node"] == node)
            .map(|e| e["why"].clone())
            .unwrap_or(serde_json::Value::Null)
    }
}

impl Ws {
    pub fn new() -> Ws {
        Ws {
            dir: tempfile::tempdir().expect("tempdir"),
        }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn p(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    pub fn write(&self, rel: &str, content: &str) {
        let p = self.p(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, content).unwrap();
    }

    pub fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.p(rel)).unwrap_or_else(|e| panic!("reading {rel}: {e}"))
    }

    pub fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(skyctl_bin());
        c.args(args)
            .current_dir(self.path())
            .env_remove("SKYCTL_STORE");
        c
    }

    pub fn run(&self, args: &[&str]) -> Output {
        self.cmd(args).output().expect("running skyctl")
    }

    /// `skyctl build --json ARGS`.
    pub fn build(&self, args: &[&str]) -> BuildRun {
        let mut all = vec!["build", "--json"];
        all.extend_from_slice(args);
        parse_build(self.run(&all))
    }

    /// stderr of a command expected to exit with `code`.
    pub fn fails(&self, args: &[&str], code: i32) -> String {
        let out = self.run(args);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(
            out.status.code(),
            Some(code),
            "skyctl {args:?}: stdout {} stderr {stderr}",
            String::from_utf8_lossy(&out.stdout)
        );
        stderr
    }
}

pub fn parse_build(out: Output) -> BuildRun {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let mut events = Vec::new();
    let mut summary = serde_json::Value::Null;
    for line in stdout.lines() {
        let v: serde_json::Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("bad JSON line {line:?}: {e}\nstderr: {stderr}"));
        if v.get("summary").is_some() {
            summary = v["summary"].clone();
        } else {
            events.push(v);
        }
    }
    BuildRun {
        code: out.status.code().unwrap_or(-1),
        events,
        summary,
        stderr,
    }
}

/// A pipeline shaped like the model pipeline, out of command nodes: per model
/// convert.f32 -> calibrate (+ prompts) -> quantize, convert.f16, bench (volatile,
/// exclusive); one manifest over all models; published files.
pub fn model_shaped_pipeline(models: &[&str]) -> String {
    let mut s = String::new();
    for m in models {
        s += &format!(
            r#"
[[command]]
name = "{m}/convert.f32"
run = "cat models/{m}/* > build/{m}/{m}.f32.gguf"
inputs = ["models/{m}"]
outputs = ["build/{m}/{m}.f32.gguf"]

[[command]]
name = "{m}/convert.f16"
run = "cat models/{m}/* | tr a-z A-Z > build/{m}/{m}.f16.gguf"
inputs = ["models/{m}"]
outputs = ["build/{m}/{m}.f16.gguf"]

[[command]]
name = "{m}/calibrate"
run = "cat build/{m}/{m}.f32.gguf prompts/default.jsonl | wc -c > build/{m}/calibration.json"
inputs = ["build/{m}/{m}.f32.gguf", "prompts/default.jsonl"]
outputs = ["build/{m}/calibration.json"]

[[command]]
name = "{m}/quantize.q8_0"
run = "cat build/{m}/{m}.f32.gguf build/{m}/calibration.json > build/{m}/{m}.q8_0.gguf"
inputs = ["build/{m}/{m}.f32.gguf", "build/{m}/calibration.json"]
outputs = ["build/{m}/{m}.q8_0.gguf"]

[[command]]
name = "{m}/bench"
run = "wc -c build/{m}/{m}.f16.gguf build/{m}/{m}.q8_0.gguf > build/{m}/bench.json"
inputs = ["node:{m}/convert.f16", "node:{m}/quantize.q8_0"]
outputs = ["build/{m}/bench.json"]
exclusive = true
volatile = true

[[release.publish]]
from = "build/{m}/{m}.q8_0.gguf"
to = "models/"
"#
        );
    }
    let inputs: Vec<String> = models
        .iter()
        .flat_map(|m| {
            [
                format!("\"build/{m}/{m}.q8_0.gguf\""),
                format!("\"build/{m}/bench.json\""),
            ]
        })
        .collect();
    s += &format!(
        r#"
[[command]]
name = "manifest"
run = "ls -1 build/*/*.q8_0.gguf > build/manifest.json"
inputs = [{}]
outputs = ["build/manifest.json"]

[[release.publish]]
from = "build/manifest.json"
to = "manifest.json"
"#,
        inputs.join(", ")
    );
    s
}

/// Write the model-shaped pipeline and its sources.
pub fn model_workspace(models: &[&str]) -> Ws {
    let ws = Ws::new();
    ws.write("pipeline.toml", &model_shaped_pipeline(models));
    for m in models {
        ws.write(
            &format!("models/{m}/model.safetensors"),
            &format!("weights of {m}\n"),
        );
        ws.write(
            &format!("models/{m}/config.json"),
            &format!("{{\"name\": \"{m}\"}}\n"),
        );
    }
    ws.write(
        "prompts/default.jsonl",
        "{\"prompt\": \"is it raining?\"}\n",
    );
    ws
}

/// Every file under `dir` (relative path -> bytes), for tree comparisons.
pub fn snapshot(dir: &Path) -> std::collections::BTreeMap<String, Vec<u8>> {
    let mut out = std::collections::BTreeMap::new();
    if !dir.exists() {
        return out;
    }
    for e in walkdir::WalkDir::new(dir).into_iter().flatten() {
        if e.file_type().is_file() {
            let rel = e
                .path()
                .strip_prefix(dir)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            out.insert(rel, std::fs::read(e.path()).unwrap());
        }
    }
    out
}

/// Two command nodes (`a` copies `in.txt`, `b` upper-cases it) and one published file: the
/// pipeline of the store tests.
pub const TWO_COMMANDS: &str = r#"
[[command]]
name = "a"
run = "mkdir -p out && cat in.txt > out/a.txt && echo a >> out/a.txt"
inputs = ["in.txt"]
outputs = ["out/a.txt"]

[[command]]
name = "b"
run = "tr a-z A-Z < out/a.txt > out/b.txt"
inputs = ["out/a.txt"]
outputs = ["out/b.txt"]

[[release.publish]]
from = "out/b.txt"
to = "b.txt"
"#;

/// Copies the tree at `from` to `to` (a checkpoint into a test workspace).
pub fn copy_tree(from: &Path, to: &Path) {
    for e in walkdir::WalkDir::new(from).into_iter().flatten() {
        let dst = to.join(e.path().strip_prefix(from).unwrap());
        if e.file_type().is_dir() {
            std::fs::create_dir_all(&dst).unwrap();
        } else {
            std::fs::copy(e.path(), &dst).unwrap();
        }
    }
}

/// Send SIGTERM to `child` and wait for it to exit: its status and how long it took. Killed
/// after 10 s (failing the test with `what` in the message), so a regression fails instead
/// of hanging the suite.
pub fn terminate(
    child: &mut std::process::Child,
    what: &str,
) -> (std::process::ExitStatus, std::time::Duration) {
    let t0 = std::time::Instant::now();
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    loop {
        if let Some(s) = child.try_wait().expect("waiting") {
            return (s, t0.elapsed());
        }
        if t0.elapsed() > std::time::Duration::from_secs(10) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the build ignored SIGTERM for 10 s {what}");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// A clone of this repository's own release pipeline: pipeline.toml, models/, golden/.
pub fn project_clone() -> Ws {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let ws = Ws::new();
    // The model part of the pipeline: the browser engine's nodes (which build the WASM
    // modules from the workspace's sources, minutes of compiling) follow its marker.
    let text = std::fs::read_to_string(root.join("pipeline.toml")).unwrap();
    let models = text
        .split("# The browser engine (stages/web)")
        .next()
        .unwrap();
    assert!(models.len() < text.len(), "the web section marker moved");
    std::fs::write(ws.p("pipeline.toml"), models).unwrap();
    for d in ["models", "golden"] {
        copy_tree(&root.join(d), &ws.p(d));
    }
    ws
}

/// The committed digests of the pipeline's non-volatile artifacts (every GGUF, calibration,
/// tune result and policy, the manifests, the golden reports and kernel goldens, the published
/// models): every instruction set computes the same bits, so a fresh build on any machine
/// reproduces this machine's bytes. Timings (bench.json) are volatile and left out.
pub const ARTIFACTS: &str = "golden/artifacts.blake3";

pub fn artifact_digests(ws: &Ws) -> String {
    let mut lines = Vec::new();
    for top in ["build", "site/public/models"] {
        for e in walkdir::WalkDir::new(ws.p(top)).sort_by_file_name() {
            let e = e.unwrap();
            let rel = e
                .path()
                .strip_prefix(ws.p(""))
                .unwrap()
                .to_string_lossy()
                .into_owned();
            if !e.file_type().is_file() || rel.ends_with("bench.json") {
                continue;
            }
            let digest = blake3::hash(&std::fs::read(e.path()).unwrap());
            lines.push((rel, format!("{digest}  ")));
        }
    }
    lines.sort();
    lines
        .into_iter()
        .map(|(rel, d)| format!("{d}{rel}\n"))
        .collect()
}

pub fn check_artifact_digests(ws: &Ws) {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let got = artifact_digests(ws);
    assert!(got.contains("build/s1-micro/s1-micro.q8_0.gguf"), "{got}");
    if std::env::var_os("SKYCTL_BLESS_ARTIFACTS").is_some() {
        let head = "# blake3 of the non-volatile artifacts of this repository's pipeline (a build of its\n\
                    # model part, from a clean clone; every CPU builds the same bytes). Regenerate:\n\
                    # SKYCTL_BLESS_ARTIFACTS=1 cargo test -p skyctl --test remote_cache the_projects_own_pipeline\n";
        std::fs::write(root.join(ARTIFACTS), format!("{head}{got}")).unwrap();
        return;
    }
    let want = std::fs::read_to_string(root.join(ARTIFACTS)).unwrap();
    let want: String = want
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| format!("{l}\n"))
        .collect();
    if got != want {
        let fresh = root.join("target/artifacts.blake3");
        std::fs::write(&fresh, &got).unwrap();
        let differ: Vec<&str> = got
            .lines()
            .filter(|l| !want.lines().any(|w| w == *l))
            .collect();
        panic!(
            "the pipeline's artifacts differ from {ARTIFACTS} (this build's list: {}); differing: {differ:#?}. If the change is intended: SKYCTL_BLESS_ARTIFACTS=1 cargo test -p skyctl --test remote_cache the_projects_own_pipeline",
            fresh.display()
        );
    }
}
