//! `skyctl calibrate MODEL OUT.json [--prompts FILE]`: run the f32 model over a prompt set and
//! write the max |x| per input channel of every matrix product (deterministic JSON).

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use sky_infer::calibrate::{calibrate, parse_prompts, CalibrationRun};
use sky_quant::calibration_prompts;

use crate::engine::fsutil::write_atomic;

/// Arguments of `skyctl calibrate`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The model: a Laya checkpoint directory or a float GGUF file.
    pub model: PathBuf,
    /// The calibration file to write (JSON, atomically).
    pub out: PathBuf,
    /// A JSONL file of decision requests (id, type, instructions, criteria, state) to
    /// calibrate on, instead of the twelve built-in prompts.
    #[arg(long, value_name = "FILE")]
    pub prompts: Option<PathBuf>,
}

/// Calibrate `model` on `prompts` (a JSONL file) or the built-in set; what [`run`] and the
/// `calibrate` node share.
pub fn calibrate_model(model: &Path, prompts: Option<&Path>) -> anyhow::Result<CalibrationRun> {
    let set = match prompts {
        Some(p) => {
            let text = std::fs::read_to_string(p)
                .with_context(|| format!("reading prompt set {}", p.display()))?;
            parse_prompts(&text).with_context(|| format!("prompt set {}", p.display()))?
        }
        None => calibration_prompts(),
    };
    let engine =
        sky_infer::load::open(model).with_context(|| format!("loading {}", model.display()))?;
    let run =
        calibrate(&engine, &set).with_context(|| format!("calibrating {}", model.display()))?;
    Ok(run)
}

/// Run `skyctl calibrate`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let run = calibrate_model(&args.model, args.prompts.as_deref())?;
    write_atomic(&args.out, run.calibration.to_json().as_bytes(), false)
        .with_context(|| format!("writing {}", args.out.display()))?;
    let mut err = std::io::stderr().lock();
    for note in run.notes() {
        writeln!(err, "note: {note}")?;
    }
    writeln!(
        std::io::stdout().lock(),
        "{}: {} sites from {} prompts ({} tokens), blake3 {}",
        args.out.display(),
        run.calibration.len(),
        run.prompts,
        run.tokens,
        run.calibration.digest()
    )?;
    Ok(ExitCode::SUCCESS)
}
