//! Per-workspace state: what the last build recorded for each node (its key material and
//! outputs) and the release tree it wrote. `status` and `explain` diff against it; the no-op
//! path uses it to skip reading action records.
//!
//! Format: `.skyctl/state-v1/last-build.json`, written atomically at the end of a build. It
//! lives in the workspace, never in a (possibly shared) store.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::key::{Digest, KeyMaterial};
use crate::store::OutputRecord;

/// The last recorded state of one node.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct NodeState {
    /// Its key.
    pub key: Digest,
    /// What the key was computed from, kept as JSON text: a no-op build never needs it, and
    /// parsing 5,000 of them was a sixth of a no-op build ([`NodeState::material`] parses).
    pub material: Option<Box<RawValue>>,
    /// Its outputs.
    pub outputs: Vec<OutputRecord>,
}

impl NodeState {
    /// The state of a node built with `material` (whose key is `key`).
    pub fn new(key: Digest, material: &KeyMaterial, outputs: Vec<OutputRecord>) -> NodeState {
        NodeState {
            key,
            // Serializing strings and digests cannot fail; without it, the worst case is a
            // vaguer reason on the next rebuild.
            material: serde_json::value::to_raw_value(material).ok(),
            outputs,
        }
    }

    /// The key material, parsed (None when the recorded text is not one).
    pub fn material(&self) -> Option<KeyMaterial> {
        serde_json::from_str(self.material.as_ref()?.get()).ok()
    }
}

/// One file of the release tree as last written.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReleaseFile {
    /// Path inside the release directory.
    pub to: String,
    /// Content (a file digest, or a tree digest for a directory).
    pub digest: Digest,
    /// Whether it is a directory.
    pub dir: bool,
    /// Executable bit.
    pub exec: bool,
}

/// Which store a full build last recorded every node's result in.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoreStamp {
    /// The store directory (absolute).
    pub dir: String,
    /// Its generation id ([`crate::store::Store::id`]).
    pub id: String,
}

/// Everything the last build recorded.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct LastBuild {
    /// Per node id.
    pub nodes: BTreeMap<String, NodeState>,
    /// The release tree, or `None` if no build wrote one.
    pub release: Option<Vec<ReleaseFile>>,
    /// The store holding an action record for every node above; a build with another store
    /// (`--store`, or one emptied or collected since) stores what that one lacks.
    #[serde(default)]
    pub store: Option<StoreStamp>,
    /// Output paths of nodes that ran here and failed: files the engine made without
    /// recording them (a declared output found on disk that is neither recorded nor listed
    /// here was not made by the engine, and is never deleted).
    #[serde(default, skip_serializing_if = "std::collections::BTreeSet::is_empty")]
    pub made: std::collections::BTreeSet<String>,
}

/// Paths of the workspace's own state.
#[derive(Debug, Clone)]
pub struct StatePaths {
    /// `.skyctl/state-v1`.
    pub dir: PathBuf,
}

impl StatePaths {
    /// State under `root/.skyctl/state-v1`.
    pub fn new(root: &Path) -> StatePaths {
        StatePaths {
            dir: root.join(".skyctl").join("state-v1"),
        }
    }
    /// The stat cache file.
    pub fn statcache(&self) -> PathBuf {
        self.dir.join("statcache")
    }
    /// The last build record.
    pub fn last_build(&self) -> PathBuf {
        self.dir.join("last-build.json")
    }
    /// The workspace lock file.
    pub fn lock(&self) -> PathBuf {
        self.dir.join("lock")
    }
    /// `.skyctl/state-v1/children.log`: the process groups of running command nodes.
    pub fn children(&self) -> PathBuf {
        self.dir.join("children.log")
    }
    /// `.skyctl/state-v1/outputs.log`: the outputs of nodes about to run ([`Journal`]).
    pub fn journal(&self) -> PathBuf {
        self.dir.join("outputs.log")
    }
}

impl LastBuild {
    /// Load; missing or unreadable means "no previous build".
    pub fn load(path: &Path) -> LastBuild {
        std::fs::read(path)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default()
    }

    /// Save atomically.
    pub fn save(&self, path: &Path) -> std::io::Result<()> {
        let bytes = serde_json::to_vec(self).map_err(std::io::Error::other)?;
        sky_fs::write_cache(path, &bytes)
    }
}

