//! Per-question latency of the engine: `cargo bench -p sky-infer --bench infer
//! [-- MODEL... --iters N --q8|--q8-fast --threads N --split auto|rows|columns --profile]` (one
//! thread by default; `--split`: how several threads split the pass, `Workspace::set_split`;
//! `--profile`: the per-op timers of the forward pass, µs per forward; `--paired`: f32, q8 and
//! q8-fast on the same question one after the other, see [`paired`]). Each model directory is converted to an F16 GGUF (the shipping
//! format) in a temp dir and loaded from it; the golden cases (golden/laya/cases.jsonl) are
//! answered round-robin. Reported: median / p10 / p90 of the whole question (sequence build +
//! forward + softmax) and of the forward alone, and the median sequence length.

#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::path::PathBuf;
use std::time::Instant;

use sky_gguf::GgmlType;
use sky_infer::forward::{Op, Split, Workspace};
use sky_infer::kernels::Isa;
use sky_infer::sequence::Question;

/// This process's user+system CPU seconds (Linux /proc; None elsewhere). On a shared, loaded
/// machine the wall-clock median includes time spent waiting for a core; CPU time does not.
fn cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let rest = stat.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
    Some(ticks / 100.0)
}

/// Nanoseconds of CPU time this thread has used (`CLOCK_THREAD_CPUTIME_ID`; None off Linux).
/// Unlike wall time, it leaves out the time the thread waited for a core, so per-question
/// figures stay comparable on a machine that other work shares.
#[cfg(target_os = "linux")]
fn thread_cpu_ns() -> Option<u64> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the call.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    (rc == 0).then(|| ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
}

#[cfg(not(target_os = "linux"))]
fn thread_cpu_ns() -> Option<u64> {
    None
}

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[((v.len() - 1) as f64 * p).round() as usize]
}

/// GFLOP/s of the matrix product on encoder-like shapes.
fn gemm_rate(isa: Isa) {
    use sky_infer::kernels::{gemm, Gemm};
    for &(m, n, k) in &[
        (107usize, 512usize, 128usize),
        (107, 768, 256),
        (512, 1024, 256),
        (107, 128, 256),
        // One 32-query attention block: Q·Kᵀ over 107 and 160 keys (head dim 64), then P·V.
        (32, 107, 64),
        (32, 64, 107),
        (32, 160, 64),
        (32, 64, 160),
    ] {
        let a = vec![0.5f32; m * k];
        let b = vec![0.25f32; k * n];
        let mut c = vec![0f32; m * n];
        let g = Gemm {
            m,
            n,
            k,
            lda: k,
            ldb: n,
            ldc: n,
            accumulate: false,
        };
        // At least 200 runs, more for the attention blocks (a few µs each).
        let reps = (250_000_000 / (m * n * k)).clamp(200, 5000);
        let t0 = Instant::now();
        for _ in 0..reps {
            gemm(isa, g, &a, &b, &mut c);
            std::hint::black_box(&c);
        }
        let s = t0.elapsed().as_secs_f64() / reps as f64;
        println!(
            "gemm {m}x{n}x{k}: {:.1} µs, {:.1} GFLOP/s",
            s * 1e6,
            2.0 * (m * n * k) as f64 / s / 1e9
        );
    }
}

/// This core's f32 ceiling: 12 independent chains of register-only AVX-512 FMAs (no loads).
/// The forward pass's matrix products are compared against it.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn fma_peak_avx512(steps: usize) -> f32 {
    use std::arch::x86_64::*;
    let x = _mm512_set1_ps(0.999_999);
    let y = _mm512_set1_ps(1e-7);
    // Named accumulators (an array here ends up in memory, and the loop then measures
    // store-to-load forwarding instead of the FMA units).
    let (mut a0, mut a1, mut a2, mut a3) = (x, y, x, y);
    let (mut a4, mut a5, mut a6, mut a7) = (x, y, x, y);
    let (mut a8, mut a9, mut a10, mut a11) = (x, y, x, y);
    for _ in 0..steps {
        a0 = _mm512_fmadd_ps(a0, x, y);
        a1 = _mm512_fmadd_ps(a1, x, y);
        a2 = _mm512_fmadd_ps(a2, x, y);
        a3 = _mm512_fmadd_ps(a3, x, y);
        a4 = _mm512_fmadd_ps(a4, x, y);
        a5 = _mm512_fmadd_ps(a5, x, y);
        a6 = _mm512_fmadd_ps(a6, x, y);
        a7 = _mm512_fmadd_ps(a7, x, y);
        a8 = _mm512_fmadd_ps(a8, x, y);
        a9 = _mm512_fmadd_ps(a9, x, y);
        a10 = _mm512_fmadd_ps(a10, x, y);
        a11 = _mm512_fmadd_ps(a11, x, y);
    }
    [a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11]
        .iter()
        .map(|&a| _mm512_reduce_add_ps(a))
        .sum()
}

