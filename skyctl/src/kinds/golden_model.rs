//! `golden_model`: run a model golden suite with sky-infer and judge it.
//!
//! Inputs ([`GoldenModel::INPUTS`]): the model (a GGUF file or a Laya checkpoint directory),
//! the cases JSONL, the expected JSONL. Params (planned here from the suite): `tolerance` (max |p - p_expected|), `suite`
//! (the suite name, so the report says what it is; the node id's `golden/` suffix when
//! absent), `variant` (informative), `path` (the compute path: `f32`, the default, or the
//! int8 paths `q8` / `q8-fast`).
//!
//! Output: the suite report as pretty JSON (`suite`, `kind`, `path`, `model`, `cases`,
//! `max_abs_err`, `worst_case`, `mismatched_ids`, `unrecorded_ids`, `fix` (the `skyctl golden
//! record` command that records the expected file again), `failures`, `tolerance`, `passed`). A suite
//! that does not pass fails the node with a one-line summary; the report file is written
//! first, so `skyctl verify` still shows it, and the table row goes to the node log.

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::{InputRole as _, PipelineKind, Role};
use crate::ops::compute::{Compute, ComputePath};
use crate::ops::golden_table;
use crate::ops::names::Variant;
use crate::pipeline::plan::{model_file, GoldenPlan, Planned, Planner};
use crate::pipeline::schema::GoldenKind;
use sky_dag::{Kind, NodeSpec, StageCtx};

/// The `golden_model` kind.
pub struct GoldenModel;

/// The model: a GGUF file or a Laya checkpoint directory.
pub const MODEL: Role = Role {
    name: "model",
    what: "model",
};
/// The cases (JSONL).
pub const CASES: Role = Role {
    name: "cases",
    what: "cases JSONL",
};
/// The expected answers (JSONL).
pub const EXPECTED: Role = Role {
    name: "expected",
    what: "expected JSONL",
};

impl PipelineKind for GoldenModel {
    const PLANNER: Option<Planner> = Some(Planner::Golden(plan));
    const INPUTS: &'static [Role] = &[MODEL, CASES, EXPECTED];
}

/// A `kind = "model"` suite: one node checking the model's variant file.
fn plan(cx: &GoldenPlan<'_>, out: &mut Planned) -> sky_dag::Result<()> {
    let (m, g) = (cx.m, cx.golden);
    if g.kind != GoldenKind::Model {
        return Ok(());
    }
    let model = g
        .model
        .as_ref()
        .map(|x| x.get_ref().clone())
        .unwrap_or_default();
    let variant = g
        .variant
        .as_ref()
        .map(|v| *v.get_ref())
        .unwrap_or(Variant::F16);
    let record_from = match m.model.iter().find(|x| x.name.get_ref() == &model) {
        Some(x) => match (&x.source, &x.export) {
            (Some(s), _) => s.get_ref().clone(),
            // The export command's output directory is the checkpoint.
            (None, Some(e)) => m
                .command
                .iter()
                .find(|c| c.name.get_ref() == e.get_ref())
                .and_then(|c| c.outputs.first())
                .map(|o| o.get_ref().trim_end_matches('/').to_string())
                .unwrap_or_default(),
            (None, None) => String::new(),
        },
        None => String::new(),
    };
    let params = Params {
        record_from,
        tolerance: g.tolerance.as_ref().map_or(1e-3, |t| *t.get_ref()),
        variant,
        suite: g.name.get_ref().clone(),
        // Checked with the manifest: an unknown name was refused there.
        path: g
            .compute
            .as_ref()
            .and_then(|c| Compute::parse(c.get_ref()).ok())
            .unwrap_or_default(),
    };
    let mut node = NodeSpec::new::<GoldenModel>(&cx.id, &params, cx.span.clone())?
        .group(&model)
        .input_role(MODEL, model_file(m, &model, variant), cx.span.clone());
    // A suite of a file the release ships must pass for the release to be written; any other
    // suite fails the build but does not hold back the release.
    node.gates_release = m
        .model
        .iter()
        .any(|x| x.name.get_ref() == &model && x.publish.iter().any(|p| *p.get_ref() == variant));
    for (role, f) in [(CASES, &g.cases), (EXPECTED, &g.expected)] {
        if let Some(f) = f {
            node = node.input_role(role, f.get_ref(), f.span());
        }
    }
    out.node(node.output(cx.report(), cx.span.clone()));
    Ok(())
}

/// Parameters of a `golden_model` node.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Params {
    /// Largest allowed absolute probability error.
    pub tolerance: f64,
    /// The model variant checked (its file is the [`MODEL`] input; named here for the key).
    pub variant: Variant,
    /// The suite name.
    pub suite: String,
    /// The compute path.
    pub path: Compute,
    /// The checkpoint the suite's expected file is recorded from: the fix a failing report
    /// names (`skyctl golden record ...`) starts from it. Empty: no fix is named.
    #[serde(default)]
    pub record_from: String,
}

