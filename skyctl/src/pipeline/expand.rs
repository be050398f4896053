//! `pipeline.toml` -> node specs: every `[[command]]`, each `[[model]]`'s chain (convert,
//! calibrate, quantize, bench), the release `manifest` node, the golden suites and the
//! release entries. Each node's parameters are its kind's `Params`, built here: the one place
//! each default is chosen. The graph checks themselves are [`sky_dag::Graph::build`]'s.
//!
//! Node ids: a command's name, `<model>/<stage>` (grouped under the model, so `skyctl build
//! <model>` selects them), `golden/<suite>` (grouped under its model for model suites),
//! `manifest`. Files: `<build_dir>/<model>/<model>.<variant>.gguf`, `calibration.json`,
//! `bench.json`; `<build_dir>/manifest.json`, `<build_dir>/bench.json`,
//! `<build_dir>/golden/<suite>.json`.

use std::ops::Range;

use sky_dag::{GraphSpec, Located, NodeSpec, ReleaseSpec, Result};

use super::schema::{GoldenKind, Manifest, Model, Variant, SITE_NODE};
use crate::kinds::{
    bench, calibrate, convert, golden_gen, golden_kernels, golden_model, kernel_harness, manifest,
    quantize, site, tune, InputRole as _,
};
use crate::ops::bench::BenchMode;
use crate::ops::compute::Compute;
use crate::ops::kernels::Generator;
use crate::ops::policy::TensorType;

/// The specs of every node `m` declares. `env` reads the values of declared environment
/// variables (they enter command keys).
pub fn expand(m: &Manifest, env: &dyn Fn(&str) -> Option<String>) -> Result<GraphSpec> {
    let mut x = Expander {
        m,
        nodes: Vec::new(),
        release: Vec::new(),
    };
    x.commands(env)?;
    for model in &m.model {
        x.model(model)?;
    }
    x.manifest_node()?;
    x.goldens()?;
    x.site()?;
    x.explicit_release();
    Ok(GraphSpec {
        nodes: x.nodes,
        release: x.release,
        release_dir: Located::new(
            m.project.release_dir.get_ref().clone(),
            m.project.release_dir.span(),
        ),
        store_dir: m.project.store_dir.get_ref().clone(),
        group_noun: "model".into(),
        protected: Vec::new(),
    })
}

struct Expander<'m> {
    m: &'m Manifest,
    nodes: Vec<NodeSpec>,
    release: Vec<ReleaseSpec>,
}

/// Where a published variant goes in the release tree: the F16 file, the one the site ships,
/// as `models/<name>.gguf`; any other variant as `models/<name>.<variant>.gguf`.
fn release_model_path(model: &str, variant: Variant) -> String {
    match variant {
        Variant::F16 => format!("models/{model}.gguf"),
        v => format!("models/{model}.{}.gguf", v.name()),
    }
}

/// The policy file a model's `tune` node writes.
fn tuned_policy_file(m: &Manifest, model: &str) -> String {
    format!(
        "{}/{model}/{model}.tuned.policy.toml",
        m.project.build_dir.get_ref()
    )
}

/// The search report a model's `tune` node writes.
fn tune_report_file(m: &Manifest, model: &str) -> String {
    format!("{}/{model}/tune.json", m.project.build_dir.get_ref())
}

fn model_file(m: &Manifest, model: &str, variant: Variant) -> String {
    format!(
        "{}/{model}/{model}.{}.gguf",
        m.project.build_dir.get_ref(),
        variant.name()
    )
}

