//! `skyctl tune` on the committed s1-pico checkpoint: the promise checked independently (the
//! tuned file's answers from `skyctl ask` against the f32 file's, on the tuned and the held-out
//! cases), the size against the uniform policies, monotonicity in the tolerance, the boundary
//! at exactly the tolerance, the policy file through `convert --policy` and `quantize --policy`
//! byte for byte, the errors, and the `tuned` variant of a pipeline.

mod common;

use common::Ws;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Output;

fn repo(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(rel)
}

fn pico() -> String {
    repo("models/s1-pico").display().to_string()
}

fn tuned_cases() -> String {
    repo("golden/laya/tune.jsonl").display().to_string()
}

fn held_out_cases() -> String {
    repo("golden/laya/cases.jsonl").display().to_string()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn ok(o: Output) -> Output {
    assert_eq!(
        o.status.code(),
        Some(0),
        "stdout {}\nstderr {}",
        text(&o.stdout),
        text(&o.stderr)
    );
    o
}

/// `skyctl tune` on s1-pico with `extra` flags; returns the report.
fn tune(ws: &Ws, tag: &str, extra: &[&str]) -> Value {
    let (policy, report, gguf) = (
        format!("{tag}.toml"),
        format!("{tag}.json"),
        format!("{tag}.gguf"),
    );
    let (model, cases, holdout) = (pico(), tuned_cases(), held_out_cases());
    let mut args = vec![
        "tune",
        &model,
        "--cases",
        &cases,
        "--holdout",
        &holdout,
        "--out",
        &policy,
        "--report",
        &report,
        "--gguf",
        &gguf,
    ];
    args.extend_from_slice(extra);
    ok(ws.run(&args));
    serde_json::from_str(&ws.read(&report)).expect("report JSON")
}

/// Probabilities per case id from `skyctl ask --json --requests`.
fn answers(ws: &Ws, model: &str, cases: &str) -> Vec<(String, Vec<f64>)> {
    let o = ok(ws.run(&["ask", model, "--json", "--requests", cases]));
    text(&o.stdout)
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).expect("answer line");
            let p = v["probabilities"]
                .as_array()
                .expect("probabilities")
                .iter()
                .map(|x| x.as_f64().expect("a number"))
                .collect();
            (v["id"].as_str().expect("id").to_string(), p)
        })
        .collect()
}

/// max |p - q| over every option of every case, the case lists checked to match first.
fn max_diff(a: &[(String, Vec<f64>)], b: &[(String, Vec<f64>)]) -> f64 {
    assert_eq!(a.len(), b.len(), "case counts");
    let mut worst = 0.0f64;
    for ((ia, pa), (ib, pb)) in a.iter().zip(b) {
        assert_eq!(ia, ib);
        assert_eq!(pa.len(), pb.len(), "options of {ia}");
        for (x, y) in pa.iter().zip(pb) {
            worst = worst.max((x - y).abs());
        }
    }
    worst
}

fn f32_file(ws: &Ws) -> String {
    ok(ws.run(&[
        "convert",
        &pico(),
        "f32.gguf",
        "--type",
        "f32",
        "--head-type",
        "f32",
    ]));
    "f32.gguf".into()
}

