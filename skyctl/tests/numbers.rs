//! Issue 53, classes 5 and 6, on the real binary: no artifact or answer carries a non-finite
//! number (every writer checks the value in its target type, the engine checks its weights at
//! load and its scores), and one config check (`convert`, `ask DIR` and GGUF load refuse the
//! same configs and tokenizers, naming the field). Checkpoints come from `skyctl random`, with
//! bad values planted in their safetensors and JSON.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn skyctl(args: &[&dyn AsRef<std::ffi::OsStr>]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_skyctl"));
    for a in args {
        c.arg(a);
    }
    c.output().expect("run skyctl")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// A fresh random s1-pico checkpoint (f32 weights) in `dir/name`.
fn random_pico(dir: &Path, name: &str) -> PathBuf {
    let p = dir.join(name);
    let o = skyctl(&[&"random", &"s1-pico", &p]);
    assert!(o.status.success(), "{}", text(&o));
    p
}

/// Set element `index` of the f32 tensor `name` in `dir/model.safetensors` to `value`.
fn plant(dir: &Path, name: &str, index: usize, value: f32) {
    let path = dir.join("model.safetensors");
    let mut raw = std::fs::read(&path).unwrap();
    let n = u64::from_le_bytes(raw[..8].try_into().unwrap()) as usize;
    let header: Value = serde_json::from_slice(&raw[8..8 + n]).unwrap();
    assert_eq!(header[name]["dtype"], "F32", "{name}");
    let start = header[name]["data_offsets"][0].as_u64().unwrap() as usize;
    let at = 8 + n + start + 4 * index;
    raw[at..at + 4].copy_from_slice(&value.to_le_bytes());
    std::fs::write(&path, raw).unwrap();
}

/// Change one JSON file of a checkpoint.
fn edit_json(path: &Path, f: impl FnOnce(&mut Value)) {
    let mut v: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    f(&mut v);
    std::fs::write(path, serde_json::to_string_pretty(&v).unwrap()).unwrap();
}

/// Run and expect exit 2, no panic, and every needle in the message; returns the message.
fn refused(args: &[&dyn AsRef<std::ffi::OsStr>], needles: &[&str]) -> String {
    let o = skyctl(args);
    let msg = text(&o);
    assert_eq!(o.status.code(), Some(2), "expected exit 2: {msg}");
    assert!(!msg.contains("panicked"), "{msg}");
    for n in needles {
        assert!(msg.contains(n), "message lacks {n:?}: {msg}");
    }
    msg
}

/// One case line of the golden set.
fn case_file(dir: &Path) -> PathBuf {
    let line = include_str!("../../golden/laya/cases.jsonl")
        .lines()
        .next()
        .unwrap();
    let p = dir.join("case.jsonl");
    std::fs::write(&p, line).unwrap();
    p
}

const WQKV: &str = "encoder.layers.0.attn.Wqkv.weight";

// ---- class 5: no artifact or answer carries a non-finite number ----

/// A Wqkv weight of 1e10 is finite in f32 but inf in F16 and an infinite Q8_0 block scale:
/// `convert` refuses both, naming the tensor and the flat index, and leaves no file.
#[test]
fn a_weight_that_overflows_its_target_type_is_refused_by_convert() {
    let tmp = tempfile::tempdir().unwrap();
    let src = random_pico(tmp.path(), "big");
    plant(&src, WQKV, 5, 1e10);
    let f16 = tmp.path().join("big.f16.gguf");
    refused(
        &[&"convert", &src, &f16],
        &[WQKV, "flat index 5", "overflows F16", "--allow-nonfinite"],
    );
    let q8 = tmp.path().join("big.q8.gguf");
    refused(
        &[&"convert", &src, &q8, &"--type", &"q8_0"],
        &[
            WQKV,
            "flat index 5",
            "scale of Q8_0 block 0",
            "--allow-nonfinite",
        ],
    );
    assert!(!f16.exists() && !q8.exists());
    // In f32 the value is finite: written, and answered (finite).
    let f32_file = tmp.path().join("big.f32.gguf");
    let o = skyctl(&[&"convert", &src, &f32_file, &"--type", &"f32"]);
    assert!(o.status.success(), "{}", text(&o));
    let cases = case_file(tmp.path());
    let o = skyctl(&[&"ask", &f32_file, &"--requests", &cases]);
    assert!(o.status.success(), "{}", text(&o));
    // `skyctl quantize` (outlier-aware Q8_0 from the f32 reference) refuses it the same way.
    refused(
        &[&"quantize", &src, &tmp.path().join("q.gguf")],
        &["blk.0.attn_qkv.weight", "flat index 5", "Q8_0 block 0"],
    );
    assert!(!tmp.path().join("q.gguf").exists());
}

