//! `manifest`: the release's `manifest.json` (every model the pipeline builds with its parameter
//! count and every variant's size and blake3 digest; `files`: the published files with their
//! release path, size, tensor types, digest and type policy) and `bench.json` (microseconds per
//! question per model and mode, `null` where not measured; `measured`: per model, the CPU, the
//! instruction set, the int8 kernel path and the thread count that produced the timings).
//!
//! Params: `models`: `[{name, variants: [variant...], publish: [{variant, path}], bench: bool,
//! tune: bool}]`. Inputs, model by model: every variant's file (in `variants` order), then the
//! model's `bench.json` when `bench`, then its `tune.json` when `tune` (the tuned variant's
//! entries gain `tune`: tolerance, margin, measured errors and the policy). Outputs: `manifest.json`, `bench.json`. Both are deterministic (no
//! dates, no paths outside the release tree).

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use sky_gguf::{GgufFile, Value as GValue};
use std::collections::BTreeMap;

use crate::ops::bench::BenchMode;
use crate::ops::names::Variant;
use crate::pipeline::plan::{
    bench_file, build_dir, model_file, release_model_path, tune_report_file, Plan, Planned, Planner,
};
use sky_dag::{Kind, NodeSpec, StageCtx};

/// `format` of the manifest written by this version.
pub const MANIFEST_FORMAT: &str = "skycmd.manifest/1";
/// `format` of bench.json.
pub const BENCH_FORMAT: &str = "skycmd.bench/1";

/// The `manifest` kind.
pub struct Manifest;

/// Positional inputs (or none): see the module doc.
impl super::PipelineKind for Manifest {
    const PLANNER: Option<Planner> = Some(Planner::Pipeline(plan));
}

/// One `manifest` node over every model: `manifest.json` and `bench.json` of the release.
fn plan(cx: &Plan<'_>, out: &mut Planned) -> sky_dag::Result<()> {
    let m = cx.m;
    if m.model.is_empty() {
        return Ok(());
    }
    let build = build_dir(m);
    let mut models = Vec::new();
    let mut inputs = Vec::new();
    for model in &m.model {
        let name = model.name.get_ref();
        // Every variant the pipeline builds (sizes and digests), published or not: the F32
        // reference too where quantizing builds it without its being a listed variant (the
        // Bench page would otherwise show no size for a file the build made).
        let mut built = model.variants.clone();
        if !built.contains(&Variant::F32)
            && built
                .iter()
                .any(|v| matches!(v, Variant::Q8_0 | Variant::Tuned))
        {
            built.insert(0, Variant::F32);
        }
        for &v in &built {
            inputs.push((model_file(m, name, v), model.name.span()));
        }
        if model.bench.is_some() {
            inputs.push((bench_file(m, name), model.name.span()));
        }
        let tuned = model.variants.contains(&Variant::Tuned);
        if tuned {
            inputs.push((tune_report_file(m, name), model.name.span()));
        }
        models.push(ModelParams {
            name: name.clone(),
            variants: built.iter().map(|v| v.name().to_string()).collect(),
            publish: model
                .publish
                .iter()
                .map(|p| PublishParams {
                    variant: p.get_ref().name().to_string(),
                    path: release_model_path(name, *p.get_ref()),
                })
                .collect(),
            bench: model.bench.is_some(),
            tune: tuned,
        });
    }
    let (manifest_json, bench_json) = (
        format!("{build}/manifest.json"),
        format!("{build}/bench.json"),
    );
    let mut node = NodeSpec::new::<Manifest>("manifest", &Params { models }, 0..0)?
        .output(&manifest_json, 0..0)
        .output(&bench_json, 0..0);
    for (path, span) in inputs {
        node = node.input(path, span);
    }
    out.node(node);
    out.publish("models/manifest.json", manifest_json, 0..0);
    out.publish("bench.json", bench_json, 0..0);
    Ok(())
}

