//! The DAG: a manifest expanded into nodes, with every cross-node check done before anything
//! runs (unknown references, cycles, two nodes writing one output, outputs outside the
//! workspace, outputs inside the release tree or the store).
//!
//! Invariants once [`Graph::build`] returns: `order` is a topological order of all nodes;
//! `deps[n]` is sorted and deduplicated; every [`Input::Output`] points at an earlier node in
//! `order`; output paths are workspace-relative, `/`-separated, without `.`/`..` components.

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::Path;

use serde_json::{json, Value};

use super::error::{EngineError, Result};
use super::glob::Glob;
use super::manifest::{GoldenKind, Manifest, Model, Variant};

/// Index of a node in [`Graph::nodes`].
pub type NodeIdx = usize;

/// One input of a node, in declared order.
#[derive(Clone, Debug)]
pub enum Input {
    /// A source file or directory in the workspace (a directory hashes as a tree).
    Source(String),
    /// Source files matching a glob, hashed in sorted path order.
    Glob(Glob),
    /// One declared output of another node.
    Output {
        /// The producing node.
        node: NodeIdx,
        /// Index into that node's `outputs`.
        output: usize,
    },
}

/// One declared output of a node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Output {
    /// Workspace-relative path, without a trailing `/`.
    pub path: String,
    /// Whether the output is a directory (declared with a trailing `/`).
    pub dir: bool,
}

/// A node: a stage kind, its canonical parameters, inputs and outputs.
#[derive(Clone, Debug)]
pub struct Node {
    /// Unique id: a command's name, `<model>/<stage>`, `golden/<name>`, `manifest`.
    pub id: String,
    /// Stage kind name (`command`, `convert`, ...).
    pub kind: String,
    /// Canonical parameters (hashed with sorted object keys).
    pub params: Value,
    /// Inputs in declared order.
    pub inputs: Vec<Input>,
    /// Declared outputs.
    pub outputs: Vec<Output>,
    /// Runs alone.
    pub exclusive: bool,
    /// Not reproducible; re-run on `--rerun`.
    pub volatile: bool,
    /// The model this node belongs to, for `skyctl build <model>`.
    pub model: Option<String>,
    /// Where the node is declared in the manifest.
    pub span: Range<usize>,
}

/// One file of the release tree.
#[derive(Clone, Debug)]
pub struct ReleaseEntry {
    /// Path inside the release directory.
    pub to: String,
    /// The producing node.
    pub node: NodeIdx,
    /// Index into that node's outputs.
    pub output: usize,
}

/// The whole pipeline as a DAG.
#[derive(Debug)]
pub struct Graph {
    /// Every node.
    pub nodes: Vec<Node>,
    /// Node id -> index.
    pub by_id: BTreeMap<String, NodeIdx>,
    /// Direct dependencies of each node (sorted, unique).
    pub deps: Vec<Vec<NodeIdx>>,
    /// A topological order.
    pub order: Vec<NodeIdx>,
    /// The release tree's files.
    pub release: Vec<ReleaseEntry>,
    /// The release directory, workspace-relative.
    pub release_dir: String,
}

struct Builder<'m> {
    m: &'m Manifest,
    nodes: Vec<Node>,
    /// Inputs as written, resolved to [`Input`] once every node exists.
    pending: Vec<Vec<(String, Range<usize>)>>,
    release: Vec<(String, String, Range<usize>)>,
}

impl Graph {
    /// Expand `m` into nodes and check the result. `root` is the workspace root, used only to
    /// detect output paths that lead out of it through a symlink; `env` reads the values of
    /// declared environment variables (they enter command keys).
    pub fn build(m: &Manifest, root: &Path, env: &dyn Fn(&str) -> Option<String>) -> Result<Graph> {
        let mut b = Builder {
            m,
            nodes: Vec::new(),
            pending: Vec::new(),
            release: Vec::new(),
        };
        b.commands(env)?;
        for model in &m.model {
            b.model(model)?;
        }
        b.manifest_node();
        b.goldens();
        b.finish(root)
    }

