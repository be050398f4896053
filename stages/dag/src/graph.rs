//! The DAG: node specs resolved into nodes, with every cross-node check done before anything
//! runs (unknown references, duplicate ids, cycles, two nodes writing one output, outputs
//! outside the workspace, outputs inside the release tree or the store).
//!
//! A front end (skyctl's `pipeline.toml`) describes the pipeline as a [`GraphSpec`]: one
//! [`NodeSpec`] per node with its inputs and outputs as written, and the release entries.
//! [`Graph::build`] resolves references and checks the whole; errors point at the spans the
//! specs carry, in the front end's [`Source`].
//!
//! Invariants once [`Graph::build`] returns: `order` is a topological order of all nodes;
//! `deps[n]` is sorted and deduplicated; every [`Input::Output`] points at an earlier node in
//! `order`; output paths are workspace-relative, `/`-separated, without `.`/`..` components.

use std::collections::{BTreeMap, HashMap};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;

use crate::error::{DagError, Result};
use crate::glob::Glob;
use crate::kind::Kind;
use crate::source::{did_you_mean, Located, Source};
use crate::statcache::FileStat;
use crate::writable::Protected;

/// Index of a node in [`Graph::nodes`].
pub type NodeIdx = usize;

/// One input of a node, in declared order.
#[derive(Clone, Debug)]
pub enum Input {
    /// A source file or directory in the workspace (a directory hashes as a tree).
    Source(String),
    /// Source files matching a glob, hashed in sorted path order.
    Glob {
        /// The pattern.
        glob: Glob,
        /// Matching no file is allowed (else it is an error: the command would read files
        /// its key does not cover, or none at all).
        allow_empty: bool,
    },
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
    /// Unique id.
    pub id: String,
    /// Stage kind name (`command`, `convert`, ...).
    pub kind: String,
    /// Canonical parameters (hashed with sorted object keys); the value is shared with every
    /// key material computed from it.
    pub params: NodeParams,
    /// Inputs in declared order.
    pub inputs: Vec<Input>,
    /// Where each of `inputs` is declared (same order).
    pub input_spans: Vec<Range<usize>>,
    /// The role each of `inputs` was declared with ([`NodeSpec::input_as`]; empty: none),
    /// same order. Not part of the key: the kind reads it back with [`crate::StageCtx::input`].
    pub input_roles: Vec<String>,
    /// Declared outputs.
    pub outputs: Vec<Output>,
    /// Runs alone.
    pub exclusive: bool,
    /// Not reproducible; re-run on `--rerun`.
    pub volatile: bool,
    /// A check of what the release publishes: when it fails (or does not run) the release
    /// tree is left as it was, like a failure of a node the release files come from.
    pub gates_release: bool,
    /// Built only when a target names it (or a node that depends on it): a build without
    /// targets leaves it out, and the release does not wait for it (a GPU check on a machine
    /// that may have no GPU). Not part of the key.
    pub on_request: bool,
    /// The group this node belongs to (skyctl: its model), so one name can target many nodes.
    pub group: Option<String>,
    /// Where the node is declared in the source.
    pub span: Range<usize>,
}

/// A node's parameters: the JSON value the kind parses, and the bytes of it that every key of
/// the node hashes ([`crate::key::canonical_json`], computed once). A graph loaded from a
/// compiled cache ([`crate::compiled`]) decodes the value only when something asks for it
/// (a node that runs, a key material to record): a no-op build never does.
#[derive(Clone)]
pub struct NodeParams {
    value: std::sync::OnceLock<Arc<Value>>,
    /// Holds the canonical bytes, and for a compiled graph the encoded value (the whole file).
    buf: Arc<crate::codec::FileBytes>,
    /// The value in the compiled-graph encoding, until decoded (empty for a built graph).
    encoded: Range<usize>,
    canonical: Range<usize>,
}

impl NodeParams {
    /// Parameters with their value known.
    pub fn new(value: Value) -> NodeParams {
        let canonical = crate::key::canonical_json(&value);
        NodeParams {
            value: std::sync::OnceLock::from(Arc::new(value)),
            canonical: 0..canonical.len(),
            encoded: 0..0,
            buf: Arc::new(crate::codec::FileBytes::Owned(canonical)),
        }
    }

    /// Parameters from a compiled graph: `buf[encoded]` is the value as
    /// [`crate::codec::Writer::json`] wrote it, `buf[canonical]` its canonical bytes (both
    /// ranges checked by the caller).
    pub(crate) fn encoded(
        buf: Arc<crate::codec::FileBytes>,
        encoded: Range<usize>,
        canonical: Range<usize>,
    ) -> NodeParams {
        NodeParams {
            value: std::sync::OnceLock::new(),
            buf,
            encoded,
            canonical,
        }
    }

    /// The value. A compiled graph's encoding is checked against the canonical bytes the key
    /// hashes when it is decoded; one that does not decode to them (it cannot happen to a file
    /// whose checksum matched) gives `null`, which no kind with parameters accepts.
    pub fn value(&self) -> &Arc<Value> {
        self.value.get_or_init(|| {
            let v = self
                .buf
                .get(self.encoded.clone())
                .and_then(|b| crate::codec::Reader::new(b).json(crate::codec::MAX_DEPTH))
                .filter(|v| crate::key::canonical_json(v) == self.canonical())
                .unwrap_or(Value::Null);
            Arc::new(v)
        })
    }

    /// The bytes the node's keys hash for these parameters.
    pub fn canonical(&self) -> &[u8] {
        self.buf.get(self.canonical.clone()).unwrap_or_default()
    }
}

impl std::fmt::Debug for NodeParams {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.value.get() {
            Some(v) => v.fmt(f),
            None => f.write_str("<encoded>"),
        }
    }
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
    /// Where the release directory is declared.
    pub release_span: Range<usize>,
    /// What the front end calls a group, for messages ("model").
    pub group_noun: String,
    /// The declaration the spans point into.
    pub source: Source,
    /// Every node's parameters were already parsed by its kind in this executable (by the front
    /// end, or before a compiled graph was written, [`crate::compiled`]): a build only checks
    /// that the kinds exist.
    pub params_checked: bool,
    /// What the disk checks' one `lstat` of each declared output found, flat in node order
    /// then output order ([`Graph::output_stats`]).
    pub(crate) output_stats: std::sync::Mutex<Option<Vec<Option<FileStat>>>>,
}

/// A node as the front end declares it: inputs and outputs as written, resolved by
/// [`Graph::build`].
#[derive(Clone, Debug)]
pub struct NodeSpec {
    /// Unique id.
    pub id: String,
    /// Stage kind name.
    pub kind: String,
    /// Canonical parameters: the kind's `Params`, serialized.
    pub params: Value,
    /// Inputs in declared order: a workspace path (file or directory), a glob, or
    /// `node:<id>` (every output of that node). A path inside a declared output depends on
    /// its node.
    pub inputs: Vec<InputSpec>,
    /// Declared outputs, workspace-relative; a trailing `/` declares a directory.
    pub outputs: Vec<Located<String>>,
    /// Runs alone.
    pub exclusive: bool,
    /// Not reproducible; re-run on `--rerun`.
    pub volatile: bool,
    /// See [`Node::gates_release`].
    pub gates_release: bool,
    /// See [`Node::on_request`].
    pub on_request: bool,
    /// The group this node belongs to.
    pub group: Option<String>,
    /// Where the node is declared.
    pub span: Range<usize>,
}

