//! Where a node runs: the executor seam.
//!
//! The scheduler hands a ready node to the [`crate::builder`]'s job, which asks the remote
//! cache first and then an [`Executor`] to run it. [`Local`] runs it in this process, the way
//! every build did before executors existed. Another engine (skyctl's Slurm executor, a Ray
//! or Remote Execution one) runs it somewhere else and leaves the result in the remote cache
//! under the node's key; the job then takes it from there exactly as it takes a remote-cache
//! hit. The key is the same whichever executor ran the node, so a result made on a cluster is
//! a cache hit for a local build and the other way round.
//!
//! An executor elsewhere needs to say what to run without a shared file system: a
//! [`NodeDescription`] (kind, parameters, inputs by digest, declared outputs, the version of
//! the program that wrote it) goes through the remote cache like any blob, and
//! [`run_described`] is what the worker at the other end runs: the kind's own code, the
//! outputs checked and stored as a local run does.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::failure::NodeFailure;
use crate::graph::Node;
use crate::key::{Digest, KeyMaterial};
use crate::kind::Registry;
use crate::report::JobState;
use crate::store::{ActionRecord, OutputRecord, Store};

/// One node to run, as the builder knows it when the node must run.
pub struct Task<'a> {
    /// The node.
    pub node: &'a Node,
    /// Its key (what the result is recorded under).
    pub key: Digest,
    /// What the key was computed from: kind, version, parameters, inputs by digest.
    pub material: &'a KeyMaterial,
    /// The role of each of `material.inputs` (empty: none).
    pub roles: &'a [String],
    /// The workspace the inputs are in.
    pub root: &'a Path,
    /// The local store.
    pub store: &'a Store,
    /// The node is not reproducible (it is re-run on `--rerun`).
    pub volatile: bool,
}

/// How a task ended well.
pub enum Executed {
    /// It ran in this process (through the `here` closure): its outputs, stored.
    Here(Vec<OutputRecord>),
    /// It ran elsewhere: its action record is in the remote cache under the task's key.
    InRemoteCache,
}

/// Runs nodes. Implementations must be shareable between the builder's worker threads.
pub trait Executor: Send + Sync {
    /// A short name for messages (`local`, `slurm`).
    fn name(&self) -> &str;
    /// Run `task`. `here` runs it in this process exactly as a local build does (for an
    /// executor that keeps some nodes on this machine); its log goes to the build's log.
    fn execute(
        &self,
        task: &Task<'_>,
        here: &mut dyn FnMut() -> Result<Vec<OutputRecord>, NodeFailure>,
    ) -> Result<Executed, NodeFailure>;
    /// Where the nodes this executor handed elsewhere stand now (asked on the coordinator
    /// thread about twice a second while nodes run; an engine that runs everything here has
    /// none). A node it does not list is not waiting on another machine.
    fn jobs(&self) -> Vec<RemoteJob> {
        Vec::new()
    }
}

/// A node waiting on another engine, as that engine last said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteJob {
    /// The node id.
    pub node: String,
    /// The engine's id for its job (a Slurm job id).
    pub job: String,
    /// Queued or running.
    pub state: JobState,
    /// Why it is queued (Slurm's reason, e.g. `Resources`), or where it runs (its host).
    pub detail: Option<String>,
}

/// Every node runs in this process.
#[derive(Debug, Default, Clone, Copy)]
pub struct Local;

impl Executor for Local {
    fn name(&self) -> &str {
        "local"
    }

    fn execute(
        &self,
        _task: &Task<'_>,
        here: &mut dyn FnMut() -> Result<Vec<OutputRecord>, NodeFailure>,
    ) -> Result<Executed, NodeFailure> {
        here().map(Executed::Here)
    }
}

/// The version of [`NodeDescription`]'s format.
pub const DESCRIPTION_FORMAT: u32 = 1;

/// What a worker elsewhere needs to run one node: everything comes by digest from the remote
/// cache. The declared environment is in the parameters (a command's `env`), as it is in the
/// key.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct NodeDescription {
    /// [`DESCRIPTION_FORMAT`].
    pub format: u32,
    /// The version of the program that wrote it (the worker must run the same).
    pub version: String,
    /// The node id.
    pub node: String,
    /// The node key; the worker checks it is `material`'s.
    pub key: Digest,
    /// Kind, kind version, parameters, inputs (path and digest) in declared order.
    pub material: KeyMaterial,
    /// Each input of `material` as the store records it: a file (size, executable bit) or a
    /// directory (its tree listing's digest).
    pub inputs: Vec<OutputRecord>,
    /// The role of each input (empty: none).
    pub roles: Vec<String>,
    /// The declared outputs: workspace path, and whether it is a directory.
    pub outputs: Vec<(String, bool)>,
    /// Not reproducible.
    pub volatile: bool,
    /// Programs the node runs that are not among its inputs (`nvcc`, a Python with NVRTC):
    /// a worker without one refuses the job, naming it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<String>,
}

