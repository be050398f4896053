//! `pipeline.toml` -> node specs: every `[[command]]`, each `[[model]]`'s chain (convert,
//! calibrate, quantize, tune, bench), the release `manifest` node, the golden suites, `[site]`
//! and the release entries. Each kind plans its own nodes, params and input roles in its file
//! under [`crate::kinds`], through the [`Planner`] registered beside it: the one place each
//! default is chosen. This walks the manifest and runs the planners in their registered order
//! (see [`Planner`]). The graph checks themselves are [`sky_dag::Graph::build`]'s.
//!
//! Node ids: a command's name, `<model>/<stage>` (grouped under the model, so `skyctl build
//! <model>` selects them), `golden/<suite>` (grouped under its model for model suites),
//! `manifest`. Files ([`super::plan`]): `<build_dir>/<model>/<model>.<variant>.gguf`,
//! `calibration.json`, `bench.json`; `<build_dir>/manifest.json`, `<build_dir>/bench.json`,
//! `<build_dir>/golden/<suite>.json`.

use sky_dag::{GraphSpec, Located, Result};

use super::plan::{model_file, release_model_path, GoldenPlan, ModelPlan, Plan, Planned, Planner};
use super::schema::Manifest;

/// The specs of every node `m` declares, planned by `planners` (the kinds' list). `env`
/// reads the values of declared environment variables (they enter command keys).
pub fn expand(
    m: &Manifest,
    env: &super::plan::EnvReader<'_>,
    planners: &[Planner],
) -> Result<GraphSpec> {
    let models = models(m);
    let mut out = Planned::default();
    // The published variants come first in the release, in model order.
    for cx in &models {
        for p in &cx.model.publish {
            let v = *p.get_ref();
            out.publish(
                release_model_path(cx.name, v),
                model_file(m, cx.name, v),
                p.span(),
            );
        }
    }
    let plan = Plan { m, env };
    for run in planners.chunk_by(|a, b| std::mem::discriminant(a) == std::mem::discriminant(b)) {
        match run.first() {
            Some(Planner::Pipeline(_)) => {
                for p in run {
                    if let Planner::Pipeline(f) = p {
                        f(&plan, &mut out)?;
                    }
                }
            }
            Some(Planner::Model(_)) => {
                for cx in &models {
                    for p in run {
                        if let Planner::Model(f) = p {
                            f(cx, &mut out)?;
                        }
                    }
                }
            }
            Some(Planner::Golden(_)) => {
                for g in &m.golden {
                    let name = g.name.get_ref();
                    let cx = GoldenPlan {
                        m,
                        golden: g,
                        name,
                        id: format!("golden/{name}"),
                        span: g.name.span(),
                        env,
                    };
                    // Every node of an on-request suite is on request (the harness run too).
                    let first = out.nodes.len();
                    for p in run {
                        if let Planner::Golden(f) = p {
                            f(&cx, &mut out)?;
                        }
                    }
                    if g.on_request {
                        out.nodes[first..]
                            .iter_mut()
                            .for_each(|n| n.on_request = true);
                    }
                }
            }
            None => {}
        }
    }
    explicit_release(m, &mut out);
    Ok(GraphSpec {
        nodes: out.nodes,
        release: out.release,
        release_dir: Located::new(
            m.project.release_dir.get_ref().clone(),
            m.project.release_dir.span(),
        ),
        store_dir: m.project.store_dir.get_ref().clone(),
        group_noun: "model".into(),
        protected: Vec::new(),
    })
}

/// The models that have a checkpoint (one with neither `source` nor `export` was refused by
/// the manifest check), each with what its planners share.
fn models(m: &Manifest) -> Vec<ModelPlan<'_>> {
    m.model
        .iter()
        .filter_map(|model| {
            let checkpoint = match (&model.source, &model.export) {
                (Some(s), _) => (s.get_ref().clone(), s.span()),
                (None, Some(e)) => (format!("node:{}", e.get_ref()), e.span()),
                (None, None) => return None,
            };
            Some(ModelPlan {
                m,
                model,
                name: model.name.get_ref(),
                span: model.name.span(),
                checkpoint,
            })
        })
        .collect()
}

