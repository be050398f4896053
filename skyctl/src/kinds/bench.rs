//! `bench`: per-question latency of a model's variants, per compute mode (exclusive: runs
//! alone; volatile: re-run by `--rerun bench`).
//!
//! Params: the model's `bench = {modes, questions, iters, rounds, threads}`. Modes: `f32` (the F16
//! file, else the F32 one, computed in f32), `q8` (alias `int8`: that file quantized at load,
//! Q8x2 activations), `q8-fast` (Q8 activations), `q8_0` (the Q8_0 file on its default int8
//! path), `tuned` (the tuned file on its default path); an empty list means the first four,
//! and `tuned` when the model builds it. Inputs: the model's variant files, each in the role of
//! its variant ([`file`]). Output: `bench.json`, `{"model", "modes": {mode: result or
//! null}}`, a mode being null when its file is not built.

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use std::io::Write as _;

use super::{InputRole as _, PipelineKind, Role};
use crate::ops::bench::{bench_engine, BenchConfig, BenchMode};
use crate::ops::compute::ComputePath;
use crate::ops::names::Variant;
use crate::pipeline::plan::{ModelPlan, Planned, Planner};
use sky_dag::{Kind, NodeSpec, StageCtx};

/// The `bench` kind.
pub struct Bench;

/// Parameters of a `bench` node.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Params {
    /// Modes to measure (empty: all).
    pub modes: Vec<BenchMode>,
    /// Questions per frame.
    pub questions: u32,
    /// Frames per round.
    pub iters: u32,
    /// Rounds.
    pub rounds: u32,
    /// Threads of one forward pass (absent: 1, and then not part of the key).
    #[serde(default = "one_thread", skip_serializing_if = "is_one_thread")]
    pub threads: u32,
}

fn one_thread() -> u32 {
    1
}

fn is_one_thread(n: &u32) -> bool {
    *n == 1
}

/// The input role of a variant's file: the variant's name.
pub const fn file(v: Variant) -> Role {
    Role {
        name: v.name(),
        what: "variant file",
    }
}

impl PipelineKind for Bench {
    const INPUTS: &'static [Role] = &[
        file(Variant::F32),
        file(Variant::F16),
        file(Variant::Q8_0),
        file(Variant::Tuned),
    ];
    const PLANNER: Option<Planner> = Some(Planner::Model(plan));
}

/// A model's `bench = {...}`: one node over every variant file, its modes checked against the
/// variants the model builds.
fn plan(cx: &ModelPlan<'_>, out: &mut Planned) -> sky_dag::Result<()> {
    let Some(b) = &cx.model.bench else {
        return Ok(());
    };
    let (m, name, span) = (cx.m, cx.name, &cx.span);
    let mut modes = Vec::with_capacity(b.modes.len());
    for mode in &b.modes {
        let parsed = BenchMode::parse(mode.get_ref())
            .map_err(|e| m.error_at(mode.span(), format!("model `{name}`: {e} (int8 = q8)")))?;
        // A mode whose file is not built would measure nothing and print null.
        let needs: &[Variant] = match parsed {
            BenchMode::Q8_0 => &[Variant::Q8_0],
            BenchMode::Tuned => &[Variant::Tuned],
            _ => &[Variant::F16, Variant::F32],
        };
        if !needs.iter().any(|&v| cx.wants(v)) {
            let wanted: Vec<&str> = needs.iter().map(|v| v.name()).collect();
            return Err(m.error_at(
                mode.span(),
                format!(
                    "model `{name}`: bench mode `{}` measures the {} variant, which `variants` does not build",
                    mode.get_ref(),
                    wanted.join(" or ")
                ),
            ));
        }
        modes.push(parsed);
    }
    let params = Params {
        modes,
        questions: *b.questions.get_ref(),
        iters: *b.iters.get_ref(),
        rounds: *b.rounds.get_ref(),
        threads: *b.threads.get_ref(),
    };
    let mut node = NodeSpec::new::<Bench>(cx.id("bench"), &params, span.clone())?
        .group(name)
        .output(cx.bench_file(), span.clone());
    // In the order of `variants`, as the keys always had them.
    for &v in &cx.model.variants {
        node = node.input_role(file(v), cx.file(v), span.clone());
    }
    node.exclusive = true;
    node.volatile = true;
    out.node(node);
    Ok(())
}

impl Kind for Bench {
    const NAME: &'static str = "bench";
    // 3: the median of rounds with min_us, max_us and spread (was: the best round).
    const VERSION: u32 = 3;
    type Params = Params;

    fn exclusive(&self) -> bool {
        true
    }

    fn volatile(&self) -> bool {
        true
    }