/// A published variant and its path in the release tree.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PublishParams {
    /// The variant.
    pub variant: String,
    /// Its path inside the release tree.
    pub path: String,
}

/// One model in the release.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelParams {
    /// The model name.
    pub name: String,
    /// Every variant it builds; their files are inputs, in this order.
    pub variants: Vec<String>,
    /// The published variants.
    pub publish: Vec<PublishParams>,
    /// Whether its `bench.json` is an input (after the files).
    pub bench: bool,
    /// Whether its `tune.json` is an input (after `bench.json`): the tuned variant's policy
    /// and measured error.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub tune: bool,
}

/// Parameters of the `manifest` node.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Params {
    /// Every model, in pipeline order.
    pub models: Vec<ModelParams>,
}

/// The description of one published GGUF file.
pub fn describe_file(
    bytes: &[u8],
    release_path: &str,
    variant: &str,
) -> anyhow::Result<(u64, usize, Value)> {
    let f = GgufFile::parse(bytes).with_context(|| format!("reading {release_path}"))?;
    let mut types: BTreeMap<String, usize> = BTreeMap::new();
    for t in &f.tensors {
        *types.entry(t.ty.name()).or_default() += 1;
    }
    let ty_of = |name: &str| f.tensor(name).map(|t| t.ty.name());
    let n_outliers = f
        .metadata
        .iter()
        .filter(|(k, _)| k.starts_with(sky_quant::META_OUTLIERS_PREFIX))
        .count();
    let policy = json!({
        "encoder": ty_of("blk.0.attn_qkv.weight"),
        "token_embd": ty_of("token_embd.weight"),
        "head": ty_of("cls.weight"),
        "outlier_ratio": f.get(sky_quant::META_OUTLIER_RATIO).and_then(GValue::as_f64),
        "tensors_with_outliers": n_outliers,
        "calibration_blake3": f.get(sky_quant::META_CALIBRATION_DIGEST).and_then(GValue::as_str),
    });
    let file = json!({
        "path": release_path,
        "variant": variant,
        "bytes": bytes.len(),
        "types": types,
        "blake3": blake3::hash(bytes).to_hex().to_string(),
        "policy": policy,
    });
    Ok((f.n_parameters(), f.tensors.len(), file))
}

/// The next input, a JSON record (`what`) of model `model`.
fn next_json<'a>(
    inputs: &mut impl Iterator<Item = &'a sky_dag::StageInput>,
    node: &str,
    what: &str,
    model: &str,
) -> anyhow::Result<Value> {
    let input = inputs
        .next()
        .with_context(|| format!("node `{node}`: missing {what} of {model}"))?;
    let text = sky_fs::read_to_string(&input.path, sky_fs::REPORT)
        .with_context(|| format!("reading {}", input.rel))?;
    serde_json::from_str(&text).with_context(|| format!("node `{node}`: {} is not JSON", input.rel))
}

/// What the manifest keeps of a `tune` report: the promise (tolerance, margin), what was
/// measured (errors, cases) and the policy, tensor by tensor.
fn tune_summary(report: &Value) -> Value {
    let policy: Map<String, Value> = report["tensors"]
        .as_array()
        .map(|rows| {
            rows.iter()
                .filter_map(|r| Some((r["name"].as_str()?.to_string(), r["chosen"].clone())))
                .collect()
        })
        .unwrap_or_default();
    json!({
        "tolerance": report["tolerance"],
        "margin": report["margin"],
        "error": report["error"],
        "cases": report["cases"],
        "holdout_error": report["holdout_error"],
        "holdout_cases": report["holdout_cases"],
        "policy": policy,
    })
}

impl Kind for Manifest {
    const NAME: &'static str = "manifest";
    // 4: bench.json's `spread` (min and max round per timing); F32 reference sizes.
    const VERSION: u32 = 4;
    type Params = Params;