/// `[[release.publish]]`: `to` ending in `/` means "into this directory" (an empty `to` was
/// refused by the manifest check).
fn explicit_release(m: &Manifest, out: &mut Planned) {
    for p in &m.release.publish {
        let mut to = p.to.get_ref().clone();
        if to.ends_with('/') {
            // A directory output (`out/site/`) keeps its name too.
            let from = p.from.get_ref().trim_end_matches('/');
            let base = from.rsplit('/').next().unwrap_or_default();
            to.push_str(base);
        }
        out.publish(to, p.from.get_ref().clone(), p.from.span());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn graph(src: &str) -> Result<sky_dag::Graph> {
        let m = Manifest::parse(src, Path::new("pipeline.toml"))?;
        sky_dag::Graph::build(
            expand(&m, &|_| Ok(None), &crate::kinds::kinds().planners)?,
            &m.source,
            Path::new("/nonexistent-root"),
        )
    }

    fn cmd(name: &str, inputs: &[&str], outputs: &[&str]) -> String {
        format!(
            "[[command]]\nname = \"{name}\"\nrun = \"true\"\ninputs = {inputs:?}\noutputs = {outputs:?}\n"
        )
    }

    #[test]
    fn graph_errors_are_located_in_pipeline_toml() {
        let e = graph(&(cmd("a", &[], &["out/x"]) + &cmd("b", &[], &["out/x"])))
            .unwrap_err()
            .to_string();
        assert!(e.contains("output `out/x` also written by node `a`"), "{e}");
        assert!(e.starts_with("pipeline.toml:7:8:"), "{e}");
        let e = graph(&cmd("a", &[], &["site/public/x"]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("inside the release directory"), "{e}");
    }

    #[test]
    fn model_expands_into_chain() {
        let g = graph("[calibration.default]\nprompts = \"builtin\"\n[[model]]\nname = \"m\"\nsource = \"models/m\"\nvariants = [\"f16\", \"q8_0\"]\npublish = [\"q8_0\"]\nbench = { modes = [\"f32\"] }\n").unwrap();
        let ids: Vec<&str> = g.order.iter().map(|&n| g.nodes[n].id.as_str()).collect();
        for id in [
            "m/convert.f32",
            "m/convert.f16",
            "m/calibrate",
            "m/quantize.q8_0",
            "m/bench",
            "manifest",
        ] {
            assert!(ids.contains(&id), "{id} missing from {ids:?}");
        }
        let q = g.by_id["m/quantize.q8_0"];
        assert_eq!(
            g.deps[q],
            vec![g.by_id["m/convert.f32"], g.by_id["m/calibrate"]]
        );
        assert!(g.nodes[g.by_id["m/bench"]].exclusive);
        assert_eq!(g.release.len(), 3);
        assert_eq!(g.resolve_target("m").unwrap().len(), 5);
        assert_eq!(
            g.resolve_target("mm").unwrap_err().to_string(),
            "no node, model or kind named `mm` (did you mean `m`?)"
        );
    }

    #[test]
    fn each_models_chain_stays_together_in_declaration_order() {
        let model = |name: &str| {
            format!("[[model]]\nname = \"{name}\"\nsource = \"models/{name}\"\nvariants = [\"f16\", \"q8_0\"]\nbench = {{}}\n")
        };
        let src = format!(
            "{}{}{}[[golden]]\nname = \"k\"\nkind = \"kernels\"\n",
            cmd("c", &[], &["x"]),
            model("a"),
            model("b")
        );
        let g = graph(&src).unwrap();
        let ids: Vec<&str> = g.nodes.iter().map(|n| n.id.as_str()).collect();
        let chain = |m: &str| {
            [
                "convert.f32",
                "convert.f16",
                "calibrate",
                "quantize.q8_0",
                "bench",
            ]
            .map(|s| format!("{m}/{s}"))
        };
        let mut want = vec!["c".to_string()];
        want.extend(chain("a"));
        want.extend(chain("b"));
        want.extend(["manifest", "golden/k/gen", "golden/k/run", "golden/k"].map(String::from));
        assert_eq!(ids, want);
    }

    #[test]
    fn every_kind_accepts_the_params_built_here() {
        let src = format!(
            "{}[[model]]\nname = \"m\"\nsource = \"models/m\"\nvariants = [\"f32\", \"f16\", \"q8_0\"]\n\
             publish = [\"f16\"]\nbench = {{ modes = [\"int8\", \"q8_0\"] }}\n\
             [[golden]]\nname = \"g\"\nkind = \"model\"\nmodel = \"m\"\ncompute = \"q8-fast\"\n\
             cases = \"c.jsonl\"\nexpected = \"e.jsonl\"\n\
             [[golden]]\nname = \"k\"\nkind = \"kernels\"\n",
            cmd("a", &[], &["x"])
        );
        let g = graph(&src).unwrap();
        let kinds = crate::kinds::kinds();
        for n in &g.nodes {
            let kind = kinds.registry.get(&n.kind).unwrap();
            if let Err(e) = kind.check_params(n.params.value()) {
                panic!("node {}: {e}", n.id);
            }
            // Every input has a role its kind declares, but the inputs of command nodes
            // (which name their own) and of the manifest (ordered by its params).
            let declared: Vec<&str> = kinds.inputs[n.kind.as_str()]
                .iter()
                .map(|r| r.name)
                .collect();
            for role in &n.input_roles {
                let free = n.kind == "command" || n.kind == "manifest";
                assert!(
                    if free {
                        role.is_empty()
                    } else {
                        declared.contains(&role.as_str())
                    },
                    "node {}: role `{role}` of {declared:?}",
                    n.id
                );
            }
        }
        let roles = |id: &str| g.nodes[g.by_id[id]].input_roles.clone();
        assert_eq!(roles("m/quantize.q8_0"), ["model", "calibration"]);
        assert_eq!(roles("m/bench"), ["f32", "f16", "q8_0"]);
        assert_eq!(roles("golden/g"), ["model", "cases", "expected"]);
        assert_eq!(roles("golden/k"), ["gold", "candidate"]);
        let bench = &g.nodes[g.by_id["m/bench"]].params.value();
        assert_eq!(bench["modes"], serde_json::json!(["q8", "q8_0"]));
    }

    #[test]
    fn bench_threads_reach_the_params_and_bad_counts_are_located() {
        let src = "[[model]]\nname = \"m\"\nsource = \"models/m\"\nbench = { threads = 2 }\n";
        let g = graph(src).unwrap();
        let bench = &g.nodes[g.by_id["m/bench"]].params.value();
        assert_eq!(bench["threads"], serde_json::json!(2));
        // One thread (the default) stays out of the params, so existing keys do not move.
        let g = graph("[[model]]\nname = \"m\"\nsource = \"models/m\"\nbench = {}\n").unwrap();
        assert!(g.nodes[g.by_id["m/bench"]]
            .params
            .value()
            .get("threads")
            .is_none());
        for (v, needle) in [("0", "at least 1"), ("17", "at most 16")] {
            let e = graph(&format!(
                "[[model]]\nname = \"m\"\nsource = \"models/m\"\nbench = {{ threads = {v} }}\n"
            ))
            .unwrap_err()
            .to_string();
            assert!(
                e.starts_with("pipeline.toml:4:")
                    && e.contains("bench.threads")
                    && e.contains(needle),
                "{e}"
            );
        }
    }

    #[test]
    fn only_suites_of_published_variants_gate_the_release() {
        let suite = |name: &str, variant: &str| {
            format!("[[golden]]\nname = \"{name}\"\nkind = \"model\"\nmodel = \"m\"\nvariant = \"{variant}\"\ncases = \"c.jsonl\"\nexpected = \"e.jsonl\"\n")
        };
        let src = format!(
            "[[model]]\nname = \"m\"\nsource = \"models/m\"\nvariants = [\"f32\", \"f16\"]\npublish = [\"f16\"]\n{}{}[[golden]]\nname = \"k\"\nkind = \"kernels\"\n{}",
            suite("pub", "f16"),
            suite("side", "f32"),
            cmd("other", &[], &["x"])
        );
        let g = graph(&src).unwrap();
        let gates: Vec<&str> = g
            .nodes
            .iter()
            .filter(|n| n.gates_release)
            .map(|n| n.id.as_str())
            .collect();
        assert_eq!(gates, ["golden/pub"]);
        let critical = g.release_critical();
        let is = |id: &str| critical[g.by_id[id]];
        // What the release files come from, the gating suite and what it needs.
        for id in ["m/convert.f16", "m/convert.f32", "manifest", "golden/pub"] {
            assert!(is(id), "{id}");
        }
        for id in ["golden/side", "golden/k", "golden/k/run", "other"] {
            assert!(!is(id), "{id}");
        }
    }

    #[test]
    fn site_publishes_the_pages_and_the_modules_at_the_top() {
        let model = "[[model]]\nname = \"m\"\nsource = \"models/m\"\npublish = [\"f16\"]\n";
        let with = |site: &str| {
            let src = format!(
                "{model}{}{site}",
                cmd("w", &[], &["out/s.wasm", "out/c.wasm"])
            );
            let g = graph(&src).unwrap();
            let mut rel: Vec<(String, String)> = g
                .release
                .iter()
                .map(|r| (r.to.clone(), g.nodes[r.node].outputs[r.output].path.clone()))
                .collect();
            rel.sort();
            (g, rel)
        };
        let (g, rel) =
            with("[site]\nmodules = { simd = \"out/s.wasm\", scalar = \"out/c.wasm\" }\n");
        let site = &g.nodes[g.by_id["site"]];
        assert_eq!(site.kind, "site");
        assert_eq!(site.outputs.len(), 9);
        assert!(site.params.value().get("modules").is_none());
        let find = |to: &str| rel.iter().find(|(t, _)| t == to).map(|(_, f)| f.as_str());
        assert_eq!(find("index.html"), Some("build/site/index.html"));
        assert_eq!(find("bench.html"), Some("build/site/bench.html"));
        assert_eq!(find("sky-web.simd.wasm"), Some("out/s.wasm"));
        assert_eq!(find("sky-web.scalar.wasm"), Some("out/c.wasm"));
        assert_eq!(find("models/m.gguf"), Some("build/m/m.f16.gguf"));
        // The pages' digest is in the key's params, so other pages make another key.
        assert_eq!(
            site.params.value()["pages"],
            serde_json::json!(crate::kinds::site::pages_digest())
        );
        // Without `modules`: the ones skyctl carries, written by the site node (when this
        // build of skyctl has them).
        if crate::kinds::site::embedded_modules().is_ok() {
            let (g, rel) = with("[site]\n");
            let site = &g.nodes[g.by_id["site"]];
            assert_eq!(site.outputs.len(), 11);
            assert!(site.params.value()["modules"].is_string());
            let find = |to: &str| rel.iter().find(|(t, _)| t == to).map(|(_, f)| f.as_str());
            assert_eq!(
                find("sky-web.simd.wasm"),
                Some("build/site/sky-web.simd.wasm")
            );
        }
    }

    #[test]
    fn unknown_bench_mode_is_located() {
        let e = graph(
            "[[model]]\nname = \"m\"\nsource = \"models/m\"\nbench = { modes = [\"fp8\"] }\n",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.starts_with("pipeline.toml:4:20: model `m`: unknown bench mode `fp8`"),
            "{e}"
        );
    }
}
