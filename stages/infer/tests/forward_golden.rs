//! The forward pass against the PyTorch Laya goldens, from the golden input ids.

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