/// The outputs of each node, noted (one appended line per path) before the node runs: a build
/// killed mid-node leaves partial outputs that nothing recorded, and the next build must know
/// they are its own to replace. Merged into [`LastBuild::made`] and removed when a build
/// ends normally.
#[derive(Debug)]
pub struct Journal {
    path: PathBuf,
    file: std::sync::Mutex<Option<std::fs::File>>,
}

impl Journal {
    /// The journal at `path` (created on the first note).
    pub fn new(path: PathBuf) -> Journal {
        Journal {
            path,
            file: std::sync::Mutex::new(None),
        }
    }

    /// The paths noted by builds that did not end normally.
    pub fn read(&self) -> std::collections::BTreeSet<String> {
        std::fs::read_to_string(&self.path)
            .map(|t| {
                t.lines()
                    .filter(|l| !l.is_empty())
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Note `paths` before writing them (one `write(2)`).
    pub fn note(&self, paths: &[&str]) -> std::io::Result<()> {
        use std::io::Write;
        let mut f = self.file.lock().unwrap_or_else(|p| p.into_inner());
        if f.is_none() {
            *f = Some(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&self.path)?,
            );
        }
        let mut line = String::new();
        for p in paths {
            line.push_str(p);
            line.push('\n');
        }
        match f.as_mut() {
            Some(file) => file.write_all(line.as_bytes()),
            None => Ok(()),
        }
    }

    /// The build ended and recorded what it made: the journal goes.
    pub fn clear(&self) {
        *self.file.lock().unwrap_or_else(|p| p.into_inner()) = None;
        let _ = std::fs::remove_file(&self.path);
    }
}

/// What a build starts from in the workspace state (the last build and the stat cache), read
/// ahead of the build: a front end can load it on another thread while it parses its
/// manifest. [`Preloaded::current`] re-reads a file that changed in the meantime (another
/// build finished), so reading early never gives a stale state.
#[derive(Debug)]
pub struct Preloaded {
    last: LastBuild,
    last_id: Option<FileId>,
    statcache: crate::statcache::StatCache,
    statcache_id: Option<FileId>,
}

/// Size, mtime and inode: a rewrite (temp file + rename) changes the inode.
type FileId = (u64, Option<std::time::SystemTime>, u64);

fn file_id(path: &Path) -> Option<FileId> {
    use std::os::unix::fs::MetadataExt;
    let md = std::fs::metadata(path).ok()?;
    Some((md.len(), md.modified().ok(), md.ino()))
}

impl Preloaded {
    /// Read the state under `paths`.
    pub fn load(paths: &StatePaths) -> Preloaded {
        let (last_path, stat_path) = (paths.last_build(), paths.statcache());
        let last_id = file_id(&last_path);
        let statcache_id = file_id(&stat_path);
        Preloaded {
            last: LastBuild::load(&last_path),
            last_id,
            statcache: crate::statcache::StatCache::load(&stat_path),
            statcache_id,
        }
    }

    /// The state as it is now (call with the workspace lock held).
    pub fn current(self, paths: &StatePaths) -> (LastBuild, crate::statcache::StatCache) {
        let (last_path, stat_path) = (paths.last_build(), paths.statcache());
        let last = if file_id(&last_path) == self.last_id {
            self.last
        } else {
            LastBuild::load(&last_path)
        };
        let statcache = if file_id(&stat_path) == self.statcache_id {
            self.statcache
        } else {
            crate::statcache::StatCache::load(&stat_path)
        };
        (last, statcache)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preloaded_state_is_reread_when_another_build_replaced_it() {
        let dir = tempfile::tempdir().unwrap();
        let paths = StatePaths::new(dir.path());
        std::fs::create_dir_all(&paths.dir).unwrap();
        let stamp = |id: &str| LastBuild {
            store: Some(StoreStamp {
                dir: "s".into(),
                id: id.into(),
            }),
            ..LastBuild::default()
        };
        stamp("first").save(&paths.last_build()).unwrap();
        let early = Preloaded::load(&paths);
        let (last, _) = early.current(&paths);
        assert_eq!(last.store.unwrap().id, "first");
        let early = Preloaded::load(&paths);
        // Another build finishes between the read ahead and the lock.
        stamp("second").save(&paths.last_build()).unwrap();
        let (last, _) = early.current(&paths);
        assert_eq!(last.store.unwrap().id, "second");
    }
}
