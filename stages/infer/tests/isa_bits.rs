//! Same answers on every CPU: every golden case of s1-pico, s1-nano and s1-micro, on every
//! compute path (f32; q8 and q8-fast quantized at load; the calibrated Q8_0 file with either
//! activation mode), at 1 and 2 threads, gives the scalar path's bits on every instruction set
//! this CPU runs: every score and every probability. The calibration the int8 paths start from,
//! and the Q8_0 file made from it, are byte-identical whichever instruction set computed them.
//!
//! A machine with AVX-512 checks scalar, avx2 (and avx-vnni) and avx512 here; one with AVX2
//! only checks scalar and avx2.

mod common;

use serde_json::Value;
use sky_gguf::GgufFile;
use sky_infer::answer::probabilities;
use sky_infer::calibrate::calibrate_builtin;
use sky_infer::engine::Engine;
use sky_infer::forward::{forward, Workspace};
use sky_infer::int8::{self, q8_policy};
use sky_infer::kernels::Isa;
use sky_infer::load::engine_from_gguf;
use sky_infer::QType;
use sky_quant::{ActQuant, OUTLIER_RATIO};

/// The bits of every score and probability of every case, in case order.
fn answers(e: &Engine, isa: Isa, threads: usize, gold: &[Value]) -> Vec<Vec<u32>> {
    let mut ws = Workspace::new();
    ws.set_threads(threads).expect("thread count");
    gold.iter()
        .map(|rec| {
            let ids = common::numbers(rec, "input_ids", |x| x as u32);
            let markers = common::numbers(rec, "markers", |x| x as usize);
            let qtype = QType::parse(rec["type"].as_str().expect("type")).expect("qtype");
            let scores = forward(&e.model, isa, &mut ws, &ids, &markers, qtype, None)
                .expect("forward")
                .to_vec();
            let temperature = rec["temperature"].as_f64().expect("temperature");
            let p = probabilities(&scores, temperature);
            assert_eq!(p.len(), scores.len());
            scores.iter().chain(&p).map(|v| v.to_bits()).collect()
        })
        .collect()
}

fn isas() -> Vec<Isa> {
    let have: Vec<Isa> = Isa::NATIVE.into_iter().filter(|i| i.available()).collect();
    // x86-64 CI machines have AVX2 at least: a test that compared scalar with itself would
    // prove nothing there.
    #[cfg(target_arch = "x86_64")]
    assert!(have.contains(&Isa::Avx2), "this x86-64 CPU has no AVX2");
    #[cfg(target_arch = "aarch64")]
    assert!(
        have.contains(&Isa::Neon),
        "NEON is not available on aarch64"
    );
    have
}

fn check(model: &str) {
    let gold = common::golden(model, "f64");
    assert_eq!(gold.len(), 41, "{model}: golden cases");
    let ckpt = sky_laya::LayaCheckpoint::open(common::model_dir(model)).expect("checkpoint");
    let opts = sky_laya::ConvertOptions {
        policy: sky_laya::TypePolicy {
            ftype: sky_gguf::GgmlType::F32,
            head_type: sky_gguf::GgmlType::F32,
            rules: vec![],
        },
        ..Default::default()
    };
    let (w, _) = sky_laya::build_writer(&ckpt, &opts).expect("converts");
    let f32_bytes = w.to_bytes().expect("serializes");
    let engine = || engine_from_gguf(&f32_bytes, model.into()).expect("engine loads");

    // The calibration and the Q8_0 file, from every instruction set.
    let mut calib = None;
    let mut q8_file: Option<Vec<u8>> = None;
    for isa in isas() {
        let mut e = engine();
        e.isa = isa;
        let c = calibrate_builtin(&e).expect("calibrates").calibration;
        let file = int8::quantize_gguf(
            &GgufFile::parse(&f32_bytes).expect("parses"),
            &c,
            OUTLIER_RATIO,
            &q8_policy(),
            false,
        )
        .expect("quantizes")
        .bytes;
        match (&calib, &q8_file) {
            (Some(c0), Some(f0)) => {
                assert!(
                    sky_quant::Calibration::to_json(c0) == c.to_json(),
                    "{model}: the calibration on {isa} differs from scalar's"
                );
                assert!(*f0 == file, "{model}: the Q8_0 file on {isa} differs");
            }
            _ => {
                calib = Some(c);
                q8_file = Some(file);
            }
        }
    }
    let (calib, q8_file) = (calib.expect("calibrated"), q8_file.expect("quantized"));

    let at_load = |act| {
        let mut e = engine();
        int8::quantize_at_load(&mut e.model, &calib, OUTLIER_RATIO, act).expect("quantizes");
        e
    };
    let from_file = |act| {
        let mut e = engine_from_gguf(&q8_file, model.into()).expect("Q8_0 file loads");
        let f = GgufFile::parse(&q8_file).expect("parses");
        let s = int8::from_q8_file(&mut e.model, &f, act, true).expect("int8 from file");
        assert_eq!(s.matrices, 4 * e.model.config.n_enc);
        e
    };
    let paths = [
        ("f32", engine()),
        ("q8", at_load(ActQuant::Q8x2)),
        ("q8-fast", at_load(ActQuant::Q8)),
        ("q8_0 file", from_file(ActQuant::Q8x2)),
        ("q8_0 file q8-fast", from_file(ActQuant::Q8)),
    ];
    for (name, e) in &paths {
        let want = answers(e, Isa::Scalar, 1, &gold);
        assert_eq!(want.len(), gold.len());
        for isa in isas() {
            for threads in [1, 2] {
                if isa == Isa::Scalar && threads == 1 {
                    continue;
                }
                let got = answers(e, isa, threads, &gold);
                assert_eq!(got.len(), want.len());
                for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                    assert!(
                        g == w,
                        "{model} {name} on {isa} at {threads} threads, case {}: {:?} vs scalar {:?}",
                        gold[i]["id"],
                        g.iter().map(|b| f32::from_bits(*b)).collect::<Vec<_>>(),
                        w.iter().map(|b| f32::from_bits(*b)).collect::<Vec<_>>()
                    );
                }
            }
        }
    }
}

#[test]
fn pico_gives_the_same_bits_on_every_isa() {
    check("s1-pico");
}

#[test]
fn nano_gives_the_same_bits_on_every_isa() {
    if !common::model_selected("s1-nano") {
        return;
    }
    check("s1-nano");
}

#[test]
fn micro_gives_the_same_bits_on_every_isa() {
    if !common::model_selected("s1-micro") {
        return;
    }
    check("s1-micro");
}
