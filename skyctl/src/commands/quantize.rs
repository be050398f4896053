//! `skyctl quantize MODEL OUT.gguf [--calibration FILE | --prompts FILE]`: the calibrated
//! Q8_0 variant (encoder matrices Q8_0, token embeddings F16, head F32) with its outlier
//! columns recorded in `skycmd.quant.*` metadata.

use crate::outcome::Outcome;
use std::io::Write as _;
use std::path::PathBuf;

use anyhow::Context;
use sky_infer::int8::OUTLIER_RATIO;
use sky_quant::Calibration;

/// Arguments of `skyctl quantize`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The model: a Laya checkpoint directory or a float GGUF (`skyctl convert --type f32`).
    pub model: PathBuf,
    /// The Q8_0 GGUF to write (atomically).
    pub out: PathBuf,
    /// A calibration file from `skyctl calibrate`.
    #[arg(long, value_name = "FILE", conflicts_with = "prompts")]
    pub calibration: Option<PathBuf>,
    /// Calibrate on this JSONL prompt set (default: the twelve built-in prompts).
    #[arg(long, value_name = "FILE")]
    pub prompts: Option<PathBuf>,
    /// A channel is an outlier when its calibrated max |x| exceeds this times the median.
    #[arg(long, value_name = "R", default_value_t = OUTLIER_RATIO)]
    pub outlier_ratio: f32,
    /// Choose Q8_0 block scales that store the outlier weights exactly (better for readers
    /// that ignore the outlier metadata, such as llama.cpp; worse for skyctl).
    #[arg(long)]
    pub exact_cols: bool,
}

/// Run `skyctl quantize`.
pub fn run(args: Args) -> anyhow::Result<Outcome> {
    let mut err = std::io::stderr().lock();
    let calib = match &args.calibration {
        Some(p) => {
            let text = std::fs::read_to_string(p)
                .with_context(|| format!("reading calibration {}", p.display()))?;
            Calibration::from_json(&text).with_context(|| format!("calibration {}", p.display()))?
        }
        None => {
            let run = crate::ops::calibrate::calibrate_model(&args.model, args.prompts.as_deref())?;
            if args.prompts.is_none() {
                writeln!(
                    err,
                    "note: no calibration given: calibrated on the {} built-in prompts",
                    run.prompts
                )?;
            }
            for note in run.notes() {
                writeln!(err, "note: {note}")?;
            }
            run.calibration
        }
    };
    let reference = crate::ops::quantize::reference_bytes(&args.model)?;
    let q = crate::ops::quantize::quantize_to(
        &reference,
        &args.model,
        &calib,
        args.outlier_ratio,
        args.exact_cols,
        &args.out,
    )?;
    writeln!(
        std::io::stdout().lock(),
        "{}: {} Q8_0 matrices, {} outlier columns kept in f32, {} bytes",
        args.out.display(),
        q.q8_tensors,
        q.outlier_columns,
        q.bytes.len()
    )?;
    Ok(Outcome::Success)
}
