//! `skyctl quantize MODEL OUT.gguf [--calibration FILE | --prompts FILE]`: the calibrated
//! Q8_0 variant (encoder matrices Q8_0, token embeddings F16, head F32) with its outlier
//! columns recorded in `skycmd.quant.*` metadata.

use crate::outcome::Outcome;
use std::io::Write as _;
use std::path::PathBuf;

/// Arguments of `skyctl quantize`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The model: a Laya checkpoint directory or a float GGUF (`skyctl convert --type f32`).
    pub model: PathBuf,
    /// The Q8_0 GGUF to write (atomically).
    pub out: PathBuf,
    /// The calibration (for the Q8_0 tensors' outlier columns).
    #[command(flatten)]
    pub calib: super::CalibrationFlags,
    /// Choose Q8_0 block scales that store the outlier weights exactly (better for readers
    /// that ignore the outlier metadata, such as llama.cpp; worse for skyctl).
    #[arg(long)]
    pub exact_cols: bool,
    /// A policy file (one `[policy.<name>]` table, as `skyctl tune` writes it) instead of the
    /// Q8_0 variant's types; its Q8_0 tensors get outlier columns from the calibration.
    #[arg(long, value_name = "POLICY.toml")]
    pub policy: Option<PathBuf>,
}

/// Run `skyctl quantize`.
pub fn run(args: Args) -> anyhow::Result<Outcome> {
    let mut reads = vec![(args.model.as_path(), "the model")];
    for (p, what) in [
        (&args.policy, "the policy file"),
        (&args.calib.calibration, "the calibration"),
        (&args.calib.prompts, "the prompts file"),
    ] {
        if let Some(p) = p {
            reads.push((p.as_path(), what));
        }
    }
    crate::ops::out_path::check("quantize", &args.out, &reads)?;
    let (calib, notes) = args.calib.load(&args.model)?;
    let mut err = std::io::stderr().lock();
    for note in notes {
        writeln!(err, "note: {note}")?;
    }
    let reference = crate::ops::quantize::reference_bytes(&args.model)?;
    let q = crate::ops::quantize::quantize_to(
        &reference,
        &args.model,
        &calib,
        args.calib.outlier_ratio,
        args.exact_cols,
        args.policy.as_deref(),
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