    fn run(&self, p: Params, ctx: &mut StageCtx<'_>) -> anyhow::Result<()> {
        let node = ctx.node;
        let mut modes: Vec<BenchMode> = p.modes.clone();
        modes.sort();
        modes.dedup();
        let [f32_file, f16_file, q8_0_file, tuned_file] =
            [Variant::F32, Variant::F16, Variant::Q8_0, Variant::Tuned].map(|v| file(v).opt(ctx));
        if modes.is_empty() {
            modes = BenchMode::DEFAULT.to_vec();
            if tuned_file.is_some() {
                modes.push(BenchMode::Tuned);
            }
        }
        let Some(out) = ctx.outputs.first() else {
            bail!("node `{node}`: expects one output")
        };
        let float = f16_file.or(f32_file);
        let model = node.split('/').next().unwrap_or(node).to_string();
        let cfg = BenchConfig {
            questions: p.questions,
            iters: p.iters,
            rounds: p.rounds,
            threads: p.threads,
            encoder_only: false,
        };
        let mut results = Map::new();
        for mode in modes {
            let input = match mode {
                BenchMode::Q8_0 => q8_0_file.as_ref(),
                BenchMode::Tuned => tuned_file.as_ref(),
                _ => float.as_ref(),
            };
            let path = ComputePath::new(mode.compute());
            let mode = mode.name();
            let Some(input) = input else {
                writeln!(ctx.log, "{mode}: no file to measure (null)")?;
                results.insert(mode.into(), Value::Null);
                continue;
            };
            let (engine, report) = path.open(&input.path)?;
            let r = bench_engine(&engine, &report, cfg)
                .with_context(|| format!("node `{node}`: {mode} on {}", input.rel))?;
            writeln!(
                ctx.log,
                "{mode} ({}): {:.1} us/question (median; spread {:.1}%), rounds {:?}",
                input.rel,
                r.us_per_question,
                r.spread * 100.0,
                r.round_medians_us
            )?;
            let mut v = serde_json::to_value(&r)?;
            if let Some(o) = v.as_object_mut() {
                o.insert("file".into(), json!(input.rel));
            }
            results.insert(mode.into(), v);
        }
        let doc = json!({"model": model, "modes": results});
        sky_fs::write(
            out,
            format!("{}\n", serde_json::to_string_pretty(&doc)?).as_bytes(),
        )
        .with_context(|| format!("writing {}", out.display()))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sky_dag::kind::DynKind;
    use sky_dag::StageInput;
    use std::path::PathBuf;

    fn input(rel: &str, role: &str) -> StageInput {
        StageInput {
            rel: rel.into(),
            path: PathBuf::from(rel),
            dir: false,
            role: role.into(),
        }
    }

    #[test]
    fn variants_come_from_roles_not_file_names() {
        let mut log = Vec::new();
        let ctx = StageCtx {
            node: "m/bench",
            workspace: std::path::Path::new("."),
            inputs: vec![
                input("build/m/m.q8_0.gguf", ""),
                input("build/m/weights.bin", "f16"),
            ],
            outputs: vec![],
            log: &mut log,
        };
        assert_eq!(
            file(Variant::F16).opt(&ctx).map(|i| i.rel),
            Some("build/m/weights.bin".to_string())
        );
        assert!(file(Variant::Q8_0).opt(&ctx).is_none());
        let names: Vec<&str> = Bench::INPUTS.iter().map(|r| r.name).collect();
        assert_eq!(names, Variant::NAMES);
    }

    #[test]
    fn unknown_modes_and_bad_params_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = Vec::new();
        let run = |params: serde_json::Value, log: &mut Vec<u8>| {
            let mut ctx = StageCtx {
                node: "m/bench",
                workspace: dir.path(),
                inputs: vec![],
                outputs: vec![dir.path().join("bench.json")],
                log,
            };
            DynKind::run(&Bench, &params, &mut ctx)
                .unwrap_err()
                .to_string()
        };
        let e = run(
            json!({"modes": ["fp8"], "questions": 1, "iters": 1, "rounds": 1}),
            &mut log,
        );
        assert!(e.contains("unknown variant `fp8`"), "{e}");
        let e = run(
            json!({"modes": [], "questions": "x", "iters": 1, "rounds": 1}),
            &mut log,
        );
        assert!(e.contains("bad parameters for kind `bench`"), "{e}");
        // No file for any mode: every mode is null, nothing fails.
        let params = json!({"modes": ["f32", "int8"], "questions": 1, "iters": 1, "rounds": 1});
        let mut ctx = StageCtx {
            node: "m/bench",
            workspace: dir.path(),
            // Named like a variant file, but in no role: not measured.
            inputs: vec![input("build/m/m.f16.gguf", "")],
            outputs: vec![dir.path().join("bench.json")],
            log: &mut log,
        };
        DynKind::run(&Bench, &params, &mut ctx).unwrap();
        let doc: Value =
            serde_json::from_slice(&std::fs::read(dir.path().join("bench.json")).unwrap()).unwrap();
        assert_eq!(
            doc,
            json!({"model": "m", "modes": {"f32": null, "q8": null}})
        );
    }
}
