//! `skyctl calibrate MODEL OUT.json [--prompts FILE]`: run the f32 model over a prompt set and
//! write the max |x| per input channel of every matrix product (deterministic JSON).

use crate::outcome::Outcome;
use std::io::Write as _;
use std::path::PathBuf;

use anyhow::Context;

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

/// Run `skyctl calibrate`.
pub fn run(args: Args) -> anyhow::Result<Outcome> {
    let mut reads = vec![(args.model.as_path(), "the model")];
    if let Some(p) = &args.prompts {
        reads.push((p.as_path(), "the prompts file"));
    }
    crate::ops::out_path::check("calibrate", &args.out, &reads)?;
    let run = crate::ops::calibrate::calibrate_model(&args.model, args.prompts.as_deref())?;
    sky_fs::write(&args.out, run.calibration.to_json().as_bytes())
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
    Ok(Outcome::Success)
}
