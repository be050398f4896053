//! `golden_kernels`: judge a kernel harness's outputs against the goldens with
//! [`sky_kernels::check`].
//!
//! Inputs: the golden directory, then the harness output directory. Params: `suite` (the
//! suite name for the report) and `path` (`cpu` for the built-in harness, `harness` for a
//! shell one; informative). Unusable goldens are a node error. Otherwise the report is
//! written (pretty JSON: `suite`, `kind`, `path`, `files`, `files_failed`, `failing`,
//! `max_abs_err` and `worst` of the worst file, `passed`, and the full `check` report with
//! workspace-relative paths), the check table goes to the node log, and a report that does not
//! pass fails the node with a one-line summary naming the failing files.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};
use serde_json::json;
use sky_kernels::{CheckReport, FileReport, Status};

use super::{Inputs, Role};
use crate::ops::golden_table;
use sky_dag::{Kind, StageCtx};

/// The `golden_kernels` kind.
pub struct GoldenKernels;

/// The golden directory.
pub const GOLD: Role = super::kernel_harness::GOLD;
/// The harness's output directory (`kernel_harness`'s output).
pub const CANDIDATE: Role = Role {
    name: "candidate",
    what: "harness output directory",
};

impl Inputs for GoldenKernels {
    const INPUTS: &'static [Role] = &[GOLD, CANDIDATE];
}

/// Which harness produced the outputs checked (for the report).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Harness {
    /// The built-in CPU references.
    Cpu,
    /// An external harness command.
    Harness,
}

impl Harness {
    fn name(self) -> &'static str {
        match self {
            Harness::Cpu => "cpu",
            Harness::Harness => "harness",
        }
    }
}

/// Parameters of a `golden_kernels` node.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Params {
    /// The suite name.
    pub suite: String,
    /// Which harness ran.
    pub path: Harness,
}

impl Kind for GoldenKernels {
    const NAME: &'static str = "golden_kernels";
    const VERSION: u32 = 1;
    type Params = Params;

    fn run(&self, p: Params, ctx: &mut StageCtx<'_>) -> anyhow::Result<()> {
        let node = ctx.node;
        let (gold, cand) = (GOLD.get(ctx)?, CANDIDATE.get(ctx)?);
        let [out] = ctx.outputs.as_slice() else {
            bail!(
                "node `{node}`: expected one output (the report), got {}",
                ctx.outputs.len()
            );
        };
        let suite = p.suite;
        let path = p.path.name();
        let mut check = sky_kernels::check(&gold.path, &cand.path).with_context(|| {
            format!("node `{node}`: the goldens in `{}` are unusable", gold.rel)
        })?;
        relativize(&mut check, (&gold.path, &gold.rel), (&cand.path, &cand.rel));
        let worst = worst_file(&check);
        let report = json!({
            "suite": suite,
            "kind": "kernels",
            "path": path,
            "files": check.files_checked,
            "files_failed": check.files_failed,
            "failing": check.failing(),
            "max_abs_err": worst.and_then(|f| f.max_abs_err),
            "worst": worst.map(|f| match &f.worst {
                Some(w) => format!("{}[{}]", f.name, w.index),
                None => f.name.clone(),
            }),
            "passed": check.passed,
            "check": check,
        });
        let mut bytes = serde_json::to_vec_pretty(&report)?;
        bytes.push(b'\n');
        sky_fs::write(out, &bytes)
            .with_context(|| format!("node `{node}`: writing `{}`", out.display()))?;
        ctx.log
            .extend_from_slice(crate::ops::kernels::render_check(&check).as_bytes());
        if !check.passed {
            bail!("{}", golden_table::failure_summary(&report));
        }
        Ok(())
    }
}

/// The file to show: the failing one with the largest relative error (unreadable or
/// non-finite files first), else the passing one with the largest relative error; `None` when
/// every file matches exactly.
fn worst_file(check: &CheckReport) -> Option<&FileReport> {
    let rank = |f: &FileReport| {
        (
            f.status == Status::Fail,
            f.problem.is_some() || f.non_finite > 0,
            f.max_rel_err.unwrap_or(0.0),
        )
    };
    let best = check.files.iter().max_by(|a, b| {
        let (x, y) = (rank(a), rank(b));
        (x.0, x.1).cmp(&(y.0, y.1)).then(x.2.total_cmp(&y.2))
    })?;
    let r = rank(best);
    (r.0 || r.2 > 0.0).then_some(best)
}

