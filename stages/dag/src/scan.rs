//! The dirty check: input digests, key material, and whether a node is fresh, and if not, why.
//!
//! Reads the disk (through the stat cache), the store's action records and the last build's
//! state; decides nothing about order or running (that is [`crate::plan`] and
//! [`crate::scheduler`]).

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;
use std::path::Path;

use serde::Serialize;

use crate::error::{DagError, Result};
use crate::graph::{Graph, Input, NodeIdx};
use crate::key::{key_head, key_input, Digest, KeyInput, KeyMaterial};
use crate::kind::Registry;
use crate::statcache::{FileStat, StatCache};
use crate::state::{LastBuild, NodeState};
use crate::store::{OutputRecord, Store};
use crate::tree::{list_files, Tree, TreeEntry};

/// How many characters of a changed parameter's value `explain` shows.
pub const SHOWN_VALUE: usize = 80;
/// How many of them come before the first character where the old and new values differ.
const SHOWN_BEFORE: usize = 24;

/// `SHOWN_VALUE` characters of `text` from character `from`, with `…` where it is cut.
fn excerpt(text: &str, from: usize) -> String {
    let n = text.chars().count();
    // A value that fits is shown whole.
    let from = if n <= SHOWN_VALUE { 0 } else { from };
    let body: String = text.chars().skip(from).take(SHOWN_VALUE).collect();
    let head = if from > 0 { "…" } else { "" };
    let tail = if from + SHOWN_VALUE < n { "…" } else { "" };
    format!("{head}{body}{tail}")
}

/// Why a node has to run (or be restored).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum DirtyReason {
    /// `--rerun` named it (or its kind).
    Forced,
    /// No previous build recorded this node.
    NewNode,
    /// Its stage kind changed.
    KindChanged {
        /// Before.
        old: String,
        /// Now.
        new: String,
    },
    /// The kind's implementation version changed.
    StageVersionChanged {
        /// Before.
        old: u32,
        /// Now.
        new: u32,
    },
    /// A parameter changed (first differing top-level field).
    ParamsChanged {
        /// The field.
        field: String,
        /// Its value before, as compact JSON (cut to [`SHOWN_VALUE`] characters); absent for
        /// `env`, whose values may be secrets, and for a value that was not set.
        #[serde(skip_serializing_if = "Option::is_none")]
        old: Option<String>,
        /// Its value now, the same way.
        #[serde(skip_serializing_if = "Option::is_none")]
        new: Option<String>,
    },
    /// An input's content changed.
    InputChanged {
        /// The input path.
        path: String,
    },
    /// An input appeared (new file matching a glob, new declared input).
    InputAdded {
        /// The input path.
        path: String,
    },
    /// An input disappeared.
    InputRemoved {
        /// The input path.
        path: String,
    },
    /// Same key as the last build, but the store has no record of it (new or collected store).
    NoRecord,
    /// A declared output is missing or modified in the workspace (restored from the store).
    OutputMissing {
        /// The output path.
        path: String,
    },
    /// The workspace holds the last build's outputs, made from other inputs; these inputs
    /// were built before and their result is in the store (a reverted edit): restored.
    BuiltBefore {
        /// The first output that differs.
        path: String,
    },
    /// The stored outputs could not be used (missing or corrupted blob); re-run.
    StoreDamaged {
        /// What was wrong.
        message: String,
    },
    /// The key cannot be known until an upstream node runs.
    UpstreamChanged {
        /// The upstream node.
        node: String,
    },
    /// No build recorded it, and the last one that ran it failed (instead of [`Self::NewNode`]).
    FailedLastBuild {
        /// Why it failed.
        failure: crate::failure::NodeFailure,
    },
}

impl DirtyReason {
    /// The reason a node is restored, given whether the last run of it failed: a failed run
    /// leaves its outputs, so when the inputs are back to those of the success before (a
    /// reverted edit) the outputs differ because of that run, not a hand: built before.
    pub fn for_restore(self, failed_last_run: bool) -> DirtyReason {
        match self {
            DirtyReason::OutputMissing { path } if failed_last_run => {
                DirtyReason::BuiltBefore { path }
            }
            why => why,
        }
    }
}

