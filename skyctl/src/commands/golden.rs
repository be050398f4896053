//! `skyctl golden`: generate the qwen35moe kernel goldens (PNGOLDEN1) and check a kernel
//! implementation's outputs against them.

use crate::outcome::Outcome;
use std::io::Write as _;
use std::path::PathBuf;

use anyhow::Context;
use serde_json::json;

use crate::ops::compute::{Compute, ComputePath};

/// Arguments of `skyctl golden`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(subcommand)]
    pub command: Command,
}

/// `skyctl golden` subcommands.
#[derive(clap::Subcommand, Debug)]
pub enum Command {
    /// Write every golden file of the seed's tables (inputs and reference outputs) into OUT_DIR.
    Gen {
        /// Directory to write into (created if missing).
        out_dir: PathBuf,
        /// Print one JSON document (files, sizes, BLAKE3 digests) instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Record the expected-outputs file of a model golden suite from this engine: run every
    /// case of CASES on MODEL and write one expected record per line (id, input_ids,
    /// markers, scores, temperature, probabilities), the file a `[[golden]] kind = "model"`
    /// suite's `expected` names. A later model or engine whose answers move beyond the
    /// suite's tolerance then fails `skyctl verify`.
    Record {
        /// The model: a .gguf file or a Laya checkpoint directory.
        model: PathBuf,
        /// The cases (JSONL: id, type, instructions, criteria, state).
        #[arg(long, value_name = "CASES.jsonl")]
        cases: PathBuf,
        /// The expected file to write (atomically).
        #[arg(long, value_name = "EXPECTED.jsonl")]
        out: PathBuf,
        /// The compute path to record with.
        #[arg(long, value_enum, default_value_t = Compute::F32)]
        compute: Compute,
        /// Also write each suite's tolerance into pipeline.toml, fitted to the error measured
        /// on its variant and compute path: 2x the measured max |dp|, rounded up to one
        /// significant digit, at least 1e-4, at most 1. Without it, the suites of the
        /// nearest pipeline.toml that use OUT are measured and reported, not changed.
        #[arg(long)]
        set_tolerance: bool,
    },
    /// Compare a kernel implementation's output files with the goldens; exit 1 on any failure.
    ///
    /// f32 files pass when every element has |c − g| / max(|g|, floor) ≤ rtol, with
    /// floor = 0.01 × the file's largest |g| and rtol = 1e-3 (1e-4 for the MoE weights and
    /// gate); the top-k indices must be equal; NaN/Inf or a missing, malformed or wrongly sized
    /// file fails. Exit 2 when the goldens themselves are unusable.
    Check {
        /// Directory holding the goldens (as written by `skyctl golden gen`).
        golden_dir: PathBuf,
        /// Directory holding the implementation's output files (same names and format).
        candidate_dir: PathBuf,
        /// Print the report as one JSON document instead of a table.
        #[arg(long)]
        json: bool,
    },
}

/// Run `skyctl golden`.
pub fn run(args: Args) -> anyhow::Result<Outcome> {
    match args.command {
        Command::Gen { out_dir, json } => {
            crate::ops::out_path::check("golden gen", &out_dir, &[])?;
            let files = sky_kernels::generate(&out_dir)?;
            let digest = sky_kernels::set_digest(&files);
            let total: u64 = files.iter().map(|f| f.bytes).sum();
            let out = if json {
                let doc = json!({ "out_dir": out_dir, "set_digest": digest, "bytes": total, "files": files });
                format!("{}\n", serde_json::to_string_pretty(&doc)?)
            } else {
                format!(
                    "wrote {} golden files ({total} bytes) to {}\nset digest {digest}\n",
                    files.len(),
                    out_dir.display()
                )
            };
            emit(&out)?;
            Ok(Outcome::Success)
        }
        Command::Record {
            model,
            cases,
            out,
            compute,
            set_tolerance,
        } => {
            crate::ops::out_path::check(
                "golden record",
                &out,
                &[(&model, "the model"), (&cases, "the cases file")],
            )?;
            let (engine, report) = ComputePath::new(compute).open(&model)?;
            let text = sky_fs::read_to_string(&cases, sky_fs::CASES)?;
            let case_list = sky_infer::golden::parse_cases(&text)
                .with_context(|| format!("`{}`", cases.display()))?;
            let lines = sky_infer::golden::record(&engine, &case_list)
                .with_context(|| format!("`{}`", cases.display()))?;
            let mut bytes = Vec::new();
            for l in &lines {
                serde_json::to_writer(&mut bytes, l)?;
                bytes.push(b'\n');
            }
            sky_fs::write(&out, &bytes).with_context(|| format!("writing `{}`", out.display()))?;
            emit(&format!(
                "wrote {}: {} cases recorded from {} ({} compute)\n",
                out.display(),
                lines.len(),
                model.display(),
                report.mode
            ))?;
            fit_suites(&out, set_tolerance)?;
            Ok(Outcome::Success)
        }
        Command::Check {
            golden_dir,
            candidate_dir,
            json,
        } => {
            let report = sky_kernels::check(&golden_dir, &candidate_dir)?;
            let out = if json {
                format!("{}\n", serde_json::to_string_pretty(&report)?)
            } else {
                crate::ops::kernels::render_check(&report)
            };
            emit(&out)?;
            Ok(if report.passed {
                Outcome::Success
            } else {
                Outcome::Failed
            })
        }
    }
}

/// Measure the model suites of the nearest pipeline.toml whose expected file is `out`, print
/// each one's error and fitted tolerance, and write those when `set`.
fn fit_suites(out: &std::path::Path, set: bool) -> anyhow::Result<()> {
    let cwd = std::env::current_dir()?;
    let file = match crate::pipeline::ManifestFile::find(&cwd, None) {
        Ok(f) => f,
        Err(e) if set => {
            return Err(e.context("--set-tolerance writes into the project's pipeline.toml"))
        }
        Err(_) => return Ok(()),
    };
    let (path, text) = (file.root.join(&file.manifest_rel), file.text.clone());
    let shown = file.shown.clone();
    let pipe = crate::pipeline::Pipeline::from_file(file, None, crate::kinds::planners())?;
    let target = std::path::absolute(out)?;
    let uses_out: Vec<String> = pipe
        .manifest
        .golden
        .iter()
        .filter(|g| {
            g.expected
                .as_ref()
                .is_some_and(|e| pipe.ws.root.join(e.get_ref()) == target)
        })
        .map(|g| g.name.get_ref().clone())
        .collect();
    if uses_out.is_empty() {
        if set {
            anyhow::bail!(
                "--set-tolerance: no [[golden]] suite of `{}` has expected = `{}`",
                shown.display(),
                out.display()
            );
        }
        return Ok(());
    }
    let keep = |s: &str| uses_out.iter().any(|u| u == s);
    let fits = match crate::pipeline::fit::measure_and_set(
        &pipe,
        &crate::kinds::registry(),
        &path,
        &text,
        &keep,
        set,
    ) {
        Ok(f) => f,
        Err(e) if !set => {
            emit(&format!(
                "note: the suites using it were not measured: {e:#}\n"
            ))?;
            return Ok(());
        }
        Err(e) => return Err(e),
    };
    let mut text = format!(
        "measured on the suites' variants and paths (fitted: {}):\n",
        crate::pipeline::fit::RULE
    );
    for m in &fits {
        text.push_str(&format!("  {}\n", m.line()));
    }
    text.push_str(&if set {
        format!("wrote the fitted tolerances into {}\n", shown.display())
    } else {
        "--set-tolerance writes the fitted tolerances into pipeline.toml\n".to_string()
    });
    emit(&text)
}

/// Write to stdout; a closed pipe (`... | head`) is not an error of ours.
fn emit(out: &str) -> anyhow::Result<()> {
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(out.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(()),
    }
}
