//! `convert`: a Laya checkpoint directory to one GGUF file, through [`sky_laya::convert`].
//!
//! Input: the checkpoint directory (a source directory, or the single directory output of the
//! model's `export` command). Params (planned here from the model and its policy):
//! `type` and `head_type` (`f32`, `f16`, `bf16`, `q8_0`), `rules` (ordered
//! `{"match": glob, "type": t}`; the first rule whose glob matches a GGUF tensor name wins) and
//! `name` (`general.name`; the checkpoint directory's name when absent). Output: the GGUF file,
//! written atomically by the converter.
//!
//! Rules are matched with the engine's glob ([`sky_dag::glob::Glob`], the syntax
//! pipeline.toml documents and validates) and handed to the converter as exact tensor names,
//! so `[set]` classes work and both sides agree on what a pattern means.

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};
use sky_laya::{convert_until, ConvertOptions, LayaCheckpoint, TypePolicy};

use super::{InputRole as _, PipelineKind, Role};
use crate::ops::names::Variant;
use crate::ops::policy::{resolve_rules, TensorType};
use crate::pipeline::plan::{ModelPlan, Planned, Planner};
use sky_dag::{Kind, NodeSpec, StageCtx};

/// The `convert` kind.
pub struct Convert;

/// The Laya checkpoint directory.
pub const CHECKPOINT: Role = Role {
    name: "checkpoint",
    what: "Laya checkpoint directory",
};

impl PipelineKind for Convert {
    const INPUTS: &'static [Role] = &[CHECKPOINT];
    const PLANNER: Option<Planner> = Some(Planner::Model(plan));
}

/// A model's conversions: the F32 reference (the Q8_0 and tuned variants are made from it and
/// its calibration) and the F16 file under the model's policy.
fn plan(cx: &ModelPlan<'_>, out: &mut Planned) -> sky_dag::Result<()> {
    let name = Some(cx.name.to_string());
    if cx.wants(Variant::F32) || cx.wants(Variant::Q8_0) || cx.wants(Variant::Tuned) {
        let params = Params {
            ftype: TensorType::F32,
            head_type: TensorType::F32,
            rules: Vec::new(),
            name: name.clone(),
        };
        out.node(node(cx, "convert.f32", &params, Variant::F32)?);
    }
    if cx.wants(Variant::F16) {
        let policy =
            cx.m.policy_for(cx.model.policy.get_ref())
                .unwrap_or_default();
        let params = Params {
            ftype: policy.default_type,
            head_type: policy.head_type,
            rules: policy
                .rule
                .iter()
                .map(|r| Rule {
                    pattern: r.pattern.get_ref().clone(),
                    ty: r.tensor_type,
                })
                .collect(),
            name,
        };
        out.node(node(cx, "convert.f16", &params, Variant::F16)?);
    }
    Ok(())
}

/// The model's node `stage`: its checkpoint converted to the file of variant `v`.
fn node(cx: &ModelPlan<'_>, stage: &str, params: &Params, v: Variant) -> sky_dag::Result<NodeSpec> {
    Ok(
        NodeSpec::new::<Convert>(cx.id(stage), params, cx.span.clone())?
            .group(cx.name)
            .input_role(CHECKPOINT, &cx.checkpoint.0, cx.checkpoint.1.clone())
            .output(cx.file(v), cx.span.clone()),
    )
}

/// Parameters of a `convert` node: the type policy and the model name.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Params {
    /// Default tensor type (`f32`, `f16`, `bf16`, `q8_0`).
    #[serde(rename = "type")]
    pub ftype: TensorType,
    /// Type of the decision head.
    pub head_type: TensorType,
    /// Per-tensor rules, first match wins.
    pub rules: Vec<Rule>,
    /// `general.name`.
    pub name: Option<String>,
}

/// One per-tensor rule.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    /// Glob over GGUF tensor names.
    #[serde(rename = "match")]
    pub pattern: String,
    /// The type.
    #[serde(rename = "type")]
    pub ty: TensorType,
}

impl Kind for Convert {
    const NAME: &'static str = "convert";
    const VERSION: u32 = 1;
    type Params = Params;

    fn run(&self, p: Params, ctx: &mut StageCtx<'_>) -> anyhow::Result<()> {
        let node = ctx.node;
        let params = p;
        let input = CHECKPOINT.get(ctx)?;
        if !input.dir {
            bail!(
                "node `{node}`: input `{}` is not a directory; a Laya checkpoint is a directory \
                 (model.safetensors, encoder/, rl_agent_config.json, tokenizer/)",
                input.rel
            );
        }
        let [out] = ctx.outputs.as_slice() else {
            bail!(
                "node `{node}`: expected one output (the GGUF file), got {}",
                ctx.outputs.len()
            );
        };
        let ckpt = LayaCheckpoint::open(&input.path)
            .with_context(|| format!("node `{node}`: reading the checkpoint `{}`", input.rel))?;
        let policy = policy(&params, &ckpt).with_context(|| format!("node `{node}`"))?;
        let opts = ConvertOptions {
            policy,
            name: params.name.clone(),
            pre: None,
            allow_nonfinite: false,
            encoder_only: false,
        };
        let s = convert_until(&ckpt, &opts, out, Some(crate::ops::stop_requested))
            .with_context(|| format!("node `{node}`: converting `{}`", input.rel))?;
        let line = format!(
            "{}: {} tensors, {} parameters, {} bytes of tensor data, {} metadata keys, {} bytes\n",
            input.rel,
            s.tensors.len(),
            s.n_params,
            s.tensor_bytes,
            s.n_kv,
            s.file_bytes
        );
        ctx.log.extend_from_slice(line.as_bytes());
        Ok(())
    }
}

