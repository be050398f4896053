//! `calibrate`: the f32 model over a prompt set -> the calibration JSON (max |x| per input
//! channel of every matrix product).
//!
//! Params (planned here from the model's `quantize.calibration`): `prompts`: `"builtin"` or `{"file": <workspace path>}`.
//! Inputs ([`Calibrate::INPUTS`]): the model's F32 GGUF, and the prompt file when one is named.
//! Output: one JSON file.

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};
use std::io::Write as _;

use super::{InputRole as _, PipelineKind, Role};
use crate::ops::names::Variant;
use crate::pipeline::plan::{ModelPlan, Planned, Planner};
use sky_dag::{Kind, NodeSpec, StageCtx};

/// The `calibrate` kind.
pub struct Calibrate;

/// The F32 GGUF.
pub const MODEL: Role = super::quantize::MODEL;
/// The prompt file, when `prompts` names one.
pub const PROMPTS: Role = Role {
    name: "prompts",
    what: "prompt file",
};

impl PipelineKind for Calibrate {
    const INPUTS: &'static [Role] = &[MODEL, PROMPTS];
    const PLANNER: Option<Planner> = Some(Planner::Model(plan));
}

/// The calibration of a model's F32 file, which its Q8_0 and tuned variants need.
fn plan(cx: &ModelPlan<'_>, out: &mut Planned) -> sky_dag::Result<()> {
    if !(cx.wants(Variant::Q8_0) || cx.wants(Variant::Tuned)) {
        return Ok(());
    }
    let cal_name = cx.model.quantize.calibration.get_ref();
    let prompts = cx.m.calibration.get(cal_name).map(|c| c.prompts.clone());
    let mut calib = NodeSpec::new::<Calibrate>(
        cx.id("calibrate"),
        &Params {
            prompts: match &prompts {
                Some(p) if p.get_ref() != "builtin" => Prompts::File {
                    file: p.get_ref().clone(),
                },
                _ => Prompts::Builtin(BuiltinPrompts::Builtin),
            },
        },
        cx.span.clone(),
    )?
    .group(cx.name)
    .input_role(MODEL, cx.file(Variant::F32), cx.span.clone());
    if let Some(p) = prompts.as_ref().filter(|p| p.get_ref() != "builtin") {
        calib = calib.input_role(PROMPTS, p.get_ref(), p.span());
    }
    out.node(calib.output(cx.calibration_file(), cx.span.clone()));
    Ok(())
}

/// Where the prompts come from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged, deny_unknown_fields)]
pub enum Prompts {
    /// `"builtin"`: the twelve built-in prompts.
    Builtin(BuiltinPrompts),
    /// `{"file": path}`: a JSONL prompt file, the node's [`PROMPTS`] input.
    File {
        /// The workspace path (its content enters the key as an input).
        file: String,
    },
}

/// The string `"builtin"`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum BuiltinPrompts {
    /// The built-in set.
    #[serde(rename = "builtin")]
    Builtin,
}

/// Parameters of a `calibrate` node.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Params {
    /// The prompt set.
    pub prompts: Prompts,
}

impl Kind for Calibrate {
    const NAME: &'static str = "calibrate";
    const VERSION: u32 = 2;
    type Params = Params;

    fn run(&self, p: Params, ctx: &mut StageCtx<'_>) -> anyhow::Result<()> {
        let node = ctx.node;
        let file_set = matches!(p.prompts, Prompts::File { .. });
        let model = MODEL.get(ctx)?;
        let Some(out) = ctx.outputs.first() else {
            bail!("node `{node}`: expects one output");
        };
        let prompts = if file_set {
            Some(PROMPTS.get(ctx)?.path.clone())
        } else {
            None
        };
        let run = crate::ops::calibrate::calibrate_model(&model.path, prompts.as_deref())
            .with_context(|| format!("node `{node}`"))?;
        sky_fs::write(out, run.calibration.to_json().as_bytes())
            .with_context(|| format!("writing {}", out.display()))?;
        for note in run.notes() {
            writeln!(ctx.log, "note: {note}")?;
        }
        writeln!(
            ctx.log,
            "{} sites from {} prompts ({} tokens)",
            run.calibration.len(),
            run.prompts,
            run.tokens
        )?;
        Ok(())
    }
}