impl NodeSpec {
    /// A node of kind `K` with typed parameters; no inputs or outputs yet.
    pub fn new<K: Kind>(
        id: impl Into<String>,
        params: &K::Params,
        span: Range<usize>,
    ) -> Result<NodeSpec> {
        let id = id.into();
        let params = serde_json::to_value(params).map_err(|e| DagError::Params {
            node: id.clone(),
            message: e.to_string(),
        })?;
        Ok(NodeSpec {
            id,
            kind: K::NAME.to_string(),
            params,
            inputs: Vec::new(),
            outputs: Vec::new(),
            exclusive: false,
            volatile: false,
            gates_release: false,
            on_request: false,
            group: None,
            span,
        })
    }

    /// Add an input (see [`NodeSpec::inputs`]).
    pub fn input(mut self, path: impl Into<String>, span: Range<usize>) -> NodeSpec {
        self.inputs.push(InputSpec {
            path: Located::new(path.into(), span),
            allow_empty: false,
            role: String::new(),
        });
        self
    }

    /// Add an input the kind finds by `role` ([`crate::StageCtx::input`]) rather than by
    /// position. The role stays out of the key: the key hashes the inputs in declared order,
    /// as for [`NodeSpec::input`].
    pub fn input_as(
        mut self,
        role: impl Into<String>,
        path: impl Into<String>,
        span: Range<usize>,
    ) -> NodeSpec {
        self.inputs.push(InputSpec {
            path: Located::new(path.into(), span),
            allow_empty: false,
            role: role.into(),
        });
        self
    }

    /// Add a glob input that may match no file (see [`InputSpec::allow_empty`]).
    pub fn input_may_be_empty(mut self, glob: impl Into<String>, span: Range<usize>) -> NodeSpec {
        self.inputs.push(InputSpec {
            path: Located::new(glob.into(), span),
            allow_empty: true,
            role: String::new(),
        });
        self
    }

    /// Add an output (see [`NodeSpec::outputs`]).
    pub fn output(mut self, path: impl Into<String>, span: Range<usize>) -> NodeSpec {
        self.outputs.push(Located::new(path.into(), span));
        self
    }

    /// Put the node in `group`.
    pub fn group(mut self, group: impl Into<String>) -> NodeSpec {
        self.group = Some(group.into());
        self
    }
}

/// One input of a node as declared.
#[derive(Clone, Debug)]
pub struct InputSpec {
    /// A workspace path, a glob or `node:<id>`, as written.
    pub path: Located<String>,
    /// For a glob: matching no file is not an error. Only globs take it.
    pub allow_empty: bool,
    /// The role the kind knows it by (empty: none); see [`NodeSpec::input_as`].
    pub role: String,
}

/// One file of the release tree as declared: `to` (inside the release directory) is a copy of
/// the declared output `from`.
#[derive(Clone, Debug)]
pub struct ReleaseSpec {
    /// Path inside the release directory.
    pub to: String,
    /// A declared output path of some node.
    pub from: String,
    /// Where it is declared.
    pub span: Range<usize>,
}

/// A whole pipeline as declared.
#[derive(Clone, Debug)]
pub struct GraphSpec {
    /// Every node, in declaration order.
    pub nodes: Vec<NodeSpec>,
    /// The release tree's files.
    pub release: Vec<ReleaseSpec>,
    /// The release directory, workspace-relative.
    pub release_dir: Located<String>,
    /// The store directory as declared (outputs may not lie inside it).
    pub store_dir: String,
    /// What a group is called in messages ("model").
    pub group_noun: String,
    /// Workspace paths no output (nor the release directory) may be, contain or lie inside
    /// (the declaration file itself), with what each is in messages. A `.git` component at any
    /// depth is always refused ([`crate::writable::may_write`]).
    pub protected: Vec<Protected>,
}

impl Default for GraphSpec {
    fn default() -> GraphSpec {
        GraphSpec {
            nodes: Vec::new(),
            release: Vec::new(),
            release_dir: Located::new("release".into(), 0..0),
            store_dir: ".store".into(),
            group_noun: "group".into(),
            protected: Vec::new(),
        }
    }
}

impl Graph {
    /// The nodes the release tree depends on: those its files come from, those that gate it
    /// ([`Node::gates_release`]) and everything they depend on. A failure of any other node
    /// neither stops the build nor keeps the release from being written.
    /// Without a release every node is critical.
    pub fn release_critical(&self) -> Vec<bool> {
        if self.release.is_empty() {
            return vec![true; self.nodes.len()];
        }
        let mut critical = vec![false; self.nodes.len()];
        let mut stack: Vec<NodeIdx> = self.release.iter().map(|r| r.node).collect();
        stack.extend((0..self.nodes.len()).filter(|&n| self.nodes[n].gates_release));
        while let Some(n) = stack.pop() {
            if !std::mem::replace(&mut critical[n], true) {
                stack.extend(self.deps[n].iter().copied());
            }
        }
        critical
    }

    /// `FILE:LINE:COL: ` of a span of the declaration (empty when there is no file).
    pub fn location(&self, span: &Range<usize>) -> String {
        if self.source.file.as_os_str().is_empty() {
            return String::new();
        }
        let (line, col) = crate::source::line_col(&self.source.text, span.start);
        format!("{}:{line}:{col}: ", self.source.file.display())
    }

    /// Resolve `spec` into a graph and check it. `root` is the workspace root, used only to
    /// detect output paths that lead out of it through a symlink; errors are located in `src`.
    pub fn build(spec: GraphSpec, src: &Source, root: &Path) -> Result<Graph> {
        let mut nodes = Vec::with_capacity(spec.nodes.len());
        let mut pending = Vec::with_capacity(spec.nodes.len());
        for n in spec.nodes {
            let mut outputs = Vec::with_capacity(n.outputs.len());
            for o in &n.outputs {
                outputs.push(output(src, &o.value, o.span.clone())?);
            }
            nodes.push(Node {
                id: n.id,
                kind: n.kind,
                params: NodeParams::new(n.params),
                inputs: Vec::new(),
                input_spans: Vec::new(),
                input_roles: Vec::new(),
                outputs,
                exclusive: n.exclusive,
                volatile: n.volatile,
                gates_release: n.gates_release,
                on_request: n.on_request,
                group: n.group,
                span: n.span,
            });
            pending.push(n.inputs);
        }
        finish(
            nodes,
            pending,
            spec.release,
            &spec.release_dir,
            &spec.store_dir,
            &spec.protected,
            spec.group_noun,
            src,
            root,
        )
    }

