//! Benchmarks: per-question latency of a loaded engine, best median of rounds; what
//! `skyctl bench` and the `bench` node share.
//!
//! A frame is one request of `questions` questions (the built-in calibration prompts, in
//! order, cycled), each answered from scratch: tokenization, sequence, forward pass,
//! softmax, answer. A round times `iters` frames after one untimed warm-up frame and takes
//! the median of (frame time / questions); the result is the best round.

use std::time::Instant;

use serde::Serialize;
use sky_infer::engine::Engine;
use sky_infer::forward::Workspace;
use sky_infer::int8::ComputeReport;
use sky_infer::sequence::Question;
use sky_quant::calibration_prompts;

use super::compute::Compute;

super::names::name_table! {
    /// What a pipeline bench measures: a compute path on the model's float file, or the Q8_0
    /// file on its default int8 path. The first three are named like their [`Compute`] paths.
    pub enum BenchMode("bench mode") {
        /// The float file, f32 compute.
        F32 = "f32",
        /// The float file quantized at load, Q8x2 activations.
        Q8 = "q8" | "int8",
        /// The float file quantized at load, Q8 activations.
        Q8Fast = "q8-fast",
        /// The Q8_0 file.
        Q8_0 = "q8_0",
        /// The tuned file (`skyctl tune`'s policy) on its default path.
        Tuned = "tuned",
    }
}

impl BenchMode {
    /// Every mode of a float model, in output order (what an empty `modes` measures, with
    /// [`BenchMode::Tuned`] when the model has a tuned variant).
    pub const DEFAULT: [BenchMode; 4] = [
        BenchMode::F32,
        BenchMode::Q8,
        BenchMode::Q8Fast,
        BenchMode::Q8_0,
    ];

    /// The compute path it runs: the Q8_0 file runs on its default (int8) path, i.e. f32 flags.
    pub fn compute(self) -> Compute {
        match self {
            BenchMode::F32 | BenchMode::Q8_0 | BenchMode::Tuned => Compute::F32,
            BenchMode::Q8 => Compute::Q8,
            BenchMode::Q8Fast => Compute::Q8Fast,
        }
    }
}

/// How much to measure.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct BenchConfig {
    /// Questions per frame.
    pub questions: u32,
    /// Frames per round.
    pub iters: u32,
    /// Rounds.
    pub rounds: u32,
    /// Threads of one forward pass (1: the calling thread alone; answers are the same).
    pub threads: u32,
}

/// One measurement.
#[derive(Debug, Clone, Serialize)]
pub struct BenchResult {
    /// Model name (file or directory name).
    pub model: String,
    /// `f32`, `q8` or `q8-fast`.
    pub mode: &'static str,
    /// Where int8 weights came from (`none`, `q8_0 file`, `at load`).
    pub weights: &'static str,
    /// Matrices computed in int8.
    pub int8_matrices: usize,
    /// Outlier columns computed in f32.
    pub outlier_columns: usize,
    /// The CPU that measured it (`/proc/cpuinfo`'s model name).
    pub cpu: String,
    /// The instruction set of the f32 kernels (`SKYCTL_ISA` caps it).
    pub isa: &'static str,
    /// The int8 kernel path (the same bits on every path; only the speed differs).
    pub int8_kernel: &'static str,
    /// The settings.
    #[serde(flatten)]
    pub config: BenchConfig,
    /// Best round median, microseconds per question.
    pub us_per_question: f64,
    /// Median of each round, microseconds per question.
    pub round_medians_us: Vec<f64>,
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        0.0
    } else if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Time `engine` (see the module docs).
pub fn bench_engine(
    engine: &Engine,
    report: &ComputeReport,
    cfg: BenchConfig,
) -> anyhow::Result<BenchResult> {
    let prompts = calibration_prompts();
    let mut questions = Vec::with_capacity(prompts.len());
    for p in &prompts {
        let def = serde_json::json!({"type": p.kind, "instructions": p.instructions, "criteria": p.criteria});
        questions.push((Question::parse(&p.id, &def)?, &p.state, p.id.as_str()));
    }
    anyhow::ensure!(!questions.is_empty(), "no benchmark questions");
    let q = cfg.questions.max(1) as usize;
    let mut ws = Workspace::new();
    ws.set_threads(cfg.threads.max(1) as usize)?;
    let mut next = 0usize;
    let mut frame = |ws: &mut Workspace| -> anyhow::Result<f64> {
        let t = Instant::now();
        for _ in 0..q {
            // A build asked to stop (SIGINT, SIGTERM) ends here: one question takes
            // milliseconds, and a frame may hold millions of them.
            if let Some(sig) = sky_dag::interrupt::requested() {
                anyhow::bail!("interrupted by signal {sig}");
            }
            let (question, state, id) = &questions[next % questions.len()];
            next += 1;
            std::hint::black_box(engine.run_question(ws, question, state, id)?);
        }
        Ok(t.elapsed().as_secs_f64() * 1e6 / q as f64)
    };
    frame(&mut ws)?;
    let mut round_medians = Vec::with_capacity(cfg.rounds as usize);
    for _ in 0..cfg.rounds.max(1) {
        let mut times = Vec::with_capacity(cfg.iters as usize);
        for _ in 0..cfg.iters.max(1) {
            times.push(frame(&mut ws)?);
        }
        round_medians.push(median(&mut times));
    }
    let best = round_medians.iter().copied().fold(f64::INFINITY, f64::min);
    Ok(BenchResult {
        model: engine.name.clone(),
        mode: report.mode,
        weights: report.weights,
        int8_matrices: report.int8.matrices,
        outlier_columns: report.int8.outlier_columns,
        cpu: sky_quant::cpu::cpu_model(),
        isa: engine.isa.name(),
        int8_kernel: engine.isa.int8_path().name(),
        config: cfg,
        us_per_question: (best * 10.0).round() / 10.0,
        round_medians_us: round_medians
            .iter()
            .map(|v| (v * 10.0).round() / 10.0)
            .collect(),
    })
}
