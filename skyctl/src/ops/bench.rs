//! Benchmarks: per-question latency of a loaded engine, the median of rounds with their spread;
//! what `skyctl bench` and the `bench` node share.
//!
//! A frame is one request of `questions` questions (the built-in calibration prompts, in
//! order, cycled), each answered from scratch: tokenization, sequence, forward pass,
//! softmax, answer; or, encoder only, each question's sequence through the encoder alone
//! (tokenization, sequence, embeddings, encoder layers, final norm: no decision head, scorer
//! or answer), what an embedding run of the encoder costs. A round times `iters` frames after
//! one untimed warm-up frame and takes the median of (frame time / questions); the result is
//! the median of the rounds, with the smallest and the largest round (the spread: how far one
//! round may land from another on this machine, so a figure is never read as more exact than
//! it is).

use std::time::Instant;

use serde::Serialize;
use sky_infer::engine::Engine;
use sky_infer::forward::{encode, Workspace};
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
    /// Time the encoder alone on each question's sequence (no decision head, no scorer).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub encoder_only: bool,
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
    /// Median of the round medians, microseconds per question.
    pub us_per_question: f64,
    /// The fastest round's median (the spread's low end), microseconds per question.
    pub min_us: f64,
    /// The slowest round's median (the spread's high end), microseconds per question.
    pub max_us: f64,
    /// (max - min) / median, to 0.001: above [`NOISY_SPREAD`] the figure is noise-dominated.
    pub spread: f64,
    /// Median of each round, microseconds per question.
    pub round_medians_us: Vec<f64>,
}

/// A spread ((max - min) / median over rounds) above which a timing is marked noisy (the
/// Bench page, `skyctl bench`'s text).
pub const NOISY_SPREAD: f64 = 0.10;

/// Median, smallest and largest of round medians, and the spread (max - min) / median.
pub fn spread_of(round_medians: &[f64]) -> (f64, f64, f64, f64) {
    let mut sorted = round_medians.to_vec();
    let med = median(&mut sorted);
    let min = sorted.first().copied().unwrap_or(0.0);
    let max = sorted.last().copied().unwrap_or(0.0);
    let spread = if med > 0.0 {
        ((max - min) / med * 1000.0).round() / 1000.0
    } else {
        0.0
    };
    (med, min, max, spread)
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

/// The built-in questions a frame cycles through: `(question, state, id)`.
type Questions<'p> = Vec<(Question, &'p serde_json::Value, &'p str)>;

fn questions(prompts: &[sky_quant::PromptRequest]) -> anyhow::Result<Questions<'_>> {
    let mut questions = Vec::with_capacity(prompts.len());
    for p in prompts {
        let def = serde_json::json!({"type": p.kind, "instructions": p.instructions, "criteria": p.criteria});
        questions.push((Question::parse(&p.id, &def)?, &p.state, p.id.as_str()));
    }
    anyhow::ensure!(!questions.is_empty(), "no benchmark questions");
    Ok(questions)
}

/// One engine's side of a benchmark: its workspace and the next question it answers.
struct Timed<'e> {
    engine: &'e Engine,
    ws: Workspace,
    next: usize,
    encoder_only: bool,
}