    /// Repeat the checks of [`Graph::build`] that read the disk (no component of the release
    /// directory or of an output path may be a symlink), for a graph
    /// read back from a compiled cache ([`crate::compiled`]); `false` when one fails (the front
    /// end then builds the graph again, which reports it).
    pub fn disk_checks_pass(&self, root: &Path) -> bool {
        if !self.release_dir_passes(root) {
            return false;
        }
        let root_real = root.canonicalize().ok();
        let root_fd = open_root(root);
        let outputs: Vec<&str> = self
            .nodes
            .iter()
            .flat_map(|n| &n.outputs)
            .map(|o| o.path.as_str())
            .collect();
        let check = |part: &[&str]| -> Option<Vec<Option<FileStat>>> {
            let mut checked = std::collections::HashSet::new();
            // Sized up front: grown piece by piece, a new thread's vector is most of the cost.
            let mut stats = Vec::with_capacity(part.len());
            for rel in part {
                stats.push(
                    check_output_path(
                        root,
                        root_fd.as_ref(),
                        root_real.as_deref(),
                        rel,
                        &mut checked,
                    )
                    .ok()?,
                );
            }
            Some(stats)
        };
        // On a large graph these stats are most of a no-op build's time on one core: the
        // other cores take a share (each with its own set of checked folders).
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get().min(4));
        let stats = if threads > 1 && outputs.len() >= PARALLEL_DISK_CHECKS {
            let chunk = outputs.len().div_ceil(threads);
            std::thread::scope(|scope| {
                let parts: Vec<_> = outputs
                    .chunks(chunk)
                    .map(|part| {
                        (
                            part,
                            std::thread::Builder::new().spawn_scoped(scope, || check(part)),
                        )
                    })
                    .collect();
                let mut all = Vec::with_capacity(outputs.len());
                for (part, spawned) in parts {
                    // No thread (the system refused one): this thread takes its share.
                    let stats = match spawned {
                        Ok(h) => h.join().ok().flatten(),
                        Err(_) => check(part),
                    };
                    all.extend(stats?);
                }
                Some(all)
            })
        } else {
            check(&outputs)
        };
        match stats {
            Some(stats) => {
                if let Ok(mut taken) = self.output_stats.lock() {
                    *taken = Some(stats);
                }
                true
            }
            None => false,
        }
    }

    /// The disk check of the release folder alone: no symlink on its path.
    pub fn release_dir_passes(&self, root: &Path) -> bool {
        symlink_on_path(root, &self.release_dir, true).is_none()
    }

    /// The stat of each declared output (flat in node order, then output order) as the disk
    /// checks took it: `Some` for a regular file. The first build of this graph takes them
    /// instead of a stat of its own, so a no-op build stats each output once; `None` when no
    /// disk check ran, or a build took them already (they are only as fresh as the checks).
    pub fn take_output_stats(&self) -> Option<Vec<Option<FileStat>>> {
        self.output_stats.lock().ok()?.take()
    }

    /// Whether source input `rel` of node `n` is a folder holding declared outputs of the
    /// nodes it depends on: its digest is only taken once they ran (none of it before).
    pub fn holds_built(&self, n: NodeIdx, rel: &str) -> bool {
        self.deps[n]
            .iter()
            .any(|&d| self.nodes[d].outputs.iter().any(|o| under(&o.path, rel)))
    }

    /// The node ids a command-line target names: a node id, a group name, or a kind name.
    pub fn resolve_target(&self, name: &str) -> Result<Vec<NodeIdx>> {
        if let Some(&n) = self.by_id.get(name) {
            return Ok(vec![n]);
        }
        let found: Vec<NodeIdx> = (0..self.nodes.len())
            .filter(|&n| self.nodes[n].group.as_deref() == Some(name) || self.nodes[n].kind == name)
            .collect();
        if found.is_empty() {
            let mut names: Vec<&str> = self.by_id.keys().map(String::as_str).collect();
            names.extend(self.nodes.iter().filter_map(|n| n.group.as_deref()));
            names.extend(self.nodes.iter().map(|n| n.kind.as_str()));
            return Err(DagError::UnknownTarget {
                group: self.group_noun.clone(),
                name: name.to_string(),
                hint: did_you_mean(name, names),
            });
        }
        Ok(found)
    }
}

fn output(src: &Source, raw: &str, span: Range<usize>) -> Result<Output> {
    let dir = raw.ends_with('/');
    let path =
        clean_rel(raw).map_err(|e| src.error_at(span.clone(), format!("output `{raw}`: {e}")))?;
    if path.is_empty() {
        return Err(src.error_at(span, "output `.`: the workspace root cannot be an output"));
    }
    Ok(Output { path, dir })
}

/// Who writes each declared output path: (node, index into its `outputs`).
type Owners = BTreeMap<String, (NodeIdx, usize)>;

/// The checks and resolution of [`Graph::build`] once every node's outputs are parsed, in the
/// order their errors are reported: the release directory, node ids, outputs, inputs, the
/// order (cycles), the release entries.
#[allow(clippy::too_many_arguments)]
fn finish(
    mut nodes: Vec<Node>,
    pending: Vec<Vec<InputSpec>>,
    release_specs: Vec<ReleaseSpec>,
    release_dir: &Located<String>,
    store_dir: &str,
    protected: &[Protected],
    group_noun: String,
    m: &Source,
    root: &Path,
) -> Result<Graph> {
    let release_span = release_dir.span.clone();
    let release_dir = check_release_dir(release_dir, &folder_rules(store_dir, protected), m, root)?;
    let by_id = index_ids(&nodes, m)?;
    let (owners, stats) = check_outputs(&nodes, &release_dir, store_dir, protected, m, root)?;
    for (ni, raw_inputs) in pending.into_iter().enumerate() {
        resolve_inputs(&mut nodes, ni, raw_inputs, &by_id, &owners, m)?;
    }
    let deps = deps_of(&nodes);
    let order = order_of(&nodes, &deps, m)?;
    let release = release_entries(release_specs, &owners, m)?;
    Ok(Graph {
        nodes,
        by_id,
        deps,
        order,
        release,
        release_dir,
        release_span,
        group_noun,
        source: m.clone(),
        params_checked: false,
        output_stats: Some(stats).into(),
    })
}

/// The release directory, normalised: a folder inside the workspace (not its root), none of
/// `rules` ([`crate::writable::may_write`]), reached through real folders only, since the
/// release tree is replaced whole.
fn check_release_dir(
    release_dir: &Located<String>,
    rules: &[Protected],
    m: &Source,
    root: &Path,
) -> Result<String> {
    let release_span = release_dir.span.clone();
    let release_dir = clean_rel(&release_dir.value)
        .map_err(|e| m.error_at(release_span.clone(), format!("release_dir: {e}")))?;
    if release_dir.is_empty() {
        return Err(m.error_at(
            release_span,
            "release_dir `.`: the workspace root cannot be the release directory (it is replaced whole); name a folder inside it",
        ));
    }
    if let Err(refusal) = crate::writable::may_write(Path::new(&release_dir), rules) {
        return Err(m.error_at(
            release_span,
            format!("release_dir `{release_dir}` {refusal}, which is not the build's to write"),
        ));
    }
    // The release tree is replaced whole: it must not lead anywhere else.
    if let Some(target) = symlink_escape(root, &release_dir) {
        return Err(m.error_at(
            release_span,
            format!(
                "release_dir `{release_dir}` leads out of the workspace through a symlink (to `{}`)",
                target.display()
            ),
        ));
    }
    if let Some((link, target)) = symlink_on_path(root, &release_dir, true) {
        return Err(m.error_at(
            release_span,
            format!(
                "release_dir `{release_dir}`: `{link}` is a symlink (to `{}`); the release tree is written only through real folders",
                target.display()
            ),
        ));
    }
    Ok(release_dir)
}