fn fma_peak() {
    #[cfg(target_arch = "x86_64")]
    if Isa::Avx512.available() {
        let steps = 20_000_000;
        let mut best = f64::MAX;
        for _ in 0..5 {
            let t0 = Instant::now();
            // SAFETY: avx512f was detected on this CPU.
            std::hint::black_box(unsafe { fma_peak_avx512(steps) });
            best = best.min(t0.elapsed().as_secs_f64());
        }
        let flops = (steps * 12 * 16 * 2) as f64;
        println!(
            "f32 FMA peak (AVX-512, registers only, best of 5): {:.1} GFLOP/s",
            flops / best / 1e9
        );
    }
}

/// GFLOP/s of the packed weight product (what the forward runs) on the models' shapes.
fn weight_rate(isa: Isa) {
    use sky_infer::weights::Weight;
    for &(rows, n, k) in &[
        (118usize, 192usize, 64usize),
        (118, 64, 64),
        (118, 256, 64),
        (118, 64, 128),
        (107, 384, 128),
        (107, 512, 128),
        (97, 768, 256),
        (97, 1024, 256),
        (97, 256, 512),
    ] {
        let w: Vec<f32> = (0..n * k)
            .map(|i| ((i * 7 % 13) as f32 - 6.0) / 13.0)
            .collect();
        let w = Weight::from_rows("bench", n, k, &w);
        let x = vec![0.5f32; rows * k];
        let mut out = vec![0f32; rows * n];
        let reps = 300;
        let mut best = f64::MAX;
        for _ in 0..5 {
            let t0 = Instant::now();
            for _ in 0..reps {
                w.matmul(isa, &x, rows, &mut out).unwrap();
                std::hint::black_box(&out);
            }
            best = best.min(t0.elapsed().as_secs_f64() / reps as f64);
        }
        println!(
            "weight product {rows}x{k} · {k}x{n} (packed): {:.1} µs, {:.1} GFLOP/s (best of 5)",
            best * 1e6,
            2.0 * (rows * n * k) as f64 / best / 1e9
        );
    }
}

/// `models/NAME` converted to an F16 GGUF (the shipping format: F16 encoder, F32 head) in
/// `dir`; a missing model is a message and exit 2.
fn convert_f16(root: &std::path::Path, name: &str, dir: &std::path::Path) -> PathBuf {
    let src = root.join("models").join(name);
    // A model name is the user's input: a missing one is a message and exit 2.
    let ckpt = sky_laya::LayaCheckpoint::open(&src).unwrap_or_else(|e| {
        eprintln!("infer bench: model {name:?} ({}): {e}", src.display());
        std::process::exit(2)
    });
    let opts = sky_laya::ConvertOptions {
        policy: sky_laya::TypePolicy {
            ftype: GgmlType::F16,
            head_type: GgmlType::F32,
            rules: Vec::new(),
        },
        ..Default::default()
    };
    let out = dir.join(format!("{name}.gguf"));
    sky_laya::convert(&ckpt, &opts, &out).expect("convert");
    out
}