    /// The node ids a command-line target names: a node id, a model name, or a kind name.
    pub fn resolve_target(&self, name: &str) -> Result<Vec<NodeIdx>> {
        if let Some(&n) = self.by_id.get(name) {
            return Ok(vec![n]);
        }
        let found: Vec<NodeIdx> = (0..self.nodes.len())
            .filter(|&n| self.nodes[n].model.as_deref() == Some(name) || self.nodes[n].kind == name)
            .collect();
        if found.is_empty() {
            let mut names: Vec<&str> = self.by_id.keys().map(String::as_str).collect();
            names.extend(self.nodes.iter().filter_map(|n| n.model.as_deref()));
            names.extend(self.nodes.iter().map(|n| n.kind.as_str()));
            return Err(EngineError::UnknownTarget {
                name: name.to_string(),
                hint: super::manifest::did_you_mean(name, names),
            });
        }
        Ok(found)
    }
}

/// Where a published variant goes in the release tree: the F16 file, the one the site ships,
/// as `models/<name>.gguf`; any other variant as `models/<name>.<variant>.gguf`.
fn release_model_path(model: &str, variant: Variant) -> String {
    match variant {
        Variant::F16 => format!("models/{model}.gguf"),
        v => format!("models/{model}.{}.gguf", v.name()),
    }
}

fn model_file(m: &Manifest, model: &str, variant: Variant) -> String {
    format!(
        "{}/{model}/{model}.{}.gguf",
        m.project.build_dir.get_ref(),
        variant.name()
    )
}

