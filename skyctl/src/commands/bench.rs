//! `skyctl bench MODEL [--q8 | --q8-fast | --compare] [--no-calib] [--questions N] [--iters N]
//! [--rounds N] [--threads N] [--encoder-only] [--json]`: per-question latency of one compute
//! path, the median of rounds and their spread (the fastest and the slowest round); with
//! `--compare`, of f32, q8 and q8-fast frame by frame in turn, with each int8 path's speed-up
//! over f32 on this machine; with `--encoder-only`, of the encoder alone on each question's
//! sequence (what upstream llama.cpp runs on an `--encoder-only` file).
//!
//! A frame is one request of `--questions` questions (the built-in calibration prompts, in
//! order, cycled), each answered from scratch: tokenization, sequence, forward pass,
//! softmax, answer. A round times `--iters` frames after one untimed warm-up frame and takes
//! the median of (frame time / questions); the result is the median of the rounds, with the
//! fastest and slowest round as its spread, marked noisy when (max - min) / median is above
//! 10%.

use crate::outcome::Outcome;
use std::io::Write as _;

use crate::ops::bench::{
    bench_engine, compare_engines, BenchConfig, BenchResult, Compared, NOISY_SPREAD,
};
use crate::ops::compute::{Compute, ComputePath};

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
    /// Rounds; the median of the round medians is reported, with the fastest and the slowest.
    #[arg(long, value_name = "N", default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..))]
    pub rounds: u32,
    /// Threads of one question's forward pass (same answers bit for bit).
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=16))]
    pub threads: u32,
    /// Time f32, q8 and q8-fast in turn, frame by frame, and print each int8 path's speed-up
    /// over f32 on this machine (a float model: an F16/F32 GGUF or a Laya directory).
    #[arg(long, conflicts_with_all = ["q8", "q8_fast"])]
    pub compare: bool,
    /// Time the encoder alone on each question's sequence (tokenization, embeddings, encoder
    /// layers, final norm), without the decision head, the scorer and the answer.
    #[arg(long)]
    pub encoder_only: bool,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Run `skyctl bench`.
pub fn run(args: Args) -> anyhow::Result<Outcome> {
    let cfg = BenchConfig {
        questions: args.questions,
        iters: args.iters,
        rounds: args.rounds,
        threads: args.threads,
        encoder_only: args.encoder_only,
    };
    if args.compare {
        return compare(&args, cfg);
    }
    let (engine, report) = args.path.path().open(&args.model)?;
    let mut err = std::io::stderr().lock();
    for note in &report.notes {
        writeln!(err, "note: {note}")?;
    }
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
            "{}{} [{}; int8 weights: {}, {} matrices, {} outlier columns]: {:.1} us/question ({}; median of {} rounds x {} frames of {} question(s); rounds {})\non {} ({}, int8 kernel {}), {} thread(s)",
            r.model,
            encoder_words(cfg),
            r.mode,
            r.weights,
            r.int8_matrices,
            r.outlier_columns,
            r.us_per_question,
            spread_words(&r),
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

/// `--compare`: f32, q8 and q8-fast of one float model, timed in turn.
fn compare(args: &Args, cfg: BenchConfig) -> anyhow::Result<Outcome> {
    let mut engines = Vec::with_capacity(3);
    let mut err = std::io::stderr().lock();
    for compute in [Compute::F32, Compute::Q8, Compute::Q8Fast] {
        let path = ComputePath {
            compute,
            no_calib: args.path.no_calib,
        };
        let (engine, report) = path.open(&args.model)?;
        // A Q8_0 file's f32 path runs in int8: there is no f32 to compare with.
        anyhow::ensure!(
            compute != Compute::F32 || report.int8.matrices == 0,
            "--compare needs a float model (an F16 or F32 GGUF, or a Laya directory): {} has int8 weights ({}), so its f32 path runs in int8; compare on the float file it was quantized from",
            args.model.display(),
            report.weights
        );
        for note in &report.notes {
            writeln!(err, "note ({}): {note}", compute.name())?;
        }
        engines.push((engine, report));
    }
    let compared = compare_engines(&engines, cfg)?;
    let mut out = std::io::stdout().lock();
    if args.json {
        let all = serde_json::json!({ "modes": compared });
        writeln!(out, "{all}")?;
        return Ok(Outcome::Success);
    }
    if let Some(first) = compared.first() {
        let r = &first.result;
        writeln!(
            out,
            "{}{} on {} ({}, int8 kernel {}), {} thread(s): f32, q8 and q8-fast in turn, frame by frame, {} rounds x {} frames of {} question(s); median of the round medians per question (spread: fastest-slowest round)",
            r.model,
            encoder_words(cfg),
            r.cpu,
            r.isa,
            r.int8_kernel,
            cfg.threads,
            cfg.rounds,
            cfg.iters,
            cfg.questions
        )?;
    }
    for c in &compared {
        writeln!(out, "{}", compared_line(c))?;
    }
    Ok(Outcome::Success)
}

/// What the text output says of an `--encoder-only` timing (nothing for whole questions).
fn encoder_words(cfg: BenchConfig) -> &'static str {
    if cfg.encoder_only {
        ", encoder only (no decision head)"
    } else {
        ""
    }
}

/// One mode's line of `--compare`'s text output.
fn compared_line(c: &Compared) -> String {
    let r = &c.result;
    let mut line = format!(
        "  {:8} {:9.1} us/question ({})",
        r.mode,
        r.us_per_question,
        spread_words(r)
    );
    if r.mode != "f32" {
        let rounds: Vec<String> = c.speedup_rounds.iter().map(|v| format!("{v:.2}")).collect();
        line.push_str(&format!(
            "  f32 / {} = {:.2}x (median of the rounds: {}; {} matrices in int8, {} outlier columns)",
            r.mode,
            c.speedup,
            rounds.join(", "),
            r.int8_matrices,
            r.outlier_columns
        ));
    }
    line
}

/// The spread of a timing in words: `rounds 321.0-335.5, spread 4.4%`, with `NOISY` when the
/// rounds are more than 10% apart (the figure is then more machine noise than speed).
fn spread_words(r: &BenchResult) -> String {
    let noisy = if r.spread > NOISY_SPREAD {
        ", NOISY: rerun on a quiet machine or with more --iters"
    } else {
        ""
    };
    format!(
        "rounds {:.1}-{:.1}, spread {:.1}%{noisy}",
        r.min_us,
        r.max_us,
        r.spread * 100.0
    )
}
