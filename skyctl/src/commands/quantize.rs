//! `skyctl quantize MODEL OUT.gguf [--calibration FILE | --prompts FILE]`: the calibrated
//! Q8_0 variant (encoder matrices Q8_0, token embeddings F16, head F32) with its outlier
//! columns recorded in `skycmd.quant.*` metadata.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use sky_gguf::GgufFile;
use sky_infer::int8::{
    f32_reference_from_dir, q8_policy, quantize_gguf, QuantizedFile, OUTLIER_RATIO,
};
use sky_quant::Calibration;

use crate::engine::fsutil::write_atomic;

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

/// The float reference GGUF bytes of a model: the file itself, or a Laya directory converted
/// to F32 in memory.
pub fn reference_bytes(model: &Path) -> anyhow::Result<Vec<u8>> {
    if model.is_dir() {
        Ok(f32_reference_from_dir(model)?)
    } else {
        std::fs::read(model).with_context(|| format!("reading {}", model.display()))
    }
}

/// Quantize `reference` (GGUF bytes) with `calib` and write `out` atomically; what [`run`]
/// and the `quantize` node share.
pub fn quantize_to(
    reference: &[u8],
    what: &Path,
    calib: &Calibration,
    ratio: f32,
    exact_cols: bool,
    out: &Path,
) -> anyhow::Result<QuantizedFile> {
    let f = GgufFile::parse(reference).with_context(|| format!("reading {}", what.display()))?;
    let q = quantize_gguf(&f, calib, ratio, &q8_policy(), exact_cols)
        .with_context(|| format!("quantizing {}", what.display()))?;
    write_atomic(out, &q.bytes, false).with_context(|| format!("writing {}", out.display()))?;
    Ok(q)
}

/// Run `skyctl quantize`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let mut err = std::io::stderr().lock();
    let calib = match &args.calibration {
        Some(p) => {
            let text = std::fs::read_to_string(p)
                .with_context(|| format!("reading calibration {}", p.display()))?;
            Calibration::from_json(&text).with_context(|| format!("calibration {}", p.display()))?
        }
        None => {
            let run = super::calibrate::calibrate_model(&args.model, args.prompts.as_deref())?;
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
    let reference = reference_bytes(&args.model)?;
    let q = quantize_to(
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
    Ok(ExitCode::SUCCESS)
}