impl Builder<'_> {
    fn push(&mut self, node: Node, inputs: Vec<(String, Range<usize>)>) {
        self.nodes.push(node);
        self.pending.push(inputs);
    }

    fn commands(&mut self, env: &dyn Fn(&str) -> Option<String>) -> Result<()> {
        for c in &self.m.command {
            let run = match c.run.get_ref() {
                toml::Value::String(s) => json!(["sh", "-c", s]),
                toml::Value::Array(a) => Value::Array(
                    a.iter()
                        .map(|v| Value::String(v.as_str().unwrap_or_default().to_string()))
                        .collect(),
                ),
                _ => Value::Null,
            };
            let cwd = match &c.cwd {
                Some(cwd) => {
                    let p = clean_rel(cwd.get_ref())
                        .map_err(|e| self.m.error_at(cwd.span(), format!("cwd: {e}")))?;
                    if p.is_empty() {
                        ".".to_string()
                    } else {
                        p
                    }
                }
                None => ".".to_string(),
            };
            let mut envs = serde_json::Map::new();
            for e in &c.env {
                envs.insert(
                    e.get_ref().clone(),
                    env(e.get_ref()).map(Value::String).unwrap_or(Value::Null),
                );
            }
            let mut outputs = Vec::new();
            for o in &c.outputs {
                outputs.push(self.output(o.get_ref(), o.span())?);
            }
            let node = Node {
                id: c.name.get_ref().clone(),
                kind: "command".into(),
                params: json!({
                    "run": run,
                    "cwd": cwd,
                    "env": envs,
                    "outputs": c.outputs.iter().map(|o| o.get_ref().clone()).collect::<Vec<_>>(),
                }),
                inputs: Vec::new(),
                outputs,
                exclusive: c.exclusive,
                volatile: c.volatile,
                model: None,
                span: c.name.span(),
            };
            let inputs = c
                .inputs
                .iter()
                .map(|i| (i.get_ref().clone(), i.span()))
                .collect();
            self.push(node, inputs);
        }
        Ok(())
    }

    fn output(&self, raw: &str, span: Range<usize>) -> Result<Output> {
        let dir = raw.ends_with('/');
        let path = clean_rel(raw).map_err(|e| {
            self.m
                .error_at(span.clone(), format!("output `{raw}`: {e}"))
        })?;
        if path.is_empty() {
            return Err(self
                .m
                .error_at(span, "output `.`: the workspace root cannot be an output"));
        }
        Ok(Output { path, dir })
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
        let node = |id: &str, kind: &str, params: Value, outputs: Vec<Output>| Node {
            id: format!("{name}/{id}"),
            kind: kind.into(),
            params,
            inputs: Vec::new(),
            outputs,
            exclusive: false,
            volatile: false,
            model: Some(name.clone()),
            span: span.clone(),
        };
        let file = |v: Variant| Output {
            path: model_file(m, &name, v),
            dir: false,
        };
        let wants = |v: Variant| model.variants.contains(&v);
        let need_f32 = wants(Variant::F32) || wants(Variant::Q8_0);
        if need_f32 {
            let params = json!({"type": "f32", "head_type": "f32", "rules": [], "name": name});
            self.push(
                node("convert.f32", "convert", params, vec![file(Variant::F32)]),
                vec![checkpoint.clone()],
            );
        }
        if wants(Variant::F16) {
            let policy = m.policy_for(model.policy.get_ref()).unwrap_or_default();
            let params = json!({
                "type": policy.default_type.name(),
                "head_type": policy.head_type.name(),
                "rules": policy.rule.iter().map(|r| json!({"match": r.pattern.get_ref(), "type": r.tensor_type.name()})).collect::<Vec<_>>(),
                "name": name,
            });
            self.push(
                node("convert.f16", "convert", params, vec![file(Variant::F16)]),
                vec![checkpoint.clone()],
            );
        }
        let f32_file = (model_file(m, &name, Variant::F32), span.clone());
        if wants(Variant::Q8_0) {
            let cal_name = model.quantize.calibration.get_ref();
            let prompts = m.calibration.get(cal_name).map(|c| c.prompts.clone());
            let mut inputs = vec![f32_file.clone()];
            let prompts_param = match &prompts {
                Some(p) if p.get_ref() != "builtin" => {
                    inputs.push((p.get_ref().clone(), p.span()));
                    json!({"file": p.get_ref()})
                }
                _ => json!("builtin"),
            };
            let calib_out = Output {
                path: format!("{}/{name}/calibration.json", m.project.build_dir.get_ref()),
                dir: false,
            };
            let calib_path = calib_out.path.clone();
            self.push(
                node(
                    "calibrate",
                    "calibrate",
                    json!({"prompts": prompts_param}),
                    vec![calib_out],
                ),
                inputs,
            );
            let params = json!({"outlier_ratio": model.quantize.outlier_ratio});
            self.push(
                node(
                    "quantize.q8_0",
                    "quantize",
                    params,
                    vec![file(Variant::Q8_0)],
                ),
                vec![f32_file, (calib_path, span.clone())],
            );
        }
        if let Some(bench) = &model.bench {
            let inputs = model
                .variants
                .iter()
                .map(|&v| (model_file(m, &name, v), span.clone()))
                .collect();
            let out = Output {
                path: format!("{}/{name}/bench.json", m.project.build_dir.get_ref()),
                dir: false,
            };
            let mut n = node(
                "bench",
                "bench",
                serde_json::to_value(bench).unwrap_or(Value::Null),
                vec![out],
            );
            n.exclusive = true;
            n.volatile = true;
            self.push(n, inputs);
        }
        for p in &model.publish {
            let v = *p.get_ref();
            self.release.push((
                release_model_path(&name, v),
                model_file(m, &name, v),
                p.span(),
            ));
        }
        Ok(())
    }

    /// One `manifest` node over every model: `manifest.json` and `bench.json` of the release.
    fn manifest_node(&mut self) {
        let m = self.m;
        if m.model.is_empty() {
            return;
        }
        let build = m.project.build_dir.get_ref();
        let mut inputs = Vec::new();
        let mut models = Vec::new();
        for model in &m.model {
            let name = model.name.get_ref();
            // Every variant the pipeline builds (sizes and digests), published or not.
            for &v in &model.variants {
                inputs.push((model_file(m, name, v), model.name.span()));
            }
            if model.bench.is_some() {
                inputs.push((format!("{build}/{name}/bench.json"), model.name.span()));
            }
            models.push(json!({
                "name": name,
                "variants": model.variants.iter().map(|v| v.name()).collect::<Vec<_>>(),
                "publish": model.publish.iter().map(|p| {
                    let v = *p.get_ref();
                    json!({"variant": v.name(), "path": release_model_path(name, v)})
                }).collect::<Vec<_>>(),
                "bench": model.bench.is_some(),
            }));
        }
        let outputs = vec![
            Output {
                path: format!("{build}/manifest.json"),
                dir: false,
            },
            Output {
                path: format!("{build}/bench.json"),
                dir: false,
            },
        ];
        self.release
            .push(("models/manifest.json".into(), outputs[0].path.clone(), 0..0));
        self.release
            .push(("bench.json".into(), outputs[1].path.clone(), 0..0));
        let node = Node {
            id: "manifest".into(),
            kind: "manifest".into(),
            params: json!({"models": models}),
            inputs: Vec::new(),
            outputs,
            exclusive: false,
            volatile: false,
            model: None,
            span: 0..0,
        };
        self.push(node, inputs);
    }

    fn goldens(&mut self) {
        let m = self.m;
        let build = m.project.build_dir.get_ref();
        for g in &m.golden {
            let name = g.name.get_ref();
            let span = g.name.span();
            let mut inputs = Vec::new();
            let (kind, params) = match g.kind {
                GoldenKind::Model => {
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
                    inputs.push((model_file(m, &model, variant), span.clone()));
                    for f in [&g.cases, &g.expected].into_iter().flatten() {
                        inputs.push((f.get_ref().clone(), f.span()));
                    }
                    (
                        "golden_model",
                        json!({
                            "tolerance": g.tolerance.unwrap_or(1e-3),
                            "variant": variant.name(),
                            "suite": name,
                            "path": g.compute.as_ref().map_or("f32", |c| c.get_ref().as_str()),
                        }),
                    )
                }
                GoldenKind::Kernels => {
                    // Chain: goldens (generated, or committed at `path`) -> harness run
                    // (volatile) -> this check node. See kinds/kernel_harness.rs.
                    let dir = format!("{build}/golden/{name}");
                    let chain_node =
                        |id: &str, kind: &str, params: Value, out: &str, volatile: bool| Node {
                            id: format!("golden/{name}/{id}"),
                            kind: kind.into(),
                            params,
                            inputs: Vec::new(),
                            outputs: vec![Output {
                                path: format!("{dir}/{out}"),
                                dir: true,
                            }],
                            exclusive: false,
                            volatile,
                            model: None,
                            span: span.clone(),
                        };
                    let gold = match &g.path {
                        Some(p) => (p.get_ref().clone(), p.span()),
                        None => {
                            let generator = g
                                .generator
                                .as_ref()
                                .map_or("qwen35moe", |x| x.get_ref().as_str());
                            let gen = chain_node(
                                "gen",
                                "golden_gen",
                                json!({"generator": generator}),
                                "gold",
                                false,
                            );
                            self.push(gen, Vec::new());
                            (format!("node:golden/{name}/gen"), span.clone())
                        }
                    };
                    let mut run_inputs = vec![gold.clone()];
                    run_inputs.extend(g.sources.iter().map(|s| (s.get_ref().clone(), s.span())));
                    let harness = g.harness.as_ref().map(|h| h.get_ref().clone());
                    let run = chain_node(
                        "run",
                        "kernel_harness",
                        json!({"harness": harness}),
                        "out",
                        true,
                    );
                    self.push(run, run_inputs);
                    inputs.push(gold);
                    inputs.push((format!("node:golden/{name}/run"), span.clone()));
                    let path = if g.harness.is_some() {
                        "harness"
                    } else {
                        "cpu"
                    };
                    ("golden_kernels", json!({"suite": name, "path": path}))
                }
            };
            let node = Node {
                id: format!("golden/{name}"),
                kind: kind.into(),
                params,
                inputs: Vec::new(),
                outputs: vec![Output {
                    path: format!("{build}/golden/{name}.json"),
                    dir: false,
                }],
                exclusive: false,
                volatile: false,
                model: g.model.as_ref().map(|x| x.get_ref().clone()),
                span,
            };
            self.push(node, inputs);
        }
    }

    fn finish(mut self, root: &Path) -> Result<Graph> {
        let m = self.m;
        let release_dir = clean_rel(m.project.release_dir.get_ref())
            .map_err(|e| m.error_at(m.project.release_dir.span(), format!("release_dir: {e}")))?;
        let mut by_id = BTreeMap::new();
        for (i, n) in self.nodes.iter().enumerate() {
            if by_id.insert(n.id.clone(), i).is_some() {
                return Err(m.error_at(n.span.clone(), format!("two nodes are named `{}`", n.id)));
            }
        }
        // Every output: unique, not nested in another, not in the release tree or the store,
        // not reached through a symlink that leads out of the workspace.
        let mut owners: BTreeMap<String, (NodeIdx, usize)> = BTreeMap::new();
        let root_real = root.canonicalize().ok();
        let mut checked_dirs = std::collections::HashSet::new();
        let store = clean_rel(&m.project.store_dir).unwrap_or_default();
        for (ni, n) in self.nodes.iter().enumerate() {
            for (oi, o) in n.outputs.iter().enumerate() {
                let at = n.span.clone();
                if under(&o.path, &release_dir) {
                    return Err(m.error_at(at, format!(
                        "node `{}`: output `{}` is inside the release directory `{release_dir}`; write it elsewhere and publish it with [[release.publish]]",
                        n.id, o.path)));
                }
                if under(&o.path, ".skyctl") || (!store.is_empty() && under(&o.path, &store)) {
                    return Err(m.error_at(
                        at,
                        format!("node `{}`: output `{}` is inside the store", n.id, o.path),
                    ));
                }
                check_no_symlink_escape(root, root_real.as_deref(), &o.path, &mut checked_dirs)
                    .map_err(|e| {
                        m.error_at(
                            at.clone(),
                            format!("node `{}`: output `{}`: {e}", n.id, o.path),
                        )
                    })?;
                if let Some((other, &(on, _))) = overlapping(&owners, &o.path) {
                    {
                        let what = if other == &o.path {
                            "also written by"
                        } else {
                            "overlaps an output of"
                        };
                        return Err(m.error_at(
                            at,
                            format!(
                                "node `{}`: output `{}` {what} node `{}` (`{other}`)",
                                n.id, o.path, self.nodes[on].id
                            ),
                        ));
                    }
                }
                owners.insert(o.path.clone(), (ni, oi));
            }
        }
        // Resolve inputs.
        let pending = std::mem::take(&mut self.pending);
        for (ni, raw_inputs) in pending.into_iter().enumerate() {
            let mut inputs = Vec::new();
            for (raw, span) in raw_inputs {
                let id = self.nodes[ni].id.clone();
                if let Some(target) = raw.strip_prefix("node:") {
                    let Some(&t) = by_id.get(target) else {
                        return Err(m.error_at(
                            span,
                            format!(
                                "node `{id}`: input `{raw}` refers to no node named `{target}`{}",
                                super::manifest::did_you_mean(
                                    target,
                                    by_id.keys().map(String::as_str)
                                )
                            ),
                        ));
                    };
                    if self.nodes[t].outputs.is_empty() {
                        return Err(m.error_at(
                            span,
                            format!(
                                "node `{id}`: input `{raw}`: node `{target}` declares no outputs"
                            ),
                        ));
                    }
                    for oi in 0..self.nodes[t].outputs.len() {
                        inputs.push(Input::Output {
                            node: t,
                            output: oi,
                        });
                    }
                    continue;
                }
                let path = clean_rel(&raw).map_err(|e| {
                    m.error_at(span.clone(), format!("node `{id}`: input `{raw}`: {e}"))
                })?;
                if Glob::is_glob(&path) {
                    let g = Glob::new(&path).map_err(|e| {
                        m.error_at(span.clone(), format!("node `{id}`: input: {e}"))
                    })?;
                    // A glob must not pick up built files: their content is only known after
                    // their node ran, so they must be named (path or `node:`) to be ordered.
                    let reaches = |o: &String| {
                        let (on, oi) = owners[o];
                        let dir_out = self.nodes[on].outputs[oi].dir;
                        g.matches(o)
                            || (dir_out && (under(o, g.literal_dir()) || o == g.literal_dir()))
                    };
                    if let Some(o) = owners.keys().find(|o| reaches(o)) {
                        return Err(m.error_at(span, format!(
                            "node `{id}`: input glob `{raw}` matches output `{o}`; name built outputs explicitly or with `node:<name>`")));
                    }
                    inputs.push(Input::Glob(g));
                    continue;
                }
                // A path that is (or lies inside) a declared output is a dependency on its node.
                let owner = owner_of(&owners, &path);
                match owner {
                    Some((on, oi)) => inputs.push(Input::Output {
                        node: on,
                        output: oi,
                    }),
                    None => {
                        if path.is_empty() {
                            return Err(m.error_at(
                                span,
                                format!("node `{id}`: the whole workspace cannot be an input"),
                            ));
                        }
                        inputs.push(Input::Source(path))
                    }
                }
            }
            self.nodes[ni].inputs = inputs;
        }
        let deps: Vec<Vec<NodeIdx>> = self
            .nodes
            .iter()
            .map(|n| {
                let mut d: Vec<NodeIdx> = n
                    .inputs
                    .iter()
                    .filter_map(|i| match i {
                        Input::Output { node, .. } => Some(*node),
                        _ => None,
                    })
                    .collect();
                d.sort_unstable();
                d.dedup();
                d
            })
            .collect();
        let order = topo_order(&self.nodes, &deps).map_err(|cycle| {
            let names: Vec<&str> = cycle.iter().map(|&n| self.nodes[n].id.as_str()).collect();
            m.error_at(
                self.nodes[cycle[0]].span.clone(),
                format!("dependency cycle: {}", names.join(" -> ")),
            )
        })?;
        // Release entries.
        let mut release: Vec<ReleaseEntry> = Vec::new();
        let mut explicit: Vec<(String, String, Range<usize>)> = m
            .release
            .publish
            .iter()
            .map(|p| {
                let mut to = p.to.get_ref().clone();
                if to.ends_with('/') || to.is_empty() {
                    let base = p.from.get_ref().rsplit('/').next().unwrap_or_default();
                    to.push_str(base);
                }
                (to, p.from.get_ref().clone(), p.from.span())
            })
            .collect();
        let mut all = std::mem::take(&mut self.release);
        all.append(&mut explicit);
        for (to_raw, from_raw, span) in all {
            let to = clean_rel(&to_raw)
                .map_err(|e| m.error_at(span.clone(), format!("release path `{to_raw}`: {e}")))?;
            let from = clean_rel(&from_raw)
                .map_err(|e| m.error_at(span.clone(), format!("publish `{from_raw}`: {e}")))?;
            let Some(&(node, output)) = owners.get(&from) else {
                return Err(m.error_at(
                    span,
                    format!(
                        "publish `{from_raw}` is not a declared output of any node{}",
                        super::manifest::did_you_mean(&from, owners.keys().map(String::as_str))
                    ),
                ));
            };
            if let Some(prev) = release
                .iter()
                .find(|r| r.to == to || under(&r.to, &to) || under(&to, &r.to))
            {
                return Err(m.error_at(
                    span,
                    format!("release path `{to}` collides with `{}`", prev.to),
                ));
            }
            release.push(ReleaseEntry { to, node, output });
        }
        Ok(Graph {
            nodes: self.nodes,
            by_id,
            deps,
            order,
            release,
            release_dir,
        })
    }
}

