//! A user's first week: `init` on their own checkpoint builds on the first try (tolerances
//! fitted to the error measured on that checkpoint), the release's checksums check, and the
//! messages say what to do next.

mod common;
// Only the open server is used here.
#[allow(dead_code)]
#[path = "common/nginx.rs"]
mod nginx;

use common::Ws;
use std::path::Path;
use std::process::Command;

fn repo() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn text(o: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The `tolerance = ...` values of the manifest's suites, in order.
fn tolerances(manifest: &str) -> Vec<f64> {
    manifest
        .lines()
        .filter_map(|l| l.strip_prefix("tolerance = "))
        .map(|t| t.parse().unwrap())
        .collect()
}

/// `init --model CHECKPOINT` into `proj/`, then the first build: it passes and publishes.
fn first_build_passes(ws: &Ws, checkpoint: &Path, name: &str) {
    let o = ws.run(&["init", "proj", "--model", checkpoint.to_str().unwrap()]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    // Each suite's tolerance is reported with the error it was fitted to.
    for suite in [format!("{name}-f16"), format!("{name}-q8_0")] {
        let line = out
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("{suite}: max |dp| ")))
            .unwrap_or_else(|| panic!("no line for {suite}:\n{out}"));
        let measured: f64 = line
            .split("max |dp| ")
            .nth(1)
            .and_then(|r| r.split(' ').next())
            .unwrap()
            .parse()
            .unwrap();
        let fitted: f64 = line.rsplit("tolerance = ").next().unwrap().parse().unwrap();
        assert!(
            fitted >= (2.0 * measured).min(1.0) && (1e-4..=1.0).contains(&fitted),
            "{line}"
        );
    }
    let manifest = ws.read("proj/pipeline.toml");
    assert_eq!(tolerances(&manifest).len(), 2, "{manifest}");
    let b = common::parse_build(
        ws.cmd(&["build", "--json"])
            .current_dir(ws.p("proj"))
            .output()
            .unwrap(),
    );
    assert_eq!((b.code, b.count("failed")), (0, 0), "{}", b.stderr);
    assert_eq!(b.summary["release"]["published"], true, "{}", b.summary);
    assert!(ws
        .p(&format!("proj/site/public/models/{name}.gguf"))
        .is_file());
    assert!(ws
        .p(&format!("proj/site/public/models/{name}.q8_0.gguf"))
        .is_file());
}

#[test]
fn init_on_each_committed_model_builds_on_the_first_try() {
    for name in ["s1-pico", "s1-nano", "s1-micro"] {
        let ws = Ws::new();
        first_build_passes(&ws, &repo().join("models").join(name), name);
    }
}

