//! `tune`: the smallest type policy of a model within a tolerance ([`crate::ops::tune`]).
//!
//! Params: `tolerance`, `margin`, `budget` (bytes, optional), `outlier_ratio` (of the Q8_0
//! candidates, the model's `quantize` setting) and `name` (the model). Inputs
//! ([`Tune::INPUTS`]): the F32 GGUF, the calibration JSON, the tuned cases, optionally
//! held-out cases. Outputs: the policy file
//! (one `[policy.tuned]` table, which the `quantize.tuned` node applies) and the report JSON.
//! Both are deterministic: the same inputs give the same bytes.

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};
use std::io::Write as _;
use std::path::Path;

use super::{InputRole as _, PipelineKind, Role};
use crate::ops::names::Variant;
use crate::ops::tune::{policy_text, read_cases, report_json, tune, Provenance, Spec};
use crate::pipeline::plan::{ModelPlan, Planned, Planner};
use sky_dag::{Kind, NodeSpec, StageCtx};

/// The `tune` kind.
pub struct Tune;

/// The F32 GGUF.
pub const MODEL: Role = super::quantize::MODEL;
/// The calibration JSON.
pub const CALIBRATION: Role = super::quantize::CALIBRATION;
/// The cases the search is tuned on (JSONL).
pub const CASES: Role = Role {
    name: "cases",
    what: "tuning cases",
};
/// Optional: held-out cases, measured but not tuned on.
pub const HOLDOUT: Role = Role {
    name: "holdout",
    what: "held-out cases",
};

impl PipelineKind for Tune {
    const INPUTS: &'static [Role] = &[MODEL, CALIBRATION, CASES, HOLDOUT];
    const PLANNER: Option<Planner> = Some(Planner::Model(plan));
}

/// A model's tuned variant: the search (its `tune` settings) and the `quantize.tuned` node
/// applying the policy it finds.
fn plan(cx: &ModelPlan<'_>, out: &mut Planned) -> sky_dag::Result<()> {
    let (true, Some(t)) = (cx.wants(Variant::Tuned), &cx.model.tune) else {
        return Ok(());
    };
    let span = &cx.span;
    let policy_path = cx.tuned_policy_file();
    let mut node = NodeSpec::new::<Tune>(
        cx.id("tune"),
        &Params {
            tolerance: *t.tolerance.get_ref(),
            margin: *t.margin.get_ref(),
            budget: t.budget,
            outlier_ratio: cx.model.quantize.outlier_ratio,
            name: cx.name.to_string(),
        },
        span.clone(),
    )?
    .group(cx.name)
    .input_role(MODEL, cx.file(Variant::F32), span.clone())
    .input_role(CALIBRATION, cx.calibration_file(), span.clone())
    .input_role(CASES, t.cases.get_ref(), t.cases.span());
    if let Some(h) = &t.holdout {
        node = node.input_role(HOLDOUT, h.get_ref(), h.span());
    }
    out.node(
        node.output(&policy_path, span.clone())
            .output(cx.tune_report_file(), span.clone()),
    );
    // The policy applied like the Q8_0 variant's: its Q8_0 tensors get the calibrated outlier
    // columns the search measured.
    out.node(super::quantize::node(
        cx,
        "quantize.tuned",
        Variant::Tuned,
        Some(&policy_path),
    )?);
    Ok(())
}

/// Parameters of a `tune` node.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Params {
    /// Largest allowed error.
    pub tolerance: f64,
    /// Fraction of the tolerance held back.
    pub margin: f64,
    /// Largest allowed file size in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<u64>,
    /// Outlier ratio of the Q8_0 candidates.
    pub outlier_ratio: f64,
    /// The model's name.
    pub name: String,
}

/// The candidate types of a pipeline's tuned variant.
const TYPES: [sky_gguf::GgmlType; 3] = [
    sky_gguf::GgmlType::F16,
    sky_gguf::GgmlType::BF16,
    sky_gguf::GgmlType::Q8_0,
];

impl Kind for Tune {
    const NAME: &'static str = "tune";
    const VERSION: u32 = 2;
    type Params = Params;

    fn run(&self, p: Params, ctx: &mut StageCtx<'_>) -> anyhow::Result<()> {
        let node = ctx.node;
        let (model, calib, cases) = (MODEL.get(ctx)?, CALIBRATION.get(ctx)?, CASES.get(ctx)?);
        let holdout = HOLDOUT.opt(ctx);
        let [policy_out, report_out] = ctx.outputs.as_slice() else {
            bail!("node `{node}`: expects the policy and the report as outputs");
        };
        let reference = sky_fs::read(&model.path, sky_fs::MODEL)
            .with_context(|| format!("reading {}", model.rel))?;
        let text = sky_fs::read_to_string(&calib.path, sky_fs::CALIBRATION)
            .with_context(|| format!("reading {}", calib.rel))?;
        let calibration = sky_quant::Calibration::from_json(&text)
            .with_context(|| format!("node `{node}`: {}", calib.rel))?;
        let case_list = read_cases(&cases.path)?;
        let holdout_list = match &holdout {
            Some(h) => read_cases(&h.path)?,
            None => Vec::new(),
        };
        let spec = Spec {
            reference: &reference,
            name: &p.name,
            calibration: &calibration,
            outlier_ratio: p.outlier_ratio as f32,
            cases: &case_list,
            holdout: &holdout_list,
            tolerance: p.tolerance,
            margin: p.margin,
            budget: p.budget,
            types: &TYPES,
        };
        let tuned = tune(&spec).with_context(|| format!("node `{node}`: tuning {}", p.name))?;
        let how = Provenance {
            model: &p.name,
            cases: Path::new(&cases.rel),
            holdout: holdout.as_ref().map(|h| Path::new(&h.rel)),
        };
        sky_fs::write(policy_out, policy_text(&tuned, "tuned", &how)?.as_bytes())?;
        sky_fs::write(report_out, report_json(&tuned, &p.name).as_bytes())?;
        let held = tuned
            .holdout_error
            .map_or_else(String::new, |h| format!(", {h:.3e} held out"));
        writeln!(
            ctx.log,
            "{}: {} bytes (f32 {}), error {:.3e}{held}, tolerance {} tuned to {:.3e}, {} full runs",
            p.name,
            tuned.bytes,
            tuned.f32_bytes,
            tuned.error,
            tuned.tolerance,
            tuned.target,
            tuned.evaluations
        )?;
        Ok(())
    }
}
