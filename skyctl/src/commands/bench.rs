//! `skyctl bench MODEL [--q8 | --q8-fast] [--no-calib] [--questions N] [--iters N]
//! [--rounds N] [--threads N] [--json]`: per-question latency of one compute path, best median of rounds.
//!
//! A frame is one request of `--questions` questions (the built-in calibration prompts, in
//! order, cycled), each answered from scratch: tokenization, sequence, forward pass,
//! softmax, answer. A round times `--iters` frames after one untimed warm-up frame and takes
//! the median of (frame time / questions); the result is the best round.

use crate::outcome::Outcome;
use std::io::Write as _;

use crate::ops::bench::{bench_engine, BenchConfig};

/// Arguments of `skyctl bench`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The model: a GGUF file or a Laya checkpoint directory.
    pub model: std::path::PathBuf,
    /// Compute path.
    #[command(flatten)]
    pub path: super::ComputeFlags,
    /// Questions per frame (request).
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub questions: u32,
    /// Frames timed per round.
    #[arg(long, value_name = "N", default_value_t = 300, value_parser = clap::value_parser!(u32).range(1..))]
    pub iters: u32,
    /// Rounds; the best round median is reported.
    #[arg(long, value_name = "N", default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..))]
    pub rounds: u32,
    /// Threads of one question's forward pass (same answers bit for bit).
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=16))]
    pub threads: u32,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Run `skyctl bench`.
pub fn run(args: Args) -> anyhow::Result<Outcome> {
    let (engine, report) = args.path.path().open(&args.model)?;
    let mut err = std::io::stderr().lock();
    for note in &report.notes {
        writeln!(err, "note: {note}")?;
    }
    let cfg = BenchConfig {
        questions: args.questions,
        iters: args.iters,
        rounds: args.rounds,
        threads: args.threads,
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
            "{} [{}; int8 weights: {}, {} matrices, {} outlier columns]: {:.1} us/question (best median of {} rounds x {} frames of {} question(s); rounds {})\non {} ({}, int8 kernel {}), {} thread(s)",
            r.model,
            r.mode,
            r.weights,
            r.int8_matrices,
            r.outlier_columns,
            r.us_per_question,
            cfg.rounds,
            cfg.iters,
            cfg.questions,
            rounds.join(", "),
            r.cpu,
            r.isa,
            r.int8_kernel,
            cfg.threads
        )?;
    }
    Ok(Outcome::Success)
}