/// Each node's index by id; two nodes of one id are an error.
fn index_ids(nodes: &[Node], m: &Source) -> Result<BTreeMap<String, NodeIdx>> {
    let mut by_id = BTreeMap::new();
    for (i, n) in nodes.iter().enumerate() {
        if by_id.insert(n.id.clone(), i).is_some() {
            return Err(m.error_at(n.span.clone(), format!("two nodes are named `{}`", n.id)));
        }
    }
    Ok(by_id)
}

/// Every output: unique, not nested in another, not in the release tree or the store, not a
/// protected path, not reached through a symlink. Returns who writes each, and what the one
/// `lstat` of each output found ([`Graph::output_stats`]).
fn check_outputs(
    nodes: &[Node],
    release_dir: &str,
    store_dir: &str,
    protected: &[Protected],
    m: &Source,
    root: &Path,
) -> Result<(Owners, Vec<Option<FileStat>>)> {
    let mut owners = Owners::new();
    let mut stats = Vec::new();
    let root_real = root.canonicalize().ok();
    let root_fd = open_root(root);
    let mut checked_dirs = std::collections::HashSet::new();
    let rules = output_rules(release_dir, store_dir, protected);
    for (ni, n) in nodes.iter().enumerate() {
        for (oi, o) in n.outputs.iter().enumerate() {
            let at = n.span.clone();
            if let Err(refusal) = crate::writable::may_write(Path::new(&o.path), &rules) {
                let hint = if refusal.path.as_os_str() == release_dir
                    && refusal.relation == crate::writable::Relation::LiesInside
                {
                    "; write it elsewhere and publish it with [[release.publish]]"
                } else {
                    ", which is not the build's to write"
                };
                return Err(m.error_at(
                    at,
                    format!("node `{}`: output `{}` {refusal}{hint}", n.id, o.path),
                ));
            }
            let stat = check_output_path(
                root,
                root_fd.as_ref(),
                root_real.as_deref(),
                &o.path,
                &mut checked_dirs,
            )
            .map_err(|e| {
                m.error_at(
                    at.clone(),
                    format!("node `{}`: output `{}`: {e}", n.id, o.path),
                )
            })?;
            stats.push(stat);
            if let Some((other, &(on, _))) = overlapping(&owners, &o.path) {
                let what = if other == &o.path {
                    "also written by"
                } else {
                    "overlaps an output of"
                };
                return Err(m.error_at(
                    at,
                    format!(
                        "node `{}`: output `{}` {what} node `{}` (`{other}`)",
                        n.id, o.path, nodes[on].id
                    ),
                ));
            }
            owners.insert(o.path.clone(), (ni, oi));
        }
    }
    Ok((owners, stats))
}

/// What no output may be, lie inside or contain ([`crate::writable::may_write`]; `.git` at any
/// depth besides): the release directory (replaced whole by the release), and what no
/// folder of the build may be ([`folder_rules`]).
fn output_rules(release_dir: &str, store_dir: &str, protected: &[Protected]) -> Vec<Protected> {
    let mut rules = vec![Protected::new(release_dir, "the release directory")];
    rules.extend(folder_rules(store_dir, protected));
    rules
}

/// What neither an output nor the release directory may be, lie inside or contain: the paths
/// the front end protects (its declaration file), skyctl's folder (the workspace state and the
/// default store) and the store in use.
fn folder_rules(store_dir: &str, protected: &[Protected]) -> Vec<Protected> {
    let mut rules = protected.to_vec();
    rules.push(Protected::new(
        ".skyctl",
        "skyctl's folder (the workspace state and the default store)",
    ));
    match clean_rel(store_dir) {
        Ok(store) if !store.is_empty() && store != ".skyctl" => {
            rules.push(Protected::new(store, "the store"));
        }
        _ => {}
    }
    rules
}

/// Resolve node `ni`'s inputs as written: `node:<id>` (every output of that node), a glob
/// over source files, a path that is (or lies inside) an output (a dependency on its node),
/// else a source path. Sets the node's `inputs`, `input_spans` and `input_roles`.
fn resolve_inputs(
    nodes: &mut [Node],
    ni: NodeIdx,
    raw_inputs: Vec<InputSpec>,
    by_id: &BTreeMap<String, NodeIdx>,
    owners: &Owners,
    m: &Source,
) -> Result<()> {
    let mut inputs = Vec::new();
    let mut input_spans = Vec::new();
    let mut input_roles = Vec::new();
    for InputSpec {
        path: Located { value: raw, span },
        allow_empty,
        role,
    } in raw_inputs
    {
        let id = nodes[ni].id.clone();
        if let Some(target) = raw.strip_prefix("node:") {
            let Some(&t) = by_id.get(target) else {
                return Err(m.error_at(
                    span,
                    format!(
                        "node `{id}`: input `{raw}` refers to no node named `{target}`{}",
                        did_you_mean(target, by_id.keys().map(String::as_str))
                    ),
                ));
            };
            if nodes[t].outputs.is_empty() {
                return Err(m.error_at(
                    span,
                    format!("node `{id}`: input `{raw}`: node `{target}` declares no outputs"),
                ));
            }
            for oi in 0..nodes[t].outputs.len() {
                inputs.push(Input::Output {
                    node: t,
                    output: oi,
                });
                input_spans.push(span.clone());
                input_roles.push(role.clone());
            }
            continue;
        }
        let path = clean_rel(&raw)
            .map_err(|e| m.error_at(span.clone(), format!("node `{id}`: input `{raw}`: {e}")))?;
        if Glob::is_glob(&path) {
            let g = Glob::new(&path)
                .map_err(|e| m.error_at(span.clone(), format!("node `{id}`: input: {e}")))?;
            // A glob must not pick up built files: their content is only known after their
            // node ran, so they must be named (path or `node:`) to be ordered.
            let reaches = |o: &String| {
                let (on, oi) = owners[o];
                let dir_out = nodes[on].outputs[oi].dir;
                g.matches(o) || (dir_out && (under(o, g.literal_dir()) || o == g.literal_dir()))
            };
            if let Some(o) = owners.keys().find(|o| reaches(o)) {
                return Err(m.error_at(span, format!(
                    "node `{id}`: input glob `{raw}` matches output `{o}`; name built outputs explicitly or with `node:<name>`")));
            }
            inputs.push(Input::Glob {
                glob: g,
                allow_empty,
            });
            input_spans.push(span.clone());
            input_roles.push(role.clone());
            continue;
        }
        if allow_empty {
            return Err(m.error_at(
                span,
                format!("node `{id}`: input `{raw}`: only a glob (`*`, `?`, `[...]`) may be allowed to match nothing; name a plain path as a string"),
            ));
        }
        // A path that is (or lies inside) a declared output is a dependency on its node.
        match owner_of(owners, &path) {
            Some((on, oi)) => {
                inputs.push(Input::Output {
                    node: on,
                    output: oi,
                });
                input_spans.push(span.clone());
                input_roles.push(role.clone());
            }
            None => {
                if path.is_empty() {
                    return Err(m.error_at(
                        span,
                        format!("node `{id}`: the whole workspace cannot be an input"),
                    ));
                }
                // A folder holding outputs is read once their nodes ran ([`deps_of`]); one
                // holding the node's own output would change with each of its runs.
                let inside = owners.range(format!("{path}/")..format!("{path}0"));
                if let Some((o, _)) = inside.into_iter().find(|(_, &(on, _))| on == ni) {
                    return Err(m.error_at(
                        span,
                        format!("node `{id}`: input `{raw}` holds its own output `{o}`; a node cannot read the folder it writes into (its key would change with every run): read another folder, or write the output elsewhere"),
                    ));
                }
                inputs.push(Input::Source(path));
                input_spans.push(span.clone());
                input_roles.push(role.clone());
            }
        }
    }
    nodes[ni].inputs = inputs;
    nodes[ni].input_spans = input_spans;
    nodes[ni].input_roles = input_roles;
    Ok(())
}