impl fmt::Display for DirtyReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DirtyReason::Forced => write!(f, "forced by --rerun"),
            DirtyReason::NewNode => write!(f, "new node"),
            DirtyReason::FailedLastBuild { failure } => {
                write!(
                    f,
                    "failed in the last build ({}): {failure}",
                    failure.kind()
                )
            }
            DirtyReason::KindChanged { old, new } => {
                write!(f, "kind changed from `{old}` to `{new}`")
            }
            DirtyReason::StageVersionChanged { old, new } => {
                write!(f, "stage version changed from {old} to {new}")
            }
            DirtyReason::ParamsChanged { field, old, new } => {
                write!(f, "parameter `{field}` changed")?;
                match (old, new) {
                    (Some(o), Some(n)) => write!(f, " from {o} to {n}"),
                    (None, Some(n)) if field != "env" => write!(f, " (now {n})"),
                    (Some(o), None) => write!(f, " (was {o}, now unset)"),
                    _ => Ok(()),
                }
            }
            DirtyReason::InputChanged { path } => write!(f, "input `{path}` changed"),
            DirtyReason::InputAdded { path } => write!(f, "input `{path}` added"),
            DirtyReason::InputRemoved { path } => write!(f, "input `{path}` removed"),
            DirtyReason::NoRecord => write!(f, "no cached result in the store"),
            DirtyReason::OutputMissing { path } => write!(f, "output `{path}` missing or modified"),
            DirtyReason::BuiltBefore { .. } => {
                write!(f, "built before: these inputs' result is in the store")
            }
            DirtyReason::StoreDamaged { message } => write!(f, "cached result unusable: {message}"),
            DirtyReason::UpstreamChanged { node } => write!(f, "upstream node `{node}` is stale"),
        }
    }
}

/// The verdict on one node.
#[derive(Clone, Debug, PartialEq)]
pub enum Freshness {
    /// Outputs recorded and present: nothing to do.
    Fresh,
    /// Outputs recorded in the store but not (all) in the workspace: copy them out.
    Restore(DirtyReason),
    /// Must run.
    Dirty(DirtyReason),
}

/// The dirty checker. Holds the stat cache and memoises source digests for one run.
pub struct Scanner<'a> {
    root: &'a Path,
    graph: &'a Graph,
    registry: &'a Registry,
    store: &'a Store,
    last: &'a LastBuild,
    /// The last build's state of each node, by index.
    last_of: Vec<Option<&'a NodeState>>,
    /// The stat cache (saved by the caller).
    pub statcache: StatCache,
    sources: HashMap<String, Option<Digest>>,
    /// The files of each source directory hashed so far (for naming what changed).
    source_files: HashMap<String, Vec<(String, Digest)>>,
    globs: HashMap<String, Vec<KeyInput>>,
    /// The workspace root with symlinks resolved (None when it cannot be resolved).
    root_real: Option<std::path::PathBuf>,
    /// Folders of sources resolved so far: `Some(real path)` for one leading out of the
    /// workspace, `None` for one inside (or that cannot be resolved).
    folders_inside: HashMap<String, Option<std::path::PathBuf>>,
    /// Stats of the declared outputs taken ahead, and where each node's are.
    prefetched: Option<(&'a crate::statcache::Prefetch, Vec<usize>)>,
    /// What this scan looked at, for the no-op proof ([`crate::noop`]); `None`: not kept.
    pub(crate) witness: Option<crate::witness::Witness<'a>>,
}

impl<'a> Scanner<'a> {
    /// A scanner over `graph` in workspace `root`.
    pub fn new(
        root: &'a Path,
        graph: &'a Graph,
        registry: &'a Registry,
        store: &'a Store,
        last: &'a LastBuild,
        statcache: StatCache,
    ) -> Self {
        Scanner {
            root,
            graph,
            registry,
            store,
            last,
            last_of: last.aligned(graph),
            statcache,
            sources: HashMap::new(),
            source_files: HashMap::new(),
            globs: HashMap::new(),
            root_real: root.canonicalize().ok(),
            folders_inside: HashMap::new(),
            prefetched: None,
            witness: None,
        }
    }

    /// Note that file `rel`, found with stat `st`, has `digest` (for the no-op proof).
    fn see_file(&mut self, rel: Cow<'a, str>, st: FileStat, digest: Digest) {
        if let Some(w) = self.witness.as_mut() {
            w.see_file(rel, st, digest);
        }
    }

    /// Note every folder under `rel` before it is listed (for the no-op proof).
    pub(crate) fn see_tree(&mut self, rel: &str) {
        if let Some(w) = self.witness.as_mut() {
            w.see_tree(self.root, rel);
        }
    }

    /// Use stats taken ahead by `prefetch`: `first[n]` is the slot of node `n`'s first declared
    /// output (its others follow).
    pub fn use_prefetch(&mut self, prefetch: &'a crate::statcache::Prefetch, first: Vec<usize>) {
        self.prefetched = Some((prefetch, first));
    }

    /// The kind version, or an error naming the node if the kind is not in this build.
    pub fn version(&self, n: NodeIdx) -> Result<u32> {
        let node = &self.graph.nodes[n];
        self.registry
            .get(&node.kind)
            .map(|k| k.version())
            .ok_or_else(|| DagError::UnknownKind {
                node: node.id.clone(),
                kind: node.kind.clone(),
            })
    }

    /// Check every selected node's kind exists and takes its params (before anything runs).
    pub fn check_kinds(&self, selected: &[bool]) -> Result<()> {
        for (n, sel) in selected.iter().enumerate() {
            if *sel {
                self.version(n)?;
                if self.graph.params_checked {
                    continue;
                }
                let node = &self.graph.nodes[n];
                if let Some(k) = self.registry.get(&node.kind) {
                    k.check_params(node.params.value())
                        .map_err(|e| DagError::Params {
                            node: node.id.clone(),
                            message: e.to_string(),
                        })?;
                }
            }
        }
        Ok(())
    }

