//! The shipped model golden suite through the CLI: `skyctl convert` (F16 GGUF, the default)
//! then `skyctl ask --requests golden/laya/cases.jsonl --json`, every case of s1-pico compared
//! with golden/laya/s1-pico.expected.jsonl (ids and markers exact, probabilities within 1e-3).

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

#[test]
fn pico_f16_gguf_suite_through_the_cli() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let dir = tempfile::tempdir().unwrap();
    let gguf = dir.path().join("s1-pico.gguf");
    let conv = Command::new(env!("CARGO_BIN_EXE_skyctl"))
        .args([
            "convert",
            root.join("models/s1-pico").to_str().unwrap(),
            gguf.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(
        conv.status.success(),
        "{}",
        String::from_utf8_lossy(&conv.stderr)
    );
    let out = Command::new(env!("CARGO_BIN_EXE_skyctl"))
        .args([
            "ask",
            gguf.to_str().unwrap(),
            "--requests",
            root.join("golden/laya/cases.jsonl").to_str().unwrap(),
            "--json",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let want: Vec<Value> = std::fs::read_to_string(root.join("golden/laya/s1-pico.expected.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(got.len(), 41);
    let mut worst = 0f64;
    for (g, w) in got.iter().zip(&want) {
        assert_eq!(g["id"], w["id"]);
        assert_eq!(g["input_ids"], w["input_ids"], "{}: ids", g["id"]);
        assert_eq!(g["markers"], w["markers"], "{}: markers", g["id"]);
        for (p, q) in g["probabilities"]
            .as_array()
            .unwrap()
            .iter()
            .zip(w["probabilities"].as_array().unwrap())
        {
            worst = worst.max((p.as_f64().unwrap() - q.as_f64().unwrap()).abs());
        }
    }
    assert!(worst < 1e-3, "max |Δp| = {worst}");
}
