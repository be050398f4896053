//! Built-in stage kinds: what a node *does*.
//!
//! A kind is a type implementing [`StageKind`], registered by name in [`Registry::builtin`].
//! The engine owns everything around the run (keys, the store, materializing inputs, checking
//! and storing outputs, logs, scheduling); a kind only turns input files into output files.
//!
//! # Adding a kind (e.g. `convert`)
//!
//! 1. Create `kinds/convert.rs` with a unit struct implementing [`StageKind`]:
//!    - `name()` returns the kind name used by the graph (`"convert"`; the names the graph
//!      already emits are `convert`, `calibrate`, `quantize`, `bench`, `manifest`,
//!      `golden_model`, `golden_kernels`, see [`crate::engine::graph`]);
//!    - `version()` starts at 1. **Bump it whenever the bytes the kind writes can change for
//!      the same inputs and params** (a bug fix, a new field, a different default): the version
//!      is part of every node key, so bumping it re-runs exactly the nodes of that kind;
//!    - `exclusive()` is true when the kind must not share the machine (benchmarks);
//!    - `volatile()` is true when results are not reproducible (benchmarks, remote runs):
//!      they are cached but re-run by `--rerun <kind>`;
//!    - `run(ctx)` reads `ctx.params` (the node's canonical parameters, a JSON object built in
//!      `graph.rs`; parse them into a `#[derive(Deserialize)]` struct and fail with a clear
//!      message on a mismatch), reads `ctx.inputs` (materialized files or directories, in the
//!      node's declared order) and writes every path in `ctx.outputs` (parent directories
//!      exist; write each file atomically). Text for the user goes to `ctx.log`. Return an
//!      error to fail the node; do not print.
//! 2. Add `pub mod convert;` below and one `r.add(convert::Convert);` line in
//!    [`Registry::builtin`].
//! 3. If the kind needs a new parameter, add it where `graph.rs` builds the node's `params`
//!    (and to the manifest schema in `manifest.rs` if the user sets it). Every field in
//!    `params` enters the key, so keep only what changes the output there.
//! 4. Test it alone with a `StageCtx` over a temp dir (no engine needed), and once end to end
//!    in `skyctl/tests/` through `skyctl build`.
//!
//! A kind must be deterministic: same inputs and params, byte-identical outputs, in any folder.
//! It must not read anything it was not given (no pipeline.toml, no store, no absolute paths
//! baked into outputs), otherwise keys stop describing results.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub mod bench;
pub mod calibrate;
pub mod command;
pub mod convert;
pub mod golden_gen;
pub mod golden_kernels;
pub mod golden_model;
pub mod kernel_harness;
pub mod manifest;
pub mod quantize;

/// One materialized input of a node.
#[derive(Debug, Clone)]
pub struct StageInput {
    /// Workspace-relative path (what the manifest names).
    pub rel: String,
    /// Absolute path of the file or directory.
    pub path: PathBuf,
    /// Whether it is a directory.
    pub dir: bool,
}

/// Everything a stage sees of the engine while it runs.
pub struct StageCtx<'a> {
    /// The node id, for messages.
    pub node: &'a str,
    /// Canonical parameters.
    pub params: &'a serde_json::Value,
    /// The workspace root (command nodes run relative to it).
    pub workspace: &'a Path,
    /// Inputs in declared order.
    pub inputs: Vec<StageInput>,
    /// Absolute paths of the declared outputs, in declared order; the kind writes each one.
    pub outputs: Vec<PathBuf>,
    /// Captured output, stored in the content store as the node's log.
    pub log: &'a mut Vec<u8>,
}

/// A built-in node kind. See the module doc for how to add one.
pub trait StageKind: Send + Sync {
    /// The kind name, as used in node definitions.
    fn name(&self) -> &'static str;
    /// Implementation version; part of every key of this kind.
    fn version(&self) -> u32;
    /// Whether nodes of this kind run alone.
    fn exclusive(&self) -> bool {
        false
    }
    /// Whether results are not reproducible (cached, re-run on `--rerun`).
    fn volatile(&self) -> bool {
        false
    }
    /// Produce the outputs.
    fn run(&self, ctx: &mut StageCtx<'_>) -> anyhow::Result<()>;
}

/// Kinds by name.
#[derive(Default)]
pub struct Registry {
    kinds: BTreeMap<&'static str, Box<dyn StageKind>>,
}

impl Registry {
    /// Every kind this build of skyctl has.
    pub fn builtin() -> Registry {
        let mut r = Registry::default();
        r.add(command::Command);
        r.add(calibrate::Calibrate);
        r.add(quantize::Quantize);
        r.add(bench::Bench);
        r.add(manifest::Manifest);
        r.add(convert::Convert);
        r.add(golden_model::GoldenModel);
        r.add(golden_gen::GoldenGen);
        r.add(kernel_harness::KernelHarness);
        r.add(golden_kernels::GoldenKernels);
        r
    }

    /// Register a kind (replacing one of the same name).
    pub fn add(&mut self, kind: impl StageKind + 'static) {
        self.kinds.insert(kind.name(), Box::new(kind));
    }

    /// The kind named `name`.
    pub fn get(&self, name: &str) -> Option<&dyn StageKind> {
        self.kinds.get(name).map(|k| k.as_ref())
    }

    /// Names of all registered kinds.
    pub fn names(&self) -> Vec<&'static str> {
        self.kinds.keys().copied().collect()
    }
}