    /// Digest of a source file or directory (memoised).
    fn source(&mut self, n: NodeIdx, input: usize, rel: &str) -> Result<Digest> {
        let graph = self.graph;
        // `FILE:LINE:COL: ` of this input's declaration, for the errors below.
        let location = || {
            graph.nodes[n]
                .input_spans
                .get(input)
                .map(|s| graph.location(s))
                .unwrap_or_default()
        };
        let missing = || DagError::MissingInput {
            location: location(),
            node: graph.nodes[n].id.clone(),
            path: rel.into(),
        };
        if let Some(d) = self.sources.get(rel) {
            return d.ok_or_else(missing);
        }
        let abs = self.root.join(rel);
        // One `lstat` of the source: what it is, and the stat the stat cache compares.
        let lstat = std::fs::symlink_metadata(&abs);
        let is_link = lstat.as_ref().is_ok_and(|md| md.file_type().is_symlink());
        // A source reached through a symlink must stay inside the workspace, or a manifest
        // could hash and publish any file on the machine: the source itself when it is a link,
        // else its folder (resolved once per folder).
        let resolved = if lstat.is_err() {
            None
        } else if is_link {
            abs.canonicalize().ok()
        } else {
            let parent = rel.rsplit_once('/').map_or("", |(p, _)| p);
            match self.folders_inside.get(parent) {
                Some(None) => None,
                Some(Some(real)) => Some(real.clone()),
                None => {
                    let real = self.root.join(parent).canonicalize().ok();
                    let outside = match (&self.root_real, &real) {
                        (Some(real_root), Some(real)) => !real.starts_with(real_root),
                        _ => false,
                    };
                    let remembered = outside.then(|| real.clone()).flatten();
                    self.folders_inside
                        .insert(parent.to_string(), remembered.clone());
                    remembered
                }
            }
        };
        if let (Some(real_root), Some(real)) = (&self.root_real, resolved) {
            if !real.starts_with(real_root) {
                let real = if is_link {
                    real
                } else {
                    real.join(abs.file_name().unwrap_or_default())
                };
                return Err(DagError::InputOutside {
                    location: location(),
                    node: graph.nodes[n].id.clone(),
                    path: rel.into(),
                    target: real,
                });
            }
        }
        let bad = |message: String| DagError::BadInput {
            location: location(),
            node: graph.nodes[n].id.clone(),
            path: rel.into(),
            message,
        };
        let md = if is_link {
            // A stat of the link cannot vouch for its target.
            if let Some(w) = self.witness.as_mut() {
                w.spoil();
            }
            std::fs::metadata(&abs)
        } else {
            lstat
        };
        let d = match md {
            Ok(md) if md.is_dir() => {
                // A name that is not UTF-8, a symlink or a special file inside cannot be
                // hashed: refused, located at the input.
                let (digest, files) = self
                    .tree_digest_files(rel)
                    .map_err(|e| bad(format!("cannot be hashed: {}", io_message(&e))))?;
                self.source_files.insert(rel.to_string(), files);
                Some(digest)
            }
            Ok(md) if !md.is_file() => {
                return Err(bad(format!(
                    "is {}; only regular files and folders can be inputs",
                    special_kind(&md.file_type())
                )))
            }
            Ok(md) => {
                let st = FileStat::of(&md);
                let (d, _) = self
                    .statcache
                    .digest_with(self.root, rel, st)
                    .map_err(|e| DagError::io("hash", &abs, e))?;
                if !is_link && self.witness.is_some() {
                    self.see_file(Cow::Owned(rel.to_string()), st, d);
                }
                Some(d)
            }
            Err(_) => None,
        };
        self.sources.insert(rel.to_string(), d);
        d.ok_or_else(missing)
    }

    /// Tree digest of a workspace directory, files hashed through the stat cache.
    pub fn tree_digest(&mut self, rel: &str) -> Result<Digest> {
        Ok(self.tree_digest_files(rel)?.0)
    }

    /// [`Scanner::tree_digest`] and the (path inside `rel`, digest) of each file.
    fn tree_digest_files(&mut self, rel: &str) -> Result<(Digest, Vec<(String, Digest)>)> {
        let abs = self.root.join(rel);
        self.see_tree(rel);
        let files = list_files(&abs).map_err(|e| DagError::io("list", &abs, e))?;
        let mut tree = Tree::default();
        for f in files {
            let frel = format!("{rel}/{f}");
            let (digest, st) = self
                .statcache
                .digest(self.root, &frel)
                .map_err(|e| DagError::io("hash", self.root.join(&frel), e))?;
            if self.witness.is_some() {
                self.see_file(Cow::Owned(frel), st, digest);
            }
            tree.entries.push(TreeEntry {
                path: f,
                digest,
                size: st.size,
                exec: st.exec,
            });
        }
        let files = tree
            .entries
            .iter()
            .map(|e| (e.path.clone(), e.digest))
            .collect();
        Ok((Digest::of(&tree.encode()), files))
    }

