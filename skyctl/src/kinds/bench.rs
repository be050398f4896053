//! `bench`: per-question latency of a model's variants, per compute mode (exclusive: runs
//! alone; volatile: re-run by `--rerun bench`).
//!
//! Params: the model's `bench = {modes, questions, iters, rounds, threads}`. Modes: `f32` (the F16
//! file, else the F32 one, computed in f32), `q8` (alias `int8`: that file quantized at load,
//! Q8x2 activations), `q8-fast` (Q8 activations), `q8_0` (the Q8_0 file on its default int8
//! path), `tuned` (the tuned file on its default path); an empty list means the first four,
//! and `tuned` when the model builds it. Inputs: the model's variant files
//! (`<name>.<variant>.gguf`). Output: `bench.json`, `{"model", "modes": {mode: result or
//! null}}`, a mode being null when its file is not built.

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use std::io::Write as _;

use crate::ops::bench::{bench_engine, BenchConfig, BenchMode};
use crate::ops::compute::ComputePath;
use sky_dag::{Kind, StageCtx, StageInput};

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

fn variant_of(input: &StageInput) -> Option<&str> {
    let stem = input.rel.strip_suffix(".gguf")?;
    stem.rsplit_once('.').map(|(_, v)| v)
}

impl Kind for Bench {
    const NAME: &'static str = "bench";
    const VERSION: u32 = 2;
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
        let file = |v: &str| ctx.inputs.iter().find(|i| variant_of(i) == Some(v));
        if modes.is_empty() {
            modes = BenchMode::ALL.to_vec();
            if file("tuned").is_some() {
                modes.push(BenchMode::Tuned);
            }
        }
        let Some(out) = ctx.outputs.first() else {
            bail!("node `{node}`: expects one output")
        };
        let float = file("f16").or_else(|| file("f32"));
        let model = node.split('/').next().unwrap_or(node).to_string();
        let cfg = BenchConfig {
            questions: p.questions,
            iters: p.iters,
            rounds: p.rounds,
            threads: p.threads,
        };
        let mut results = Map::new();
        for mode in modes {
            let input = match mode {
                BenchMode::Q8_0 => file("q8_0"),
                BenchMode::Tuned => file("tuned"),
                _ => float,
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
                "{mode} ({}): {:.1} us/question, rounds {:?}",
                input.rel, r.us_per_question, r.round_medians_us
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
    use std::path::PathBuf;

    fn input(rel: &str) -> StageInput {
        StageInput {
            rel: rel.into(),
            path: PathBuf::from(rel),
            dir: false,
        }
    }

    #[test]
    fn variants_come_from_file_names() {
        assert_eq!(variant_of(&input("build/m/m.q8_0.gguf")), Some("q8_0"));
        assert_eq!(variant_of(&input("build/s1.x/s1.x.f16.gguf")), Some("f16"));
        assert_eq!(variant_of(&input("build/m/bench.json")), None);
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
            inputs: vec![],
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
