//! Per-question latency of the engine, one thread: `cargo bench -p sky-infer --bench infer
//! [-- MODEL... --iters N]`. Each model directory is converted to an F16 GGUF (the shipping
//! format) in a temp dir and loaded from it; the golden cases (golden/laya/cases.jsonl) are
//! answered round-robin. Reported: median / p10 / p90 of the whole question (sequence build +
//! forward + softmax) and of the forward alone, and the median sequence length.

#![allow(clippy::print_stdout)]

use std::path::PathBuf;
use std::time::Instant;

use sky_gguf::GgmlType;
use sky_infer::forward::Workspace;
use sky_infer::kernels::Isa;
use sky_infer::sequence::Question;

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[((v.len() - 1) as f64 * p).round() as usize]
}

fn main() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut models = Vec::new();
    let mut iters = 1000usize;
    let mut isa = Isa::detect();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--iters" => iters = args.next().and_then(|v| v.parse().ok()).unwrap_or(iters),
            "--scalar" => isa = Isa::Scalar,
            "--avx2" => isa = Isa::Avx2,
            "--bench" => {}
            m => models.push(m.to_string()),
        }
    }
    if models.is_empty() {
        models = vec!["s1-pico".into(), "s1-nano".into(), "s1-micro".into()];
    }
    let cases: Vec<serde_json::Value> = std::fs::read_to_string(root.join("golden/laya/cases.jsonl"))
        .expect("golden/laya/cases.jsonl")
        .lines()
        .map(|l| serde_json::from_str(l).expect("case JSON"))
        .collect();
    let tmp = tempfile::tempdir().expect("tempdir");
    println!("isa {isa:?}, {iters} questions per model (the 41 golden cases round-robin), one thread");
    println!("| model | file | median µs/question | p10 | p90 | forward median µs | median tokens |");
    println!("|---|---|---|---|---|---|---|");
    for m in models {
        let dir = root.join("models").join(&m);
        let ckpt = sky_laya::LayaCheckpoint::open(&dir).expect("checkpoint");
        let opts = sky_laya::ConvertOptions {
            policy: sky_laya::TypePolicy { ftype: GgmlType::F16, head_type: GgmlType::F32, rules: Vec::new() },
            ..Default::default()
        };
        let out = tmp.path().join(format!("{m}.gguf"));
        sky_laya::convert(&ckpt, &opts, &out).expect("convert");
        let mut engine = sky_infer::load::open(&out).expect("load");
        engine.isa = isa;
        let qs: Vec<Question> = cases.iter().map(|c| Question::parse("q", c).expect("question")).collect();
        let mut ws = Workspace::new();
        // Warm-up: one pass over every case.
        for (q, c) in qs.iter().zip(&cases) {
            engine.run_question(&mut ws, q, &c["state"], "q").expect("run");
        }
        let mut total = Vec::with_capacity(iters);
        let mut fwd = Vec::with_capacity(iters);
        let mut lens = Vec::with_capacity(iters);
        for i in 0..iters {
            let k = i % qs.len();
            let t0 = Instant::now();
            let seq = engine.sequence(&qs[k], &cases[k]["state"], "q").expect("sequence");
            let t1 = Instant::now();
            let scores = engine.scores(&mut ws, &seq, qs[k].qtype, None).expect("forward");
            let t = engine.temperatures.pick(qs[k].qtype, scores.len());
            let p = sky_infer::answer::probabilities(&scores, t.applied);
            std::hint::black_box(p);
            let t2 = Instant::now();
            total.push((t2 - t0).as_secs_f64() * 1e6);
            fwd.push((t2 - t1).as_secs_f64() * 1e6);
            lens.push(seq.ids.len() as f64);
        }
        let med = pct(&mut total, 0.5);
        println!(
            "| {m} | F16 GGUF | {med:.0} | {:.0} | {:.0} | {:.0} | {:.0} |",
            pct(&mut total, 0.1),
            pct(&mut total, 0.9),
            pct(&mut fwd, 0.5),
            pct(&mut lens, 0.5)
        );
    }
}
