//! One forward pass on several threads gives the scores of one thread bit for bit, on every
//! compute path (f32, int8 Q8x2, int8 Q8), instruction set this CPU runs (the portable one on
//! pico only) and split of the row-wise stretches (by rows, by weight columns, the default's
//! mix), for the golden cases of every reference checkpoint (micro: the cases up to 160
//! tokens, to keep the debug-profile run short).

mod common;

use sky_infer::forward::{forward, Op, Split, Workspace};
use sky_infer::int8::{self, ComputeOptions};
use sky_infer::kernels::Isa;
use sky_infer::QType;
use sky_quant::ActQuant;

struct Case {
    ids: Vec<u32>,
    markers: Vec<usize>,
    qtype: QType,
}

fn cases(model: &str, max_len: usize) -> Vec<Case> {
    let path = common::repo_root().join(format!("fixtures/laya-ref/goldens/{model}.f64.jsonl"));
    let text = std::fs::read_to_string(&path).unwrap();
    let mut out = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let rec: serde_json::Value = serde_json::from_str(line).unwrap();
        let ids: Vec<u32> = rec["input_ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as u32)
            .collect();
        if ids.len() > max_len {
            continue;
        }
        let markers = rec["markers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as usize)
            .collect();
        let qtype = QType::parse(rec["type"].as_str().unwrap()).unwrap();
        out.push(Case {
            ids,
            markers,
            qtype,
        });
    }
    out
}

fn check(model: &str, max_len: usize, isas: &[Isa]) {
    let cases = cases(model, max_len);
    assert!(cases.len() >= 10, "{model}: too few cases");
    for act in [None, Some(ActQuant::Q8x2), Some(ActQuant::Q8)] {
        let opts = ComputeOptions {
            act,
            ..Default::default()
        };
        let (mut e, _) = int8::open(&common::model_dir(model), &opts, None).unwrap();
        for &isa in isas {
            if !isa.available() {
                continue;
            }
            e.isa = isa;
            let mut one = Workspace::new();
            let mut many: Vec<Workspace> = [Split::Auto, Split::Rows, Split::Columns]
                .into_iter()
                .flat_map(|split| {
                    (2..=3).map(move |n| {
                        let mut w = Workspace::new();
                        w.set_threads(n).unwrap();
                        w.set_split(split);
                        w
                    })
                })
                .collect();
            for (i, c) in cases.iter().enumerate() {
                let want: Vec<u32> =
                    forward(&e.model, isa, &mut one, &c.ids, &c.markers, c.qtype, None)
                        .unwrap()
                        .iter()
                        .map(|v| v.to_bits())
                        .collect();
                for ws in &mut many {
                    let got: Vec<u32> =
                        forward(&e.model, isa, ws, &c.ids, &c.markers, c.qtype, None)
                            .unwrap()
                            .iter()
                            .map(|v| v.to_bits())
                            .collect();
                    assert_eq!(
                        got,
                        want,
                        "{model} {act:?} {isa:?} case {i} ({} tokens), {} threads, {:?}",
                        c.ids.len(),
                        ws.threads(),
                        ws.split()
                    );
                }
            }
        }
    }
}

#[test]
fn pico_threads_give_the_scores_of_one_thread() {
    check(
        "s1-pico",
        usize::MAX,
        &[Isa::Avx512, Isa::Avx2, Isa::Neon, Isa::Scalar],
    );
}

#[test]
fn nano_threads_give_the_scores_of_one_thread() {
    if !common::model_selected("s1-nano") {
        return;
    }
    check("s1-nano", usize::MAX, &[Isa::Avx512, Isa::Avx2, Isa::Neon]);
}

#[test]
fn micro_threads_give_the_scores_of_one_thread() {
    if !common::model_selected("s1-micro") {
        return;
    }
    check("s1-micro", 160, &[Isa::Avx512, Isa::Avx2, Isa::Neon]);
}

#[test]
fn thread_counts_out_of_range_are_refused() {
    let mut ws = Workspace::new();
    assert!(ws.set_threads(0).is_err());
    assert!(ws.set_threads(sky_infer::threads::MAX_THREADS + 1).is_err());
    ws.set_threads(2).unwrap();
    assert_eq!(ws.threads(), 2);
    ws.set_threads(1).unwrap();
    assert_eq!(ws.threads(), 1);
}

/// The profile's multiply-add count is each observed product's rows x k x n (the last head
/// block's queries on the marker rows only), once per product whichever way its rows or weight
/// columns are split over threads, under the kind of weight it ran on; and attention's two
/// products, as the sequence's shape gives them.
#[test]
fn the_profile_counts_every_product_once() {
    for act in [None, Some(ActQuant::Q8x2)] {
        let opts = ComputeOptions {
            act,
            ..Default::default()
        };
        let (mut e, _) = int8::open(&common::model_dir("s1-pico"), &opts, None).unwrap();
        let n_of: std::collections::HashMap<String, usize> = e
            .model
            .weights_mut()
            .into_iter()
            .map(|w| (w.site.clone(), w.n))
            .collect();
        let case = &cases("s1-pico", usize::MAX)[0];
        let mut want = 0u64;
        let mut count = |site: &str, rows: usize, k: usize, _: &[f32]| {
            want += (rows * k * n_of[site]) as u64;
        };
        let mut ws = Workspace::new();
        let isa = Isa::detect();
        let (ids, markers) = (&case.ids, &case.markers);
        forward(
            &e.model,
            isa,
            &mut ws,
            ids,
            markers,
            case.qtype,
            Some(&mut count),
        )
        .unwrap();
        assert!(want > 0);
        // The observer sees each product's whole input once; the last head block's Q/K/V
        // product computes its queries (d of its 3d columns) on the marker rows alone.
        let (n, d, nm) = (ids.len(), e.model.config.hidden, markers.len());
        let want = want - ((n - nm) * d * d) as u64;
        for (threads, split) in [(1, Split::Auto), (2, Split::Rows), (2, Split::Columns)] {
            let mut ws = Workspace::new();
            ws.set_threads(threads).unwrap();
            ws.set_split(split);
            ws.set_profiling(true);
            for _ in 0..2 {
                forward(&e.model, isa, &mut ws, ids, markers, case.qtype, None).unwrap();
            }
            let t = ws.op_times().unwrap();
            assert_eq!(t.passes(), 2);
            let (f32_macs, int8_macs) = (
                t.product_macs(Op::MatmulF32),
                t.product_macs(Op::MatmulInt8),
            );
            let why = format!("{act:?}, {threads} threads, {split:?}");
            assert_eq!(f32_macs + int8_macs, 2 * want, "{why}");
            assert_eq!(int8_macs > 0, act.is_some(), "{why}");
            assert!(f32_macs > 0, "{why}: the decision head stays f32");
            // Attention: every query row against every key (the case is shorter than the
            // local window, so no layer narrows it), over all heads (d columns); the last head
            // block's queries are the markers alone. Counted once per product.
            let cfg = &e.model.config;
            assert!(
                n <= cfg.local_attention / 2,
                "the case must fit the local window"
            );
            let queries = cfg.n_enc * n + (cfg.n_head_layers - 1) * n + nm;
            let attention = (queries * n * d) as u64;
            assert_eq!(t.product_macs(Op::AttnScores), 2 * attention, "{why}");
            assert_eq!(t.product_macs(Op::AttnValues), 2 * attention, "{why}");
            assert_eq!(t.product_macs(Op::Softmax), 0, "{why}");
        }
    }
}