/// f32, q8 and q8-fast question by question: each golden case (round-robin, `iters` in all)
/// answered by the three engines back to back, their order rotated from one question to the
/// next, each timed in this thread's CPU time. On a shared machine the speed drifts by 10-30%
/// over seconds; three runs milliseconds apart see the same drift, so their ratio holds
/// where separate runs' ratios scatter. Prints each mode's median of case medians and the
/// f32 ÷ int8 ratio of each case's medians (median over the cases, and its p10 / p90).
fn paired(m: &str, gguf: &std::path::Path, isa: Isa, iters: usize, cases: &[serde_json::Value]) {
    let modes = [
        ("f32", None),
        ("q8", Some(sky_quant::ActQuant::Q8x2)),
        ("q8-fast", Some(sky_quant::ActQuant::Q8)),
    ];
    let qs: Vec<Question> = cases
        .iter()
        .map(|c| Question::parse("q", c).expect("question"))
        .collect();
    let mut engines = Vec::new();
    for (_, act) in modes {
        let opts = sky_infer::int8::ComputeOptions {
            act,
            ..Default::default()
        };
        let (mut engine, _) = sky_infer::int8::open(gguf, &opts, None).expect("load");
        engine.isa = isa;
        engines.push((engine, Workspace::new()));
    }
    let mut ask = |e: usize, k: usize| -> f64 {
        let (engine, ws) = &mut engines[e];
        let c0 = thread_cpu_ns();
        let seq = engine
            .sequence(&qs[k], &cases[k]["state"], "q")
            .expect("sequence");
        let scores = engine.scores(ws, &seq, qs[k].qtype, None).expect("forward");
        let t = engine.temperatures.pick(qs[k].qtype, scores.len());
        std::hint::black_box(sky_infer::answer::probabilities(&scores, t.applied));
        match (c0, thread_cpu_ns()) {
            (Some(a), Some(b)) => b.saturating_sub(a) as f64 / 1e3,
            _ => f64::NAN,
        }
    };
    // Warm-up: every case once on every engine.
    for k in 0..qs.len() {
        for e in 0..modes.len() {
            ask(e, k);
        }
    }
    let mut times = vec![vec![Vec::new(); qs.len()]; modes.len()];
    // At least one round over the cases, so that every case has its medians.
    for i in 0..iters.max(qs.len()) {
        let k = i % qs.len();
        for j in 0..modes.len() {
            let e = (i + j) % modes.len();
            times[e][k].push(ask(e, k));
        }
    }
    let medians: Vec<Vec<f64>> = times
        .iter_mut()
        .map(|per_case| {
            per_case
                .iter_mut()
                .filter(|t| !t.is_empty())
                .map(|t| pct(t, 0.5))
                .collect()
        })
        .collect();
    println!(
        "{m}, isa {isa:?}, 1 thread, {iters} questions a mode (f32, q8, q8-fast alternated), thread CPU µs"
    );
    println!(
        "| model | mode | median of case medians µs | f32 ÷ mode, median over cases [p10, p90] |"
    );
    println!("|---|---|---:|---|");
    for (e, (name, _)) in modes.iter().enumerate() {
        let mut ratios: Vec<f64> = medians[0]
            .iter()
            .zip(&medians[e])
            .map(|(f, q)| f / q)
            .collect();
        let mut own = medians[e].clone();
        println!(
            "| {m} | {name} | {:.1} | {:.3} [{:.3}, {:.3}] |",
            pct(&mut own, 0.5),
            pct(&mut ratios, 0.5),
            pct(&mut ratios, 0.1),
            pct(&mut ratios, 0.9)
        );
    }
}

