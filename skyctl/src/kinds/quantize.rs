//! `quantize`: the reference F32 GGUF + a calibration -> the calibrated Q8_0 GGUF (Q8_0
//! encoder matrices, F16 token embeddings, F32 head; outlier columns and their exact weights
//! in `skycmd.quant.*` metadata).
//!
//! Params: `outlier_ratio` (> 1). Inputs ([`Quantize::INPUTS`]): the F32 GGUF, the calibration
//! JSON, and optionally a policy file (a tuned variant: `tune`'s output), whose types replace
//! the Q8_0 variant's. Output: the GGUF.

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};
use std::io::Write as _;

use super::{InputRole as _, PipelineKind, Role};
use crate::ops::names::Variant;
use crate::pipeline::plan::{ModelPlan, Planned, Planner};
use sky_dag::{Kind, NodeSpec, StageCtx};

/// The `quantize` kind.
pub struct Quantize;

/// The F32 GGUF.
pub const MODEL: Role = Role {
    name: "model",
    what: "F32 GGUF",
};
/// The calibration JSON (`calibrate`'s output).
pub const CALIBRATION: Role = Role {
    name: "calibration",
    what: "calibration JSON",
};
/// Optional: a policy file whose types replace the Q8_0 variant's.
pub const POLICY: Role = Role {
    name: "policy",
    what: "policy file",
};

impl PipelineKind for Quantize {
    const INPUTS: &'static [Role] = &[MODEL, CALIBRATION, POLICY];
    const PLANNER: Option<Planner> = Some(Planner::Model(plan));
}

/// A model's Q8_0 variant (its tuned variant is planned by [`super::tune`], with [`node`]).
fn plan(cx: &ModelPlan<'_>, out: &mut Planned) -> sky_dag::Result<()> {
    if cx.wants(Variant::Q8_0) {
        out.node(node(cx, "quantize.q8_0", Variant::Q8_0, None)?);
    }
    Ok(())
}

/// The model's node `stage`: its F32 file quantized with its calibration into the file of
/// variant `v`, under the types of `policy` (a policy file) when given.
pub fn node(
    cx: &ModelPlan<'_>,
    stage: &str,
    v: Variant,
    policy: Option<&str>,
) -> sky_dag::Result<NodeSpec> {
    let params = Params {
        outlier_ratio: cx.model.quantize.outlier_ratio,
    };
    let mut node = NodeSpec::new::<Quantize>(cx.id(stage), &params, cx.span.clone())?
        .group(cx.name)
        .input_role(MODEL, cx.file(Variant::F32), cx.span.clone())
        .input_role(CALIBRATION, cx.calibration_file(), cx.span.clone());
    if let Some(policy) = policy {
        node = node.input_role(POLICY, policy, cx.span.clone());
    }
    Ok(node.output(cx.file(v), cx.span.clone()))
}

/// Parameters of a `quantize` node.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Params {
    /// A channel is an outlier when its calibrated max |x| exceeds this times the median.
    pub outlier_ratio: f64,
}

impl Kind for Quantize {
    const NAME: &'static str = "quantize";
    const VERSION: u32 = 1;
    type Params = Params;

    fn run(&self, p: Params, ctx: &mut StageCtx<'_>) -> anyhow::Result<()> {
        let node = ctx.node;
        let ratio = p.outlier_ratio;
        let (model, calib) = (MODEL.get(ctx)?, CALIBRATION.get(ctx)?);
        let Some(out) = ctx.outputs.first() else {
            bail!("node `{node}`: expects one output");
        };
        let text = sky_fs::read_to_string(&calib.path, sky_fs::CALIBRATION)
            .with_context(|| format!("reading {}", calib.rel))?;
        let calibration = sky_quant::Calibration::from_json(&text)
            .with_context(|| format!("node `{node}`: {}", calib.rel))?;
        let reference = crate::ops::quantize::reference_bytes(&model.path)?;
        let q = crate::ops::quantize::quantize_to(
            &reference,
            std::path::Path::new(&model.rel),
            &calibration,
            ratio as f32,
            false,
            POLICY.opt(ctx).map(|p| p.path).as_deref(),
            out,
        )
        .with_context(|| format!("node `{node}`"))?;
        writeln!(
            ctx.log,
            "{} Q8_0 matrices, {} outlier columns kept in f32, {} bytes",
            q.q8_tensors,
            q.outlier_columns,
            q.bytes.len()
        )?;
        Ok(())
    }
}
