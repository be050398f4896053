//! `calibrate`: the f32 model over a prompt set -> the calibration JSON (max |x| per input
//! channel of every matrix product).
//!
//! Params (from `graph.rs`): `prompts`: `"builtin"` or `{"file": <workspace path>}`.
//! Inputs: the model's F32 GGUF, then the prompt file when one is named. Output: one JSON file.

use anyhow::{bail, Context};
use std::io::Write as _;

use super::{StageCtx, StageKind};
use crate::engine::fsutil::write_atomic;

/// The `calibrate` kind.
pub struct Calibrate;

impl StageKind for Calibrate {
    fn name(&self) -> &'static str {
        "calibrate"
    }

    fn version(&self) -> u32 {
        1
    }

    fn run(&self, ctx: &mut StageCtx<'_>) -> anyhow::Result<()> {
        let node = ctx.node;
        let file_set = match &ctx.params["prompts"] {
            serde_json::Value::String(s) if s == "builtin" => false,
            serde_json::Value::Object(o) if o.get("file").is_some_and(|f| f.is_string()) => true,
            other => bail!("node `{node}`: params.prompts must be \"builtin\" or {{\"file\": path}}, got {other}"),
        };
        let (Some(model), Some(out)) = (ctx.inputs.first(), ctx.outputs.first()) else {
            bail!("node `{node}`: expects the model as first input and one output");
        };
        let prompts = if file_set {
            Some(
                ctx.inputs
                    .get(1)
                    .with_context(|| {
                        format!("node `{node}`: the prompt file is not among the inputs")
                    })?
                    .path
                    .clone(),
            )
        } else {
            None
        };
        let run = crate::commands::calibrate::calibrate_model(&model.path, prompts.as_deref())
            .with_context(|| format!("node `{node}`"))?;
        write_atomic(out, run.calibration.to_json().as_bytes(), false)
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