    fn run(&self, p: Params, ctx: &mut StageCtx<'_>) -> anyhow::Result<()> {
        let node = ctx.node;
        let (Some(manifest_out), Some(bench_out)) = (ctx.outputs.first(), ctx.outputs.get(1))
        else {
            bail!("node `{node}`: expects two outputs (manifest.json, bench.json)");
        };
        let mut inputs = ctx.inputs.iter();
        let mut models = Vec::new();
        let mut bench = Map::new();
        let mut measured = Map::new();
        let mut spreads = Map::new();
        for m in &p.models {
            let mut files = Vec::new();
            let mut variants = Vec::new();
            let (mut params, mut tensors) = (Value::Null, Value::Null);
            for v in &m.variants {
                let input = inputs
                    .next()
                    .with_context(|| format!("node `{node}`: missing input for {}.{v}", m.name))?;
                let bytes = sky_fs::read(&input.path, sky_fs::MODEL)
                    .with_context(|| format!("reading {}", input.rel))?;
                let published = m.publish.iter().find(|p| p.variant == *v);
                let rel = match published {
                    Some(p) => p.path.clone(),
                    None => format!("models/{}.{v}.gguf", m.name),
                };
                let (n_params, n_tensors, file) = describe_file(&bytes, &rel, v)
                    .with_context(|| format!("node `{node}`: {}", input.rel))?;
                params = json!(n_params);
                tensors = json!(n_tensors);
                variants.push(json!({
                    "variant": v,
                    "bytes": file["bytes"],
                    "blake3": file["blake3"],
                    "types": file["types"],
                }));
                if published.is_some() {
                    files.push(file);
                }
            }
            let mut per_mode = Map::new();
            let mut spread_per_mode = Map::new();
            for mode in BenchMode::ALL {
                per_mode.insert(mode.name().into(), Value::Null);
                spread_per_mode.insert(mode.name().into(), Value::Null);
            }
            if m.bench {
                let doc = next_json(&mut inputs, node, "bench.json", &m.name)?;
                if let Some(modes) = doc["modes"].as_object() {
                    for (mode, r) in modes {
                        per_mode.insert(mode.clone(), r["us_per_question"].clone());
                        // The spread over rounds: the fastest and the slowest round's median.
                        let spread = if r.is_object() {
                            json!({"min": r["min_us"], "max": r["max_us"], "rounds": r["rounds"]})
                        } else {
                            Value::Null
                        };
                        spread_per_mode.insert(mode.clone(), spread);
                    }
                    // Where the timings come from: one process measures every mode.
                    if let Some(r) = modes.values().find(|r| r.is_object()) {
                        let on = ["cpu", "isa", "int8_kernel", "threads"]
                            .into_iter()
                            .map(|k| (k.to_string(), r[k].clone()))
                            .collect();
                        measured.insert(m.name.clone(), Value::Object(on));
                    }
                }
            }
            bench.insert(m.name.clone(), Value::Object(per_mode));
            spreads.insert(m.name.clone(), Value::Object(spread_per_mode));
            if m.tune {
                let doc = next_json(&mut inputs, node, "tune.json", &m.name)?;
                let tune = tune_summary(&doc);
                for v in variants.iter_mut().chain(files.iter_mut()) {
                    if v["variant"] == "tuned" {
                        v["tune"] = tune.clone();
                    }
                }
            }
            models.push(
                json!({"name": m.name, "parameters": params, "tensors": tensors, "variants": variants, "files": files}),
            );
        }
        let manifest = json!({"format": MANIFEST_FORMAT, "models": models});
        let bench = json!({"format": BENCH_FORMAT, "unit": "microseconds per question", "models": bench, "spread": spreads, "measured": measured});
        sky_fs::write(
            manifest_out,
            format!("{}\n", serde_json::to_string_pretty(&manifest)?).as_bytes(),
        )?;
        sky_fs::write(
            bench_out,
            format!("{}\n", serde_json::to_string_pretty(&bench)?).as_bytes(),
        )?;
        Ok(())
    }
}