    fn glob(
        &mut self,
        n: NodeIdx,
        input: usize,
        g: &crate::glob::Glob,
        allow_empty: bool,
    ) -> Result<Vec<KeyInput>> {
        self.glob_ref(n, input, g, allow_empty)
            .map(<[KeyInput]>::to_vec)
    }

    /// The files a glob matches (memoised).
    fn glob_ref(
        &mut self,
        n: NodeIdx,
        input: usize,
        g: &crate::glob::Glob,
        allow_empty: bool,
    ) -> Result<&[KeyInput]> {
        if !self.globs.contains_key(g.as_str()) {
            let found = self.walk_glob(n, input, g)?;
            self.globs.insert(g.as_str().to_string(), found);
        }
        let found = self.globs.get(g.as_str()).map_or(&[][..], Vec::as_slice);
        if found.is_empty() && !allow_empty {
            let graph = self.graph;
            return Err(DagError::BadInput {
                location: graph.nodes[n]
                    .input_spans
                    .get(input)
                    .map(|s| graph.location(s))
                    .unwrap_or_default(),
                node: graph.nodes[n].id.clone(),
                path: g.as_str().to_string(),
                message: format!(
                    "matches no file; if that is expected, declare it as {{ glob = \"{}\", allow_empty = true }}",
                    g.as_str()
                ),
            });
        }
        Ok(found)
    }

    /// Every file `g` matches, hashed, in path order. A match that cannot be hashed as it is
    /// (a name that is not UTF-8, a FIFO, socket or device, a folder that cannot be listed) is
    /// an error: leaving it out would leave out of the key a file the node may read.
    fn walk_glob(
        &mut self,
        n: NodeIdx,
        input: usize,
        g: &crate::glob::Glob,
    ) -> Result<Vec<KeyInput>> {
        let graph = self.graph;
        let bad = |path: String, message: String| DagError::BadInput {
            location: graph.nodes[n]
                .input_spans
                .get(input)
                .map(|s| graph.location(s))
                .unwrap_or_default(),
            node: graph.nodes[n].id.clone(),
            path,
            message,
        };
        let base = g.literal_dir().to_string();
        let abs = if base.is_empty() {
            self.root.to_path_buf()
        } else {
            self.root.join(&base)
        };
        let mut out = Vec::new();
        if !abs.is_dir() {
            // Nothing there (or not a folder): seen as it is.
            if let Some(w) = self.witness.as_mut() {
                w.see_listed(self.root, &base);
            }
            return Ok(out);
        }
        // The release tree and the store are the engine's own (copies of outputs, which a
        // glob never matches).
        let release = (!graph.release_dir.is_empty()).then(|| self.root.join(&graph.release_dir));
        let store = self.store.root();
        let walker = walkdir::WalkDir::new(&abs)
            .sort_by_file_name()
            .into_iter()
            .filter_entry(|e| {
                // Never descend into our own state, VCS metadata, the store or the release
                // tree.
                !(e.depth() > 0
                    && e.file_type().is_dir()
                    && (matches!(e.file_name().to_str(), Some(".skyctl" | ".git"))
                        || release.as_deref() == Some(e.path())
                        || e.path() == store))
            });
        for e in walker {
            let e = match e {
                Ok(e) => e,
                Err(err) => {
                    let at = err
                        .path()
                        .and_then(|p| p.strip_prefix(self.root).ok())
                        .map(|p| p.to_string_lossy().into_owned())
                        .unwrap_or_else(|| base.clone());
                    return Err(bad(
                        g.as_str().to_string(),
                        format!("cannot be expanded: listing `{at}` failed: {err}"),
                    ));
                }
            };
            let ft = e.file_type();
            if ft.is_dir() {
                // Before the walk lists it.
                if let Some(w) = self.witness.as_mut() {
                    match e.path().strip_prefix(self.root).ok().and_then(Path::to_str) {
                        Some(rel) => w.see_listed(self.root, rel),
                        None => w.spoil(),
                    }
                }
                continue;
            }
            let Ok(rel) = e.path().strip_prefix(self.root) else {
                continue;
            };
            let Some(rel) = rel.to_str() else {
                let shown = rel.to_string_lossy();
                if g.matches(&shown) {
                    return Err(bad(
                        g.as_str().to_string(),
                        format!("matches `{shown}`, whose name is not UTF-8: it cannot be part of a key; rename it, or narrow the glob"),
                    ));
                }
                continue;
            };
            if !g.matches(rel) {
                continue;
            }
            // A symlink the glob matches is resolved like a named source (and refused when it
            // leads out, or to something other than a file or folder).
            if !(ft.is_file() || ft.is_symlink()) {
                return Err(bad(
                    g.as_str().to_string(),
                    format!(
                        "matches `{rel}`, which is {}; only regular files can be inputs",
                        special_kind(&ft)
                    ),
                ));
            }
            let d = self.source(n, input, rel)?;
            out.push(KeyInput {
                path: rel.to_string(),
                digest: d,
                files: Vec::new(),
            });
        }
        out.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(out)
    }