fn num(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

#[test]
fn tuned_file_meets_the_tolerance_on_tuned_and_held_out_cases() {
    let ws = Ws::new();
    let r = tune(&ws, "t", &["--tolerance", "0.01"]);
    assert_eq!((num(&r["tolerance"]), num(&r["margin"])), (0.01, 0.5));
    assert_eq!(num(&r["target"]), 0.005);
    assert_eq!(
        (r["cases"].as_u64(), r["holdout_cases"].as_u64()),
        (Some(41), Some(41))
    );
    // Independently: the shipped file's answers against the f32 file's, as a user gets them.
    let f32 = f32_file(&ws);
    for (cases, key) in [
        (tuned_cases(), "error"),
        (held_out_cases(), "holdout_error"),
    ] {
        let got = max_diff(&answers(&ws, "t.gguf", &cases), &answers(&ws, &f32, &cases));
        let reported = num(&r[key]);
        assert!(
            (got - reported).abs() <= 1e-7,
            "{key}: reported {reported}, measured {got}"
        );
        assert!(got <= 0.01, "{key} {got} above the tolerance");
    }
    assert!(num(&r["error"]) <= 0.005);
    // Something was lowered below F16, and the report says what each tensor cost.
    let tensors = r["tensors"].as_array().expect("tensors");
    assert_eq!(tensors.len(), 16, "every tensor of two or more dimensions");
    assert!(tensors.iter().any(|t| t["chosen"] == "q8_0"), "{r}");
    for t in tensors {
        assert_eq!(
            t["error_alone"].as_object().map(|o| o.len()),
            Some(t["bytes"].as_object().map_or(0, |b| b.len()) - 1),
            "one error per candidate type: {t}"
        );
    }
    assert_eq!(r["costliest"].as_array().map(Vec::len), Some(3));
    let accepted: Vec<&Value> = r["steps"]
        .as_array()
        .expect("steps")
        .iter()
        .filter(|s| s["accepted"] == true)
        .collect();
    let last = accepted.last().expect("an accepted step");
    assert_eq!(last["bytes_after"], r["bytes"]);
    let size = std::fs::metadata(ws.p("t.gguf")).expect("tuned file").len();
    assert_eq!(r["bytes"].as_u64(), Some(size));
    // The table on stdout and the policy comment say the same numbers.
    let policy = ws.read("t.toml");
    assert!(
        policy.starts_with(
            "# skyctl tune s1-pico: tolerance 0.01, margin 0.5 (tuned to 5.000e-3), on 41 cases"
        ),
        "{policy}"
    );
    assert!(policy.contains(&format!("{size} bytes")), "{policy}");
}

#[test]
fn never_larger_than_the_smallest_uniform_policy_and_tighter_is_never_smaller() {
    let ws = Ws::new();
    let mut last: Option<(f64, u64)> = None;
    // 0.07 lies above uniform Q8_0's error on these cases: the tuned file must then be at most
    // that small.
    let mut q8_met = false;
    for (i, t) in ["0.001", "0.01", "0.03", "0.07"].iter().enumerate() {
        let r = tune(&ws, &format!("m{i}"), &["--tolerance", t, "--margin", "0"]);
        let tol: f64 = t.parse().expect("tolerance");
        let bytes = r["bytes"].as_u64().expect("bytes");
        assert!(num(&r["error"]) <= tol);
        let uniform = r["uniform"].as_array().expect("uniform");
        assert_eq!(uniform.len(), 3);
        for u in uniform {
            if num(&u["error"]) <= tol {
                assert!(
                    bytes <= u["bytes"].as_u64().expect("bytes"),
                    "tolerance {t}: tuned {bytes} > uniform {u}"
                );
                q8_met |= u["type"] == "q8_0";
            }
        }
        if let Some((prev_tol, prev_bytes)) = last {
            assert!(
                bytes <= prev_bytes,
                "tolerance {t} gave {bytes} bytes, tighter {prev_tol} gave {prev_bytes}"
            );
        }
        last = Some((tol, bytes));
    }
    assert!(q8_met, "the loosest tolerance should admit uniform Q8_0");
    // The uniform F16 size is the converter's: `convert --type f16 --head-type f16`.
    ok(ws.run(&[
        "convert",
        &pico(),
        "u16.gguf",
        "--type",
        "f16",
        "--head-type",
        "f16",
    ]));
    let r: Value = serde_json::from_str(&ws.read("m0.json")).expect("report");
    let u16 = r["uniform"]
        .as_array()
        .and_then(|u| u.iter().find(|u| u["type"] == "f16"))
        .expect("uniform f16");
    assert_eq!(
        u16["bytes"].as_u64(),
        Some(std::fs::metadata(ws.p("u16.gguf")).expect("file").len())
    );
}

#[test]
fn a_move_at_exactly_the_tolerance_is_kept_and_one_just_above_is_not() {
    let ws = Ws::new();
    let r = tune(
        &ws,
        "probe",
        &["--tolerance", "0.001", "--margin", "0", "--types", "q8_0"],
    );
    // The cheapest Q8_0 error alone over all tensors, exactly as the report wrote it.
    let (name, e) = r["tensors"]
        .as_array()
        .expect("tensors")
        .iter()
        .filter_map(|t| {
            Some((
                t["name"].as_str()?.to_string(),
                t["error_alone"]["q8_0"].as_f64()?,
            ))
        })
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .expect("a q8_0 candidate");
    assert!(e > 0.001, "the probe tolerance admits nothing: {e}");
    let at = format!("{e:?}");
    let r = tune(
        &ws,
        "at",
        &["--tolerance", &at, "--margin", "0", "--types", "q8_0"],
    );
    let chosen = |r: &Value| {
        r["tensors"]
            .as_array()
            .expect("tensors")
            .iter()
            .find(|t| t["name"] == name.as_str())
            .map(|t| t["chosen"].clone())
    };
    assert_eq!(
        chosen(&r),
        Some(Value::from("q8_0")),
        "error == tolerance is within it"
    );
    let below = f64::from_bits(e.to_bits() - 1);
    let r = tune(
        &ws,
        "below",
        &[
            "--tolerance",
            &format!("{below:?}"),
            "--margin",
            "0",
            "--types",
            "q8_0",
        ],
    );
    assert_eq!(
        chosen(&r),
        Some(Value::from("f32")),
        "error one ulp above the tolerance"
    );
}

#[test]
fn the_policy_file_round_trips_through_convert_and_quantize() {
    let ws = Ws::new();
    // 0.001: nothing below F16 is good enough, so the policy is a float one -> convert.
    tune(&ws, "float", &["--tolerance", "0.001"]);
    assert!(!ws.read("float.toml").contains("\"q8_0\""));
    let o = ok(ws.run(&[
        "convert",
        &pico(),
        "float.again.gguf",
        "--policy",
        "float.toml",
    ]));
    assert!(text(&o.stderr).is_empty(), "{}", text(&o.stderr));
    assert!(
        std::fs::read(ws.p("float.gguf")).expect("tuned")
            == std::fs::read(ws.p("float.again.gguf")).expect("converted"),
        "convert --policy gives the tuned file byte for byte"
    );
    // 0.03: Q8_0 tensors -> quantize --policy with the same (built-in) calibration.
    tune(&ws, "q8", &["--tolerance", "0.03"]);
    assert!(ws.read("q8.toml").contains("type = \"q8_0\""));
    ok(ws.run(&["quantize", &pico(), "q8.again.gguf", "--policy", "q8.toml"]));
    assert!(
        std::fs::read(ws.p("q8.gguf")).expect("tuned")
            == std::fs::read(ws.p("q8.again.gguf")).expect("quantized"),
        "quantize --policy gives the tuned file byte for byte"
    );
    // convert --policy on it says its Q8_0 tensors lack the outlier columns.
    let o = ok(ws.run(&["convert", &pico(), "plain.gguf", "--policy", "q8.toml"]));
    assert!(
        text(&o.stderr).contains("tensors are plain Q8_0 (no outlier columns)"),
        "{}",
        text(&o.stderr)
    );
    // The same inputs give the same policy and report.
    tune(&ws, "q8b", &["--tolerance", "0.03"]);
    assert_eq!(ws.read("q8.toml"), ws.read("q8b.toml"));
    assert_eq!(
        ws.read("q8.json").replace("q8.", ""),
        ws.read("q8b.json").replace("q8b.", "")
    );
}

#[test]
fn errors_are_located_and_exit_non_zero() {
    let ws = Ws::new();
    ws.write(
        "P.toml",
        "[policy.tuned]\ntype = \"f16\"\n\n[[policy.tuned.rule]]\nmatch = \"blk.9.ffn_up.weight\"\ntype = \"q8_0\"\n",
    );
    let e = ws.fails(&["convert", &pico(), "x.gguf", "--policy", "P.toml"], 2);
    assert!(
        e.contains("P.toml:5:9: policy rule `blk.9.ffn_up.weight` matches no tensor of the model (did you mean `blk.0.ffn_up.weight`?)"),
        "{e}"
    );
    assert!(!ws.p("x.gguf").exists(), "nothing written");
    let e = ws.fails(&["quantize", &pico(), "x.gguf", "--policy", "P.toml"], 2);
    assert!(
        e.contains("P.toml:5:9: policy rule `blk.9.ffn_up.weight`"),
        "{e}"
    );

    let (model, cases) = (pico(), tuned_cases());
    let base = ["tune", &model, "--cases", &cases, "--out", "o.toml"];
    let with = |extra: &[&str]| {
        let mut a = base.to_vec();
        a.extend_from_slice(extra);
        a.iter().map(|s| s.to_string()).collect::<Vec<_>>()
    };
    let run = |args: Vec<String>, code: i32| {
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        ws.fails(&refs, code)
    };
    let e = run(with(&["--tolerance=-0.1"]), 2);
    assert!(e.contains("tolerance -0.1 is not a number >= 0"), "{e}");
    let e = run(with(&["--tolerance", "0.01", "--margin", "1"]), 2);
    assert!(e.contains("margin 1 is not a fraction in [0, 1)"), "{e}");
    let e = run(with(&["--tolerance", "0.01", "--types", "q4_0"]), 2);
    assert!(e.contains("unknown tensor type \"q4_0\""), "{e}");
    // A budget no policy meets: exit 1, with the smallest size that meets the tolerance and the
    // best error reached within the budget.
    let e = run(with(&["--tolerance", "0.01", "--budget", "300000"]), 1);
    assert!(
        e.contains("s1-pico: no policy of at most 300000 bytes meets the tolerance: the smallest file that does is 424416 bytes"),
        "{e}"
    );
    assert!(
        e.contains("within the budget the best error reached is")
            && e.contains("(uniform q8_0, 263840 bytes)"),
        "{e}"
    );
    let e = run(with(&["--tolerance", "0.01", "--budget", "1000"]), 1);
    assert!(e.contains("no policy tried fits the budget"), "{e}");
    assert!(!ws.p("o.toml").exists(), "no policy written on failure");
    // A budget the tuned file meets changes nothing.
    ok(ws.run(
        &with(&["--tolerance", "0.01", "--budget", "424416"])
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
    ));
    ws.write(
        "bad.jsonl",
        "{\"id\": \"x\", \"type\": \"choice\"}\n{nope\n",
    );
    let e = ws.fails(
        &[
            "tune",
            &model,
            "--cases",
            "bad.jsonl",
            "--tolerance",
            "0.01",
            "--out",
            "o.toml",
        ],
        2,
    );
    assert!(e.contains("bad.jsonl") && e.contains("cases:2"), "{e}");
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for e in std::fs::read_dir(from).expect("read_dir").flatten() {
        let p = e.path();
        if p.is_dir() {
            copy_dir(&p, &to.join(e.file_name()));
        } else {
            std::fs::copy(&p, to.join(e.file_name())).expect("copy");
        }
    }
}

#[test]
fn a_pipeline_builds_benchmarks_and_publishes_a_tuned_variant() {
    let ws = Ws::new();
    copy_dir(&repo("models/s1-pico"), &ws.p("models/s1-pico"));
    for f in ["tune.jsonl", "cases.jsonl"] {
        std::fs::create_dir_all(ws.p("cases")).expect("mkdir");
        std::fs::copy(
            repo(&format!("golden/laya/{f}")),
            ws.p(&format!("cases/{f}")),
        )
        .expect("copy");
    }
    let pipeline = r#"[project]
release_dir = "public"

[[model]]
name = "pico"
source = "models/s1-pico"
variants = ["f16", "tuned"]
tune = { cases = "cases/tune.jsonl", holdout = "cases/cases.jsonl", tolerance = 0.03 }
bench = { questions = 2, iters = 1, rounds = 1 }
publish = ["tuned"]
"#;
    ws.write("pipeline.toml", pipeline);
    let b = ws.build(&[]);
    assert_eq!(b.code, 0, "{}", b.stderr);
    for n in [
        "pico/convert.f32",
        "pico/calibrate",
        "pico/tune",
        "pico/quantize.tuned",
        "pico/bench",
    ] {
        assert!(
            b.executed().iter().any(|x| x == n),
            "{n} not in {:?}",
            b.executed()
        );
    }
    assert!(!b.executed().iter().any(|x| x == "pico/quantize.q8_0"));
    let report: Value = serde_json::from_str(&ws.read("build/pico/tune.json")).expect("report");
    let manifest: Value =
        serde_json::from_str(&ws.read("public/models/manifest.json")).expect("manifest");
    let model = &manifest["models"][0];
    let tuned = model["variants"]
        .as_array()
        .and_then(|v| v.iter().find(|v| v["variant"] == "tuned"))
        .expect("tuned variant");
    assert_eq!(tuned["tune"]["error"], report["error"]);
    assert_eq!(tuned["tune"]["holdout_error"], report["holdout_error"]);
    assert_eq!(tuned["tune"]["tolerance"], 0.03);
    assert_eq!(
        tuned["tune"]["policy"].as_object().map(|p| p.len()),
        Some(16),
        "{tuned}"
    );
    assert_eq!(tuned["bytes"], report["bytes"]);
    assert_eq!(
        model["files"][0]["tune"], tuned["tune"],
        "the published file says it too"
    );
    let published = std::fs::read(ws.p("public/models/pico.tuned.gguf")).expect("published");
    assert_eq!(
        published.len() as u64,
        report["bytes"].as_u64().expect("bytes")
    );
    let bench: Value = serde_json::from_str(&ws.read("build/pico/bench.json")).expect("bench");
    assert!(
        bench["modes"]["tuned"]["us_per_question"]
            .as_f64()
            .is_some(),
        "{bench}"
    );
    // The policy the node wrote gives the same file through the command line.
    ok(ws.run(&[
        "quantize",
        "build/pico/pico.f32.gguf",
        "again.gguf",
        "--calibration",
        "build/pico/calibration.json",
        "--policy",
        "build/pico/pico.tuned.policy.toml",
    ]));
    assert!(
        std::fs::read(ws.p("again.gguf")).expect("again") == published,
        "quantize --policy gives the published file"
    );
    let again = ws.build(&[]);
    assert_eq!(
        again.executed(),
        Vec::<String>::new(),
        "a second build runs nothing"
    );

    // Schema errors, located.
    ws.write("pipeline.toml", &pipeline.replace("tune = {", "# tune = {"));
    let e = ws.fails(&["build"], 2);
    assert!(
        e.contains("pipeline.toml:5:8: model `pico`: variant `tuned` needs `tune = { cases = \"CASES.jsonl\", tolerance = T }`"),
        "{e}"
    );
    ws.write(
        "pipeline.toml",
        &pipeline
            .replace("\"f16\", \"tuned\"", "\"f16\"")
            .replace("publish = [\"tuned\"]", ""),
    );
    let e = ws.fails(&["build"], 2);
    assert!(
        e.contains(
            "pipeline.toml:8:18: model `pico`: `tune` is set but `variants` does not build `tuned`"
        ),
        "{e}"
    );
    ws.write(
        "pipeline.toml",
        &pipeline.replace("tolerance = 0.03", "tolerance = -1.0"),
    );
    let e = ws.fails(&["build"], 2);
    assert!(e.contains("tune.tolerance must be a number >= 0"), "{e}");
    ws.write(
        "pipeline.toml",
        &pipeline.replace("cases/tune.jsonl", "cases/missing.jsonl"),
    );
    let e = ws.fails(&["build"], 2);
    assert!(
        e.contains("pipeline.toml:8:18") && e.contains("cases/missing.jsonl"),
        "{e}"
    );
}
