//! `calibrate`: the f32 model over a prompt set -> the calibration JSON (max |x| per input
//! channel of every matrix product).
//!
//! Params (from `pipeline::expand`): `prompts`: `"builtin"` or `{"file": <workspace path>}`.
//! Inputs ([`Calibrate::INPUTS`]): the model's F32 GGUF, and the prompt file when one is named.
//! Output: one JSON file.

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};
use std::io::Write as _;

use super::{Inputs, Role};
use sky_dag::{Kind, StageCtx};

/// The `calibrate` kind.
pub struct Calibrate;

/// The F32 GGUF.
pub const MODEL: Role = super::quantize::MODEL;
/// The prompt file, when `prompts` names one.
pub const PROMPTS: Role = Role {
    name: "prompts",
    what: "prompt file",
};

impl Inputs for Calibrate {
    const INPUTS: &'static [Role] = &[MODEL, PROMPTS];
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
