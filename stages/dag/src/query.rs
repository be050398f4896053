//! Read-only questions about a workspace: `status` (what is stale and why), `explain` (one
//! node's key inputs and what differs from the last build), and the graph with keys. None of
//! these runs a node or writes the store; they may hash files (through the stat cache).

use serde::Serialize;

use crate::error::{DagError, Result};
use crate::graph::{Graph, NodeIdx};
use crate::key::{Digest, KeyMaterial};
use crate::kind::Registry;
use crate::scan::{diff_all, DirtyReason, Freshness, Scanner};
use crate::statcache::StatCache;
use crate::state::LastBuild;
use crate::store::OutputRecord;
use crate::workspace::Workspace;

/// One node as the dirty check sees it.
#[derive(Debug, Clone, Serialize)]
pub struct NodeView {
    /// Node id.
    pub id: String,
    /// Kind.
    pub kind: String,
    /// Key, when it can be known without running an upstream node.
    pub key: Option<Digest>,
    /// `None` when fresh; otherwise why it would run (or be restored).
    pub stale: Option<DirtyReason>,
    /// The other parameters that changed, when `stale` is a changed parameter (a status line
    /// names every one).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub more_params: Vec<DirtyReason>,
    /// Whether it would only be restored from the store (not run).
    pub restore_only: bool,
    /// Dependencies (ids).
    pub deps: Vec<String>,
    /// Declared output paths.
    pub outputs: Vec<String>,
    /// How it failed, when the last build that ran it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_failure: Option<crate::failure::NodeFailure>,
    /// Key material, when known.
    #[serde(skip)]
    pub material: Option<KeyMaterial>,
}

/// Scan every node (`selected`, or all) without running anything.
pub fn scan(
    ws: &Workspace,
    graph: &Graph,
    registry: &Registry,
    forced: &[bool],
) -> Result<Vec<NodeView>> {
    let store = ws.store()?;
    let last = LastBuild::load(&ws.state);
    let failures = crate::state::load_failures(&ws.state);
    let statcache = StatCache::load(&ws.state.statcache());
    let mut scanner = Scanner::new(&ws.root, graph, registry, &store, &last, statcache);
    let mut known: Vec<Option<Vec<OutputRecord>>> = vec![None; graph.nodes.len()];
    let mut views: Vec<Option<NodeView>> = vec![None; graph.nodes.len()];
    for &n in &graph.order {
        let node = &graph.nodes[n];
        let mut view = NodeView {
            id: node.id.clone(),
            kind: node.kind.clone(),
            key: None,
            stale: None,
            more_params: Vec::new(),
            restore_only: false,
            deps: graph.deps[n]
                .iter()
                .map(|&d| graph.nodes[d].id.clone())
                .collect(),
            outputs: node.outputs.iter().map(|o| o.path.clone()).collect(),
            last_failure: failures.get(&node.id).cloned(),
            material: None,
        };
        if scanner.version(n).is_err() {
            view.stale = Some(DirtyReason::KindChanged {
                old: node.kind.clone(),
                new: format!("{} (not available in this build)", node.kind),
            });
            views[n] = Some(view);
            continue;
        }
        let material = match scanner.material(n, &known) {
            // A missing source makes the node stale, not the whole query an error.
            Err(DagError::MissingInput { path, .. }) => {
                view.stale = Some(DirtyReason::InputRemoved { path });
                views[n] = Some(view);
                continue;
            }
            other => other?,
        };
        match material {
            Err(up) => {
                view.stale = Some(DirtyReason::UpstreamChanged {
                    node: graph.nodes[up].id.clone(),
                })
            }
            Ok(material) => {
                let key = material.key();
                let (fresh, outs) =
                    scanner.freshness(n, &material, &key, forced.get(n).copied().unwrap_or(false));
                view.key = Some(key);
                view.material = Some(material);
                let outs = outs.map(std::borrow::Cow::into_owned);
                match fresh {
                    Freshness::Fresh => known[n] = outs,
                    Freshness::Restore(why) => {
                        known[n] = outs;
                        view.stale = Some(why.for_restore(view.last_failure.is_some()));
                        view.restore_only = true;
                    }
                    Freshness::Dirty(why) => {
                        if let (DirtyReason::ParamsChanged { .. }, Some(m)) = (&why, &view.material)
                        {
                            view.more_params = scanner
                                .differences(n, m)
                                .into_iter()
                                .filter(|d| {
                                    matches!(d, DirtyReason::ParamsChanged { .. }) && *d != why
                                })
                                .collect();
                        }
                        view.stale = Some(why);
                    }
                }
            }
        }
        // Never recorded, but it ran and failed: say that, not "new node".
        if let (Some(DirtyReason::NewNode), Some(failure)) = (&view.stale, &view.last_failure) {
            view.stale = Some(DirtyReason::FailedLastBuild {
                failure: failure.clone(),
            });
        }
        views[n] = Some(view);
    }
    let _ = scanner.statcache.save(&ws.state.statcache());
    Ok(graph
        .order
        .iter()
        .filter_map(|&n| views[n].take())
        .collect())
}