    /// Hash every source input of node `n` now, so a missing input is an error before anything
    /// runs.
    pub fn prefetch(&mut self, n: NodeIdx) -> Result<()> {
        let graph = self.graph;
        let node = &graph.nodes[n];
        for (i, input) in node.inputs.iter().enumerate() {
            match input {
                // Hashed once the nodes writing into it ran, never before.
                Input::Source(rel) if graph.holds_built(n, rel) => {}
                Input::Source(rel) => {
                    self.source(n, i, rel)?;
                }
                Input::Glob { glob, allow_empty } => {
                    self.glob(n, i, glob, *allow_empty)?;
                }
                Input::Output { .. } => {}
            }
        }
        Ok(())
    }

    /// The key of node `n` (the key of its [`Scanner::material`], computed from the canonical
    /// parameters the graph holds, without building the material), given the outputs of
    /// finished upstream nodes; `Ok(Err(up))` names an upstream node whose outputs are not
    /// known yet.
    pub fn key<K: AsRef<[OutputRecord]>>(
        &mut self,
        n: NodeIdx,
        known: &[Option<K>],
    ) -> Result<std::result::Result<Digest, NodeIdx>> {
        let graph = self.graph;
        let node = &graph.nodes[n];
        if let Some(up) = unfinished(graph, n, known) {
            return Ok(Err(up));
        }
        // The number of key inputs goes first: a glob stands for every file it matches.
        let mut count = 0;
        for (i, input) in node.inputs.iter().enumerate() {
            count += match input {
                Input::Glob { glob, allow_empty } => self.glob_ref(n, i, glob, *allow_empty)?.len(),
                _ => 1,
            };
        }
        let mut h = key_head(&node.kind, self.version(n)?, node.params.canonical(), count);
        for (i, input) in node.inputs.iter().enumerate() {
            match input {
                Input::Source(rel) => {
                    let digest = self.source(n, i, rel)?;
                    key_input(&mut h, rel, &digest);
                }
                Input::Glob { glob, allow_empty } => {
                    for k in self.glob_ref(n, i, glob, *allow_empty)? {
                        key_input(&mut h, &k.path, &k.digest);
                    }
                }
                Input::Output { node: up, output } => {
                    let Some(o) = known
                        .get(*up)
                        .and_then(|o| o.as_ref())
                        .and_then(|outs| outs.as_ref().get(*output))
                    else {
                        return Ok(Err(*up));
                    };
                    key_input(&mut h, &o.path, &o.digest);
                }
            }
        }
        Ok(Ok(h.finish()))
    }

    /// The key material of node `n`, given the outputs of finished upstream nodes; `Ok(Err(up))`
    /// names an upstream node whose outputs are not known yet.
    pub fn material<K: AsRef<[OutputRecord]>>(
        &mut self,
        n: NodeIdx,
        known: &[Option<K>],
    ) -> Result<std::result::Result<KeyMaterial, NodeIdx>> {
        let graph = self.graph;
        let node = &graph.nodes[n];
        if let Some(up) = unfinished(graph, n, known) {
            return Ok(Err(up));
        }
        let mut inputs = Vec::with_capacity(node.inputs.len());
        for (i, input) in node.inputs.iter().enumerate() {
            match input {
                Input::Source(rel) => {
                    let digest = self.source(n, i, rel)?;
                    inputs.push(KeyInput {
                        path: rel.clone(),
                        digest,
                        files: self.source_files.get(rel).cloned().unwrap_or_default(),
                    });
                }
                Input::Glob { glob, allow_empty } => {
                    inputs.extend(self.glob(n, i, glob, *allow_empty)?)
                }
                Input::Output { node: up, output } => {
                    let Some(outs) = known.get(*up).and_then(|o| o.as_ref()) else {
                        return Ok(Err(*up));
                    };
                    let Some(o) = outs.as_ref().get(*output) else {
                        return Ok(Err(*up));
                    };
                    inputs.push(KeyInput {
                        path: o.path.clone(),
                        digest: o.digest,
                        files: Vec::new(),
                    });
                }
            }
        }
        Ok(Ok(KeyMaterial {
            kind: node.kind.clone(),
            version: self.version(n)?,
            params: node.params.value().clone(),
            inputs,
        }))
    }