impl Kind for GoldenModel {
    const NAME: &'static str = "golden_model";
    const VERSION: u32 = 3;
    type Params = Params;

    fn run(&self, p: Params, ctx: &mut StageCtx<'_>) -> anyhow::Result<()> {
        let node = ctx.node;
        let params = p;
        if !(params.tolerance.is_finite() && params.tolerance >= 0.0) {
            bail!(
                "node `{node}`: tolerance must be a number >= 0, got {}",
                params.tolerance
            );
        }
        let suite = params.suite.clone();
        let (model, cases, expected) = (MODEL.get(ctx)?, CASES.get(ctx)?, EXPECTED.get(ctx)?);
        let [out] = ctx.outputs.as_slice() else {
            bail!(
                "node `{node}`: expected one output (the report), got {}",
                ctx.outputs.len()
            );
        };
        let read = |rel: &str, path: &std::path::Path| {
            sky_fs::read_to_string(path, sky_fs::CASES)
                .with_context(|| format!("node `{node}`: reading `{rel}`"))
        };
        let case_list = sky_infer::golden::parse_cases(&read(&cases.rel, &cases.path)?)
            .with_context(|| format!("node `{node}`: `{}`", cases.rel))?;
        let want = sky_infer::golden::parse_expected(&read(&expected.rel, &expected.path)?)
            .with_context(|| format!("node `{node}`: `{}`", expected.rel))?;
        let mut engine = load(&model.path, params.path, ctx.log).with_context(|| {
            format!(
                "node `{node}`: loading `{}` on the {} path",
                model.rel,
                params.path.name()
            )
        })?;
        engine.stop = Some(crate::ops::stop_requested);
        let outputs = sky_infer::golden::run_cases(&engine, &case_list);
        if let Some(sig) = sky_dag::interrupt::requested() {
            // The cases after the signal did not run: no report, not a golden failure.
            bail!("interrupted by signal {sig}");
        }
        let r = sky_infer::golden::compare(&outputs, &want, params.tolerance);
        let fix = (!params.record_from.is_empty()).then(|| {
            format!(
                "skyctl golden record {} --cases {} --out {} --set-tolerance",
                params.record_from, cases.rel, expected.rel
            )
        });
        let report = json!({
            "suite": suite,
            "kind": "model",
            "path": params.path.name(),
            "model": model.rel,
            "cases": r.cases,
            "max_abs_err": r.max_abs_err,
            "worst_case": r.worst_case,
            "mismatched_ids": r.mismatched_ids,
            "unrecorded_ids": r.unrecorded_ids,
            "fix": fix,
            "failures": r.failures,
            "tolerance": r.tolerance,
            "passed": r.passed,
        });
        let mut bytes = serde_json::to_vec_pretty(&report)?;
        bytes.push(b'\n');
        sky_fs::write(out, &bytes)
            .with_context(|| format!("node `{node}`: writing `{}`", out.display()))?;
        let row = golden_table::Row::from_report(&report);
        ctx.log
            .extend_from_slice(golden_table::render(std::slice::from_ref(&row)).as_bytes());
        for f in &r.failures {
            ctx.log.extend_from_slice(format!("{f}\n").as_bytes());
        }
        if !r.passed {
            bail!("{}", golden_table::failure_summary(&report));
        }
        Ok(())
    }
}