/// What `skyctl explain NODE` shows.
#[derive(Debug, Serialize)]
pub struct Explanation {
    /// The node as scanned.
    pub view: NodeView,
    /// Its key material now (None when an upstream node must run first).
    pub material: Option<KeyMaterial>,
    /// The key recorded by the last build.
    pub last_key: Option<Digest>,
    /// Every difference from the last build's key material.
    pub differences: Vec<DirtyReason>,
}

/// Explain one node.
pub fn explain(
    ws: &Workspace,
    graph: &Graph,
    registry: &Registry,
    node: &str,
) -> Result<Explanation> {
    let Some(&n) = graph.by_id.get(node) else {
        return Err(DagError::UnknownTarget {
            group: graph.group_noun.clone(),
            name: node.into(),
            hint: crate::source::did_you_mean(node, graph.by_id.keys().map(String::as_str)),
        });
    };
    let views = scan(ws, graph, registry, &[])?;
    let view = views
        .into_iter()
        .find(|v| v.id == graph.nodes[n].id)
        .ok_or_else(|| DagError::UnknownTarget {
            group: graph.group_noun.clone(),
            name: node.into(),
            hint: String::new(),
        })?;
    let last = LastBuild::load(&ws.state);
    let last_state = last.nodes.get(node);
    let differences = match (&view.material, last_state) {
        (Some(m), Some(st)) => last
            .material(st)
            .map_or_else(Vec::new, |old| diff_all(&old, m)),
        _ => Vec::new(),
    };
    Ok(Explanation {
        material: view.material.clone(),
        last_key: last_state.map(|s| s.key),
        differences,
        view,
    })
}

/// Node indices in topological order (for renderers).
pub fn order(graph: &Graph) -> &[NodeIdx] {
    &graph.order
}

/// Check the workspace against what the last build recorded: every materialized output file
/// and every file of the release tree must still hash to its recorded digest (bit rot, an
/// edit through a hard link, a file replaced by hand). A damaged file is also dropped from
/// the stat cache, so the next build re-hashes it and restores it from the store. Returns
/// (workspace path, what is wrong). `release_dir` is the release tree's workspace path.
pub fn check_materialized(ws: &Workspace, release_dir: &str) -> Vec<(String, String)> {
    let last = LastBuild::load(&ws.state);
    let mut files: Vec<(String, Digest)> = last
        .nodes
        .values()
        .flat_map(|st| st.outputs.iter())
        .filter(|o| !o.dir)
        .map(|o| (o.path.clone(), o.digest))
        .collect();
    if let Some(release) = &last.release {
        files.extend(
            release
                .iter()
                .filter(|f| !f.dir)
                .map(|f| (format!("{release_dir}/{}", f.to), f.digest)),
        );
    }
    files.sort();
    files.dedup();
    let mut problems = Vec::new();
    let mut statcache = StatCache::load(&ws.state.statcache());
    for (rel, digest) in files {
        let abs = ws.root.join(&rel);
        let what = match crate::statcache::hash_file(&abs) {
            Ok(d) if d == digest => continue,
            Ok(d) => format!(
                "content hashes to {}, the build recorded {} (the next build restores it)",
                d.short(),
                digest.short()
            ),
            Err(e) => format!("{e} (the next build restores it)"),
        };
        statcache.forget(&rel);
        problems.push((rel, what));
    }
    let _ = statcache.save(&ws.state.statcache());
    problems
}