    /// Recorded outputs for `key`: from the last build when it had the same key (no parsing),
    /// else from the store's action record.
    pub fn recorded_outputs(&self, n: NodeIdx, key: &Digest) -> Option<Cow<'a, [OutputRecord]>> {
        if let Some(st) = self.last_state(n) {
            // Same key as the last build here: trust its record of the outputs (the workspace
            // check that follows still verifies them) without touching the store.
            if st.key == *key {
                return Some(Cow::Borrowed(&st.outputs));
            }
        }
        self.store.get_action(key).map(|r| Cow::Owned(r.outputs))
    }

    /// [`Scanner::check_outputs`] of node `n`'s recorded outputs, with the stats taken ahead.
    fn check_outputs_of(&mut self, n: NodeIdx, outputs: &[OutputRecord]) -> Option<String> {
        let Some((prefetch, base)) = self
            .prefetched
            .as_ref()
            .map(|(p, first)| (*p, first.get(n).copied()))
        else {
            return self.check_outputs(outputs);
        };
        let graph = self.graph;
        let declared = &graph.nodes[n].outputs;
        for (i, o) in outputs.iter().enumerate() {
            let ahead = base
                .and_then(|f| f.checked_add(i))
                .filter(|_| !o.dir && declared.get(i).is_some_and(|d| d.path == o.path))
                .and_then(|slot| prefetch.get(slot));
            let ok = match ahead {
                Some(st) => {
                    let same = self
                        .statcache
                        .digest_with(self.root, &o.path, st)
                        .ok()
                        .map(|x| x.0)
                        == Some(o.digest);
                    if same {
                        // The slot is this declared output's (checked above).
                        let path = declared.get(i).map_or("", |d| d.path.as_str());
                        self.see_file(Cow::Borrowed(path), st, o.digest);
                    }
                    same
                }
                None => self.check_outputs(std::slice::from_ref(o)).is_none(),
            };
            if !ok {
                return Some(o.path.clone());
            }
        }
        None
    }

    /// Whether the workspace holds exactly `outputs`; the first mismatching path otherwise.
    pub fn check_outputs(&mut self, outputs: &[OutputRecord]) -> Option<String> {
        for o in outputs {
            let ok = if o.dir {
                self.root.join(&o.path).is_dir() && self.tree_digest(&o.path).ok() == Some(o.digest)
            } else {
                match self.statcache.digest(self.root, &o.path) {
                    Ok((d, st)) if d == o.digest => {
                        if self.witness.is_some() {
                            self.see_file(Cow::Owned(o.path.clone()), st, d);
                        }
                        true
                    }
                    _ => false,
                }
            };
            if !ok {
                return Some(o.path.clone());
            }
        }
        None
    }

    /// Fresh, restore, or dirty (with the reason), for a node whose key material is known.
    pub fn freshness(
        &mut self,
        n: NodeIdx,
        material: &KeyMaterial,
        key: &Digest,
        forced: bool,
    ) -> (Freshness, Option<Cow<'a, [OutputRecord]>>) {
        self.freshness_with(n, key, forced, |s| s.why(n, material, key))
    }

    /// [`Scanner::freshness`] from the key alone ([`Scanner::key`]): the material is only
    /// built when the node is dirty and the reason needs it.
    pub fn freshness_of_key<K: AsRef<[OutputRecord]>>(
        &mut self,
        n: NodeIdx,
        key: &Digest,
        forced: bool,
        known: &[Option<K>],
    ) -> (Freshness, Option<Cow<'a, [OutputRecord]>>) {
        self.freshness_with(n, key, forced, |s| match s.last_state(n) {
            None => DirtyReason::NewNode,
            Some(st) if st.key == *key => DirtyReason::NoRecord,
            Some(_) => match s.material(n, known) {
                Ok(Ok(material)) => s.why(n, &material, key),
                _ => DirtyReason::NoRecord,
            },
        })
    }

    fn freshness_with(
        &mut self,
        n: NodeIdx,
        key: &Digest,
        forced: bool,
        why: impl FnOnce(&mut Self) -> DirtyReason,
    ) -> (Freshness, Option<Cow<'a, [OutputRecord]>>) {
        if forced {
            return (Freshness::Dirty(DirtyReason::Forced), None);
        }
        match self.recorded_outputs(n, key) {
            Some(outputs) => match self.check_outputs_of(n, &outputs) {
                None => (Freshness::Fresh, Some(outputs)),
                // The last build ran the node on other inputs: its outputs are there, not
                // damaged, and this key's were made by an earlier build.
                Some(path) if self.last_state(n).is_some_and(|st| st.key != *key) => (
                    Freshness::Restore(DirtyReason::BuiltBefore { path }),
                    Some(outputs),
                ),
                Some(path) => (
                    Freshness::Restore(DirtyReason::OutputMissing { path }),
                    Some(outputs),
                ),
            },
            None => (Freshness::Dirty(why(self)), None),
        }
    }

    /// Why a node without a usable record is dirty, compared with the last build.
    pub fn why(&self, n: NodeIdx, material: &KeyMaterial, key: &Digest) -> DirtyReason {
        match self.last_state(n) {
            None => DirtyReason::NewNode,
            Some(st) if st.key == *key => DirtyReason::NoRecord,
            Some(st) => self
                .last
                .material(st)
                .and_then(|old| diff(&old, material))
                .unwrap_or(DirtyReason::NoRecord),
        }
    }

    /// Every difference of node `n`'s key material from the last build's (empty without one).
    pub fn differences(&self, n: NodeIdx, material: &KeyMaterial) -> Vec<DirtyReason> {
        self.last_state(n)
            .and_then(|st| self.last.material(st))
            .map_or_else(Vec::new, |old| diff_all(&old, material))
    }

    /// The last recorded state of node `n`.
    pub fn last_state(&self, n: NodeIdx) -> Option<&'a NodeState> {
        self.last_of.get(n).copied().flatten()
    }

    /// How many nodes of the last build are nodes of this graph.
    pub fn last_matched(&self) -> usize {
        self.last_of.iter().flatten().count()
    }
}