/// The converter's policy: types parsed, rules resolved against the checkpoint's tensor names
/// (a rule that matches no tensor is an error naming it).
fn policy(params: &Params, ckpt: &LayaCheckpoint) -> anyhow::Result<TypePolicy> {
    let rules: Vec<(&str, &str)> = params
        .rules
        .iter()
        .map(|r| (r.pattern.as_str(), r.ty.name()))
        .collect();
    let names = ckpt.tensors().iter().map(|t| t.gguf_name.as_str());
    let resolved = resolve_rules(&rules, names).map_err(|e| anyhow::anyhow!(e.message))?;
    let policy = TypePolicy {
        ftype: params.ftype.ggml(),
        head_type: params.head_type.ggml(),
        rules: resolved,
    };
    policy.validate()?;
    Ok(policy)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use sky_dag::kind::DynKind;
    use sky_dag::StageInput;
    use std::path::{Path, PathBuf};

    fn pico() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/s1-pico")
    }

    fn run(params: serde_json::Value, out: &Path) -> (anyhow::Result<()>, String) {
        let ws = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let mut log = Vec::new();
        let mut ctx = StageCtx {
            node: "pico/convert.f16",
            workspace: &ws,
            inputs: vec![StageInput {
                rel: "models/s1-pico".into(),
                path: pico(),
                dir: true,
                role: CHECKPOINT.name.into(),
            }],
            outputs: vec![out.to_path_buf()],
            log: &mut log,
        };
        let r = DynKind::run(&Convert, &params, &mut ctx);
        (r, String::from_utf8_lossy(&log).into_owned())
    }

    fn tensor_types(path: &Path) -> Vec<(String, sky_gguf::GgmlType)> {
        let bytes = std::fs::read(path).unwrap();
        let f = sky_gguf::GgufFile::parse(&bytes).unwrap();
        f.tensors.iter().map(|t| (t.name.clone(), t.ty)).collect()
    }

    #[test]
    fn converts_with_policy_rules_and_is_deterministic() {
        let dir = tempfile::tempdir().unwrap();
        let params = json!({
            "type": "f16", "head_type": "f32", "name": "pico",
            "rules": [{"match": "blk.[0].attn_qkv.weight", "type": "f32"}, {"match": "blk.*.ffn_*", "type": "bf16"}],
        });
        let a = dir.path().join("a.gguf");
        let (r, log) = run(params.clone(), &a);
        r.unwrap();
        assert!(log.contains("models/s1-pico: "), "{log}");
        let types = tensor_types(&a);
        let ty = |n: &str| {
            types
                .iter()
                .find(|(x, _)| x == n)
                .map(|(_, t)| *t)
                .unwrap_or_else(|| panic!("{n} missing"))
        };
        use sky_gguf::GgmlType as T;
        assert_eq!(ty("blk.0.attn_qkv.weight"), T::F32, "`[0]` class rule");
        assert_eq!(
            ty("blk.1.attn_qkv.weight"),
            T::F16,
            "no rule: the policy type"
        );
        assert_eq!(ty("blk.1.ffn_up.weight"), T::BF16, "first matching rule");
        let b = dir.path().join("b.gguf");
        run(params, &b).0.unwrap();
        assert_eq!(
            std::fs::read(&a).unwrap(),
            std::fs::read(&b).unwrap(),
            "same inputs, same bytes"
        );
        let bytes = std::fs::read(&a).unwrap();
        let f = sky_gguf::GgufFile::parse(&bytes).unwrap();
        assert_eq!(f.get("general.name").and_then(|v| v.as_str()), Some("pico"));
    }

    #[test]
    fn bad_params_and_inputs_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("x.gguf");
        let e = run(
            json!({"type": "q4", "head_type": "f32", "rules": [], "name": null}),
            &out,
        )
        .0
        .unwrap_err();
        assert!(
            format!("{e:#}").contains(
                "bad parameters for kind `convert`: unknown variant `q4`, expected one of `f32`, `f16`, `bf16`, `q8_0`"
            ),
            "{e:#}"
        );
        let e = run(json!({"head_type": "f32"}), &out).0.unwrap_err();
        assert!(
            format!("{e:#}").contains("bad parameters for kind `convert`: missing field `type`"),
            "{e:#}"
        );
        let e = run(json!({"type": "f16", "head_type": "f32", "rules": [{"match": "blk.[0", "type": "f32"}], "name": null}), &out)
            .0
            .unwrap_err();
        assert!(format!("{e:#}").contains("policy rule `blk.[0`"), "{e:#}");
        assert!(!out.exists(), "nothing written on error");

        let params = json!({"type": "f16", "head_type": "f32", "rules": [], "name": null});
        let mut log = Vec::new();
        let ws = dir.path().to_path_buf();
        std::fs::write(dir.path().join("file"), "x").unwrap();
        let mut ctx = StageCtx {
            node: "n",
            workspace: &ws,
            inputs: vec![StageInput {
                rel: "file".into(),
                path: dir.path().join("file"),
                dir: false,
                role: CHECKPOINT.name.into(),
            }],
            outputs: vec![out.clone()],
            log: &mut log,
        };
        let e = DynKind::run(&Convert, &params, &mut ctx)
            .unwrap_err()
            .to_string();
        assert!(e.contains("input `file` is not a directory"), "{e}");
    }
}
