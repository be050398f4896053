//! Stage kinds: what a node *does*.
//!
//! A kind is a type implementing [`Kind`], registered in a [`Registry`]. The engine owns
//! everything around the run (keys, the store, materializing inputs, checking and storing
//! outputs, logs, scheduling); a kind only turns input files into output files.
//!
//! # Writing a kind
//!
//! - `NAME` is the kind name node specs use; `VERSION` starts at 1. **Bump it whenever the
//!   bytes the kind writes can change for the same inputs and params** (a bug fix, a new field,
//!   a different default): the version is part of every node key, so bumping it re-runs exactly
//!   the nodes of that kind.
//! - `Params` is the kind's parameter struct. The front end builds it (the one place each
//!   default is chosen) and [`crate::NodeSpec::new`] serializes it; every field enters the key,
//!   so keep only what changes the output. The engine parses it back before anything runs
//!   ([`Registry::check`]), so a mismatch is an error naming the node, never a silent default.
//! - `exclusive()` is true when the kind must not share the machine (benchmarks); `volatile()`
//!   when results are not reproducible (benchmarks, remote runs): they are cached but re-run by
//!   `--rerun <kind>`.
//! - `run(params, ctx)` reads `ctx.inputs` (materialized files or directories, in the node's
//!   declared order; [`StageCtx::input`] finds one by the role it was declared with,
//!   [`crate::NodeSpec::input_as`]) and writes every path in `ctx.outputs` (parent directories exist; write
//!   each file atomically, with `sky_fs::write`). Text for the user goes to
//!   `ctx.log`. Return an error to fail the node; do not print.
//!
//! A kind must be deterministic: same inputs and params, byte-identical outputs, in any folder.
//! It must not read anything it was not given (no declaration file, no store, no absolute paths
//! baked into outputs), otherwise keys stop describing results.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::Serialize;

/// One materialized input of a node.
#[derive(Debug, Clone)]
pub struct StageInput {
    /// Workspace-relative path (what the spec names).
    pub rel: String,
    /// Absolute path of the file or directory.
    pub path: PathBuf,
    /// Whether it is a directory.
    pub dir: bool,
    /// The role it was declared with ([`crate::NodeSpec::input_as`]); empty: none.
    pub role: String,
}

/// Everything a stage sees of the engine while it runs.
pub struct StageCtx<'a> {
    /// The node id, for messages.
    pub node: &'a str,
    /// The workspace root (command nodes run relative to it).
    pub workspace: &'a Path,
    /// Inputs in declared order.
    pub inputs: Vec<StageInput>,
    /// Absolute paths of the declared outputs, in declared order; the kind writes each one.
    pub outputs: Vec<PathBuf>,
    /// Captured output, stored in the content store as the node's log.
    pub log: &'a mut Vec<u8>,
}

impl StageCtx<'_> {
    /// The input declared with `role` (the first, should several share it).
    pub fn input(&self, role: &str) -> Option<&StageInput> {
        self.inputs.iter().find(|i| i.role == role)
    }
}

/// A node kind. See the module doc.
pub trait Kind: Send + Sync + 'static {
    /// The kind name, as used in node specs.
    const NAME: &'static str;
    /// Implementation version; part of every key of this kind.
    const VERSION: u32;
    /// The node parameters.
    type Params: Serialize + DeserializeOwned;
    /// Whether nodes of this kind run alone.
    fn exclusive(&self) -> bool {
        false
    }
    /// Whether results are not reproducible (cached, re-run on `--rerun`).
    fn volatile(&self) -> bool {
        false
    }
    /// Produce the outputs.
    fn run(&self, params: Self::Params, ctx: &mut StageCtx<'_>) -> anyhow::Result<()>;
}

/// A [`Kind`] with its parameters still serialized: what the registry holds.
pub trait DynKind: Send + Sync {
    /// [`Kind::NAME`].
    fn name(&self) -> &'static str;
    /// [`Kind::VERSION`].
    fn version(&self) -> u32;
    /// [`Kind::exclusive`].
    fn exclusive(&self) -> bool;
    /// [`Kind::volatile`].
    fn volatile(&self) -> bool;
    /// Whether `params` parse as the kind's `Params`; the parse error (naming the field) when
    /// they do not.
    fn check_params(&self, params: &serde_json::Value) -> Result<(), serde_json::Error>;
    /// Parse `params` and run.
    fn run(&self, params: &serde_json::Value, ctx: &mut StageCtx<'_>) -> anyhow::Result<()>;
}

impl<K: Kind> DynKind for K {
    fn name(&self) -> &'static str {
        K::NAME
    }
    fn version(&self) -> u32 {
        K::VERSION
    }
    fn exclusive(&self) -> bool {
        Kind::exclusive(self)
    }
    fn volatile(&self) -> bool {
        Kind::volatile(self)
    }
    fn check_params(&self, params: &serde_json::Value) -> Result<(), serde_json::Error> {
        <K::Params as serde::Deserialize>::deserialize(params).map(drop)
    }
    fn run(&self, params: &serde_json::Value, ctx: &mut StageCtx<'_>) -> anyhow::Result<()> {
        let params = <K::Params as serde::Deserialize>::deserialize(params)
            .map_err(|e| anyhow::anyhow!("bad parameters for kind `{}`: {e}", K::NAME))?;
        Kind::run(self, params, ctx)
    }
}

/// Kinds by name.
#[derive(Default)]
pub struct Registry {
    kinds: BTreeMap<&'static str, Box<dyn DynKind>>,
}

impl Registry {
    /// Register a kind (replacing one of the same name).
    pub fn add(&mut self, kind: impl DynKind + 'static) {
        self.kinds.insert(kind.name(), Box::new(kind));
    }

    /// The kind named `name`.
    pub fn get(&self, name: &str) -> Option<&dyn DynKind> {
        self.kinds.get(name).map(|k| k.as_ref())
    }

    /// Names of all registered kinds.
    pub fn names(&self) -> Vec<&'static str> {
        self.kinds.keys().copied().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Serialize, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Params {
        n: u32,
    }

    struct Count;

    impl Kind for Count {
        const NAME: &'static str = "count";
        const VERSION: u32 = 3;
        type Params = Params;
        fn run(&self, p: Params, ctx: &mut StageCtx<'_>) -> anyhow::Result<()> {
            ctx.log.extend(p.n.to_string().bytes());
            Ok(())
        }
    }

    #[test]
    fn params_are_checked_against_the_kind() {
        let mut r = Registry::default();
        r.add(Count);
        let k = r.get("count").unwrap();
        assert_eq!((k.name(), k.version()), ("count", 3));
        assert!(k.check_params(&serde_json::json!({"n": 2})).is_ok());
        let e = k
            .check_params(&serde_json::json!({"n": 2, "m": 1}))
            .unwrap_err();
        assert!(e.is_data(), "{e:?}");
        assert!(e.to_string().contains("unknown field `m`"), "{e}");
        let e = k.check_params(&serde_json::json!({})).unwrap_err();
        assert!(e.is_data(), "{e:?}");
        assert!(e.to_string().contains("missing field `n`"), "{e}");
        assert_eq!(r.names(), vec!["count"]);
    }
}