/// "a FIFO", "a socket", "a device", "a symlink": what a file that is neither a regular file
/// nor a folder is, for messages.
fn special_kind(ft: &std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if ft.is_fifo() {
        "a FIFO"
    } else if ft.is_socket() {
        "a socket"
    } else if ft.is_block_device() || ft.is_char_device() {
        "a device"
    } else if ft.is_symlink() {
        "a symlink"
    } else {
        "not a regular file"
    }
}

/// The message of an error hashing a directory input: a listing's without the folder's
/// absolute path (the caller names the input; the message names the file inside it).
fn io_message(e: &DagError) -> String {
    match e {
        DagError::Io {
            action: "list",
            source,
            ..
        } => source.to_string(),
        other => other.to_string(),
    }
}

/// What changed between two listings of directory `dir`, file by file.
fn diff_files(dir: &str, old: &[(String, Digest)], new: &[(String, Digest)]) -> Vec<DirtyReason> {
    let before: HashMap<&str, &Digest> = old.iter().map(|(p, d)| (p.as_str(), d)).collect();
    let now: HashMap<&str, &Digest> = new.iter().map(|(p, d)| (p.as_str(), d)).collect();
    let mut out = Vec::new();
    for (p, d) in new {
        let path = format!("{dir}/{p}");
        match before.get(p.as_str()) {
            None => out.push(DirtyReason::InputAdded { path }),
            Some(b) if *b != d => out.push(DirtyReason::InputChanged { path }),
            _ => {}
        }
    }
    for (p, _) in old.iter().filter(|(p, _)| !now.contains_key(p.as_str())) {
        out.push(DirtyReason::InputRemoved {
            path: format!("{dir}/{p}"),
        });
    }
    if out.is_empty() {
        out.push(DirtyReason::InputChanged { path: dir.into() });
    }
    out
}

/// The first difference between two key materials, as a reason.
pub fn diff(old: &KeyMaterial, new: &KeyMaterial) -> Option<DirtyReason> {
    diff_all(old, new).into_iter().next()
}

/// Every difference between two key materials.
pub fn diff_all(old: &KeyMaterial, new: &KeyMaterial) -> Vec<DirtyReason> {
    let mut out = Vec::new();
    if old.kind != new.kind {
        out.push(DirtyReason::KindChanged {
            old: old.kind.clone(),
            new: new.kind.clone(),
        });
    }
    if old.version != new.version {
        out.push(DirtyReason::StageVersionChanged {
            old: old.version,
            new: new.version,
        });
    }
    if old.params != new.params {
        match (old.params.as_object(), new.params.as_object()) {
            (Some(a), Some(b)) => {
                let mut fields: Vec<&String> = a
                    .keys()
                    .chain(b.keys())
                    .filter(|k| a.get(*k) != b.get(*k))
                    .collect();
                fields.sort();
                fields.dedup();
                out.extend(fields.into_iter().map(|f| {
                    // What the user changed, shown; never the values of environment variables.
                    let text = |v: Option<&serde_json::Value>| {
                        v.filter(|_| f != "env").map(|v| v.to_string())
                    };
                    let (old, new) = (text(a.get(f)), text(b.get(f)));
                    // Both sides from just before where they part, so a long value shows the
                    // change rather than the prefix the two share.
                    let from = match (&old, &new) {
                        (Some(o), Some(n)) => o
                            .chars()
                            .zip(n.chars())
                            .position(|(x, y)| x != y)
                            .unwrap_or(o.chars().count().min(n.chars().count()))
                            .saturating_sub(SHOWN_BEFORE),
                        _ => 0,
                    };
                    DirtyReason::ParamsChanged {
                        field: f.clone(),
                        old: old.map(|t| excerpt(&t, from)),
                        new: new.map(|t| excerpt(&t, from)),
                    }
                }));
            }
            _ => out.push(DirtyReason::ParamsChanged {
                field: String::new(),
                old: None,
                new: None,
            }),
        }
    }
    let old_map: HashMap<&str, &Digest> = old
        .inputs
        .iter()
        .map(|i| (i.path.as_str(), &i.digest))
        .collect();
    let new_map: HashMap<&str, &Digest> = new
        .inputs
        .iter()
        .map(|i| (i.path.as_str(), &i.digest))
        .collect();
    for i in &new.inputs {
        match old_map.get(i.path.as_str()) {
            None => out.push(DirtyReason::InputAdded {
                path: i.path.clone(),
            }),
            Some(d) if **d != i.digest => {
                let before = old.inputs.iter().find(|o| o.path == i.path);
                match before.filter(|o| !o.files.is_empty() && !i.files.is_empty()) {
                    // A directory: name the files inside it that changed.
                    Some(o) => out.extend(diff_files(&i.path, &o.files, &i.files)),
                    None => out.push(DirtyReason::InputChanged {
                        path: i.path.clone(),
                    }),
                }
            }
            _ => {}
        }
    }
    for i in old
        .inputs
        .iter()
        .filter(|i| !new_map.contains_key(i.path.as_str()))
    {
        out.push(DirtyReason::InputRemoved {
            path: i.path.clone(),
        });
    }
    let listed = |m: &KeyMaterial| -> Vec<(String, Digest)> {
        m.inputs
            .iter()
            .map(|i| (i.path.clone(), i.digest))
            .collect()
    };
    if out.is_empty() && listed(old) != listed(new) {
        out.push(DirtyReason::ParamsChanged {
            field: "input order".into(),
            old: None,
            new: None,
        });
    }
    out
}

