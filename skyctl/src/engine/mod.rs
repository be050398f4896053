//! The pipeline engine: `pipeline.toml` in, a DAG of content-hashed nodes, only what changed
//! re-run, every result cached, the release tree written atomically.
//!
//! Data flows one way, one noun per file:
//!
//! ```text
//! manifest.rs  pipeline.toml -> Manifest (located errors, "did you mean")
//! graph.rs     Manifest -> Graph (nodes, deps, topological order, release entries; cycles,
//!              duplicate outputs and paths leading out of the workspace are errors here)
//! plan.rs      Graph + targets + --rerun -> Plan (what is in scope; no I/O)
//! scan.rs      the dirty check: input digests (statcache.rs), keys (key.rs), action records
//!              (store.rs), last build (state.rs) -> Freshness + DirtyReason
//! scheduler.rs runs ready nodes on workers; knows nothing about keys or files
//! builder.rs   the scheduler's driver: key at ready time (early cutoff), restore or run
//!              (kinds/), store outputs, record; then release.rs swaps the release tree in
//! query.rs     status / explain / graph, read-only
//! ```
//!
//! Seams: stage kinds ([`kinds::StageKind`], registered in a [`kinds::Registry`]) are the only
//! code that produces outputs, and progress goes out as [`report::Event`]s to a
//! [`report::Reporter`]; engine tests register fake kinds and collect events, no processes.

pub mod builder;
pub mod error;
pub mod fsutil;
pub mod glob;
pub mod graph;
pub mod key;
pub mod kinds;
pub mod manifest;
pub mod plan;
pub mod query;
pub mod release;
pub mod report;
pub mod scan;
pub mod scheduler;
pub mod statcache;
pub mod state;
pub mod store;
pub mod tree;
pub mod workspace;

pub use builder::{build, BuildOptions};
pub use error::EngineError;
pub use workspace::Workspace;
