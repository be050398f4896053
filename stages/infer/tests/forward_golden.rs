//! The forward pass against the PyTorch Laya goldens, from the golden input ids.

#![allow(clippy::print_stderr)] // the measured errors are part of the report

mod common;

use sky_infer::forward::{forward, Workspace};
use sky_infer::kernels::Isa;
use sky_infer::QType;

fn qtype(rec: &serde_json::Value) -> QType {
    QType::parse(rec["type"].as_str().unwrap()).unwrap()
}

fn ids_markers(rec: &serde_json::Value) -> (Vec<u32>, Vec<usize>) {
    let ids = rec["input_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap() as u32)
        .collect();
    let markers = rec["markers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap() as usize)
        .collect();
    (ids, markers)
}

/// Max |Δscore| of our f32 pass against the f64 goldens, per model; every case.
fn check_model(name: &str, golden_name: &str, isa: Isa, tol: f64) -> f64 {
    let model = common::load_safetensors_model(&common::model_dir(name));
    let mut ws = Workspace::new();
    let mut worst = (0f64, String::new());
    for rec in common::golden(golden_name, "f64") {
        let (ids, markers) = ids_markers(&rec);
        let scores = forward(&model, isa, &mut ws, &ids, &markers, qtype(&rec), None).unwrap();
        for (s, want) in scores.iter().zip(rec["scores"].as_array().unwrap()) {
            let err = (*s as f64 - want.as_f64().unwrap()).abs();
            if err > worst.0 {
                worst = (err, rec["id"].as_str().unwrap().to_string());
            }
        }
    }
    eprintln!(
        "{name} {isa:?}: max |Δscore| vs f64 = {:.3e} ({})",
        worst.0, worst.1
    );
    assert!(
        worst.0 < tol,
        "{name}: max |Δscore| {} at {}",
        worst.0,
        worst.1
    );
    worst.0
}

#[test]
fn pico_scores_match_f64_goldens() {
    check_model("s1-pico", "s1-pico", Isa::detect(), 2e-4);
}

#[test]
fn pico_scalar_path_matches_f64_goldens() {
    check_model("s1-pico", "s1-pico", Isa::Scalar, 2e-4);
}

/// The calibration observer sees the input of every matrix product, by site name, with the
/// right widths, and observing does not change the scores.
#[test]
fn observer_sees_every_matmul_site() {
    let model = common::load_safetensors_model(&common::model_dir("s1-pico"));
    let rec = &common::golden("s1-pico", "f64")[2];
    let (ids, markers) = ids_markers(rec);
    let mut ws = Workspace::new();
    let plain = forward(
        &model,
        Isa::detect(),
        &mut ws,
        &ids,
        &markers,
        qtype(rec),
        None,
    )
    .unwrap()
    .to_vec();
    let mut seen: Vec<(String, usize, usize, f32)> = Vec::new();
    let mut obs = |site: &str, rows: usize, k: usize, x: &[f32]| {
        assert_eq!(x.len(), rows * k, "{site}");
        let max = x.iter().fold(0f32, |m, v| m.max(v.abs()));
        seen.push((site.to_string(), rows, k, max));
    };
    let observed = forward(
        &model,
        Isa::detect(),
        &mut ws,
        &ids,
        &markers,
        qtype(rec),
        Some(&mut obs),
    )
    .unwrap()
    .to_vec();
    assert_eq!(plain, observed);
    let sites: Vec<&str> = seen.iter().map(|s| s.0.as_str()).collect();
    assert_eq!(
        sites,
        [
            "blk.0.attn_qkv",
            "blk.0.attn_output",
            "blk.0.ffn_up",
            "blk.0.ffn_down",
            "blk.1.attn_qkv",
            "blk.1.attn_output",
            "blk.1.ffn_up",
            "blk.1.ffn_down",
            "blk.2.attn_qkv",
            "blk.2.attn_output",
            "blk.2.ffn_up",
            "blk.2.ffn_down",
            "cls",
        ]
    );
    let n = ids.len();
    assert_eq!((seen[0].1, seen[0].2), (n, 64));
    assert_eq!((seen[3].1, seen[3].2), (n, 128));
    // The last head block runs only the marker rows after attention.
    assert_eq!(seen[8].1, n);
    assert_eq!((seen[10].1, seen[10].2), (markers.len(), 64));
    assert_eq!((seen[11].1, seen[11].2), (markers.len(), 256));
    // Layer 0 has no attn_norm: its Wqkv input carries the ~20x residual channels.
    assert!(seen[0].3 > 10.0, "{:?}", seen[0]);
}