/// Load the model on a compute path; int8 notes go to the log.
fn load(
    path: &std::path::Path,
    compute: Compute,
    log: &mut Vec<u8>,
) -> anyhow::Result<sky_infer::engine::Engine> {
    if compute == Compute::F32 {
        return Ok(sky_infer::load::open(path)?);
    }
    let (engine, report) = sky_infer::int8::open(path, &ComputePath::new(compute).options(), None)?;
    log.extend_from_slice(
        format!(
            "compute: {} ({} int8 weights)\n",
            report.mode, report.weights
        )
        .as_bytes(),
    );
    for n in &report.notes {
        log.extend_from_slice(format!("note: {n}\n").as_bytes());
    }
    Ok(engine)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sky_dag::kind::DynKind;
    use sky_dag::StageInput;
    use std::path::{Path, PathBuf};

    fn repo() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
    }

    /// A temp dir with the first `n` s1-pico cases and their f64 records.
    fn suite_files(dir: &Path, n: usize) {
        let cases = std::fs::read_to_string(repo().join("fixtures/laya-ref/cases.jsonl")).unwrap();
        let expected =
            std::fs::read_to_string(repo().join("fixtures/laya-ref/goldens/s1-pico.f64.jsonl"))
                .unwrap();
        let take = |s: &str| {
            s.lines()
                .take(n)
                .map(|l| format!("{l}\n"))
                .collect::<String>()
        };
        std::fs::write(dir.join("cases.jsonl"), take(&cases)).unwrap();
        std::fs::write(dir.join("expected.jsonl"), take(&expected)).unwrap();
    }

    /// Run with `params` over the defaults the pipeline expansion would give.
    fn run(dir: &Path, given: serde_json::Value) -> (anyhow::Result<()>, String) {
        let mut params = json!({"variant": "f16", "suite": "pico", "path": "f32"});
        for (k, v) in given.as_object().unwrap() {
            params[k] = v.clone();
        }
        let input = |rel: &str, path: PathBuf, role: Role| StageInput {
            rel: rel.into(),
            dir: path.is_dir(),
            role: role.name.into(),
            path,
        };
        let mut log = Vec::new();
        let mut ctx = StageCtx {
            node: "golden/pico",
            workspace: dir,
            inputs: vec![
                input("models/s1-pico", repo().join("models/s1-pico"), MODEL),
                input("cases.jsonl", dir.join("cases.jsonl"), CASES),
                input("expected.jsonl", dir.join("expected.jsonl"), EXPECTED),
            ],
            outputs: vec![dir.join("report.json")],
            log: &mut log,
        };
        let r = DynKind::run(&GoldenModel, &params, &mut ctx);
        (r, String::from_utf8_lossy(&log).into_owned())
    }

    fn report(dir: &Path) -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(dir.join("report.json")).unwrap()).unwrap()
    }

    #[test]
    fn passing_suite_writes_the_report() {
        let dir = tempfile::tempdir().unwrap();
        suite_files(dir.path(), 3);
        let (r, log) = run(dir.path(), json!({"tolerance": 1e-3, "variant": "f16"}));
        r.unwrap();
        let rep = report(dir.path());
        assert_eq!(rep["suite"], "pico");
        assert_eq!(rep["path"], "f32");
        assert_eq!(rep["model"], "models/s1-pico");
        assert_eq!(rep["cases"], 3);
        assert_eq!(rep["passed"], true);
        let err = rep["max_abs_err"].as_f64().unwrap();
        assert!(err > 0.0 && err < 1e-4, "f32 engine vs f64 PyTorch: {err}");
        assert!(log.contains("pico") && log.contains("pass"), "{log}");
    }

    #[test]
    fn too_tight_tolerance_fails_with_the_worst_case_and_keeps_the_report() {
        let dir = tempfile::tempdir().unwrap();
        suite_files(dir.path(), 3);
        let (r, log) = run(dir.path(), json!({"tolerance": 1e-12, "suite": "tight"}));
        let e = r.unwrap_err().to_string();
        let rep = report(dir.path());
        assert_eq!(rep["passed"], false);
        let worst = rep["worst_case"].as_str().unwrap().to_string();
        assert!(
            e.contains("golden `tight` failed") && e.contains(&worst),
            "{e}"
        );
        assert!(!e.contains('\n'), "one line: {e}");
        assert!(log.contains("FAIL") && log.contains(&worst), "{log}");
    }

    #[test]
    fn int8_path_runs_and_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        suite_files(dir.path(), 2);
        let (r, log) = run(dir.path(), json!({"tolerance": 1.0, "path": "q8"}));
        r.unwrap();
        assert!(log.contains("compute: q8 (at load int8 weights)"), "{log}");
        let rep = report(dir.path());
        assert_eq!(rep["path"], "q8");
        // int8 moves the probabilities, unlike the f32 path (< 1e-4).
        assert!(rep["max_abs_err"].as_f64().unwrap() > 1e-4, "{rep}");
    }

    #[test]
    fn mismatched_ids_and_bad_inputs_are_reported() {
        let dir = tempfile::tempdir().unwrap();
        suite_files(dir.path(), 2);
        // An expected record with other token ids: the case is a mismatch, whatever the tolerance.
        let text = std::fs::read_to_string(dir.path().join("expected.jsonl")).unwrap();
        let mut first: serde_json::Value =
            serde_json::from_str(text.lines().next().unwrap()).unwrap();
        first["input_ids"][1] = json!(7);
        let id = first["id"].as_str().unwrap().to_string();
        let rest: String = text.lines().skip(1).map(|l| format!("{l}\n")).collect();
        std::fs::write(
            dir.path().join("expected.jsonl"),
            format!("{first}\n{rest}"),
        )
        .unwrap();
        let (r, _) = run(dir.path(), json!({"tolerance": 1.0}));
        let e = r.unwrap_err().to_string();
        assert!(
            e.contains("1 of 2 cases mismatched") && e.contains(&id),
            "{e}"
        );
        assert_eq!(report(dir.path())["mismatched_ids"], json!([id]));

        std::fs::write(dir.path().join("cases.jsonl"), "{not json\n").unwrap();
        let (r, _) = run(dir.path(), json!({"tolerance": 1e-3}));
        assert!(format!("{:#}", r.unwrap_err()).contains("cases.jsonl"));
        let (r, _) = run(dir.path(), json!({"tolerance": 1e-3, "path": "q4"}));
        assert!(format!("{:#}", r.unwrap_err()).contains("unknown variant `q4`"));
    }
}