impl NodeDescription {
    /// The checks a worker makes before it fetches anything: same program version, the key
    /// is the material's, the inputs are the material's.
    pub fn check(&self, version: &str) -> Result<(), String> {
        if self.format != DESCRIPTION_FORMAT {
            return Err(format!(
                "the job's node description has format {}, this worker reads format {DESCRIPTION_FORMAT}",
                self.format
            ));
        }
        if self.version != version {
            return Err(format!(
                "this worker runs skyctl {version} but the build that submitted node `{}` runs skyctl {}; \
                 install the same skyctl version on the cluster's nodes",
                self.node, self.version
            ));
        }
        if self.material.key() != self.key {
            return Err(format!(
                "node `{}`: the description's key is not the key of its material",
                self.node
            ));
        }
        let same = self.inputs.len() == self.material.inputs.len()
            && self
                .inputs
                .iter()
                .zip(&self.material.inputs)
                .all(|(r, m)| r.path == m.path && r.digest == m.digest);
        if !same || self.roles.len() != self.inputs.len() {
            return Err(format!(
                "node `{}`: the description's inputs are not those of its key",
                self.node
            ));
        }
        for (path, _) in &self.outputs {
            crate::graph::clean_rel(path)
                .ok()
                .filter(|p| p == path)
                .ok_or_else(|| {
                    format!("node `{}`: output path `{path}` is not clean", self.node)
                })?;
        }
        for i in &self.inputs {
            crate::graph::clean_rel(&i.path)
                .ok()
                .filter(|p| *p == i.path)
                .ok_or_else(|| {
                    format!("node `{}`: input path `{}` is not clean", self.node, i.path)
                })?;
        }
        Ok(())
    }
}

/// Run a described node in the workspace `root` (a fresh folder holding its inputs, already
/// fetched and checked) with the kind `registry` names: the kind's own code, then every
/// declared output checked and put into `store`, the log stored, the action record written
/// (last). This is the code a local build runs for the node, minus what a shared workspace
/// needs (the journal, stale outputs, the release tree's check).
pub fn run_described(
    desc: &NodeDescription,
    registry: &Registry,
    root: &Path,
    store: &Store,
    log: &mut Vec<u8>,
) -> Result<ActionRecord, NodeFailure> {
    let t0 = std::time::Instant::now();
    let m = &desc.material;
    let Some(kind) = registry.get(&m.kind) else {
        return Err(NodeFailure::UnknownKind {
            message: format!("this worker has no kind `{}`", m.kind),
        });
    };
    if kind.version() != m.version {
        return Err(NodeFailure::UnknownKind {
            message: format!(
                "kind `{}` is version {} on this worker, {} in the build",
                m.kind,
                kind.version(),
                m.version
            ),
        });
    }
    let mut outputs = Vec::with_capacity(desc.outputs.len());
    for (path, _) in &desc.outputs {
        let abs = root.join(path);
        if let Some(parent) = abs.parent() {
            std::fs::create_dir_all(parent).map_err(|e| {
                NodeFailure::io(format!("cannot create `{}`: {e}", parent.display()))
            })?;
        }
        outputs.push(abs);
    }
    let inputs = desc
        .inputs
        .iter()
        .zip(&desc.roles)
        .map(|(i, role)| crate::kind::StageInput {
            rel: i.path.clone(),
            path: root.join(&i.path),
            dir: i.dir,
            role: role.clone(),
        })
        .collect();
    let mut ctx = crate::kind::StageCtx {
        node: &desc.node,
        workspace: root,
        inputs,
        outputs,
        log,
    };
    let run = kind.run(&m.params, &mut ctx);
    let log_digest = if ctx.log.is_empty() {
        None
    } else {
        store.put_bytes(ctx.log).ok()
    };
    run.map_err(|e| NodeFailure::StageError {
        message: crate::report::error_chain(&e),
    })?;
    let mut records = Vec::with_capacity(desc.outputs.len());
    for (path, dir) in &desc.outputs {
        records.push(crate::outputs::ingest(store, root, path, *dir)?);
    }
    let rec = ActionRecord {
        node: desc.node.clone(),
        kind: m.kind.clone(),
        outputs: records,
        duration_ms: t0.elapsed().as_millis() as u64,
        log: log_digest,
        volatile: desc.volatile || kind.volatile(),
    };
    store
        .put_action(&desc.key, &rec)
        .map_err(|e| NodeFailure::io(e.to_string()))?;
    Ok(rec)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::KeyInput;

    fn desc() -> NodeDescription {
        let material = KeyMaterial {
            kind: "command".into(),
            version: 1,
            params: serde_json::json!({"run": ["true"]}).into(),
            inputs: vec![KeyInput {
                path: "in.txt".into(),
                digest: Digest::of(b"x"),
                files: Vec::new(),
            }],
        };
        NodeDescription {
            format: DESCRIPTION_FORMAT,
            version: "1.2.3".into(),
            node: "n".into(),
            key: material.key(),
            inputs: vec![OutputRecord {
                path: "in.txt".into(),
                digest: Digest::of(b"x"),
                size: 1,
                dir: false,
                exec: false,
            }],
            material,
            roles: vec![String::new()],
            outputs: vec![("out.txt".into(), false)],
            volatile: false,
            tools: Vec::new(),
        }
    }

    #[test]
    fn a_worker_of_another_version_refuses_the_job() {
        assert_eq!(desc().check("1.2.3"), Ok(()));
        assert_eq!(
            desc().check("1.2.4"),
            Err("this worker runs skyctl 1.2.4 but the build that submitted node `n` runs skyctl 1.2.3; \
                 install the same skyctl version on the cluster's nodes"
                .into())
        );
    }

    #[test]
    fn a_description_whose_key_or_paths_do_not_hold_is_refused() {
        let mut d = desc();
        d.key = Digest::of(b"other");
        assert!(d
            .check("1.2.3")
            .unwrap_err()
            .contains("is not the key of its material"));
        let mut d = desc();
        d.inputs[0].digest = Digest::of(b"y");
        assert!(d
            .check("1.2.3")
            .unwrap_err()
            .contains("inputs are not those of its key"));
        let mut d = desc();
        d.outputs[0].0 = "../escape".into();
        assert!(d
            .check("1.2.3")
            .unwrap_err()
            .contains("output path `../escape` is not clean"));
    }
}
