//! `skyctl bench MODEL [--q8 | --q8-fast] [--no-calib] [--questions N] [--iters N]
//! [--rounds N] [--json]`: per-question latency of one compute path, best median of rounds.
//!
//! A frame is one request of `--questions` questions (the built-in calibration prompts, in
//! order, cycled), each answered from scratch: tokenization, sequence, forward pass,
//! softmax, answer. A round times `--iters` frames after one untimed warm-up frame and takes
//! the median of (frame time / questions); the result is the best round.

use std::io::Write as _;
use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context;
use serde::Serialize;
use sky_infer::engine::Engine;
use sky_infer::forward::Workspace;
use sky_infer::int8::{ComputeOptions, ComputeReport};
use sky_infer::sequence::Question;
use sky_quant::{calibration_prompts, ActQuant};

/// The compute-path flags shared by `skyctl ask` and `skyctl bench` (flatten with
/// `#[command(flatten)]`).
#[derive(clap::Args, Debug, Clone, Default, PartialEq)]
pub struct ComputePath {
    /// Int8 matrix products with two-pass (Q8x2, ~15-bit) activations; a float model is
    /// quantized at load around its calibrated outlier channels (calibrated on the built-in
    /// prompts). A Q8_0 file runs in int8 without this flag.
    #[arg(long, conflicts_with = "q8_fast")]
    pub q8: bool,
    /// Int8 with single-pass Q8 activations: fastest, least accurate.
    #[arg(long)]
    pub q8_fast: bool,
    /// Plain round-to-nearest int8, no outlier channels in f32 (with --q8/--q8-fast, or on a
    /// Q8_0 file: ignore its outlier metadata).
    #[arg(long)]
    pub no_calib: bool,
}

impl ComputePath {
    /// The engine options these flags select.
    pub fn options(&self) -> ComputeOptions {
        let act = if self.q8_fast {
            Some(ActQuant::Q8)
        } else if self.q8 {
            Some(ActQuant::Q8x2)
        } else {
            None
        };
        ComputeOptions {
            act,
            no_calib: self.no_calib,
            ..ComputeOptions::default()
        }
    }

    /// Load a model (GGUF file or Laya directory) on this compute path.
    pub fn open(&self, model: &Path) -> anyhow::Result<(Engine, ComputeReport)> {
        sky_infer::int8::open(model, &self.options(), None)
            .with_context(|| format!("loading {}", model.display()))
    }
}

/// Arguments of `skyctl bench`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The model: a GGUF file or a Laya checkpoint directory.
    pub model: std::path::PathBuf,
    /// Compute path.
    #[command(flatten)]
    pub path: ComputePath,
    /// Questions per frame (request).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub questions: u32,
    /// Frames timed per round.
    #[arg(long, default_value_t = 300, value_parser = clap::value_parser!(u32).range(1..))]
    pub iters: u32,
    /// Rounds; the best round median is reported.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..))]
    pub rounds: u32,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
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
    let mut next = 0usize;
    let mut frame = |ws: &mut Workspace| -> anyhow::Result<f64> {
        let t = Instant::now();
        for _ in 0..q {
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
        config: cfg,
        us_per_question: (best * 10.0).round() / 10.0,
        round_medians_us: round_medians
            .iter()
            .map(|v| (v * 10.0).round() / 10.0)
            .collect(),
    })
}

/// Run `skyctl bench`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let (engine, report) = args.path.open(&args.model)?;
    let mut err = std::io::stderr().lock();
    for note in &report.notes {
        writeln!(err, "note: {note}")?;
    }
    let cfg = BenchConfig {
        questions: args.questions,
        iters: args.iters,
        rounds: args.rounds,
    };
    let r = bench_engine(&engine, &report, cfg)?;
    let mut out = std::io::stdout().lock();
    if args.json {
        writeln!(out, "{}", serde_json::to_string(&r)?)?;
    } else {
        let rounds: Vec<String> = r
            .round_medians_us
            .iter()
            .map(|v| format!("{v:.1}"))
            .collect();
        writeln!(
            out,
            "{} [{}; int8 weights: {}, {} matrices, {} outlier columns]: {:.1} us/question (best median of {} rounds x {} frames of {} question(s); rounds {})",
            r.model,
            r.mode,
            r.weights,
            r.int8_matrices,
            r.outlier_columns,
            r.us_per_question,
            cfg.rounds,
            cfg.iters,
            cfg.questions,
            rounds.join(", ")
        )?;
    }
    Ok(ExitCode::SUCCESS)
}
