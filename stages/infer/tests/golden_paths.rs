//! Every shipped golden suite (golden/laya: s1-pico, s1-nano, s1-micro x all 41 cases) on
//! every f32 compute path: the Laya directory (F16 safetensors computed in f32), the f32
//! safetensors copy of pico, and F32 / F16 GGUF files converted with sky-laya. Tolerance
//! 1e-3 (seed table) against the PyTorch float32 runtime; the error against the float64
//! goldens is measured and printed (`--nocapture`) and bounded at 1e-4.
//!
//! Debug-profile budget: pico runs every case on every path, nano and micro every case from
//! the Laya directory and the short cases (< 200 tokens) from the GGUF files. Set
//! `SKY_GOLDEN_FULL=1` (bench/infer_golden.sh does, in release) for every case everywhere.

#![allow(clippy::print_stderr)] // the measured errors are part of the report

mod common;

use sky_gguf::GgmlType;
use sky_infer::engine::Engine;
use sky_infer::golden::{
    check_golden, compare, parse_cases, parse_expected, run_cases, Expected, F32_TOLERANCE,
};

fn suite(model: &str) -> (Vec<serde_json::Value>, Vec<Expected>) {
    let root = common::repo_root().join("golden/laya");
    let cases = parse_cases(&std::fs::read_to_string(root.join("cases.jsonl")).unwrap()).unwrap();
    let expected = parse_expected(
        &std::fs::read_to_string(root.join(format!("{model}.expected.jsonl"))).unwrap(),
    )
    .unwrap();
    (cases, expected)
}

fn f64_expected(model: &str) -> Vec<Expected> {
    let text = std::fs::read_to_string(
        common::repo_root().join(format!("fixtures/laya-ref/goldens/{model}.f64.jsonl")),
    )
    .unwrap();
    parse_expected(&text).unwrap()
}

fn gguf(model: &str, ty: GgmlType, dir: &std::path::Path) -> Engine {
    let ckpt = sky_laya::LayaCheckpoint::open(common::model_dir(model)).unwrap();
    let opts = sky_laya::ConvertOptions {
        policy: sky_laya::TypePolicy {
            ftype: ty,
            head_type: GgmlType::F32,
            rules: Vec::new(),
        },
        ..Default::default()
    };
    let out = dir.join(format!("{model}.{ty:?}.gguf"));
    sky_laya::convert(&ckpt, &opts, &out).unwrap();
    sky_infer::load::open(&out).unwrap()
}

fn full() -> bool {
    std::env::var("SKY_GOLDEN_FULL").is_ok_and(|v| v == "1")
}

fn run(label: &str, engine: &Engine, golden_model: &str, short_only: bool) {
    let (mut cases, expected) = suite(golden_model);
    if short_only && !full() {
        cases.retain(|c| {
            expected
                .iter()
                .any(|e| e.id == c["id"].as_str().unwrap_or("") && e.input_ids.len() < 200)
        });
    }
    let outputs = run_cases(engine, &cases);
    let r = compare(&outputs, &expected, F32_TOLERANCE);
    let r64 = compare(&outputs, &f64_expected(golden_model), 1e-4);
    eprintln!(
        "{label}: {} cases, max |Δp| vs f32 golden {:.2e} ({}), vs f64 golden {:.2e} ({})",
        r.cases,
        r.max_abs_err,
        r.worst_case.as_deref().unwrap_or("-"),
        r64.max_abs_err,
        r64.worst_case.as_deref().unwrap_or("-")
    );
    assert!(r.passed, "{label}: {r:?}");
    assert!(r64.passed, "{label} vs f64: {r64:?}");
    assert!(r.cases >= if short_only && !full() { 20 } else { 41 });
}

fn all_paths(model: &str, short_gguf: bool) {
    let dir = tempfile::tempdir().unwrap();
    run(
        &format!("{model} laya dir"),
        &sky_infer::load::open(&common::model_dir(model)).unwrap(),
        model,
        false,
    );
    run(
        &format!("{model} F32 GGUF"),
        &gguf(model, GgmlType::F32, dir.path()),
        model,
        short_gguf,
    );
    run(
        &format!("{model} F16 GGUF"),
        &gguf(model, GgmlType::F16, dir.path()),
        model,
        short_gguf,
    );
}

#[test]
fn pico_all_paths() {
    all_paths("s1-pico", false);
    run(
        "s1-pico-f32 laya dir",
        &sky_infer::load::open(&common::model_dir("s1-pico-f32")).unwrap(),
        "s1-pico",
        false,
    );
}

#[test]
fn nano_all_paths() {
    if !common::model_selected("s1-nano") {
        return;
    }
    all_paths("s1-nano", true);
}

#[test]
fn micro_all_paths() {
    if !common::model_selected("s1-micro") {
        return;
    }
    all_paths("s1-micro", true);
}

/// A wrong expected record is caught: the check can fail.
#[test]
fn a_perturbed_golden_fails() {
    let engine = sky_infer::load::open(&common::model_dir("s1-pico")).unwrap();
    let (cases, mut expected) = suite("s1-pico");
    expected[3].probabilities[0] += 0.01;
    expected[5].input_ids[2] += 1;
    let r = check_golden(&engine, &cases, &expected, F32_TOLERANCE);
    assert!(!r.passed);
    assert_eq!(r.worst_case.as_deref(), Some(expected[3].id.as_str()));
    assert!(r.max_abs_err > 0.009);
    assert_eq!(r.mismatched_ids, vec![expected[5].id.clone()]);
}

/// A Q8_0 GGUF loads (dequantized to f32 for now; the int8 kernels are the next issue): ids
/// and markers exact, probabilities still close (plain Q8_0 on these outlier-heavy random
/// models is far from 1e-3, see fixtures/laya-ref/README.md section 5).
#[test]
fn q8_0_gguf_loads_dequantized() {
    let dir = tempfile::tempdir().unwrap();
    let engine = gguf("s1-pico", GgmlType::Q8_0, dir.path());
    let (cases, expected) = suite("s1-pico");
    let r = check_golden(&engine, &cases, &expected, 0.5);
    eprintln!(
        "s1-pico Q8_0 GGUF (dequantized): max |Δp| {:.2e} ({:?})",
        r.max_abs_err, r.worst_case
    );
    assert!(r.mismatched_ids.is_empty(), "{r:?}");
    assert!(r.passed, "{r:?}");
    assert!(
        r.max_abs_err > 1e-6,
        "Q8_0 weights should not be bit-identical to F16"
    );
}