/// Kahn's algorithm in declaration order; on a cycle, returns the nodes of one cycle, first
/// node repeated at the end.
fn topo_order(
    nodes: &[Node],
    deps: &[Vec<NodeIdx>],
) -> std::result::Result<Vec<NodeIdx>, Vec<NodeIdx>> {
    let n = nodes.len();
    let mut indeg: Vec<usize> = deps.iter().map(Vec::len).collect();
    let mut rdeps = vec![Vec::new(); n];
    for (i, d) in deps.iter().enumerate() {
        for &x in d {
            rdeps[x].push(i);
        }
    }
    let mut ready: std::collections::VecDeque<NodeIdx> =
        (0..n).filter(|&i| indeg[i] == 0).collect();
    let mut order = Vec::with_capacity(n);
    while let Some(i) = ready.pop_front() {
        order.push(i);
        for &r in &rdeps[i] {
            indeg[r] -= 1;
            if indeg[r] == 0 {
                ready.push_back(r);
            }
        }
    }
    if order.len() == n {
        return Ok(order);
    }
    // Walk dependencies among the remaining nodes until one repeats.
    let start = (0..n).find(|&i| indeg[i] > 0).unwrap_or(0);
    let mut path = vec![start];
    let mut seen = vec![usize::MAX; n];
    seen[start] = 0;
    let mut cur = start;
    loop {
        let Some(&next) = deps[cur].iter().find(|&&d| indeg[d] > 0) else {
            return Err(path);
        };
        if seen[next] != usize::MAX {
            // "a -> b" reads "a depends on b".
            let mut out: Vec<NodeIdx> = path[seen[next]..].to_vec();
            out.push(next);
            return Err(out);
        }
        seen[next] = path.len();
        path.push(next);
        cur = next;
    }
}