/// `--allow-nonfinite` stays the one way to write such a file; the engine then refuses to
/// answer from it (it used to answer 0.305/0.342/0.353 where f32 answered 0.968).
#[test]
fn ask_refuses_a_file_with_an_infinite_weight() {
    let tmp = tempfile::tempdir().unwrap();
    let src = random_pico(tmp.path(), "big");
    plant(&src, WQKV, 5, 1e10);
    let f16 = tmp.path().join("big.f16.gguf");
    let o = skyctl(&[&"convert", &src, &f16, &"--allow-nonfinite"]);
    assert!(o.status.success(), "{}", text(&o));
    let cases = case_file(tmp.path());
    for extra in [None, Some("--q8")] {
        let mut args: Vec<&dyn AsRef<std::ffi::OsStr>> = vec![&"ask", &f16, &"--requests", &cases];
        if let Some(e) = &extra {
            args.push(e);
        }
        refused(
            &args,
            &["blk.0.attn_qkv.weight", "flat index 5", "not finite"],
        );
    }
}

/// A NaN weight: the f32 path used to answer plausibly while `--q8` refused it, and
/// `calibrate` exited 0. Every compute path now refuses it at load, naming tensor and index.
#[test]
fn a_nan_weight_is_refused_by_every_compute_path_and_by_calibrate() {
    let tmp = tempfile::tempdir().unwrap();
    let src = random_pico(tmp.path(), "nan");
    plant(&src, "encoder.layers.1.mlp.Wo.weight", 7, f32::NAN);
    let cases = case_file(tmp.path());
    for path in [None, Some("--q8"), Some("--q8-fast")] {
        let mut args: Vec<&dyn AsRef<std::ffi::OsStr>> = vec![&"ask", &src, &"--requests", &cases];
        if let Some(p) = &path {
            args.push(p);
        }
        refused(
            &args,
            &["blk.1.ffn_down.weight", "flat index 7", "NaN", "not finite"],
        );
    }
    let calib = tmp.path().join("calib.json");
    refused(
        &[&"calibrate", &src, &calib],
        &["blk.1.ffn_down.weight", "flat index 7", "NaN"],
    );
    assert!(!calib.exists());
    // And the converter (as before): refused unless allowed.
    refused(
        &[
            &"convert",
            &src,
            &tmp.path().join("o.gguf"),
            &"--type",
            &"f32",
        ],
        &[
            "encoder.layers.1.mlp.Wo.weight",
            "flat index 7",
            "--allow-nonfinite",
        ],
    );
}

/// `rope_theta` 0 or negative (in either spelling) is refused by convert and `ask DIR`.
#[test]
fn rope_theta_zero_or_negative_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let cases = case_file(tmp.path());
    for (i, (kind, theta)) in [("full_attention", 0.0), ("sliding_attention", -10.0)]
        .into_iter()
        .enumerate()
    {
        let src = random_pico(tmp.path(), &format!("rope{i}"));
        edit_json(&src.join("encoder/config.json"), |v| {
            v["rope_parameters"][kind]["rope_theta"] = serde_json::json!(theta);
        });
        let field = format!("rope_parameters.{kind}.rope_theta");
        let out = tmp.path().join(format!("rope{i}.gguf"));
        refused(
            &[&"convert", &src, &out],
            &["encoder/config.json", &field, "not a positive number"],
        );
        assert!(!out.exists());
        refused(
            &[&"ask", &src, &"--requests", &cases],
            &[&field, "not a positive number"],
        );
    }
}

// ---- class 6: one set of config checks ----

/// Each config value `convert` used to write and `ask` then refused or misread: refused by
/// `convert` (no file) and by `ask DIR`, both naming the field.
#[test]
fn configs_that_ask_refuses_are_refused_by_convert_too() {
    let tmp = tempfile::tempdir().unwrap();
    let cases = case_file(tmp.path());
    let cases_: [(&str, &str, Value); 6] = [
        ("encoder/config.json", "norm_eps", serde_json::json!(-1.0)),
        // finite as f64, inf as the f32 the engine and GGUF use
        ("encoder/config.json", "norm_eps", serde_json::json!(1e39)),
        ("rl_agent_config.json", "max_len", serde_json::json!(1)),
        ("rl_agent_config.json", "head_max_len", serde_json::json!(0)),
        (
            "encoder/config.json",
            "local_attention",
            serde_json::json!(0),
        ),
        (
            "encoder/config.json",
            "layer_types",
            serde_json::json!(["full_attention", "full_attention"]),
        ),
    ];
    for (i, (file, key, value)) in cases_.into_iter().enumerate() {
        let src = random_pico(tmp.path(), &format!("c{i}"));
        edit_json(&src.join(file), |v| v[key] = value.clone());
        let out = tmp.path().join(format!("c{i}.gguf"));
        let needle = format!("\"{key}");
        let msg = refused(&[&"convert", &src, &out], &[file, &needle]);
        assert!(!out.exists(), "{key} = {value}: {msg}");
        refused(&[&"ask", &src, &"--requests", &cases], &[key]);
    }
}

