//! `skyctl golden`: generate the qwen35moe kernel goldens (PNGOLDEN1) and check a kernel
//! implementation's outputs against them.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use serde_json::json;
use sky_kernels::{CheckReport, Status, Tolerance};

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
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    match args.command {
        Command::Gen { out_dir, json } => {
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
            Ok(ExitCode::SUCCESS)
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
                render_check(&report)
            };
            emit(&out)?;
            Ok(if report.passed {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(crate::cli::EXIT_FAILED)
            })
        }
    }
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

/// The check report as a table: one line per output file, then problems and notes, then the
/// verdict. Public so `skyctl verify` can print the same thing.
pub fn render_check(report: &CheckReport) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<24} {:<14} {:>7} {:>10} {:>10} {:>6}  {:<26} status",
        "file", "kernel", "elems", "max_abs", "max_rel", "tol", "worst at"
    );
    for f in &report.files {
        let num = |v: Option<f64>| v.map_or("-".to_string(), |x| format!("{x:.3e}"));
        let tol = match f.tolerance {
            Tolerance::Exact => "exact".to_string(),
            Tolerance::Relative { rtol } => format!("{rtol:.0e}"),
        };
        let worst = f
            .worst
            .as_ref()
            .map_or("-".to_string(), |w| w.coords.to_string());
        let status = match f.status {
            Status::Pass => "pass".to_string(),
            Status::Fail if f.non_finite > 0 => format!("FAIL ({} NaN/Inf)", f.non_finite),
            Status::Fail if f.problem.is_some() => "FAIL (unreadable)".to_string(),
            Status::Fail => format!("FAIL ({} over)", f.over_tolerance),
        };
        let _ = writeln!(
            s,
            "{:<24} {:<14} {:>7} {:>10} {:>10} {:>6}  {:<26} {status}",
            f.name,
            f.kernel.as_str(),
            f.elements,
            num(f.max_abs_err),
            num(f.max_rel_err),
            tol,
            worst
        );
    }
    for f in report.files.iter().filter(|f| f.problem.is_some()) {
        let _ = writeln!(
            s,
            "{}: {}",
            f.name,
            f.problem.as_deref().unwrap_or_default()
        );
    }
    for f in report.files.iter().filter(|f| f.status == Status::Fail) {
        if let Some(w) = &f.worst {
            let _ = writeln!(
                s,
                "{}: worst at index {} ({}): golden {} candidate {}",
                f.name, w.index, w.coords, w.golden, w.candidate
            );
        }
    }
    for note in &report.notes {
        let _ = writeln!(s, "note: {note}");
    }
    let _ = if report.passed {
        writeln!(
            s,
            "PASS: all {} output files within tolerance",
            report.files_checked
        )
    } else {
        writeln!(
            s,
            "FAIL: {} of {} output files failed",
            report.files_failed, report.files_checked
        )
    };
    s
}