fn main() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut models = Vec::new();
    let mut iters = 1000usize;
    let mut isa = Isa::detect();
    // `--q8` / `--q8-fast`: the int8 paths, the F16 file quantized at load around its
    // calibrated outlier channels (what `skyctl ask --q8` runs).
    let mut act = None;
    let mut threads = 1usize;
    let mut profile = false;
    let mut split = Split::Auto;
    // `--dump FILE`: append every golden case's score and probability bits (one line per case,
    // after the warm-up) for the bit-for-bit checks of kernel changes, then time as usual.
    let mut dump: Option<PathBuf> = None;
    let mut pair = false;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--iters" => iters = args.next().and_then(|v| v.parse().ok()).unwrap_or(iters),
            "--scalar" => isa = Isa::Scalar,
            "--avx2" => isa = Isa::Avx2,
            "--q8" => act = Some(sky_quant::ActQuant::Q8x2),
            "--q8-fast" => act = Some(sky_quant::ActQuant::Q8),
            "--threads" => threads = args.next().and_then(|v| v.parse().ok()).unwrap_or(1),
            "--profile" => profile = true,
            "--paired" => pair = true,
            "--dump" => dump = args.next().map(PathBuf::from),
            "--split" => {
                split = match args.next().as_deref() {
                    Some("auto") => Split::Auto,
                    Some("rows") => Split::Rows,
                    Some("columns") => Split::Columns,
                    other => {
                        eprintln!("infer bench: --split {other:?}: not auto, rows or columns");
                        std::process::exit(2);
                    }
                }
            }
            "--bench" => {}
            m => models.push(m.to_string()),
        }
    }
    // A thread count the engine refuses is a message, not a panic later.
    if let Err(e) = Workspace::new().set_threads(threads) {
        eprintln!("infer bench: --threads {threads}: {e}");
        std::process::exit(2);
    }
    if models.iter().any(|m| m == "gemm") {
        fma_peak();
        weight_rate(isa);
        gemm_rate(isa);
        return;
    }
    if models.is_empty() {
        models = vec!["s1-pico".into(), "s1-nano".into(), "s1-micro".into()];
    }
    let cases: Vec<serde_json::Value> =
        std::fs::read_to_string(root.join("golden/laya/cases.jsonl"))
            .expect("golden/laya/cases.jsonl")
            .lines()
            .map(|l| serde_json::from_str(l).expect("case JSON"))
            .collect();
    let tmp = tempfile::tempdir().expect("tempdir");
    if pair {
        for m in &models {
            let gguf = convert_f16(&root, m, tmp.path());
            paired(m, &gguf, isa, iters, &cases);
        }
        return;
    }
    println!(
        "isa {isa:?}, {iters} questions per model (the 41 golden cases round-robin), {threads} thread(s), split {split:?}"
    );
    println!("| model | file | median µs/question | p10 | p90 | forward median µs | CPU µs/question (mean) | median tokens | 64 tokens forward median / p10 µs | mean µs/question | median of case medians µs | same, thread CPU µs |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for m in models {
        let out = convert_f16(&root, &m, tmp.path());
        let opts = sky_infer::int8::ComputeOptions {
            act,
            ..Default::default()
        };
        let (mut engine, report) = sky_infer::int8::open(&out, &opts, None).expect("load");
        engine.isa = isa;
        if act.is_some() {
            eprintln!(
                "{m}: {} int8 matrices, {} outlier columns in f32",
                report.int8.matrices, report.int8.outlier_columns
            );
        }
        let path = report.mode;
        let qs: Vec<Question> = cases
            .iter()
            .map(|c| Question::parse("q", c).expect("question"))
            .collect();
        let mut ws = Workspace::new();
        ws.set_threads(threads)
            .expect("checked after the arguments");
        ws.set_split(split);
        // Warm-up: one pass over every case.
        let mut lines = String::new();
        for (i, (q, c)) in qs.iter().zip(&cases).enumerate() {
            let r = engine
                .run_question(&mut ws, q, &c["state"], "q")
                .expect("run");
            let bits = |v: &[f32]| -> Vec<String> {
                v.iter().map(|x| format!("{:08x}", x.to_bits())).collect()
            };
            lines.push_str(&format!(
                "{m} {path} {isa:?} {threads} {split:?} case {i}: scores {} probs {}\n",
                bits(&r.scores).join(","),
                bits(&r.probabilities).join(",")
            ));
        }
        if let Some(d) = &dump {
            use std::io::Write;
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(d)
                .and_then(|mut f| f.write_all(lines.as_bytes()))
                .unwrap_or_else(|e| {
                    eprintln!("infer bench: --dump {}: {e}", d.display());
                    std::process::exit(2)
                });
        }
        ws.set_profiling(profile);
        let mut total = Vec::with_capacity(iters);
        let mut fwd = Vec::with_capacity(iters);
        let mut lens = Vec::with_capacity(iters);
        let mut on_cpu = Vec::with_capacity(iters);
        let cpu0 = cpu_seconds();
        for i in 0..iters {
            let k = i % qs.len();
            let c0 = thread_cpu_ns();
            let t0 = Instant::now();
            let seq = engine
                .sequence(&qs[k], &cases[k]["state"], "q")
                .expect("sequence");
            let t1 = Instant::now();
            let scores = engine
                .scores(&mut ws, &seq, qs[k].qtype, None)
                .expect("forward");
            let t = engine.temperatures.pick(qs[k].qtype, scores.len());
            let p = sky_infer::answer::probabilities(&scores, t.applied);
            std::hint::black_box(p);
            let t2 = Instant::now();
            total.push((t2 - t0).as_secs_f64() * 1e6);
            fwd.push((t2 - t1).as_secs_f64() * 1e6);
            lens.push(seq.ids.len() as f64);
            if let (Some(a), Some(b)) = (c0, thread_cpu_ns()) {
                on_cpu.push(b.saturating_sub(a) as f64 / 1e3);
            }
        }
        if let Some(t) = ws.op_times() {
            let all: u64 = Op::ALL.iter().map(|&o| t.nanos(o)).sum();
            let fwd_sum: f64 = fwd.iter().sum();
            println!(
                "{m} {path}: per-op time, µs per forward (sum of timed ops {:.0} µs of {:.0} µs forward mean)",
                all as f64 / 1e3 / t.passes() as f64,
                fwd_sum / fwd.len() as f64
            );
            for o in Op::ALL {
                let ns = t.nanos(o);
                println!(
                    "  {:20} {:8.1} µs  {:5.1}%",
                    o.name(),
                    ns as f64 / 1e3 / t.passes() as f64,
                    100.0 * ns as f64 / all.max(1) as f64
                );
            }
            for o in [
                Op::MatmulF32,
                Op::MatmulInt8,
                Op::AttnScores,
                Op::AttnValues,
            ] {
                let macs = t.product_macs(o);
                if macs > 0 {
                    println!(
                        "  {:20} {:.1} M multiply-adds per forward, {:.1} GFLOP/s",
                        o.name(),
                        macs as f64 / 1e6 / t.passes() as f64,
                        2.0 * macs as f64 / t.nanos(o).max(1) as f64
                    );
                }
            }
            ws.set_profiling(false);
        }
        let cpu = match (cpu0, cpu_seconds()) {
            (Some(a), Some(b)) => format!("{:.0}", (b - a) / iters as f64 * 1e6),
            _ => "-".into(),
        };
        // Forward only on a fixed 64-token sequence (the shape of the ORT / PyTorch reference
        // numbers in the issue): the first 63 tokens of c3_long_state (all 3 markers) + [SEP].
        let long = qs
            .iter()
            .zip(&cases)
            .find(|(_, c)| c["id"] == "c3_long_state")
            .expect("c3_long_state");
        let seq = engine
            .sequence(long.0, &long.1["state"], "q")
            .expect("sequence");
        let mut ids64: Vec<u32> = seq.ids[..63].to_vec();
        ids64.push(engine.special.sep);
        let mut t64 = Vec::with_capacity(iters);
        for _ in 0..iters {
            let t0 = Instant::now();
            let s = sky_infer::forward::forward(
                &engine.model,
                engine.isa,
                &mut ws,
                &ids64,
                &seq.markers,
                long.0.qtype,
                None,
            )
            .expect("forward");
            std::hint::black_box(s);
            t64.push(t0.elapsed().as_secs_f64() * 1e6);
        }
        // The statistic `bench/web.mjs` reports for the browser: each case's median over its
        // rounds, then the median over the cases (so the two can be divided).
        let mut case_medians: Vec<f64> = (0..qs.len())
            .filter_map(|k| {
                let mut own: Vec<f64> = total.iter().skip(k).step_by(qs.len()).copied().collect();
                (!own.is_empty()).then(|| pct(&mut own, 0.5))
            })
            .collect();
        let case_med = if case_medians.is_empty() {
            f64::NAN
        } else {
            pct(&mut case_medians, 0.5)
        };
        // The same statistic on this thread's CPU time (one thread only: other threads' work
        // is not in it).
        let mut cpu_case_medians: Vec<f64> = (0..qs.len())
            .filter_map(|k| {
                let mut own: Vec<f64> = on_cpu.iter().skip(k).step_by(qs.len()).copied().collect();
                (!own.is_empty()).then(|| pct(&mut own, 0.5))
            })
            .collect();
        let cpu_case_med = if threads != 1 || cpu_case_medians.len() != qs.len() {
            "-".to_string()
        } else {
            format!("{:.1}", pct(&mut cpu_case_medians, 0.5))
        };
        let mean = total.iter().sum::<f64>() / total.len().max(1) as f64;
        let med = pct(&mut total, 0.5);
        println!(
            "| {m} | F16 GGUF, {path}, {isa:?} | {med:.0} | {:.0} | {:.0} | {:.0} | {cpu} | {:.0} | {:.0} / {:.0} | {mean:.1} | {case_med:.1} | {cpu_case_med} |",
            pct(&mut total, 0.1),
            pct(&mut total, 0.9),
            pct(&mut fwd, 0.5),
            pct(&mut lens, 0.5),
            pct(&mut t64, 0.5),
            pct(&mut t64, 0.1)
        );
    }
}
