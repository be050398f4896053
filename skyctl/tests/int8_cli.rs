//! `skyctl calibrate`, `skyctl quantize` and `skyctl bench` end to end on s1-pico, through
//! the real binary; the quantized file is cross-read by gguf-py.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use sky_gguf::{GgufFile, GgufWriter, Value};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn pico() -> PathBuf {
    root().join("models/s1-pico")
}

fn skyctl(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_skyctl"))
        .args(args)
        .current_dir(dir)
        .output()
        .expect("running skyctl")
}

/// stdout of a command that must succeed.
fn ok(dir: &Path, args: &[&str]) -> (String, String) {
    let o = skyctl(dir, args);
    let (out, err) = (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    );
    assert!(o.status.success(), "skyctl {args:?} failed: {out}\n{err}");
    (out, err)
}

/// stderr of a command that must exit with 2.
fn fails(dir: &Path, args: &[&str]) -> String {
    let o = skyctl(dir, args);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(2), "skyctl {args:?}: {err}");
    assert!(!err.contains("panicked"), "{err}");
    err
}

fn python() -> PathBuf {
    let p = std::env::var_os("SKYCTL_TEST_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join(".venv/bin/python"));
    let works = Command::new(&p)
        .args(["-c", "import gguf, numpy"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    assert!(
        works,
        "no Python with gguf and numpy at {} (set SKYCTL_TEST_PYTHON)",
        p.display()
    );
    p
}

#[test]
fn calibrate_quantize_and_bench_pico() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let model = pico();
    let m = model.to_str().unwrap();
    // calibrate: deterministic, keyed by GGUF site names
    ok(d, &["calibrate", m, "a.json"]);
    std::fs::create_dir(d.join("sub")).unwrap();
    ok(&d.join("sub"), &["calibrate", m, "b.json"]);
    let a = std::fs::read(d.join("a.json")).unwrap();
    assert_eq!(
        a,
        std::fs::read(d.join("sub/b.json")).unwrap(),
        "same calibration in another folder"
    );
    let calib = sky_quant::Calibration::from_json(std::str::from_utf8(&a).unwrap()).unwrap();
    assert!(calib.channel_max("blk.0.attn_qkv").is_some() && calib.channel_max("cls").is_some());
    // The fixture's planted channels (fixtures/laya-ref/README.md) are found again at layer 0.
    let l0 = calib.outliers("blk.0.attn_qkv", 3.0).unwrap().unwrap();
    assert!(l0.contains(&45) && l0.contains(&49), "{l0:?}");

    // quantize with the file, and without (built-in prompts): the same bytes
    ok(d, &["quantize", m, "q8.gguf", "--calibration", "a.json"]);
    let (_, note) = ok(d, &["quantize", m, "q8b.gguf"]);
    assert!(note.contains("built-in prompts"), "{note}");
    let q8 = std::fs::read(d.join("q8.gguf")).unwrap();
    assert_eq!(q8, std::fs::read(d.join("q8b.gguf")).unwrap());
    // from the F32 reference GGUF too
    ok(d, &["convert", "--type", "f32", m, "f32.gguf"]);
    ok(
        d,
        &[
            "quantize",
            "f32.gguf",
            "q8c.gguf",
            "--calibration",
            "a.json",
        ],
    );
    assert_eq!(
        q8,
        std::fs::read(d.join("q8c.gguf")).unwrap(),
        "Laya dir and F32 GGUF give the same file"
    );

    // tensors byte-identical to plain `convert --type q8_0`; only skycmd.quant.* keys added
    ok(d, &["convert", "--type", "q8_0", m, "plain.gguf"]);
    let plain = std::fs::read(d.join("plain.gguf")).unwrap();
    let (fq, fp) = (
        GgufFile::parse(&q8).unwrap(),
        GgufFile::parse(&plain).unwrap(),
    );
    assert_eq!(fq.tensors.len(), fp.tensors.len());
    for (a, b) in fq.tensors.iter().zip(&fp.tensors) {
        assert_eq!(
            (&a.name, a.ty, &a.dims, a.data),
            (&b.name, b.ty, &b.dims, b.data)
        );
    }
    let kept: Vec<_> = fq
        .metadata
        .iter()
        .filter(|(k, _)| !k.starts_with("skycmd.quant."))
        .collect();
    assert_eq!(kept, fp.metadata.iter().collect::<Vec<_>>());
    let outliers = fq
        .get("skycmd.quant.outliers.blk.0.attn_qkv.weight")
        .and_then(Value::as_array)
        .expect("outliers recorded");
    let cols: Vec<u64> = outliers.items.iter().filter_map(Value::as_u64).collect();
    assert_eq!(cols, l0.iter().map(|&c| u64::from(c)).collect::<Vec<_>>());
    assert_eq!(
        fq.get("skycmd.quant.calibration_digest")
            .and_then(Value::as_str),
        Some(calib.digest().as_str())
    );

    // gguf-py reads the file: types, outlier keys, and the exact weights equal the F32 reference
    let script = r#"
import sys, numpy as np
from gguf import GGUFReader
q, r = GGUFReader(sys.argv[1]), GGUFReader(sys.argv[2])
t = {x.name: x for x in q.tensors}
assert t["blk.0.attn_qkv.weight"].tensor_type.name == "Q8_0", t["blk.0.attn_qkv.weight"].tensor_type
assert t["token_embd.weight"].tensor_type.name == "F16"
assert t["cls.weight"].tensor_type.name == "F32"
f = q.fields["skycmd.quant.outliers.blk.0.attn_qkv.weight"]
cols = [int(f.parts[i][0]) for i in f.data]
w = q.fields["skycmd.quant.outlier_weights.blk.0.attn_qkv.weight"]
exact = np.array([float(w.parts[i][0]) for i in w.data], dtype=np.float32).reshape(-1, len(cols))
ref = np.asarray({x.name: x for x in r.tensors}["blk.0.attn_qkv.weight"].data, dtype=np.float32)
assert ref.shape[0] == exact.shape[0], (ref.shape, exact.shape)
assert np.array_equal(ref[:, cols], exact), "exact outlier weights differ from the F32 reference"
print(len(cols), exact.shape)
"#;
    let o = Command::new(python())
        .args([
            "-c",
            script,
            d.join("q8.gguf").to_str().unwrap(),
            d.join("f32.gguf").to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "gguf-py check failed: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );

    // bench: a Q8_0 file runs in int8 with its outliers by default
    let (out, _) = ok(
        d,
        &[
            "bench", "q8.gguf", "--iters", "1", "--rounds", "1", "--json",
        ],
    );
    let r: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(
        (r["mode"].as_str(), r["weights"].as_str()),
        (Some("q8"), Some("q8_0 file")),
        "{r}"
    );
    assert_eq!(r["int8_matrices"], 8);
    assert!(
        r["outlier_columns"].as_u64().unwrap() > 0 && r["us_per_question"].as_f64().unwrap() > 0.0,
        "{r}"
    );
    let (out, _) = ok(
        d,
        &[
            "bench",
            "q8.gguf",
            "--no-calib",
            "--q8-fast",
            "--iters",
            "1",
            "--rounds",
            "1",
            "--json",
        ],
    );
    let r: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(
        (r["mode"].as_str(), r["outlier_columns"].as_u64()),
        (Some("q8-fast"), Some(0)),
        "{r}"
    );
    let (out, err) = ok(
        d,
        &[
            "bench", m, "--q8", "--iters", "1", "--rounds", "1", "--json",
        ],
    );
    let r: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(
        (r["mode"].as_str(), r["weights"].as_str()),
        (Some("q8"), Some("at load")),
        "{r}"
    );
    assert!(
        err.contains("calibrated on the 12 built-in prompts"),
        "{err}"
    );
    let (out, _) = ok(d, &["bench", "plain.gguf", "--iters", "1", "--rounds", "1"]);
    assert!(
        out.contains("[q8; int8 weights: q8_0 file, 8 matrices, 0 outlier columns]"),
        "{out}"
    );

    // a Q8_0 file whose outlier metadata does not match its tensors
    let bad = |key: &str, v: Value, name: &str| {
        let mut w = GgufWriter::from_gguf(&fq).unwrap();
        w.add_kv(key, v);
        std::fs::write(d.join(name), w.to_bytes().unwrap()).unwrap();
        fails(d, &["bench", name, "--iters", "1", "--rounds", "1"])
    };
    let e = bad(
        "skycmd.quant.outliers.blk.0.attn_qkv.weight",
        Value::u32_array([9999]),
        "bad1.gguf",
    );
    assert!(
        e.contains("skycmd.quant.outliers.blk.0.attn_qkv.weight") && e.contains("out of range"),
        "{e}"
    );
    let e = bad(
        "skycmd.quant.outliers.blk.9.nothing.weight",
        Value::u32_array([1]),
        "bad2.gguf",
    );
    assert!(
        e.contains("blk.9.nothing.weight") && e.contains("does not have"),
        "{e}"
    );
    let e = bad(
        "skycmd.quant.outliers.token_embd.weight",
        Value::u32_array([1]),
        "bad3.gguf",
    );
    assert!(e.contains("F16") && e.contains("Q8_0 tensors only"), "{e}");
    let e = bad(
        "skycmd.quant.outlier_weights.blk.0.attn_qkv.weight",
        Value::f32_array([1.0]),
        "bad4.gguf",
    );
    assert!(
        e.contains("outlier_weights.blk.0.attn_qkv.weight")
            && e.contains("expected rows x outliers"),
        "{e}"
    );
    let e = bad(
        "skycmd.quant.outlier_weights.blk.0.attn_output.weight",
        Value::f32_array([1.0]),
        "bad5.gguf",
    );
    assert!(
        e.contains("without a skycmd.quant.outliers.blk.0.attn_output.weight key"),
        "{e}"
    );
}

#[test]
fn bad_calibration_inputs_are_clear_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let model = pico();
    let m = model.to_str().unwrap();
    std::fs::write(d.join("empty.jsonl"), "\n  \n").unwrap();
    let e = fails(d, &["calibrate", m, "c.json", "--prompts", "empty.jsonl"]);
    assert!(e.contains("no usable prompt"), "{e}");
    std::fs::write(d.join("bad.jsonl"), "{\"type\": \"choice\", \"criteria\": [\"a\", \"b\"], \"state\": 1}\n{\"type\": \"maybe\", \"state\": 1}\n").unwrap();
    let e = fails(d, &["calibrate", m, "c.json", "--prompts", "bad.jsonl"]);
    assert!(e.contains("line 2") && e.contains("bad.jsonl"), "{e}");
    assert!(!d.join("c.json").exists(), "nothing written on error");
    // A state far longer than max_len is truncated as the runtime does, and said so.
    let long = "word ".repeat(3000);
    std::fs::write(d.join("long.jsonl"), format!("{{\"id\": \"big\", \"type\": \"noul\", \"instructions\": \"Is it long?\", \"criteria\": null, \"state\": \"{long}\"}}\n")).unwrap();
    let (out, err) = ok(d, &["calibrate", m, "c.json", "--prompts", "long.jsonl"]);
    assert!(
        err.contains("prompt big") && err.contains("truncated") && err.contains("max_len"),
        "{err}"
    );
    assert!(out.contains("from 1 prompts"), "{out}");
    // outlier ratio <= 1
    let e = fails(
        d,
        &[
            "quantize",
            m,
            "q.gguf",
            "--calibration",
            "c.json",
            "--outlier-ratio",
            "1",
        ],
    );
    assert!(e.contains("outlier_ratio") && e.contains("above 1"), "{e}");
    assert!(!d.join("q.gguf").exists());
    // a calibration made for another model
    std::fs::write(d.join("other.json"), "{\"format\": \"skycmd.calibration/1\", \"sites\": {\"x\": {\"rows\": 1, \"max_abs\": [1]}}}\n").unwrap();
    let e = fails(d, &["quantize", m, "q.gguf", "--calibration", "other.json"]);
    assert!(e.contains("`blk.0.") && e.contains("no statistics"), "{e}");
    // --no-calib on a float model needs --q8 or --q8-fast
    let e = fails(d, &["bench", m, "--no-calib", "--iters", "1"]);
    assert!(e.contains("--no-calib") && e.contains("--q8"), "{e}");
    let e = fails(d, &["bench", m, "--q8", "--q8-fast"]);
    assert!(e.contains("cannot be used with"), "{e}");
}

/// Probabilities of every case of the fixture requests, as `skyctl ask ... --json` prints them.
fn ask_probs(dir: &Path, model: &str, flags: &[&str]) -> Vec<f64> {
    let cases = root().join("fixtures/laya-ref/cases.jsonl");
    let mut args = vec![
        "ask",
        model,
        "--requests",
        cases.to_str().unwrap(),
        "--json",
    ];
    args.extend_from_slice(flags);
    let (out, _) = ok(dir, &args);
    let mut p = Vec::new();
    for line in out.lines().filter(|l| !l.trim().is_empty()) {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        p.extend(
            v["probabilities"]
                .as_array()
                .unwrap_or_else(|| panic!("no probabilities: {line}"))
                .iter()
                .map(|x| x.as_f64().unwrap()),
        );
    }
    p
}

fn max_diff(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f64::max)
}

#[test]
fn ask_takes_the_compute_path_flags() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let model = pico();
    let m = model.to_str().unwrap();
    ok(d, &["quantize", m, "q8.gguf"]);
    let f32 = ask_probs(d, m, &[]);
    let q8 = ask_probs(d, m, &["--q8"]);
    let fast = ask_probs(d, m, &["--q8-fast"]);
    let plain = ask_probs(d, m, &["--q8", "--no-calib"]);
    let file = ask_probs(d, "q8.gguf", &[]);
    assert!(!f32.is_empty());
    let (dq8, dfast, dplain) = (
        max_diff(&q8, &f32),
        max_diff(&fast, &f32),
        max_diff(&plain, &f32),
    );
    assert!(
        dq8 > 1e-5 && dq8 < 0.05,
        "--q8 moves probabilities by {dq8}"
    );
    assert!(
        dfast > 1e-5 && dfast < 0.08,
        "--q8-fast moves probabilities by {dfast}"
    );
    assert!(
        dplain > 1.5 * dq8,
        "--no-calib ({dplain}) must be visibly worse than --q8 ({dq8})"
    );
    let dfile = max_diff(&file, &q8);
    assert!(
        dfile < 5e-3,
        "calibrated Q8_0 file vs --q8 at load: {dfile}"
    );
}

/// `bench --compare`: f32, q8 and q8-fast of one float model timed in turn; each speed-up is
/// the f32 round median over the mode's, per round, and their median; a Q8_0 file (whose f32
/// path runs in int8) and `--q8` beside it are refused with exit 2.
#[test]
fn bench_compare_times_the_three_paths_in_turn() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let model = pico();
    let m = model.to_str().unwrap();
    let (out, err) = ok(
        d,
        &[
            "bench",
            m,
            "--compare",
            "--iters",
            "3",
            "--rounds",
            "3",
            "--json",
        ],
    );
    assert!(
        err.contains("note (q8): ") && err.contains("note (q8-fast): "),
        "{err}"
    );
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    let modes = v["modes"].as_array().unwrap();
    let names: Vec<&str> = modes.iter().map(|r| r["mode"].as_str().unwrap()).collect();
    assert_eq!(names, ["f32", "q8", "q8-fast"]);
    let rounds = |r: &serde_json::Value, key: &str| -> Vec<f64> {
        r[key]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect()
    };
    let f32_rounds = rounds(&modes[0], "round_medians_us");
    assert_eq!(f32_rounds.len(), 3);
    assert_eq!(rounds(&modes[0], "speedup_rounds"), [1.0, 1.0, 1.0]);
    assert_eq!(modes[0]["speedup"], 1.0);
    assert_eq!(modes[0]["int8_matrices"], 0);
    for r in &modes[1..] {
        assert_eq!(
            (r["int8_matrices"].as_u64(), r["weights"].as_str()),
            (Some(8), Some("at load")),
            "{r}"
        );
        let own = rounds(r, "round_medians_us");
        let speedups = rounds(r, "speedup_rounds");
        assert_eq!((own.len(), speedups.len()), (3, 3), "{r}");
        // The round medians are printed to 0.1 µs: the ratios agree to that.
        for ((f, o), s) in f32_rounds.iter().zip(&own).zip(&speedups) {
            assert!((f / o - s).abs() < 2e-3, "{f} / {o} vs {s}");
        }
        let mut sorted = speedups.clone();
        sorted.sort_by(f64::total_cmp);
        assert_eq!(r["speedup"].as_f64(), Some(sorted[1]), "{r}");
        // The median round, with the fastest and the slowest as its spread.
        let mut sorted_own = own.clone();
        sorted_own.sort_by(f64::total_cmp);
        assert_eq!(r["us_per_question"].as_f64(), Some(sorted_own[1]), "{r}");
        assert_eq!(r["min_us"].as_f64(), Some(sorted_own[0]), "{r}");
        assert_eq!(r["max_us"].as_f64(), Some(sorted_own[2]), "{r}");
        assert!(r["spread"].as_f64().is_some_and(|v| v >= 0.0), "{r}");
    }

    // The text form: one line a mode, the int8 ones with their speed-up.
    let (text, _) = ok(
        d,
        &["bench", m, "--compare", "--iters", "1", "--rounds", "1"],
    );
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4, "{text}");
    assert!(lines[0].contains("f32, q8 and q8-fast in turn"), "{text}");
    assert!(
        lines[1].trim_start().starts_with("f32 ") && !lines[1].contains("f32 / "),
        "{text}"
    );
    assert!(
        lines[2].contains("f32 / q8 = ") && lines[3].contains("f32 / q8-fast = "),
        "{text}"
    );
    // Each timing with its spread over rounds (one round here: no spread).
    for line in &lines[1..] {
        assert!(line.contains("us/question (rounds "), "{text}");
        assert!(line.contains(", spread 0.0%)"), "{text}");
    }

    ok(d, &["convert", "--type", "q8_0", m, "plain.gguf"]);
    let e = fails(
        d,
        &[
            "bench",
            "plain.gguf",
            "--compare",
            "--iters",
            "1",
            "--rounds",
            "1",
        ],
    );
    assert!(
        e.contains("--compare needs a float model")
            && e.contains("plain.gguf")
            && e.contains("q8_0 file"),
        "{e}"
    );
    let e = fails(d, &["bench", m, "--compare", "--q8"]);
    assert!(e.contains("--compare") && e.contains("--q8"), "{e}");
}