/// A node `n` depends on whose outputs are not known yet: its key waits for every one (a
/// source folder holding their outputs is hashed only after they ran, [`Graph::holds_built`]).
fn unfinished<K>(graph: &Graph, n: NodeIdx, known: &[Option<K>]) -> Option<NodeIdx> {
    graph.deps[n]
        .iter()
        .copied()
        .find(|&d| !matches!(known.get(d), Some(Some(_))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn mat() -> KeyMaterial {
        KeyMaterial {
            kind: "command".into(),
            version: 1,
            params: json!({"run": ["a"], "cwd": "."}).into(),
            inputs: vec![KeyInput {
                path: "in".into(),
                digest: Digest::of(b"1"),
                files: Vec::new(),
            }],
        }
    }

    #[test]
    fn a_long_changed_parameter_is_shown_where_it_changed() {
        let long = |path: &str| json!({"models": [{"name": "s1-pico", "variants": ["f16", "q8_0"], "publish": ["f16"], "path": path}]});
        let (mut a, mut b) = (mat(), mat());
        std::sync::Arc::make_mut(&mut a.params)["run"] = long("build/s1-pico/s1-pico.f16.gguf");
        std::sync::Arc::make_mut(&mut b.params)["run"] = long("build/s1-pico/s1-pico.bf16.gguf");
        let text = diff(&a, &b).unwrap().to_string();
        assert!(
            text.contains("s1-pico.f16.gguf") && text.contains("s1-pico.bf16.gguf"),
            "{text}"
        );
        assert!(text.starts_with("parameter `run` changed from …"), "{text}");
        // A short value is shown whole.
        assert_eq!(excerpt("\"sub\"", 3), "\"sub\"");
    }

    #[test]
    fn diff_names_each_kind_of_change() {
        assert_eq!(diff(&mat(), &mat()), None);
        let mut m = mat();
        m.version = 2;
        assert_eq!(
            diff(&mat(), &m),
            Some(DirtyReason::StageVersionChanged { old: 1, new: 2 })
        );
        let mut m = mat();
        let before_cwd = mat().params.get("cwd").map(|v| v.to_string());
        std::sync::Arc::make_mut(&mut m.params)["cwd"] = json!("sub");
        assert_eq!(
            diff(&mat(), &m),
            Some(DirtyReason::ParamsChanged {
                field: "cwd".into(),
                old: before_cwd.clone(),
                new: Some("\"sub\"".into()),
            })
        );
        assert_eq!(
            diff(&mat(), &m).map(|r| r.to_string()),
            Some(format!(
                "parameter `cwd` changed {}",
                match &before_cwd {
                    Some(o) => format!("from {o} to \"sub\""),
                    None => "(now \"sub\")".to_string(),
                }
            ))
        );
        let mut m = mat();
        m.inputs[0].digest = Digest::of(b"2");
        assert_eq!(
            diff(&mat(), &m),
            Some(DirtyReason::InputChanged { path: "in".into() })
        );
        let mut m = mat();
        m.inputs.push(KeyInput {
            path: "new".into(),
            digest: Digest::of(b"3"),
            files: Vec::new(),
        });
        assert_eq!(
            diff(&mat(), &m),
            Some(DirtyReason::InputAdded { path: "new".into() })
        );
        assert_eq!(
            diff(&m, &mat()),
            Some(DirtyReason::InputRemoved { path: "new".into() })
        );
        let mut m = mat();
        m.kind = "convert".into();
        assert!(matches!(
            diff(&mat(), &m),
            Some(DirtyReason::KindChanged { .. })
        ));
    }
}