/// A topological order of `nodes`; a cycle is an error naming its nodes, at the first one.
fn order_of(nodes: &[Node], deps: &[Vec<NodeIdx>], m: &Source) -> Result<Vec<NodeIdx>> {
    topo_order(nodes, deps).map_err(|cycle| {
        let names: Vec<&str> = cycle.iter().map(|&n| nodes[n].id.as_str()).collect();
        m.error_at(
            nodes[cycle[0]].span.clone(),
            format!("dependency cycle: {}", names.join(" -> ")),
        )
    })
}

/// The release entries: each `to` a path inside the release tree that collides with no
/// other, each `from` a declared output.
fn release_entries(
    release_specs: Vec<ReleaseSpec>,
    owners: &Owners,
    m: &Source,
) -> Result<Vec<ReleaseEntry>> {
    let mut release: Vec<ReleaseEntry> = Vec::new();
    for ReleaseSpec {
        to: to_raw,
        from: from_raw,
        span,
    } in release_specs
    {
        let to = clean_rel(&to_raw)
            .map_err(|e| m.error_at(span.clone(), format!("release path `{to_raw}`: {e}")))?;
        if to.is_empty() {
            return Err(m.error_at(
                span,
                format!("release path `{to_raw}` names the release directory itself; give a path inside it"),
            ));
        }
        let from = clean_rel(&from_raw)
            .map_err(|e| m.error_at(span.clone(), format!("publish `{from_raw}`: {e}")))?;
        let Some(&(node, output)) = owners.get(&from) else {
            return Err(m.error_at(
                span,
                format!(
                    "publish `{from_raw}` is not a declared output of any node{}",
                    did_you_mean(&from, owners.keys().map(String::as_str))
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
    Ok(release)
}

/// Each node's direct dependencies (sorted, unique), from its inputs: the producer of each
/// [`Input::Output`], and of every declared output lying inside a source folder it reads (the
/// folder's digest is taken once they ran, [`Graph::holds_built`]).
pub(crate) fn deps_of(nodes: &[Node]) -> Vec<Vec<NodeIdx>> {
    // Each source path some node reads, with the nodes writing inside it: every output's
    // folders on its way are looked up among the (few) source paths, instead of a sorted map
    // of every output (most of a 5,000-node graph's decode).
    let mut inside: HashMap<&str, Vec<NodeIdx>, foldhash::fast::RandomState> = nodes
        .iter()
        .flat_map(|n| &n.inputs)
        .filter_map(|i| match i {
            Input::Source(p) if !p.is_empty() => Some((p.as_str(), Vec::new())),
            _ => None,
        })
        .collect();
    if !inside.is_empty() {
        for (i, n) in nodes.iter().enumerate() {
            for o in &n.outputs {
                for (end, _) in o.path.match_indices('/') {
                    if let Some(writers) = inside.get_mut(&o.path[..end]) {
                        writers.push(i);
                    }
                }
            }
        }
    }
    nodes
        .iter()
        .map(|n| {
            let mut d: Vec<NodeIdx> = Vec::new();
            for i in &n.inputs {
                match i {
                    Input::Output { node, .. } => d.push(*node),
                    Input::Source(p) => {
                        if let Some(writers) = inside.get(p.as_str()) {
                            d.extend(writers);
                        }
                    }
                    Input::Glob { .. } => {}
                }
            }
            d.sort_unstable();
            d.dedup();
            d
        })
        .collect()
}

/// Kahn's algorithm in declaration order; on a cycle, returns the nodes of one cycle, first
/// node repeated at the end.
pub(crate) fn topo_order(
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
fn owner_of(owners: &Owners, path: &str) -> Option<(NodeIdx, usize)> {
    if let Some(&v) = owners.get(path) {
        return Some(v);
    }
    path.match_indices('/')
        .find_map(|(i, _)| owners.get(&path[..i]).copied())
}

/// A declared output that equals `path`, contains it, or lies inside it.
fn overlapping<'o>(owners: &'o Owners, path: &str) -> Option<(&'o String, &'o (NodeIdx, usize))> {
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

/// Why a declared path is not a workspace-relative one ([`clean_rel`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RelPathError {
    /// `/x`, `~/x` or `C:x`.
    #[error("absolute paths are not allowed; use a path relative to the workspace root")]
    Absolute,
    /// A backslash in it.
    #[error("use `/` as the path separator")]
    Backslash,
    /// A `..` component.
    #[error("`..` is not allowed: paths must stay inside the workspace")]
    Parent,
}

/// Normalise a workspace-relative path: drop `.` components and a trailing `/`; reject absolute
/// paths, `..`, backslashes and empty components.
pub fn clean_rel(raw: &str) -> std::result::Result<String, RelPathError> {
    if raw.starts_with('/') || raw.starts_with('~') || (raw.len() > 1 && raw.as_bytes()[1] == b':')
    {
        return Err(RelPathError::Absolute);
    }
    if raw.contains('\\') {
        return Err(RelPathError::Backslash);
    }
    let mut parts = Vec::new();
    for c in raw.split('/') {
        match c {
            "" | "." => {}
            ".." => return Err(RelPathError::Parent),
            c => parts.push(c),
        }
    }
    Ok(parts.join("/"))
}

/// Where `root/rel` leads when one of its existing components (the last one too) is a
/// symlink resolving outside `root`; None when it stays inside (or does not exist yet).
pub fn symlink_escape(root: &Path, rel: &str) -> Option<std::path::PathBuf> {
    let root_real = root.canonicalize().ok()?;
    let mut p = root.to_path_buf();
    for c in rel.split('/').filter(|c| !c.is_empty() && *c != ".") {
        p.push(c);
        match std::fs::symlink_metadata(&p) {
            Ok(md) if md.file_type().is_symlink() => match p.canonicalize() {
                Ok(target) if !target.starts_with(&root_real) => return Some(target),
                Ok(_) => {}
                Err(_) => return None,
            },
            Ok(_) => {}
            Err(_) => return None,
        }
    }
    None
}

/// The first existing component of `rel` under `root` that is a symlink (the last component
/// too when `last`): its workspace path and what the link says. `None` when there is none
/// (the walk stops at the first component that does not exist).
pub fn symlink_on_path(root: &Path, rel: &str, last: bool) -> Option<(String, std::path::PathBuf)> {
    let parts: Vec<&str> = rel
        .split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .collect();
    let upto = if last {
        parts.len()
    } else {
        parts.len().saturating_sub(1)
    };
    let mut p = root.to_path_buf();
    for (i, c) in parts.iter().take(upto).enumerate() {
        p.push(c);
        match std::fs::symlink_metadata(&p) {
            Ok(md) if md.file_type().is_symlink() => {
                let target = std::fs::read_link(&p).unwrap_or_default();
                return Some((parts[..=i].join("/"), target));
            }
            Ok(_) => {}
            Err(_) => return None,
        }
    }
    None
}

/// A symlink on the way to an output path, found by [`check_output_path`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum SymlinkOnOutput {
    /// `prefix` is a symlink to nothing.
    #[error("`{prefix}` is a dangling symlink")]
    Dangling {
        /// The path up to the link, workspace-relative.
        prefix: String,
    },
    /// `prefix` is a symlink leading out of the workspace.
    #[error("`{prefix}` is a symlink leading out of the workspace (to `{}`)", target.display())]
    LeadsOut {
        /// The path up to the link, workspace-relative.
        prefix: String,
        /// Where it leads.
        target: PathBuf,
    },
    /// `prefix` is a symlink inside the workspace.
    #[error("`{prefix}` is a symlink (to `{shown}`); outputs are written only through real folders, never through a symlink")]
    Inside {
        /// The path up to the link, workspace-relative.
        prefix: String,
        /// Where it leads, workspace-relative.
        shown: String,
    },
}

/// Fails when a component of output path `rel` under `root` (the last one too) is a symlink:
/// every write of an output goes through real folders, so none can land in `.git`, the
/// store or anywhere else a link points. `checked` holds the folders already found clean.
/// `Ok(Some(stat))` when the output is a regular file: that `lstat` is the only one a no-op
/// build takes of it.
/// Declared outputs from which [`Graph::disk_checks_pass`] shares its stats between threads.
const PARALLEL_DISK_CHECKS: usize = 2048;

/// The workspace folder opened for [`check_output_path`]; `None` where it cannot be (each
/// path is then looked up from `/`).
fn open_root(root: &Path) -> Option<std::os::fd::OwnedFd> {
    use rustix::fs::{Mode, OFlags};
    rustix::fs::open(
        root,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .ok()
}

/// The `lstat` of each folder on the way to the output `rel` (once per folder: `checked`) and
/// of `rel` itself, relative to `root_fd` (the kernel then walks the workspace's path once
/// instead of for every output: about a third of the time of a 5,000-output check).
fn check_output_path(
    root: &Path,
    root_fd: Option<&std::os::fd::OwnedFd>,
    root_real: Option<&Path>,
    rel: &str,
    checked: &mut std::collections::HashSet<String>,
) -> std::result::Result<Option<FileStat>, SymlinkOnOutput> {
    use rustix::fs::{AtFlags, FileType};
    let ends = rel
        .match_indices('/')
        .map(|(end, _)| end)
        .chain([rel.len()]);
    for end in ends {
        let prefix = &rel[..end];
        if end < rel.len() && checked.contains(prefix) {
            continue;
        }
        let st = match root_fd {
            Some(fd) => rustix::fs::statat(fd, prefix, AtFlags::SYMLINK_NOFOLLOW),
            None => rustix::fs::lstat(root.join(prefix)),
        };
        let kind = st.as_ref().map(|st| FileType::from_raw_mode(st.st_mode));
        match (st, kind) {
            (Ok(_), Ok(FileType::Symlink)) => {
                let p = root.join(prefix);
                let prefix = prefix.to_string();
                let Ok(target) = p.canonicalize() else {
                    return Err(SymlinkOnOutput::Dangling { prefix });
                };
                if root_real.is_some_and(|r| !target.starts_with(r)) {
                    return Err(SymlinkOnOutput::LeadsOut { prefix, target });
                }
                let shown = target
                    .strip_prefix(root_real.unwrap_or(root))
                    .map(|t| t.display().to_string())
                    .unwrap_or_else(|_| target.display().to_string());
                return Err(SymlinkOnOutput::Inside { prefix, shown });
            }
            (Ok(st), Ok(kind)) if end == rel.len() => {
                return Ok((kind == FileType::RegularFile).then(|| FileStat::of_stat(&st)));
            }
            (Ok(_), _) => {
                checked.insert(prefix.to_string());
            }
            (Err(_), _) => return Ok(None),
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{cmd, graph, spec};

    fn located(e: DagError) -> (usize, usize, String) {
        match e {
            DagError::Located {
                line, col, message, ..
            } => (line, col, message),
            other => panic!("expected a located error, got {other}"),
        }
    }

    #[test]
    fn clean_rel_normalises_or_says_why_not() {
        assert_eq!(clean_rel("./a//b/").unwrap(), "a/b");
        assert_eq!(clean_rel("/etc"), Err(RelPathError::Absolute));
        assert_eq!(clean_rel("C:x"), Err(RelPathError::Absolute));
        assert_eq!(clean_rel("a\\b"), Err(RelPathError::Backslash));
        let e = clean_rel("a/../b").unwrap_err();
        assert_eq!(e, RelPathError::Parent);
        assert_eq!(
            e.to_string(),
            "`..` is not allowed: paths must stay inside the workspace"
        );
    }

    #[test]
    fn path_inputs_become_dependencies() {
        let g = graph(vec![
            cmd("a", "true", &["src.txt"], &["out/a"]),
            cmd("b", "true", &["out/a"], &["out/b"]),
        ])
        .unwrap();
        let b = g.by_id["b"];
        assert_eq!(g.deps[b], vec![g.by_id["a"]]);
        assert_eq!(g.order, vec![0, 1]);
        assert!(matches!(&g.nodes[0].inputs[0], Input::Source(p) if p == "src.txt"));
    }

    #[test]
    fn cycle_is_printed() {
        let e = graph(vec![
            cmd("a", "true", &["out/b"], &["out/a"]),
            cmd("b", "true", &["node:a"], &["out/b"]),
        ])
        .unwrap_err();
        let (_, _, msg) = located(e);
        assert!(
            msg == "dependency cycle: a -> b -> a" || msg == "dependency cycle: b -> a -> b",
            "{msg}"
        );
    }

    #[test]
    fn errors_are_located_at_the_node_span() {
        let text = "first line\nsecond: a\nthird: b\n";
        let mut a = cmd("a", "true", &[], &["out/x"]);
        a.span = 11..12;
        let mut b = cmd("b", "true", &[], &["out/x"]);
        b.span = 28..29;
        let src = Source::new(Path::new("p.toml"), text);
        let e = Graph::build(spec(vec![a, b]), &src, Path::new("/nonexistent")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "p.toml:3:8: node `b`: output `out/x` also written by node `a` (`out/x`)"
        );
    }

    #[test]
    fn nested_outputs_overlap() {
        let e = graph(vec![
            cmd("a", "true", &[], &["out/"]),
            cmd("b", "true", &[], &["out/x"]),
        ])
        .unwrap_err();
        assert!(located(e).2.contains("overlaps an output of node `a`"));
    }

    #[test]
    fn outputs_outside_the_workspace() {
        let e = graph(vec![cmd("a", "true", &[], &["../x"])]).unwrap_err();
        assert!(located(e).2.contains("`..` is not allowed"));
        let e = graph(vec![cmd("a", "true", &[], &["/tmp/x"])]).unwrap_err();
        assert!(located(e).2.contains("absolute paths are not allowed"));
        let e = graph(vec![cmd("a", "true", &[], &["."])]).unwrap_err();
        assert!(located(e)
            .2
            .contains("the workspace root cannot be an output"));
    }

    #[test]
    fn unknown_node_reference() {
        let e = graph(vec![
            cmd("alpha", "true", &[], &["o"]),
            cmd("b", "true", &["node:alpah"], &["p"]),
        ])
        .unwrap_err();
        assert_eq!(
            located(e).2,
            "node `b`: input `node:alpah` refers to no node named `alpah` (did you mean `alpha`?)"
        );
    }

    #[test]
    fn duplicate_ids() {
        let e = graph(vec![
            cmd("a", "true", &[], &["o"]),
            cmd("a", "true", &[], &["p"]),
        ])
        .unwrap_err();
        assert_eq!(located(e).2, "two nodes are named `a`");
    }

    #[test]
    fn globs_must_not_match_outputs() {
        let e = graph(vec![
            cmd("a", "true", &[], &["out/a.txt"]),
            cmd("b", "true", &["out/*.txt"], &["b"]),
        ])
        .unwrap_err();
        assert!(located(e)
            .2
            .contains("input glob `out/*.txt` matches output `out/a.txt`"));
        assert!(graph(vec![
            cmd("a", "true", &[], &["out/a.bin"]),
            cmd("b", "true", &["out/*.txt"], &["b"])
        ])
        .is_ok());
    }

    #[test]
    fn outputs_in_release_tree_or_store_are_rejected() {
        let e = graph(vec![cmd("a", "true", &[], &["site/public/x"])]).unwrap_err();
        assert!(located(e).2.contains("inside the release directory"));
        let e = graph(vec![cmd("a", "true", &[], &[".skyctl/x"])]).unwrap_err();
        assert_eq!(
            located(e).2,
            "node `a`: output `.skyctl/x` lies inside skyctl's folder (the workspace state and the default store) `.skyctl`, which is not the build's to write"
        );
        let mut s = spec(vec![cmd("a", "true", &[], &["cache/"])]);
        s.store_dir = "cache/store".into();
        let e = Graph::build(s, &Source::default(), Path::new("/x")).unwrap_err();
        assert_eq!(
            located(e).2,
            "node `a`: output `cache` contains the store `cache/store`, which is not the build's to write"
        );
    }

    #[test]
    fn git_at_any_depth_and_protected_paths_are_never_written() {
        for (out, message) in [
            (".git/config", "lies inside version control's folder `.git`"),
            (
                "sub/.git/hooks/pre-commit",
                "lies inside version control's folder `sub/.git`",
            ),
            ("a/b/.git/", "is version control's folder `a/b/.git`"),
        ] {
            let e = graph(vec![cmd("a", "true", &[], &[out])]).unwrap_err();
            let shown = out.trim_end_matches('/');
            assert_eq!(
                located(e).2,
                format!("node `a`: output `{shown}` {message}, which is not the build's to write")
            );
        }
        let mut s = spec(vec![cmd("a", "true", &[], &["conf/pipeline.toml"])]);
        s.protected
            .push(Protected::new("conf/pipeline.toml", "the pipeline file"));
        let e = Graph::build(s.clone(), &Source::default(), Path::new("/x")).unwrap_err();
        assert_eq!(
            located(e).2,
            "node `a`: output `conf/pipeline.toml` is the pipeline file `conf/pipeline.toml`, which is not the build's to write"
        );
        s.nodes[0].outputs[0].value = "conf/".into();
        let e = Graph::build(s.clone(), &Source::default(), Path::new("/x")).unwrap_err();
        assert!(located(e)
            .2
            .contains("output `conf` contains the pipeline file"));
        // The release directory by the same rule.
        s.nodes[0].outputs[0].value = "out/a".into();
        s.release_dir = Located::new("vendor/.git/public".into(), 0..0);
        let e = Graph::build(s, &Source::default(), Path::new("/x")).unwrap_err();
        assert_eq!(
            located(e).2,
            "release_dir `vendor/.git/public` lies inside version control's folder `vendor/.git`, which is not the build's to write"
        );
    }

    #[test]
    fn a_folder_input_depends_on_the_nodes_writing_into_it() {
        let g = graph(vec![
            cmd("use", "true", &["data", "data/sub", "dat"], &["listing"]),
            cmd("gen", "true", &[], &["data/gen.txt"]),
            cmd("deep", "true", &[], &["data/sub/x/"]),
            cmd("beside", "true", &[], &["data.txt", "dat0"]),
            cmd("sub", "true", &["data/sub"], &["sublist"]),
        ])
        .unwrap();
        let (us, gen, deep) = (g.by_id["use"], g.by_id["gen"], g.by_id["deep"]);
        assert_eq!(g.deps[us], vec![gen, deep]);
        // Every folder on an output's way counts, not only its first.
        assert_eq!(g.deps[g.by_id["sub"]], vec![deep]);
        assert!(matches!(&g.nodes[us].inputs[0], Input::Source(p) if p == "data"));
        assert!(g.holds_built(us, "data") && g.holds_built(us, "data/sub"));
        assert!(!g.holds_built(us, "dat"));
        let pos = |n| g.order.iter().position(|&x| x == n).unwrap();
        assert!(pos(gen) < pos(us) && pos(deep) < pos(us));
        // What a compiled graph recomputes from the nodes is the same.
        assert_eq!(deps_of(&g.nodes), g.deps);
        // A folder holding the node's own output.
        let e = graph(vec![cmd("self", "true", &["data"], &["data/list"])]).unwrap_err();
        assert_eq!(
            located(e).2,
            "node `self`: input `data` holds its own output `data/list`; a node cannot read the folder it writes into (its key would change with every run): read another folder, or write the output elsewhere"
        );
    }

    #[test]
    fn release_entries_name_declared_outputs() {
        let mut s = spec(vec![cmd("a", "true", &[], &["out/a.txt"])]);
        s.release.push(ReleaseSpec {
            to: "a.txt".into(),
            from: "out/a.txt".into(),
            span: 0..0,
        });
        let g = Graph::build(s.clone(), &Source::default(), Path::new("/x")).unwrap();
        assert_eq!((g.release[0].to.as_str(), g.release[0].node), ("a.txt", 0));
        s.release.push(ReleaseSpec {
            to: "a.txt".into(),
            from: "out/a.txt".into(),
            span: 0..0,
        });
        let e = Graph::build(s.clone(), &Source::default(), Path::new("/x")).unwrap_err();
        assert!(located(e).2.contains("collides with"));
        s.release.pop();
        s.release[0].from = "out/b.txt".into();
        let e = Graph::build(s, &Source::default(), Path::new("/x")).unwrap_err();
        assert!(located(e)
            .2
            .contains("publish `out/b.txt` is not a declared output of any node"));
    }

    #[test]
    fn the_release_dir_and_release_paths_name_folders_and_files_inside() {
        let mut s = spec(vec![cmd("a", "true", &[], &["out/a.txt"])]);
        s.release_dir = Located::new("./".into(), 0..0);
        let e = Graph::build(s, &Source::default(), Path::new("/x")).unwrap_err();
        assert!(located(e)
            .2
            .starts_with("release_dir `.`: the workspace root cannot be the release directory"));
        let mut s = spec(vec![cmd("a", "true", &[], &["out/a.txt"])]);
        s.release.push(ReleaseSpec {
            to: "./.".into(),
            from: "out/a.txt".into(),
            span: 0..0,
        });
        let e = Graph::build(s, &Source::default(), Path::new("/x")).unwrap_err();
        assert_eq!(
            located(e).2,
            "release path `./.` names the release directory itself; give a path inside it"
        );
    }

    #[test]
    fn only_a_glob_may_match_nothing() {
        let g = graph(vec![
            cmd("a", "true", &[], &["o"]).input_may_be_empty("data/*.txt", 0..0)
        ])
        .unwrap();
        assert!(matches!(
            &g.nodes[0].inputs[0],
            Input::Glob { allow_empty: true, glob } if glob.as_str() == "data/*.txt"
        ));
        let e = graph(vec![
            cmd("a", "true", &[], &["o"]).input_may_be_empty("data/x.txt", 0..0)
        ])
        .unwrap_err();
        assert!(located(e)
            .2
            .contains("only a glob (`*`, `?`, `[...]`) may be allowed to match nothing"));
    }

    /// Past [`PARALLEL_DISK_CHECKS`] outputs the stats are shared between threads: they
    /// come back in declared order, and a symlink in any share fails the checks.
    #[test]
    fn disk_checks_of_a_large_graph_keep_the_order_and_see_every_share() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let n = PARALLEL_DISK_CHECKS + 11;
        std::fs::create_dir_all(root.join("out")).unwrap();
        let outputs: Vec<String> = (0..n).map(|i| format!("out/{i}.txt")).collect();
        for (i, o) in outputs.iter().enumerate().step_by(3) {
            std::fs::write(root.join(o), vec![b'x'; i]).unwrap();
        }
        let nodes = |extra: Option<&str>| {
            let mut v: Vec<NodeSpec> = outputs
                .iter()
                .enumerate()
                .map(|(i, o)| cmd(&format!("n{i}"), "true", &[], &[o]))
                .collect();
            if let Some(o) = extra {
                v.push(cmd("late", "true", &[], &[o]));
            }
            v
        };
        let g = Graph::build(spec(nodes(None)), &Source::default(), root).unwrap();
        assert!(g.disk_checks_pass(root));
        let stats = g.take_output_stats().unwrap();
        assert_eq!(stats.len(), n);
        for (i, st) in stats.iter().enumerate() {
            match st {
                Some(st) => assert!(i % 3 == 0 && st.size == i as u64, "{i}: {st:?}"),
                None => assert!(i % 3 != 0, "{i}"),
            }
        }
        // The last share holds a symlink made after the graph was compiled.
        let g = Graph::build(spec(nodes(Some("link/x.txt"))), &Source::default(), root).unwrap();
        assert!(g.disk_checks_pass(root));
        assert_eq!(g.take_output_stats().map(|s| s.len()), Some(n + 1));
        std::fs::create_dir_all(root.join("real")).unwrap();
        std::os::unix::fs::symlink("real", root.join("link")).unwrap();
        assert!(!g.disk_checks_pass(root));
        assert_eq!(g.take_output_stats(), None);
    }

    #[test]
    fn symlinks_on_an_output_path_are_found_at_every_depth() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("real/b")).unwrap();
        std::fs::create_dir_all(root.join("x/y")).unwrap();
        std::os::unix::fs::symlink("real", root.join("a")).unwrap();
        std::os::unix::fs::symlink("../../real", root.join("x/y/z")).unwrap();
        std::os::unix::fs::symlink("real/f", root.join("f")).unwrap();
        assert_eq!(
            symlink_on_path(root, "a/b/c", false).map(|(l, t)| (l, t.display().to_string())),
            Some(("a".to_string(), "real".to_string()))
        );
        assert_eq!(
            symlink_on_path(root, "x/y/z/out", false).map(|(l, _)| l),
            Some("x/y/z".to_string())
        );
        // The last component only when asked for.
        assert_eq!(symlink_on_path(root, "f", false), None);
        assert_eq!(
            symlink_on_path(root, "f", true).map(|(l, _)| l),
            Some("f".to_string())
        );
        // A walk stops where the path does not exist yet.
        assert_eq!(symlink_on_path(root, "new/a/b", true), None);
        let real = root.canonicalize().ok();
        std::fs::write(root.join("real/file"), b"x").unwrap();
        // The same answers from the opened workspace folder and from `/`.
        let fd = open_root(root);
        assert!(fd.is_some());
        for root_fd in [fd.as_ref(), None] {
            let mut checked = std::collections::HashSet::new();
            let mut check =
                |rel| check_output_path(root, root_fd, real.as_deref(), rel, &mut checked);
            let e = check("x/y/z/out").unwrap_err();
            assert!(
                e.to_string()
                    .starts_with("`x/y/z` is a symlink (to `real`)"),
                "{e}"
            );
            assert_eq!(
                e,
                SymlinkOnOutput::Inside {
                    prefix: "x/y/z".into(),
                    shown: "real".into()
                }
            );
            let e = check("f").unwrap_err();
            assert!(
                e.to_string().starts_with("`f` is a dangling symlink"),
                "{e}"
            );
            assert_eq!(e, SymlinkOnOutput::Dangling { prefix: "f".into() });
            assert_eq!(check("real/b/out"), Ok(None));
            let want = FileStat::of(&std::fs::metadata(root.join("real/file")).unwrap());
            assert_eq!(check("real/file"), Ok(Some(want)));
            // A folder where a file is declared is no output file.
            assert_eq!(check("real"), Ok(None));
        }
    }

    #[test]
    fn targets_are_ids_groups_or_kinds() {
        let mut s = spec(vec![
            cmd("m/a", "true", &[], &["a"]).group("m"),
            cmd("m/b", "true", &[], &["b"]).group("m"),
            cmd("c", "true", &[], &["c"]),
        ]);
        s.group_noun = "model".into();
        let g = Graph::build(s, &Source::default(), Path::new("/x")).unwrap();
        assert_eq!(g.resolve_target("m").unwrap(), vec![0, 1]);
        assert_eq!(g.resolve_target("c").unwrap(), vec![2]);
        assert_eq!(g.resolve_target("command").unwrap().len(), 3);
        let e = g.resolve_target("mm").unwrap_err();
        assert_eq!(
            e.to_string(),
            "no node, model or kind named `mm` (did you mean `m`?)"
        );
    }
}
