//! Per-workspace state: what the last build recorded for each node (its key and outputs, and
//! the key material it was computed from) and the release tree it wrote. `status` and
//! `explain` diff against it; the no-op path uses it to skip reading action records.
//!
//! It lives in the workspace (`.skyctl/state-v1/`), never in a (possibly shared) store, in
//! three files:
//!
//! - `last-build.bin`, the base, replaced atomically: a [`crate::codec`] frame (`SKYLAST1`,
//!   length, blake3) around the store stamp, the release tree and its folder, the paths in
//!   [`LastBuild::made`], and per node (sorted by id) its id, key, outputs and where its key
//!   material is (offset and length in `materials.log`, and the first 16 bytes of the
//!   material's blake3).
//! - `last-build.log`, the changes since the base: one frame (`SKYLDLT1`) per build that
//!   changed anything, holding the base's id (the first 16 bytes of the base frame's blake3),
//!   the store stamp, release tree and `made` as they now are, the states of the nodes that
//!   changed and the ids of the nodes that went. Loading applies them in order and stops at the
//!   first that is cut, damaged or of another base: an older record is only ever slower (keys
//!   are compared, outputs checked, the store's records looked up), never wrong. A one-node
//!   rebuild of a big pipeline appends a few hundred bytes; when the log passes a quarter of the
//!   base (16 KiB for a small one), the whole record is written as the new base and the log
//!   goes ([`LastBuild::save_changes`]).
//! - `materials.log`: the key materials as JSON text, one after the other. A build appends the
//!   materials of the nodes whose key changed (one `write`), then writes its record. Only
//!   `status`, `explain` and the reason a dirty node gives read it, by offset; a material whose
//!   bytes do not hash to what the record says (a torn append, a file compacted by a build that
//!   did not get to write its record) is treated as unknown (a vaguer reason, never a wrong
//!   one). When less than half of it is still referenced it is rewritten with only those
//!   (atomically), and the whole record is written.
//!
//! A missing, truncated or damaged `last-build.bin` reads as "no previous build": every node is
//! then checked against the store's action records, which is slower but gives the same answer.
//!
//! A fourth file, `failures.json`, holds each node's failure in the last build that ran it
//! (a JSON object: node id -> [`NodeFailure`]), for `status` and `explain`. A node that
//! succeeds leaves it. It is separate from the record above so that format is unchanged: a
//! workspace without it (an older skyctl's) reads as "no failures", and a damaged one too.
//!
//! One file per concern: [`paths`] (where each state file is), [`record`] (the last build
//! record: its binary codec, the change log and the materials), [`failures`], [`journal`]
//! (the outputs of nodes about to run) and [`preload`] (reading it all ahead of the lock).

mod failures;
mod journal;
mod paths;
mod preload;
mod record;

pub use failures::{load_failures, save_failures};
pub use journal::Journal;
pub use paths::StatePaths;
pub use preload::Preloaded;
pub use record::{LastBuild, NodeState, ReleaseFile, StoreStamp};