/// The declared output equal to `path` or one of its ancestors (O(depth) lookups).
fn owner_of(owners: &BTreeMap<String, (NodeIdx, usize)>, path: &str) -> Option<(NodeIdx, usize)> {
    if let Some(&v) = owners.get(path) {
        return Some(v);
    }
    path.match_indices('/')
        .find_map(|(i, _)| owners.get(&path[..i]).copied())
}

/// A declared output that equals `path`, contains it, or lies inside it.
fn overlapping<'o>(
    owners: &'o BTreeMap<String, (NodeIdx, usize)>,
    path: &str,
) -> Option<(&'o String, &'o (NodeIdx, usize))> {
    if let Some(hit) = owners.get_key_value(path) {
        return Some(hit);
    }
    if let Some(hit) = path
        .match_indices('/')
        .find_map(|(i, _)| owners.get_key_value(&path[..i]))
    {
        return Some(hit);
    }
    // Descendants sort between "path/" and "path0" ('0' follows '/').
    owners.range(format!("{path}/")..format!("{path}0")).next()
}

/// Whether `path` lies strictly inside directory `dir` (both workspace-relative).
pub fn under(path: &str, dir: &str) -> bool {
    if dir.is_empty() {
        return !path.is_empty();
    }
    path.len() > dir.len() && path.starts_with(dir) && path.as_bytes()[dir.len()] == b'/'
}