#[test]
fn init_on_random_checkpoints_builds_on_the_first_try() {
    for preset in ["s1-pico", "s1-nano"] {
        let ws = Ws::new();
        let name = format!("my-{preset}");
        let ck = ws.p(&name);
        let o = ws.run(&["random", preset, ck.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        first_build_passes(&ws, &ck, &name);
    }
}

/// A project from `init` (random s1-pico), not built.
fn initialised() -> Ws {
    let ws = Ws::new();
    let o = ws.run(&["init"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    ws
}

#[test]
fn golden_record_reports_each_suite_and_set_tolerance_writes_the_fit() {
    let ws = initialised();
    let fitted = tolerances(&ws.read("pipeline.toml"));
    // A tolerance far too tight, and one missing: both get the fitted value back.
    let manifest = ws
        .read("pipeline.toml")
        .replacen(
            &format!("tolerance = {:e}", fitted[0]),
            "tolerance = 1e-12",
            1,
        )
        .replacen(&format!("tolerance = {:e}", fitted[1]), "", 1);
    ws.write("pipeline.toml", &manifest);
    assert_eq!(tolerances(&manifest), vec![1e-12], "{manifest}");
    let record = [
        "golden",
        "record",
        "models/s1-pico",
        "--cases",
        "golden/s1-pico/cases.jsonl",
        "--out",
        "golden/s1-pico/expected.jsonl",
    ];
    let o = ws.run(&record);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(
        out.contains("s1-pico-f16 (s1-pico f16, f32 path): max |dp| ")
            && out.contains("tolerance 1e-12: EXCEEDED; fitted "),
        "{out}"
    );
    assert!(
        out.contains("s1-pico-q8_0 (s1-pico q8_0, q8 path): max |dp| ")
            && out.contains("no tolerance; fitted "),
        "{out}"
    );
    assert!(
        out.contains("--set-tolerance writes the fitted tolerances into pipeline.toml"),
        "{out}"
    );
    assert_eq!(ws.read("pipeline.toml"), manifest, "reported, not written");

    let mut set = record.to_vec();
    set.push("--set-tolerance");
    let o = ws.run(&set);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(out.contains("wrote the fitted tolerances into"), "{out}");
    let now = ws.read("pipeline.toml");
    let mut got = tolerances(&now);
    got.sort_by(f64::total_cmp);
    let mut want = fitted.clone();
    want.sort_by(f64::total_cmp);
    assert_eq!(got, want, "{now}");
    let b = ws.build(&[]);
    assert_eq!((b.code, b.count("failed")), (0, 0), "{}", b.stderr);

    // --set-tolerance with no suite using the file says so and changes nothing.
    let e = ws.fails(
        &[
            "golden",
            "record",
            "models/s1-pico",
            "--cases",
            "golden/s1-pico/cases.jsonl",
            "--out",
            "other.jsonl",
            "--set-tolerance",
        ],
        2,
    );
    assert!(
        e.contains("--set-tolerance: no [[golden]] suite of ")
            && e.contains("has expected = `other.jsonl`"),
        "{e}"
    );
    assert_eq!(ws.read("pipeline.toml"), now);
}

#[test]
fn the_release_checksums_check_with_sha256sum_in_the_release_root() {
    let ws = initialised();
    let b = ws.build(&[]);
    assert_eq!(b.code, 0, "{}", b.stderr);
    let o = Command::new("sha256sum")
        .args(["-c", "SHA256SUMS"])
        .current_dir(ws.p("site/public"))
        .output()
        .unwrap();
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert_eq!(out, "models/s1-pico.gguf: OK\n");
    // A changed published file fails the check: the sums are of what the release ships.
    std::fs::write(ws.p("site/public/models/s1-pico.gguf"), b"changed").unwrap();
    let o = Command::new("sha256sum")
        .args(["-c", "SHA256SUMS"])
        .current_dir(ws.p("site/public"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
}

const RECORD_FIX: &str = "skyctl golden record models/s1-pico --cases golden/s1-pico/cases.jsonl --out golden/s1-pico/expected.jsonl --set-tolerance";

/// `skyctl build` (plain text): exit code and stderr.
fn plain_build(ws: &Ws) -> (Option<i32>, String) {
    let o = ws.run(&["build"]);
    (o.status.code(), text(&o))
}

#[test]
fn a_golden_failure_says_what_failed_once_and_names_the_command_that_fixes_it() {
    let ws = initialised();
    assert_eq!(ws.build(&[]).code, 0);
    // A new case without an expected record.
    let cases = ws.read("golden/s1-pico/cases.jsonl");
    let first = cases.lines().next().unwrap();
    let mut new: serde_json::Value = serde_json::from_str(first).unwrap();
    new["id"] = "my_refund".into();
    ws.write("golden/s1-pico/cases.jsonl", &format!("{cases}{new}\n"));
    let (code, out) = plain_build(&ws);
    assert_eq!(code, Some(1), "{out}");
    let line = out
        .lines()
        .find(|l| l.starts_with("FAILED    golden/s1-pico-f16"))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(
        line.ends_with(&format!(
            "golden `s1-pico-f16` failed: 1 of 9 cases have no expected record: my_refund; to record the new cases: {RECORD_FIX}"
        )),
        "{line}"
    );
    assert!(!line.contains("mismatched"), "{line}");
    assert_eq!(line.matches("failed:").count(), 1, "said once: {line}");
    assert_eq!(
        out.matches("golden `s1-pico-f16` failed").count(),
        1,
        "{out}"
    );
    let v = ws.run(&["verify"]);
    assert!(
        text(&v).contains("s1-pico-f16   f32   9 cases")
            && text(&v).contains("FAIL (1 not recorded)"),
        "{}",
        text(&v)
    );

    // The command it names fixes it.
    let args: Vec<&str> = RECORD_FIX.split(' ').skip(1).collect();
    let o = ws.run(&args);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let (code, out) = plain_build(&ws);
    assert_eq!(code, Some(0), "{out}");

    // Another checkpoint moves every answer: the failure names the same fix.
    let ck = ws.p("other");
    let o = ws.run(&["random", "s1-pico", ck.to_str().unwrap(), "--seed", "7"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    std::fs::copy(
        ck.join("model.safetensors"),
        ws.p("models/s1-pico/model.safetensors"),
    )
    .unwrap();
    let (code, out) = plain_build(&ws);
    assert_eq!(code, Some(1), "{out}");
    let line = out
        .lines()
        .find(|l| l.starts_with("FAILED    golden/s1-pico-f16"))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(line.contains("failed: max |dp| "), "{line}");
    assert!(
        line.ends_with(&format!(
            "; if the new answers are right, record them: {RECORD_FIX}"
        )),
        "{line}"
    );
    let o = ws.run(&args);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let (code, out) = plain_build(&ws);
    assert_eq!(code, Some(0), "{out}");
}

#[test]
fn ctrl_c_during_a_build_is_a_cancel_not_a_failure() {
    let ws = Ws::new();
    ws.write(
        "pipeline.toml",
        "[[command]]\nname = \"slow\"\nrun = \"touch started; sleep 30; echo x > a.txt\"\noutputs = [\"a.txt\"]\n\n\
         [[command]]\nname = \"after\"\nrun = \"cp a.txt b.txt\"\ninputs = [\"node:slow\"]\noutputs = [\"b.txt\"]\n",
    );
    let child = ws
        .cmd(&["build"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = std::time::Instant::now();
    while !ws.p("started").exists() {
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(60),
            "the node never started"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let kill = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let o = child.wait_with_output().unwrap();
    let out = text(&o);
    assert_eq!(o.status.code(), Some(130), "{out}");
    assert!(out.contains("cancelled slow (new node): "), "{out}");
    assert!(
        out.contains("skipped   after: not run: the build was interrupted"),
        "{out}"
    );
    assert!(
        out.contains("skyctl: cancelled (interrupted by signal 2): 0 executed, 0 cached, 0 failed, 0 skipped, 2 cancelled"),
        "{out}"
    );
    assert!(
        !out.contains("FAILED") && !out.contains("--keep-going"),
        "{out}"
    );
}

#[test]
fn messages_of_the_first_week() {
    let ws = initialised();
    assert_eq!(ws.build(&[]).code, 0);
    ws.write(
        "r.json",
        r#"{"id": "r", "type": "score", "instructions": "Rate it", "criteria": ["good"], "state": "fine"}"#,
    );
    // A mistyped variant: the path once, and the built file it was probably meant to be.
    let e = ws.fails(
        &[
            "ask",
            "build/s1-pico/s1-pico.f61.gguf",
            "--request",
            "r.json",
        ],
        2,
    );
    assert_eq!(
        e.trim(),
        "skyctl: build/s1-pico/s1-pico.f61.gguf: no such file or directory (did you mean `build/s1-pico/s1-pico.f16.gguf`?); a model is a .gguf file or a Laya checkpoint directory"
    );
    // A folder that is no checkpoint is called that.
    let e = ws.fails(&["ask", "golden", "--request", "r.json"], 2);
    assert_eq!(
        e.trim(),
        "skyctl: golden: not a Laya checkpoint (it has no encoder/config.json nor rl_agent_config.json; a checkpoint directory holds model.safetensors, encoder/, rl_agent_config.json and tokenizer/)"
    );

    // status names every changed parameter, and a long one where it changed.
    let text0 = ws.read("pipeline.toml");
    let edited = text0
        .replacen("compute = \"f32\"", "compute = \"q8-fast\"", 1)
        .replace(
            "publish = [\"f16\", \"q8_0\"]",
            "publish = [\"q8_0\", \"f16\"]",
        );
    let tol = tolerances(&text0)[0];
    let edited = edited.replacen(&format!("tolerance = {tol:e}"), "tolerance = 0.5", 1);
    ws.write("pipeline.toml", &edited);
    let o = ws.run(&["status"]);
    let out = text(&o);
    let golden = out
        .lines()
        .find(|l| l.contains("golden/s1-pico-f16"))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(
        golden.ends_with(&format!("parameter `path` changed from \"f32\" to \"q8-fast\"; parameter `tolerance` changed from {tol} to 0.5")),
        "{golden}"
    );
    let manifest = out
        .lines()
        .find(|l| l.contains(" manifest "))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(
        manifest.contains("changed from …,\"publish\":[{\"variant\":\"f16\"")
            && manifest.contains(" to …,\"publish\":[{\"variant\":\"q8_0\""),
        "{manifest}"
    );
    ws.write("pipeline.toml", &text0);

    // verify MODEL runs that model's suites; a name that is neither is refused with the list.
    let o = ws.run(&["verify", "s1-pico"]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(
        out.contains("s1-pico-f16") && out.contains("s1-pico-q8_0"),
        "{out}"
    );
    let e = ws.fails(&["verify", "s1-pic"], 2);
    assert_eq!(
        e.trim(),
        "skyctl: no golden suite named `s1-pic`; the suites: s1-pico-f16, s1-pico-q8_0"
    );
}

#[test]
fn a_remote_cache_added_to_a_built_project_hints_store_push() {
    let _turn = nginx::one_at_a_time();
    let server = nginx::Nginx::start(nginx::Mode::Open);
    let ws = initialised();
    assert_eq!(ws.build(&[]).code, 0);
    let hint = "skyctl: nothing was uploaded: these results were built before the remote cache was set, and a build uploads only what it runs; `skyctl store push` uploads them";
    let url = server.url();
    let with_remote = || {
        let o = ws
            .cmd(&["build", "--remote-cache", &url])
            .env_remove("SKYCTL_REMOTE_CACHE")
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        text(&o)
    };
    let out = with_remote();
    assert!(
        out.contains("0 fetched, 0 uploaded") && out.contains(hint),
        "{out}"
    );
    let o = ws
        .cmd(&["store", "push", "--remote-cache", &url])
        .env_remove("SKYCTL_REMOTE_CACHE")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    // Pushed: the next no-op build has nothing to say about it.
    let out = with_remote();
    assert!(!out.contains("store push"), "{out}");
}

#[test]
fn a_bf16_policy_variant_is_named_and_labelled_bf16() {
    let ws = initialised();
    let text0 = ws.read("pipeline.toml");
    let edited = text0
        .replacen("type = \"f16\"", "type = \"bf16\"", 1)
        .replace("s1-pico.f16.gguf", "s1-pico.bf16.gguf");
    assert_ne!(edited, text0, "the template changed");
    ws.write("pipeline.toml", &edited);
    let o = ws.run(&[
        "golden",
        "record",
        "models/s1-pico",
        "--cases",
        "golden/s1-pico/cases.jsonl",
        "--out",
        "golden/s1-pico/expected.jsonl",
        "--set-tolerance",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let b = ws.build(&[]);
    assert_eq!((b.code, b.count("failed")), (0, 0), "{}", b.stderr);
    assert!(ws.p("build/s1-pico/s1-pico.bf16.gguf").is_file());
    assert!(!ws.p("build/s1-pico/s1-pico.f16.gguf").exists());
    assert!(ws.p("site/public/models/s1-pico.gguf").is_file());
    let manifest: serde_json::Value =
        serde_json::from_str(&ws.read("site/public/models/manifest.json")).unwrap();
    let file = &manifest["models"][0]["files"][0];
    assert_eq!(file["path"], "models/s1-pico.gguf");
    // The type the site shows for it.
    assert_eq!(file["policy"]["encoder"], "BF16", "{file}");
    assert!(file["types"]["BF16"].as_u64().unwrap() > 0, "{file}");
    assert!(
        file["types"]
            .get("F16")
            .is_none_or(|n| n.as_u64() <= Some(1)),
        "{file}"
    );
}

#[test]
fn a_reverted_model_is_restored_as_built_before_and_a_misused_flag_is_its_own_error() {
    let ws = initialised();
    assert_eq!(ws.build(&[]).code, 0);
    let cfg = "models/s1-pico/rl_agent_config.json";
    let before = ws.read(cfg);
    ws.write(
        cfg,
        &before.replace("\"choice:2\": 0.9", "\"choice:2\": 2.5"),
    );
    assert_eq!(ws.build(&["-k"]).code, 1);
    ws.write(cfg, &before);
    let (code, out) = plain_build(&ws);
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.contains(
            "restored  s1-pico/convert.f16 (built before: these inputs' result is in the store)"
        ),
        "{out}"
    );
    assert!(
        !out.contains("s1-pico.f16.gguf` missing or modified"),
        "{out}"
    );

    ws.write(
        "r.json",
        r#"{"id": "r", "type": "score", "instructions": "Rate it", "criteria": ["good"], "state": "fine"}"#,
    );
    let e = ws.fails(
        &[
            "ask",
            "build/s1-pico/s1-pico.f16.gguf",
            "--no-calib",
            "--request",
            "r.json",
        ],
        2,
    );
    assert_eq!(
        e.trim(),
        "skyctl: `--no-calib`: selects plain int8 without outliers: use it with --q8 or --q8-fast, or on a Q8_0 file"
    );
}

/// A float32 C-order `.npy`: (shape, values).
fn read_npy(path: &Path) -> (Vec<usize>, Vec<f32>) {
    let b = std::fs::read(path).unwrap();
    assert_eq!(&b[..6], b"\x93NUMPY", "{}", path.display());
    let (hlen, start) = match b[6] {
        1 => (u16::from_le_bytes([b[8], b[9]]) as usize, 10),
        _ => (u32::from_le_bytes([b[8], b[9], b[10], b[11]]) as usize, 12),
    };
    let header = std::str::from_utf8(&b[start..start + hlen]).unwrap();
    assert!(
        header.contains("'descr': '<f4'") && header.contains("'fortran_order': False"),
        "{header}"
    );
    let shape: Vec<usize> = header
        .split("'shape': (")
        .nth(1)
        .and_then(|r| r.split(')').next())
        .unwrap()
        .split(',')
        .filter(|s| !s.trim().is_empty())
        .map(|s| s.trim().parse().unwrap())
        .collect();
    let data = b[start + hlen..]
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    (shape, data)
}

#[test]
fn embed_matches_the_pytorch_encoder_output_and_pools_it() {
    let ws = Ws::new();
    let cases = std::fs::read_to_string(repo().join("fixtures/laya-ref/cases.jsonl")).unwrap();
    for case in ["c3_route", "c3_long_state"] {
        let line = cases
            .lines()
            .find(|l| l.contains(&format!("\"id\": \"{case}\"")))
            .unwrap_or_else(|| panic!("no case {case}"));
        ws.write(&format!("{case}.jsonl"), &format!("{line}\n"));
        for model in ["s1-pico", "s1-nano", "s1-micro"] {
            let out = ws.p(&format!("{model}.{case}.npy"));
            let m = repo().join("models").join(model);
            let o = ws.run(&[
                "embed",
                m.to_str().unwrap(),
                "--requests",
                &format!("{case}.jsonl"),
                "--pooling",
                "none",
                "--npy",
                out.to_str().unwrap(),
            ]);
            assert_eq!(o.status.code(), Some(0), "{}", text(&o));
            let (shape, got) = read_npy(&out);
            let (want_shape, want) = read_npy(
                &repo()
                    .join("fixtures/laya-ref/goldens")
                    .join(format!("{model}.last_hidden_state.{case}.npy")),
            );
            assert_eq!(shape, want_shape, "{model} {case}");
            let err = got
                .iter()
                .zip(&want)
                .map(|(a, b)| (a - b).abs())
                .fold(0f32, f32::max);
            // The engine's f32 against PyTorch's f32 (measured: about 3e-6).
            assert!(err < 1e-4, "{model} {case}: max |dh| {err}");
            let line: serde_json::Value =
                serde_json::from_str(String::from_utf8_lossy(&o.stdout).lines().next().unwrap())
                    .unwrap();
            assert_eq!(line["id"], case);
            assert_eq!(line["tokens"], shape[0]);
            assert_eq!(line["hidden"].as_array().unwrap().len(), shape[0]);
        }
    }
    // Pooled: cls is the first row, mean the mean of the rows.
    let m = repo().join("models/s1-pico");
    let (_, rows) = read_npy(&ws.p("s1-pico.c3_route.npy"));
    let d = 64;
    for (pooling, want) in [
        ("cls", rows[..d].to_vec()),
        ("mean", {
            let n = rows.len() / d;
            (0..d)
                .map(|j| (0..n).map(|i| rows[i * d + j] as f64).sum::<f64>() / n as f64)
                .map(|v| v as f32)
                .collect::<Vec<f32>>()
        }),
    ] {
        let o = ws.run(&[
            "embed",
            m.to_str().unwrap(),
            "--requests",
            "c3_route.jsonl",
            "--pooling",
            pooling,
        ]);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        let line: serde_json::Value =
            serde_json::from_slice(o.stdout.split(|&b| b == b'\n').next().unwrap()).unwrap();
        let got: Vec<f32> = line["embedding"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap() as f32)
            .collect();
        assert_eq!(got.len(), d);
        for (a, b) in got.iter().zip(&want) {
            assert!((a - b).abs() < 1e-5, "{pooling}: {a} vs {b}");
        }
    }
    // Texts: [CLS] text [SEP], one row each in the .npy.
    let out = ws.p("texts.npy");
    let o = ws.run(&[
        "embed",
        m.to_str().unwrap(),
        "--text",
        "hello world",
        "--text",
        "refund please",
        "--npy",
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(read_npy(&out).0, vec![2, d]);
    let first: serde_json::Value =
        serde_json::from_slice(o.stdout.split(|&b| b == b'\n').next().unwrap()).unwrap();
    assert_eq!(first["id"], "text1");
    assert_eq!(first["input_ids"][0], 2, "[CLS] first: {first}");
    // Per-token rows of two inputs do not make one array.
    let e = ws.fails(
        &[
            "embed",
            m.to_str().unwrap(),
            "--text",
            "a",
            "--text",
            "b",
            "--pooling",
            "none",
            "--npy",
            out.to_str().unwrap(),
        ],
        2,
    );
    assert_eq!(
        e.trim(),
        "skyctl: --npy with --pooling none writes one input's tokens x hidden; 2 inputs were given"
    );
}

#[test]
fn requests_in_text_mode_print_the_answer_not_its_object() {
    let ws = Ws::new();
    let m = repo().join("models/s1-pico");
    let cases = std::fs::read_to_string(repo().join("fixtures/laya-ref/cases.jsonl")).unwrap();
    let pick = |t: &str| {
        cases
            .lines()
            .find(|l| l.contains(&format!("\"type\": \"{t}\"")))
            .unwrap()
            .to_string()
    };
    ws.write(
        "c.jsonl",
        &format!("{}\n{}\n{}\n", pick("choice"), pick("score"), pick("noul")),
    );
    let o = ws.run(&["ask", m.to_str().unwrap(), "--requests", "c.jsonl"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let answers: Vec<&str> = out.lines().map(|l| l.split('\t').nth(1).unwrap()).collect();
    assert_eq!(answers.len(), 3, "{out}");
    assert!(answers.iter().all(|a| !a.starts_with('{')), "{out}");
    let (score, noul): (f64, f64) = (answers[1].parse().unwrap(), answers[2].parse().unwrap());
    assert!(score >= 0.0 && (0.0..=1.0).contains(&noul), "{out}");
    let choice: serde_json::Value = serde_json::from_str(&pick("choice")).unwrap();
    let labels = match &choice["criteria"] {
        serde_json::Value::Array(a) => a
            .iter()
            .map(|v| v.as_str().unwrap().to_string())
            .collect::<Vec<_>>(),
        serde_json::Value::Object(o) => o.keys().cloned().collect(),
        other => panic!("{other}"),
    };
    assert!(labels.iter().any(|l| l == answers[0]), "{out}");
}

#[test]
fn a_refused_long_option_is_not_echoed_whole() {
    let ws = Ws::new();
    let long = "refund the order ".repeat(40);
    let req = serde_json::json!({"state": "s", "questions": {"q": {"type": "choice", "instructions": "Pick", "criteria": [long, long]}}});
    ws.write("r.json", &req.to_string());
    let m = repo().join("models/s1-pico");
    let e = ws.fails(&["ask", m.to_str().unwrap(), "--request", "r.json"], 2);
    assert!(
        e.contains("questions.q.criteria[1]: the label \"refund the order refund the order refund the ord…\" is given twice (also questions.q.criteria[0])"),
        "{e}"
    );
    assert!(e.len() < 300, "{e}");
}
