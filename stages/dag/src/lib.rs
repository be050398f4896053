//! sky-dag: a content-hashed build engine. Node specs in; a DAG of keyed nodes; only what
//! changed re-run; every result in a content store; the release tree swapped in atomically.
//!
//! It knows nothing about what the nodes compute: a front end (skyctl's `pipeline.toml`)
//! declares nodes, and [`Kind`]s registered in a [`Registry`] turn input files into output
//! files.
//!
//! # The main types
//!
//! Data flows one way, one noun per module:
//!
//! - [`GraphSpec`] / [`NodeSpec`]: what the front end declares (id, kind, typed params,
//!   inputs, outputs, a span into its [`Source`] for error locations, a group).
//! - [`Graph`] ([`graph`]): the specs resolved and checked (unknown references, cycles,
//!   overlapping outputs, paths leading out of the workspace), in topological order.
//! - [`Plan`] ([`plan`]): the graph with targets and `--rerun` applied; no I/O.
//! - [`scan`]: the dirty check, from input digests ([`statcache`]), keys ([`key`]), action
//!   records ([`store`]) and the last build ([`state`]), to a [`scan::Freshness`] with a
//!   [`scan::DirtyReason`].
//! - [`scheduler`]: runs ready nodes on workers; knows nothing about keys or files.
//! - [`build()`] ([`builder`]): the scheduler's driver: the key at ready time (early cutoff),
//!   restore or run, store outputs, record; then [`release`] swaps the release tree in.
//! - [`NodeFailure`] ([`failure`]): why a node failed, with a stable kind name for `--json`;
//!   the last failure of each node is kept in the workspace state for `status` and `explain`.
//! - [`query`]: status, explain and graph export, read-only.
//! - [`remote`]: the shared remote cache (Bazel HTTP layout): fetch on a local miss, upload
//!   after a run; it never fails a build. The wire is a [`remote::Transport`] (sky-remote's
//!   HTTP client, or [`remote::MemoryRemote`] in tests).
//!
//! Seams: kinds are the only code that produces outputs; progress goes out as
//! [`report::Event`]s to a [`report::Reporter`]. [`command::Command`] is the one built-in kind
//! (an external program); [`process::Child`] is how every kind runs one.
//!
//! # Example
//!
//! A kind that upper-cases its input, run twice: the second build executes nothing.
//!
//! ```
//! use sky_dag::{build, BuildOptions, Graph, GraphSpec, Kind, NodeSpec, Registry, Source,
//!               StageCtx, Workspace};
//!
//! struct Upper;
//!
//! impl Kind for Upper {
//!     const NAME: &'static str = "upper";
//!     const VERSION: u32 = 1;
//!     type Params = ();
//!     fn run(&self, _: (), ctx: &mut StageCtx<'_>) -> anyhow::Result<()> {
//!         let text = std::fs::read_to_string(&ctx.inputs[0].path)?;
//!         sky_fs::write(&ctx.outputs[0], text.to_uppercase().as_bytes())?;
//!         Ok(())
//!     }
//! }
//!
//! # fn main() -> anyhow::Result<()> {
//! let dir = tempfile::tempdir()?;
//! std::fs::write(dir.path().join("in.txt"), "hello")?;
//! let ws = Workspace::new(dir.path(), &dir.path().join(".store"))?;
//! let mut registry = Registry::default();
//! registry.add(Upper);
//!
//! let spec = GraphSpec {
//!     nodes: vec![NodeSpec::new::<Upper>("shout", &(), 0..0)?
//!         .input("in.txt", 0..0)
//!         .output("out/in.txt", 0..0)],
//!     ..GraphSpec::default()
//! };
//! let graph = Graph::build(spec, &Source::default(), &ws.root)?;
//! let opts = BuildOptions { jobs: 1, ..BuildOptions::default() };
//!
//! let first = build(&ws, &graph, &registry, &opts, &mut sky_dag::report::Collect::default())?;
//! assert_eq!((first.executed, first.failed), (1, 0));
//! assert_eq!(std::fs::read_to_string(dir.path().join("out/in.txt"))?, "HELLO");
//!
//! let again = build(&ws, &graph, &registry, &opts, &mut sky_dag::report::Collect::default())?;
//! assert_eq!((again.executed, again.cached), (0, 1));
//! # Ok(())
//! # }
//! ```

pub mod builder;
pub mod codec;
pub mod command;
pub mod compiled;
pub mod error;
pub mod executor;
pub mod failure;
pub mod fsutil;
pub mod glob;
pub mod graph;
pub mod interrupt;
pub mod key;
pub mod kind;
pub mod noop;
mod outputs;
pub mod plan;
pub mod process;
pub mod query;
pub mod release;
pub mod remote;
pub mod report;
pub mod scan;
pub mod scheduler;
pub mod source;
pub mod statcache;
pub mod state;
pub mod store;
pub mod timings;
pub mod tree;
pub mod witness;
pub mod workspace;
pub mod writable;

#[cfg(test)]
mod testutil;

pub use builder::{build, BuildOptions};
pub use error::{DagError, Result};
pub use failure::NodeFailure;
pub use graph::{Graph, GraphSpec, InputSpec, NodeParams, NodeSpec, ReleaseSpec};
pub use kind::{Kind, Registry, StageCtx, StageInput};
pub use plan::Plan;
pub use source::{Located, Source};
pub use workspace::Workspace;