impl Expander<'_> {
    fn commands(&mut self, env: &dyn Fn(&str) -> Option<String>) -> Result<()> {
        for c in &self.m.command {
            // A string is run by `sh -c`; the manifest check has made sure an array holds
            // only strings.
            let run = match c.run.get_ref() {
                toml::Value::String(s) => vec!["sh".into(), "-c".into(), s.clone()],
                toml::Value::Array(a) => a
                    .iter()
                    .filter_map(|v| v.as_str().map(str::to_string))
                    .collect(),
                _ => Vec::new(),
            };
            let cwd = match &c.cwd {
                Some(cwd) => {
                    let p = sky_dag::graph::clean_rel(cwd.get_ref())
                        .map_err(|e| self.m.error_at(cwd.span(), format!("cwd: {e}")))?;
                    if p.is_empty() {
                        ".".to_string()
                    } else {
                        p
                    }
                }
                None => ".".to_string(),
            };
            let params = sky_dag::command::Params {
                run,
                cwd,
                env: c
                    .env
                    .iter()
                    .map(|e| (e.get_ref().clone(), env(e.get_ref())))
                    .collect(),
                outputs: c.outputs.iter().map(|o| o.get_ref().clone()).collect(),
            };
            let mut node = NodeSpec::new::<sky_dag::command::Command>(
                c.name.get_ref(),
                &params,
                c.name.span(),
            )?;
            node.exclusive = c.exclusive;
            node.volatile = c.volatile;
            node.on_request = c.on_request;
            for i in &c.inputs {
                let decl = i.get_ref();
                node = if decl.allow_empty {
                    node.input_may_be_empty(&decl.path, i.span())
                } else {
                    node.input(&decl.path, i.span())
                };
            }
            for o in &c.outputs {
                node = node.output(o.get_ref(), o.span());
            }
            self.nodes.push(node);
        }
        Ok(())
    }

    fn model(&mut self, model: &Model) -> Result<()> {
        let m = self.m;
        let name = model.name.get_ref().clone();
        let span = model.name.span();
        let checkpoint = match (&model.source, &model.export) {
            (Some(s), _) => (s.get_ref().clone(), s.span()),
            (None, Some(e)) => (format!("node:{}", e.get_ref()), e.span()),
            (None, None) => return Ok(()), // rejected by manifest validation
        };
        let build = m.project.build_dir.get_ref();
        let wants = |v: Variant| model.variants.contains(&v);
        let node = |stage: &str| format!("{name}/{stage}");
        // The F32 file and its calibration feed the Q8_0 and the tuned variants.
        let needs_reference = wants(Variant::F32) || wants(Variant::Q8_0) || wants(Variant::Tuned);
        if needs_reference {
            let params = convert::Params {
                ftype: TensorType::F32,
                head_type: TensorType::F32,
                rules: Vec::new(),
                name: Some(name.clone()),
            };
            self.nodes.push(
                NodeSpec::new::<convert::Convert>(node("convert.f32"), &params, span.clone())?
                    .group(&name)
                    .input_role(convert::CHECKPOINT, &checkpoint.0, checkpoint.1.clone())
                    .output(model_file(m, &name, Variant::F32), span.clone()),
            );
        }
        if wants(Variant::F16) {
            let policy = m.policy_for(model.policy.get_ref()).unwrap_or_default();
            let params = convert::Params {
                ftype: policy.default_type,
                head_type: policy.head_type,
                rules: policy
                    .rule
                    .iter()
                    .map(|r| convert::Rule {
                        pattern: r.pattern.get_ref().clone(),
                        ty: r.tensor_type,
                    })
                    .collect(),
                name: Some(name.clone()),
            };
            self.nodes.push(
                NodeSpec::new::<convert::Convert>(node("convert.f16"), &params, span.clone())?
                    .group(&name)
                    .input_role(convert::CHECKPOINT, &checkpoint.0, checkpoint.1.clone())
                    .output(model_file(m, &name, Variant::F16), span.clone()),
            );
        }
        if wants(Variant::Q8_0) || wants(Variant::Tuned) {
            let f32_file = model_file(m, &name, Variant::F32);
            let cal_name = model.quantize.calibration.get_ref();
            let prompts = m.calibration.get(cal_name).map(|c| c.prompts.clone());
            let calib_path = format!("{build}/{name}/calibration.json");
            let mut calib = NodeSpec::new::<calibrate::Calibrate>(
                node("calibrate"),
                &calibrate::Params {
                    prompts: match &prompts {
                        Some(p) if p.get_ref() != "builtin" => calibrate::Prompts::File {
                            file: p.get_ref().clone(),
                        },
                        _ => calibrate::Prompts::Builtin(calibrate::BuiltinPrompts::Builtin),
                    },
                },
                span.clone(),
            )?
            .group(&name)
            .input_role(calibrate::MODEL, &f32_file, span.clone());
            if let Some(p) = prompts.as_ref().filter(|p| p.get_ref() != "builtin") {
                calib = calib.input_role(calibrate::PROMPTS, p.get_ref(), p.span());
            }
            self.nodes.push(calib.output(&calib_path, span.clone()));
            let params = quantize::Params {
                outlier_ratio: model.quantize.outlier_ratio,
            };
            if wants(Variant::Q8_0) {
                self.nodes.push(
                    NodeSpec::new::<quantize::Quantize>(
                        node("quantize.q8_0"),
                        &params,
                        span.clone(),
                    )?
                    .group(&name)
                    .input_role(quantize::MODEL, &f32_file, span.clone())
                    .input_role(quantize::CALIBRATION, &calib_path, span.clone())
                    .output(model_file(m, &name, Variant::Q8_0), span.clone()),
                );
            }
            if let (true, Some(t)) = (wants(Variant::Tuned), &model.tune) {
                let policy_path = tuned_policy_file(m, &name);
                let mut tune = NodeSpec::new::<tune::Tune>(
                    node("tune"),
                    &tune::Params {
                        tolerance: *t.tolerance.get_ref(),
                        margin: *t.margin.get_ref(),
                        budget: t.budget,
                        outlier_ratio: model.quantize.outlier_ratio,
                        name: name.clone(),
                    },
                    span.clone(),
                )?
                .group(&name)
                .input_role(tune::MODEL, &f32_file, span.clone())
                .input_role(tune::CALIBRATION, &calib_path, span.clone())
                .input_role(tune::CASES, t.cases.get_ref(), t.cases.span());
                if let Some(h) = &t.holdout {
                    tune = tune.input_role(tune::HOLDOUT, h.get_ref(), h.span());
                }
                self.nodes.push(
                    tune.output(&policy_path, span.clone())
                        .output(tune_report_file(m, &name), span.clone()),
                );
                // The policy applied like the Q8_0 variant's: its Q8_0 tensors get the
                // calibrated outlier columns the search measured.
                self.nodes.push(
                    NodeSpec::new::<quantize::Quantize>(
                        node("quantize.tuned"),
                        &params,
                        span.clone(),
                    )?
                    .group(&name)
                    .input_role(quantize::MODEL, &f32_file, span.clone())
                    .input_role(quantize::CALIBRATION, &calib_path, span.clone())
                    .input_role(quantize::POLICY, &policy_path, span.clone())
                    .output(model_file(m, &name, Variant::Tuned), span.clone()),
                );
            }
        }
        if let Some(b) = &model.bench {
            let mut modes = Vec::with_capacity(b.modes.len());
            for mode in &b.modes {
                let parsed = BenchMode::parse(mode.get_ref()).map_err(|e| {
                    m.error_at(mode.span(), format!("model `{name}`: {e} (int8 = q8)"))
                })?;
                // A mode whose file is not built would measure nothing and print null.
                let needs: &[Variant] = match parsed {
                    BenchMode::Q8_0 => &[Variant::Q8_0],
                    BenchMode::Tuned => &[Variant::Tuned],
                    _ => &[Variant::F16, Variant::F32],
                };
                if !needs.iter().any(|v| model.variants.contains(v)) {
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
            let params = bench::Params {
                modes,
                questions: *b.questions.get_ref(),
                iters: *b.iters.get_ref(),
                rounds: *b.rounds.get_ref(),
                threads: *b.threads.get_ref(),
            };
            let mut n = NodeSpec::new::<bench::Bench>(node("bench"), &params, span.clone())?
                .group(&name)
                .output(format!("{build}/{name}/bench.json"), span.clone());
            // In the order of `variants`, as the keys always had them.
            for &v in &model.variants {
                n = n.input_role(bench::file(v), model_file(m, &name, v), span.clone());
            }
            n.exclusive = true;
            n.volatile = true;
            self.nodes.push(n);
        }
        for p in &model.publish {
            let v = *p.get_ref();
            self.release.push(ReleaseSpec {
                to: release_model_path(&name, v),
                from: model_file(m, &name, v),
                span: p.span(),
            });
        }
        Ok(())
    }

    /// One `manifest` node over every model: `manifest.json` and `bench.json` of the release.
    fn manifest_node(&mut self) -> Result<()> {
        let m = self.m;
        if m.model.is_empty() {
            return Ok(());
        }
        let build = m.project.build_dir.get_ref();
        let mut models = Vec::new();
        let mut inputs = Vec::new();
        for model in &m.model {
            let name = model.name.get_ref();
            // Every variant the pipeline builds (sizes and digests), published or not.
            for &v in &model.variants {
                inputs.push((model_file(m, name, v), model.name.span()));
            }
            if model.bench.is_some() {
                inputs.push((format!("{build}/{name}/bench.json"), model.name.span()));
            }
            let tuned = model.variants.contains(&Variant::Tuned);
            if tuned {
                inputs.push((tune_report_file(m, name), model.name.span()));
            }
            models.push(manifest::ModelParams {
                name: name.clone(),
                variants: model
                    .variants
                    .iter()
                    .map(|v| v.name().to_string())
                    .collect(),
                publish: model
                    .publish
                    .iter()
                    .map(|p| manifest::PublishParams {
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
        let mut node =
            NodeSpec::new::<manifest::Manifest>("manifest", &manifest::Params { models }, 0..0)?
                .output(&manifest_json, 0..0)
                .output(&bench_json, 0..0);
        for (path, span) in inputs {
            node = node.input(path, span);
        }
        self.nodes.push(node);
        self.release.push(ReleaseSpec {
            to: "models/manifest.json".into(),
            from: manifest_json,
            span: 0..0,
        });
        self.release.push(ReleaseSpec {
            to: "bench.json".into(),
            from: bench_json,
            span: 0..0,
        });
        Ok(())
    }

    fn goldens(&mut self) -> Result<()> {
        let m = self.m;
        let build = m.project.build_dir.get_ref();
        for g in &m.golden {
            let name = g.name.get_ref();
            let span = g.name.span();
            // Every node of an on-request suite is on request (the harness run too).
            let first = self.nodes.len();
            let id = format!("golden/{name}");
            let report = format!("{build}/golden/{name}.json");
            let node = match g.kind {
                GoldenKind::Model => self.model_golden(g, &id, span.clone())?,
                GoldenKind::Kernels => {
                    // Chain: goldens (generated, or committed at `path`) -> harness run
                    // (volatile) -> this check node. See kinds/kernel_harness.rs.
                    let dir = format!("{build}/golden/{name}");
                    let gold = match &g.path {
                        Some(p) => (p.get_ref().clone(), p.span()),
                        None => {
                            let generator = g
                                .generator
                                .as_ref()
                                .and_then(|x| Generator::parse(x.get_ref()))
                                .unwrap_or_default();
                            self.nodes.push(
                                NodeSpec::new::<golden_gen::GoldenGen>(
                                    format!("{id}/gen"),
                                    &golden_gen::Params { generator },
                                    span.clone(),
                                )?
                                .output(format!("{dir}/gold/"), span.clone()),
                            );
                            (format!("node:{id}/gen"), span.clone())
                        }
                    };
                    let params = kernel_harness::Params {
                        harness: g.harness.as_ref().map(|h| h.get_ref().clone()),
                    };
                    let mut run = NodeSpec::new::<kernel_harness::KernelHarness>(
                        format!("{id}/run"),
                        &params,
                        span.clone(),
                    )?
                    .input_role(kernel_harness::GOLD, &gold.0, gold.1.clone());
                    for s in &g.sources {
                        run = run.input_role(kernel_harness::SOURCE, s.get_ref(), s.span());
                    }
                    run.volatile = true;
                    self.nodes
                        .push(run.output(format!("{dir}/out/"), span.clone()));
                    let path = if g.harness.is_some() {
                        golden_kernels::Harness::Harness
                    } else {
                        golden_kernels::Harness::Cpu
                    };
                    NodeSpec::new::<golden_kernels::GoldenKernels>(
                        &id,
                        &golden_kernels::Params {
                            suite: name.clone(),
                            path,
                        },
                        span.clone(),
                    )?
                    .input_role(golden_kernels::GOLD, &gold.0, gold.1)
                    .input_role(
                        golden_kernels::CANDIDATE,
                        format!("node:{id}/run"),
                        span.clone(),
                    )
                }
            };
            self.nodes.push(node.output(report, span));
            if g.on_request {
                self.nodes[first..]
                    .iter_mut()
                    .for_each(|n| n.on_request = true);
            }
        }
        Ok(())
    }

    fn model_golden(
        &self,
        g: &super::schema::Golden,
        id: &str,
        span: Range<usize>,
    ) -> Result<NodeSpec> {
        let m = self.m;
        let model = g
            .model
            .as_ref()
            .map(|x| x.get_ref().clone())
            .unwrap_or_default();
        let variant = g
            .variant
            .as_ref()
            .map(|v| *v.get_ref())
            .unwrap_or(Variant::F16);
        let params = golden_model::Params {
            tolerance: g.tolerance.unwrap_or(1e-3),
            variant,
            suite: g.name.get_ref().clone(),
            // Checked with the manifest: an unknown name was refused there.
            path: g
                .compute
                .as_ref()
                .and_then(|c| Compute::parse(c.get_ref()).ok())
                .unwrap_or_default(),
        };
        let mut node = NodeSpec::new::<golden_model::GoldenModel>(id, &params, span.clone())?
            .group(&model)
            .input_role(golden_model::MODEL, model_file(m, &model, variant), span);
        // A suite of a file the release ships must pass for the release to be written; any
        // other suite fails the build but does not hold back the release.
        node.gates_release = m.model.iter().any(|x| {
            x.name.get_ref() == &model && x.publish.iter().any(|p| *p.get_ref() == variant)
        });
        for (role, f) in [
            (golden_model::CASES, &g.cases),
            (golden_model::EXPECTED, &g.expected),
        ] {
            if let Some(f) = f {
                node = node.input_role(role, f.get_ref(), f.span());
            }
        }
        Ok(node)
    }

    /// `[site]`: one `site` node writing the pages (and the modules skyctl carries, unless
    /// `modules` names files of the pipeline) into `<build_dir>/site/`, each published at the
    /// top of the release tree, where the pages fetch them.
    fn site(&mut self) -> Result<()> {
        let m = self.m;
        let Some(decl) = &m.site else {
            return Ok(());
        };
        let dir = format!("{}/site", m.project.build_dir.get_ref());
        let span = decl.span();
        let (modules, from_files) = match &decl.get_ref().modules {
            Some(files) => (None, Some(files)),
            None => {
                let embedded = site::embedded_modules().map_err(|why| {
                    m.error_at(
                        span.clone(),
                        format!(
                            "[site] needs the browser engine modules ({}), and this skyctl carries none: {why}; \
                             or build them in the pipeline and name them with `modules = {{ simd = \"...\", scalar = \"...\" }}`",
                            site::MODULES.join(", ")
                        ),
                    )
                })?;
                (Some(site::digest(embedded)), None)
            }
        };
        let params = site::Params {
            pages: site::pages_digest(),
            modules,
        };
        let mut node = NodeSpec::new::<site::Site>(SITE_NODE, &params, span.clone())?;
        let mut files: Vec<&str> = site::PAGES.iter().map(|(name, _)| *name).collect();
        if from_files.is_none() {
            files.extend(site::MODULES);
        }
        for f in files {
            let out = format!("{dir}/{f}");
            node = node.output(&out, span.clone());
            self.release.push(ReleaseSpec {
                to: f.to_string(),
                from: out,
                span: span.clone(),
            });
        }
        self.nodes.push(node);
        if let Some(files) = from_files {
            for (to, from) in site::MODULES.iter().zip([&files.simd, &files.scalar]) {
                self.release.push(ReleaseSpec {
                    to: to.to_string(),
                    from: from.get_ref().clone(),
                    span: from.span(),
                });
            }
        }
        Ok(())
    }

    /// `[[release.publish]]`: `to` ending in `/` means "into this directory" (an empty `to`
    /// was refused by the manifest check).
    fn explicit_release(&mut self) {
        for p in &self.m.release.publish {
            let mut to = p.to.get_ref().clone();
            if to.ends_with('/') {
                // A directory output (`out/site/`) keeps its name too.
                let from = p.from.get_ref().trim_end_matches('/');
                let base = from.rsplit('/').next().unwrap_or_default();
                to.push_str(base);
            }
            self.release.push(ReleaseSpec {
                to,
                from: p.from.get_ref().clone(),
                span: p.from.span(),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn graph(src: &str) -> Result<sky_dag::Graph> {
        let m = Manifest::parse(src, Path::new("pipeline.toml"))?;
        sky_dag::Graph::build(
            expand(&m, &|_| None)?,
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