/// Absolute paths would make the report depend on where the workspace is: use the
/// workspace-relative ones.
fn relativize(check: &mut CheckReport, gold: (&Path, &str), cand: (&Path, &str)) {
    check.golden_dir = PathBuf::from(gold.1);
    check.candidate_dir = PathBuf::from(cand.1);
    let swaps = [
        (gold.0.display().to_string(), gold.1),
        (cand.0.display().to_string(), cand.1),
    ];
    for f in &mut check.files {
        for text in [&mut f.problem, &mut f.note].into_iter().flatten() {
            for (abs, rel) in &swaps {
                *text = text.replace(abs.as_str(), rel);
            }
        }
    }
    for text in &mut check.notes {
        for (abs, rel) in &swaps {
            *text = text.replace(abs.as_str(), rel);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sky_dag::kind::DynKind;
    use sky_dag::StageInput;

    fn run(dir: &Path) -> (anyhow::Result<()>, String, serde_json::Value) {
        let params = json!({"suite": "k", "path": "harness"});
        let input = |rel: &str, role: Role| StageInput {
            rel: rel.into(),
            path: dir.join(rel),
            dir: true,
            role: role.name.into(),
        };
        let mut log = Vec::new();
        let mut ctx = StageCtx {
            node: "golden/k",
            workspace: dir,
            inputs: vec![input("gold", GOLD), input("out", CANDIDATE)],
            outputs: vec![dir.join("k.json")],
            log: &mut log,
        };
        let r = DynKind::run(&GoldenKernels, &params, &mut ctx);
        let rep = std::fs::read(dir.join("k.json"))
            .map(|b| serde_json::from_slice(&b).unwrap())
            .unwrap_or_default();
        (r, String::from_utf8_lossy(&log).into_owned(), rep)
    }

    #[test]
    fn exact_outputs_pass_and_broken_ones_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let (gold, out) = (dir.path().join("gold"), dir.path().join("out"));
        sky_kernels::generate(&gold).unwrap();
        sky_kernels::run_cpu(&gold, &out).unwrap();
        let (r, log, rep) = run(dir.path());
        r.unwrap();
        assert!(log.contains("PASS: all 19 output files"), "{log}");
        assert_eq!(rep["passed"], true);
        assert_eq!(rep["files"], 19);
        assert_eq!(
            rep["worst"],
            serde_json::Value::Null,
            "the CPU harness is exact"
        );
        assert_eq!(rep["check"]["golden_dir"], "gold");
        let first = std::fs::read(dir.path().join("k.json")).unwrap();

        // Same result from another folder: same bytes.
        let other = tempfile::tempdir().unwrap();
        sky_kernels::generate(&other.path().join("gold")).unwrap();
        sky_kernels::run_cpu(&other.path().join("gold"), &other.path().join("out")).unwrap();
        run(other.path()).0.unwrap();
        assert_eq!(std::fs::read(other.path().join("k.json")).unwrap(), first);

        // One element of one f32 file off; one file missing.
        let y = sky_kernels::format::file_path(&out, "ssm_recur_y");
        let mut bytes = std::fs::read(&y).unwrap();
        let n = bytes.len();
        bytes[n - 1] ^= 0x40;
        std::fs::write(&y, bytes).unwrap();
        std::fs::remove_file(sky_kernels::format::file_path(&out, "rope_k_pos7")).unwrap();
        let (r, log, rep) = run(dir.path());
        let e = r.unwrap_err().to_string();
        assert!(
            e.contains("2 of 19 output files failed")
                && e.contains("ssm_recur_y")
                && e.contains("rope_k_pos7"),
            "{e}"
        );
        assert_eq!(rep["passed"], false);
        assert_eq!(rep["failing"], json!(["rope_k_pos7", "ssm_recur_y"]));
        assert!(log.contains("FAIL: 2 of 19"), "{log}");
        let text = serde_json::to_string(&rep).unwrap();
        assert!(
            !text.contains(&dir.path().display().to_string()),
            "no absolute paths: {text}"
        );
        assert!(
            text.contains("missing: out/rope_k_pos7.bin does not exist"),
            "{text}"
        );
    }

    #[test]
    fn unusable_goldens_are_an_error() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("gold")).unwrap();
        std::fs::create_dir_all(dir.path().join("out")).unwrap();
        let e = format!("{:#}", run(dir.path()).0.unwrap_err());
        assert!(e.contains("the goldens in `gold` are unusable"), "{e}");
    }
}