impl<'e> Timed<'e> {
    fn new(engine: &'e Engine, cfg: BenchConfig) -> anyhow::Result<Timed<'e>> {
        let mut ws = Workspace::new();
        ws.set_threads(cfg.threads.max(1) as usize)?;
        Ok(Timed {
            engine,
            ws,
            next: 0,
            encoder_only: cfg.encoder_only,
        })
    }

    /// One frame of `q` questions, in microseconds per question.
    fn frame(&mut self, questions: &Questions<'_>, q: usize) -> anyhow::Result<f64> {
        let t = Instant::now();
        for _ in 0..q {
            // A build asked to stop (SIGINT, SIGTERM) ends here: one question takes
            // milliseconds, and a frame may hold millions of them.
            if let Some(sig) = sky_dag::interrupt::requested() {
                anyhow::bail!("interrupted by signal {sig}");
            }
            let (question, state, id) = &questions[self.next % questions.len()];
            self.next += 1;
            if self.encoder_only {
                let seq = self.engine.sequence(question, state, id)?;
                let e = self.engine;
                std::hint::black_box(encode(&e.model, e.isa, &mut self.ws, &seq.ids)?);
            } else {
                std::hint::black_box(self.engine.run_question(
                    &mut self.ws,
                    question,
                    state,
                    id,
                )?);
            }
        }
        Ok(t.elapsed().as_secs_f64() * 1e6 / q as f64)
    }
}

/// Microseconds rounded to 0.1.
fn tenth(v: f64) -> f64 {
    (v * 10.0).round() / 10.0
}

fn result(
    engine: &Engine,
    report: &ComputeReport,
    cfg: BenchConfig,
    round_medians: &[f64],
) -> BenchResult {
    let (med, min, max, spread) = spread_of(round_medians);
    BenchResult {
        model: engine.name.clone(),
        mode: report.mode,
        weights: report.weights,
        int8_matrices: report.int8.matrices,
        outlier_columns: report.int8.outlier_columns,
        cpu: sky_quant::cpu::cpu_model(),
        isa: engine.isa.name(),
        int8_kernel: engine.isa.int8_path().name(),
        config: cfg,
        us_per_question: tenth(med),
        min_us: tenth(min),
        max_us: tenth(max),
        spread,
        round_medians_us: round_medians.iter().map(|&v| tenth(v)).collect(),
    }
}

/// Time `engine` (see the module docs).
pub fn bench_engine(
    engine: &Engine,
    report: &ComputeReport,
    cfg: BenchConfig,
) -> anyhow::Result<BenchResult> {
    let prompts = calibration_prompts();
    let questions = questions(&prompts)?;
    let q = cfg.questions.max(1) as usize;
    let mut timed = Timed::new(engine, cfg)?;
    timed.frame(&questions, q)?;
    let mut round_medians = Vec::with_capacity(cfg.rounds as usize);
    for _ in 0..cfg.rounds.max(1) {
        let mut times = Vec::with_capacity(cfg.iters as usize);
        for _ in 0..cfg.iters.max(1) {
            times.push(timed.frame(&questions, q)?);
        }
        round_medians.push(median(&mut times));
    }
    Ok(result(engine, report, cfg, &round_medians))
}

/// One mode of a comparison: its measurement, and how many times faster than the first
/// (f32) mode it ran.
#[derive(Debug, Clone, Serialize)]
pub struct Compared {
    /// The measurement, as `skyctl bench` reports it for this mode alone.
    #[serde(flatten)]
    pub result: BenchResult,
    /// The first mode's round median ÷ this mode's, per round (1.0 for the first mode).
    pub speedup_rounds: Vec<f64>,
    /// The median of `speedup_rounds`, to 0.001.
    pub speedup: f64,
}

/// Time several engines of one model frame by frame in turn (their order rotated from one
/// frame to the next), so that all of them see the same machine: on a shared or throttling
/// machine the speed drifts by 10-30% over seconds, and separate runs' ratios scatter by as
/// much. Each engine answers the same questions in the same order. The first engine is the
/// reference of the speed-ups.
pub fn compare_engines(
    engines: &[(Engine, ComputeReport)],
    cfg: BenchConfig,
) -> anyhow::Result<Vec<Compared>> {
    anyhow::ensure!(!engines.is_empty(), "nothing to compare");
    let prompts = calibration_prompts();
    let questions = questions(&prompts)?;
    let q = cfg.questions.max(1) as usize;
    let mut timed = Vec::with_capacity(engines.len());
    for (engine, _) in engines {
        let mut t = Timed::new(engine, cfg)?;
        t.frame(&questions, q)?;
        timed.push(t);
    }
    let mut round_medians = vec![Vec::with_capacity(cfg.rounds as usize); engines.len()];
    for _ in 0..cfg.rounds.max(1) {
        let mut times = vec![Vec::with_capacity(cfg.iters as usize); engines.len()];
        for i in 0..cfg.iters.max(1) as usize {
            for j in 0..engines.len() {
                let e = (i + j) % engines.len();
                times[e].push(timed[e].frame(&questions, q)?);
            }
        }
        for (medians, mut t) in round_medians.iter_mut().zip(times) {
            medians.push(median(&mut t));
        }
    }
    let reference = round_medians[0].clone();
    Ok(engines
        .iter()
        .zip(&round_medians)
        .map(|((engine, report), medians)| {
            let mut rounds: Vec<f64> = reference
                .iter()
                .zip(medians)
                .map(|(r, m)| if *m > 0.0 { r / m } else { 0.0 })
                .collect();
            let speedup = (median(&mut rounds.clone()) * 1000.0).round() / 1000.0;
            for r in &mut rounds {
                *r = (*r * 1000.0).round() / 1000.0;
            }
            Compared {
                result: result(engine, report, cfg, medians),
                speedup_rounds: rounds,
                speedup,
            }
        })
        .collect())
}

#[cfg(test)]
mod spread_tests {
    use super::*;

    #[test]
    fn the_spread_is_max_minus_min_over_the_median() {
        assert_eq!(spread_of(&[110.0, 100.0, 90.0]), (100.0, 90.0, 110.0, 0.2));
        assert_eq!(spread_of(&[100.0, 104.0]), (102.0, 100.0, 104.0, 0.039));
        assert_eq!(spread_of(&[50.0]), (50.0, 50.0, 50.0, 0.0));
        assert_eq!(spread_of(&[]), (0.0, 0.0, 0.0, 0.0));
        assert!(spread_of(&[100.0, 125.0, 105.0]).3 > NOISY_SPREAD);
    }
}
