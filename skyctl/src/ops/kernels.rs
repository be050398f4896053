//! Kernel goldens: the generators this build has, and the check report as text, shared by
//! `skyctl golden` and the kernel-golden nodes.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};
use sky_kernels::{CheckReport, Status, Tolerance};

/// A kernel golden generator.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Generator {
    /// The qwen35moe kernel set ([`sky_kernels::generate`]).
    #[default]
    #[serde(rename = "qwen35moe")]
    Qwen35moe,
}

impl Generator {
    /// Every generator.
    pub const ALL: [Generator; 1] = [Generator::Qwen35moe];

    /// Its name in `pipeline.toml`.
    pub fn name(self) -> &'static str {
        match self {
            Generator::Qwen35moe => "qwen35moe",
        }
    }

    /// The generator named `name`.
    pub fn parse(name: &str) -> Option<Generator> {
        Generator::ALL.into_iter().find(|g| g.name() == name)
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