/// Normalise a workspace-relative path: drop `.` components and a trailing `/`; reject absolute
/// paths, `..`, backslashes and empty components.
pub fn clean_rel(raw: &str) -> std::result::Result<String, String> {
    if raw.starts_with('/') || raw.starts_with('~') || (raw.len() > 1 && raw.as_bytes()[1] == b':')
    {
        return Err(
            "absolute paths are not allowed; use a path relative to the workspace root".into(),
        );
    }
    if raw.contains('\\') {
        return Err("use `/` as the path separator".into());
    }
    let mut parts = Vec::new();
    for c in raw.split('/') {
        match c {
            "" | "." => {}
            ".." => return Err("`..` is not allowed: paths must stay inside the workspace".into()),
            c => parts.push(c),
        }
    }
    Ok(parts.join("/"))
}

/// Fails when an existing prefix of `rel` under `root` is a symlink resolving outside `root`.
fn check_no_symlink_escape(
    root: &Path,
    root_real: Option<&Path>,
    rel: &str,
    checked: &mut std::collections::HashSet<String>,
) -> std::result::Result<(), String> {
    let Some(root_real) = root_real else {
        return Ok(());
    };
    // Only directories can lead a write elsewhere: the output file itself is removed before its
    // node runs (removing a symlink removes the link), so its last component is not checked.
    let mut p = root.to_path_buf();
    let parts: Vec<&str> = rel.split('/').collect();
    for (i, c) in parts[..parts.len().saturating_sub(1)].iter().enumerate() {
        p.push(c);
        if !checked.insert(parts[..=i].join("/")) {
            continue;
        }
        match std::fs::symlink_metadata(&p) {
            Ok(md) if md.file_type().is_symlink() => {
                let target = p
                    .canonicalize()
                    .map_err(|_| format!("`{}` is a dangling symlink", p.display()))?;
                if !target.starts_with(root_real) {
                    return Err(format!(
                        "`{}` is a symlink leading out of the workspace (to `{}`)",
                        p.strip_prefix(root).unwrap_or(&p).display(),
                        target.display()
                    ));
                }
            }
            Ok(_) => {}
            Err(_) => return Ok(()),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn graph(src: &str) -> Result<Graph> {
        let m = Manifest::parse(src, Path::new("pipeline.toml"))?;
        Graph::build(&m, Path::new("/nonexistent-root"), &|_| None)
    }

    fn cmd(name: &str, inputs: &[&str], outputs: &[&str]) -> String {
        format!(
            "[[command]]\nname = \"{name}\"\nrun = \"true\"\ninputs = {inputs:?}\noutputs = {outputs:?}\n"
        )
    }

    #[test]
    fn path_inputs_become_dependencies() {
        let g = graph(&(cmd("a", &["src.txt"], &["out/a"]) + &cmd("b", &["out/a"], &["out/b"])))
            .unwrap();
        let b = g.by_id["b"];
        assert_eq!(g.deps[b], vec![g.by_id["a"]]);
        assert_eq!(g.order, vec![0, 1]);
    }

    #[test]
    fn cycle_is_printed() {
        let e = graph(&(cmd("a", &["out/b"], &["out/a"]) + &cmd("b", &["node:a"], &["out/b"])))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("dependency cycle: a -> b -> a")
                || e.contains("dependency cycle: b -> a -> b"),
            "{e}"
        );
    }

    #[test]
    fn two_writers_of_one_output() {
        let e = graph(&(cmd("a", &[], &["out/x"]) + &cmd("b", &[], &["out/x"])))
            .unwrap_err()
            .to_string();
        assert!(e.contains("output `out/x` also written by node `a`"), "{e}");
        assert!(e.starts_with("pipeline.toml:7:8:"), "{e}");
    }

    #[test]
    fn nested_outputs_overlap() {
        let e = graph(&(cmd("a", &[], &["out/"]) + &cmd("b", &[], &["out/x"])))
            .unwrap_err()
            .to_string();
        assert!(e.contains("overlaps an output of node `a`"), "{e}");
    }

    #[test]
    fn outputs_outside_the_workspace() {
        let e = graph(&cmd("a", &[], &["../x"])).unwrap_err().to_string();
        assert!(e.contains("`..` is not allowed"), "{e}");
        let e = graph(&cmd("a", &[], &["/tmp/x"])).unwrap_err().to_string();
        assert!(e.contains("absolute paths are not allowed"), "{e}");
    }

    #[test]
    fn unknown_node_reference() {
        let e = graph(&(cmd("alpha", &[], &["o"]) + &cmd("b", &["node:alpah"], &["p"])))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("refers to no node named `alpah` (did you mean `alpha`?)"),
            "{e}"
        );
    }

    #[test]
    fn globs_must_not_match_outputs() {
        let e = graph(&(cmd("a", &[], &["out/a.txt"]) + &cmd("b", &["out/*.txt"], &["b"])))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("input glob `out/*.txt` matches output `out/a.txt`"),
            "{e}"
        );
        assert!(
            graph(&(cmd("a", &[], &["out/a.bin"]) + &cmd("b", &["out/*.txt"], &["b"]))).is_ok()
        );
    }

    #[test]
    fn output_in_release_tree_is_rejected() {
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
        assert!(g.resolve_target("mm").is_err());
    }
}
