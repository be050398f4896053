//! Each SIMD build of the whole forward pass (`forward_avx2`, `forward_avx512`, with their
//! kernels) against the f64 PyTorch goldens and against the scalar build (bit for bit), on
//! every s1-pico case.

mod common;
use common::numbers;

use sky_infer::config::QType;
use sky_infer::forward::{forward, Workspace};
use sky_infer::kernels::Isa;

#[test]
fn simd_forward_matches_goldens_and_scalar() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let engine = sky_infer::load::open(&root.join("models/s1-pico")).expect("load s1-pico");
    let path = root.join("fixtures/laya-ref/goldens/s1-pico.f64.jsonl");
    let text = std::fs::read_to_string(&path).expect("s1-pico f64 goldens");
    let mut ws = Workspace::new();
    let mut checked = 0;
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let rec: serde_json::Value = serde_json::from_str(line).expect("golden JSON");
        let ids = numbers(&rec, "input_ids", |x| x as u32);
        let markers = numbers(&rec, "markers", |x| x as usize);
        let qtype = QType::parse(rec["type"].as_str().expect("type")).expect("qtype");
        let want = rec["scores"].as_array().expect("scores");
        let m = &engine.model;
        let scalar = forward(m, Isa::Scalar, &mut ws, &ids, &markers, qtype, None)
            .expect("scalar forward")
            .to_vec();
        assert_eq!(scalar.len(), want.len());
        for isa in [Isa::Avx2, Isa::AvxVnni, Isa::Avx512, Isa::Neon] {
            if !isa.available() {
                continue;
            }
            let got = forward(m, isa, &mut ws, &ids, &markers, qtype, None).expect("forward");
            assert_eq!(got.len(), want.len());
            for ((g, s), w) in got.iter().zip(&scalar).zip(want) {
                let w = w.as_f64().expect("score");
                let id = &rec["id"];
                assert!(
                    (*g as f64 - w).abs() < 2e-4,
                    "{isa:?} {id}: {g} vs golden {w}"
                );
                // One arithmetic on every path (kernels module docs).
                assert_eq!(g.to_bits(), s.to_bits(), "{isa:?} {id}: {g} vs scalar {s}");
            }
            checked += 1;
        }
    }
    assert!(
        checked > 0 || !(Isa::Avx2.available() || Isa::Neon.available()),
        "no case checked"
    );
}