/// Tokenizers `ask DIR` refuses (a merge naming an unknown token, a merge whose result is no
/// token, a vocab id used twice) are refused by `convert` with the same message, so no file
/// that loads them differently is written.
#[test]
fn tokenizers_that_ask_refuses_are_refused_by_convert_too() {
    let tmp = tempfile::tempdir().unwrap();
    let cases = case_file(tmp.path());
    type Edit = fn(&mut Value);
    let edits: [(&str, Edit, &str); 3] = [
        (
            "unknown",
            |v| v["model"]["merges"][0] = serde_json::json!(["zzqq", "xxyy"]),
            "merge #0 (\"zzqq\", \"xxyy\"): \"zzqq\" is not in the vocab",
        ),
        (
            "result",
            // both parts are tokens, their concatenation is none
            |v| v["model"]["merges"][0] = serde_json::json!(["[UNK]", "[CLS]"]),
            "\"[UNK][CLS]\" is not in the vocab",
        ),
        (
            "dup",
            |v| {
                let vocab = v["model"]["vocab"].as_object_mut().unwrap();
                let id = vocab["[CLS]"].clone();
                vocab.insert("[UNK]".into(), id);
            },
            "id 2 is also used by",
        ),
    ];
    for (name, edit, needle) in edits {
        let src = random_pico(tmp.path(), name);
        edit_json(&src.join("tokenizer/tokenizer.json"), edit);
        let out = tmp.path().join(format!("{name}.gguf"));
        refused(&[&"convert", &src, &out], &["tokenizer.json", needle]);
        assert!(!out.exists());
        refused(&[&"ask", &src, &"--requests", &cases], &[needle]);
    }
}

/// `outlier_ratio = 1e308` is finite as f64 but inf as the f32 the quantizer takes: refused
/// when pipeline.toml is read, before convert and calibrate run.
#[test]
fn an_outlier_ratio_infinite_as_f32_is_refused_in_pipeline_toml() {
    let ws = common::Ws::new();
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    common::copy_tree(&root.join("models/s1-pico"), &ws.p("models/s1-pico"));
    ws.write(
        "pipeline.toml",
        "[[model]]\nname = \"s1-pico\"\nsource = \"models/s1-pico\"\nvariants = [\"q8_0\"]\nquantize = { outlier_ratio = 1e308 }\n",
    );
    let e = ws.fails(&["build"], 2);
    assert!(
        e.contains("pipeline.toml:2:8: model `s1-pico`: quantize.outlier_ratio must be a number > 1 and finite as f32")
            && e.contains("1e308"),
        "{e}"
    );
    assert!(!ws.p("build").exists(), "a node ran despite: {e}");
}

/// Finite weights whose products overflow: the scores (the forward pass's output) are not
/// finite, and `ask` and `calibrate` refuse to answer instead of printing made-up numbers.
#[test]
fn a_forward_pass_that_overflows_gives_no_answer() {
    let tmp = tempfile::tempdir().unwrap();
    let src = random_pico(tmp.path(), "overflow");
    for i in 0..64 {
        plant(&src, "scorer.3.weight", i, 3e38);
    }
    let cases = case_file(tmp.path());
    refused(
        &[&"ask", &src, &"--requests", &cases],
        &["scores", "not finite", "no answer"],
    );
    let calib = tmp.path().join("calib.json");
    refused(&[&"calibrate", &src, &calib], &["scores", "not finite"]);
    assert!(!calib.exists());
}

/// GGUF load runs the converter's check: a file whose keys say `max_len` 1 or a sliding
/// window of 0 (written by hand; `convert` refuses such configs) is refused, naming the field.
#[test]
fn gguf_load_runs_the_same_config_check() {
    let tmp = tempfile::tempdir().unwrap();
    let src = random_pico(tmp.path(), "ok");
    let good = tmp.path().join("ok.gguf");
    let o = skyctl(&[&"convert", &src, &good, &"--type", &"f32"]);
    assert!(o.status.success(), "{}", text(&o));
    let bytes = std::fs::read(&good).unwrap();
    let cases = case_file(tmp.path());
    for (i, (key, field)) in [
        ("modern-bert.decision.max_tokens", "max_len"),
        ("modern-bert.attention.sliding_window", "local_attention"),
        ("modern-bert.decision.max_head_tokens", "head_max_len"),
    ]
    .into_iter()
    .enumerate()
    {
        let f = sky_gguf::GgufFile::parse(&bytes).unwrap();
        let mut w = sky_gguf::GgufWriter::from_gguf(&f).unwrap();
        w.add_kv(key, if field == "max_len" { 1u32 } else { 0u32 });
        let bad = tmp.path().join(format!("bad{i}.gguf"));
        std::fs::write(&bad, w.to_bytes().unwrap()).unwrap();
        refused(&[&"ask", &bad, &"--requests", &cases], &[field]);
    }
    let f = sky_gguf::GgufFile::parse(&bytes).unwrap();
    let mut w = sky_gguf::GgufWriter::from_gguf(&f).unwrap();
    w.add_kv("modern-bert.attention.layer_norm_epsilon", -1.0f32);
    let bad = tmp.path().join("eps.gguf");
    std::fs::write(&bad, w.to_bytes().unwrap()).unwrap();
    refused(&[&"ask", &bad, &"--requests", &cases], &["norm_eps", "-1"]);
}
