//! `skyctl tune MODEL --cases CASES.jsonl --tolerance T --out POLICY.toml`: the smallest type
//! policy whose answers stay within T of the f32 answers (search in [`crate::ops::tune`]).

use std::io::Write as _;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use sky_gguf::GgmlType;

use crate::ops::tune::{
    model_name, policy_text, read_cases, report_json, table, tune, Provenance, Spec, TuneError,
};
use crate::outcome::Outcome;

/// Arguments of `skyctl tune`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The model: a Laya checkpoint directory or a GGUF file with f32/f16/bf16 weights.
    pub model: PathBuf,
    /// The cases to tune on (JSONL: id, type, instructions, criteria, state).
    #[arg(long, value_name = "CASES.jsonl")]
    pub cases: PathBuf,
    /// Largest allowed |p - p_f32| over every option of every case.
    #[arg(long, value_name = "T")]
    pub tolerance: f64,
    /// Fraction of the tolerance held back: the search keeps the error on the tuned cases
    /// within (1 - margin) x T, a reserve for cases it has not seen (--holdout measures how
    /// they fare). 0 tunes to T itself.
    #[arg(long, value_name = "M", default_value_t = 0.5)]
    pub margin: f64,
    /// Largest allowed file size in bytes.
    #[arg(long, value_name = "BYTES")]
    pub budget: Option<u64>,
    /// The policy file to write (one `[policy.<name>]` table).
    #[arg(long, value_name = "POLICY.toml")]
    pub out: PathBuf,
    /// Also write the search report (JSON: one row per tensor, every step).
    #[arg(long, value_name = "REPORT.json")]
    pub report: Option<PathBuf>,
    /// Also write the tuned GGUF (what `skyctl quantize MODEL OUT --policy POLICY.toml` makes).
    #[arg(long, value_name = "OUT.gguf")]
    pub gguf: Option<PathBuf>,
    /// Held-out cases: the tuned file's error on them is reported, not tuned for.
    #[arg(long, value_name = "CASES.jsonl")]
    pub holdout: Option<PathBuf>,
    /// Candidate types, comma-separated.
    #[arg(
        long,
        value_name = "TYPES",
        default_value = "f16,bf16,q8_0",
        value_delimiter = ','
    )]
    pub types: Vec<String>,
    /// The table name in the policy file.
    #[arg(long, value_name = "NAME", default_value = "tuned")]
    pub name: String,
    /// The calibration (for the Q8_0 tensors' outlier columns).
    #[command(flatten)]
    pub calib: super::CalibrationFlags,
}

/// Run `skyctl tune`.
pub fn run(args: Args) -> anyhow::Result<Outcome> {
    let started = Instant::now();
    let types = args
        .types
        .iter()
        .map(|t| sky_laya::parse_type(t.trim()).context("--types"))
        .collect::<anyhow::Result<Vec<GgmlType>>>()?;
    // The search can take a minute: refuse an output folder that is not there, or an output
    // over what the search reads, before it.
    let mut reads = vec![
        (args.model.as_path(), "the model"),
        (args.cases.as_path(), "the cases file"),
    ];
    for (p, what) in [
        (&args.holdout, "the held-out cases file"),
        (&args.calib.calibration, "the calibration"),
        (&args.calib.prompts, "the prompts file"),
    ] {
        if let Some(p) = p {
            reads.push((p.as_path(), what));
        }
    }
    for out in std::iter::once(&args.out)
        .chain(&args.report)
        .chain(&args.gguf)
    {
        crate::ops::out_path::check("tune", out, &reads)?;
        let dir = out.parent().filter(|d| !d.as_os_str().is_empty());
        if let Some(d) = dir.filter(|d| !d.is_dir()) {
            anyhow::bail!(
                "cannot write {}: the folder {} does not exist",
                out.display(),
                d.display()
            );
        }
    }
    let cases = read_cases(&args.cases)?;
    let holdout = match &args.holdout {
        Some(p) => read_cases(p)?,
        None => Vec::new(),
    };
    let reference = crate::ops::quantize::reference_bytes(&args.model)?;
    let (calibration, notes) = args.calib.load(&args.model)?;
    let mut err = std::io::stderr().lock();
    for note in notes {
        writeln!(err, "note: {note}")?;
    }
    let name = model_name(&args.model);
    let spec = Spec {
        reference: &reference,
        name: &name,
        calibration: &calibration,
        outlier_ratio: args.calib.outlier_ratio,
        cases: &cases,
        holdout: &holdout,
        tolerance: args.tolerance,
        margin: args.margin,
        budget: args.budget,
        types: &types,
    };
    let tuned = match tune(&spec) {
        Ok(t) => t,
        Err(e) => {
            return match e.downcast_ref::<TuneError>() {
                Some(te @ TuneError::OverBudget { .. }) => {
                    writeln!(err, "skyctl: {name}: {te}")?;
                    Ok(Outcome::Failed)
                }
                _ => Err(e.context(format!("tuning {}", args.model.display()))),
            };
        }
    };
    let how = Provenance {
        model: &name,
        cases: &args.cases,
        holdout: args.holdout.as_deref(),
    };
    sky_fs::write(&args.out, policy_text(&tuned, &args.name, &how)?.as_bytes())
        .with_context(|| format!("writing {}", args.out.display()))?;
    if let Some(p) = &args.report {
        sky_fs::write(p, report_json(&tuned, &name).as_bytes())
            .with_context(|| format!("writing {}", p.display()))?;
    }
    if let Some(p) = &args.gguf {
        sky_fs::write(p, &tuned.file).with_context(|| format!("writing {}", p.display()))?;
    }
    let mut out = std::io::stdout().lock();
    out.write_all(table(&tuned).as_bytes())?;
    let mut wrote = vec![args.out.display().to_string()];
    wrote.extend(args.report.iter().map(|p| p.display().to_string()));
    wrote.extend(args.gguf.iter().map(|p| p.display().to_string()));
    writeln!(
        out,
        "wrote {} ({} full runs, {:.1} s)",
        wrote.join(", "),
        tuned.evaluations,
        started.elapsed().as_secs_f64()
    )?;
    Ok(Outcome::Success)
}
