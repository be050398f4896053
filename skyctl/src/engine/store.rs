//! The content store: blobs by digest, action records by node key, build records for gc.
//!
//! # Format
//!
//! ```text
//! <store_dir>/CACHEDIR.TAG, .gitignore ("*")
//! <store_dir>/store-v1/
//!   blobs/<2 hex>/<62 hex>          file content; the name is the blake3 of the content
//!   actions/<2 hex>/<62 hex>.json   ActionRecord of a node key
//!   builds/<ms>-<pid>-<n>.json      BuildRecord: the keys one build produced or used
//!   tmp/                            temp files, renamed into place when complete
//!   lock                            flock: builds hold it shared, gc exclusive
//! ```
//!
//! Every write goes to `tmp/` and is renamed into place, so a reader (or a process killed
//! mid-write) never sees half an entry. A blob is written before any record naming it, and an
//! action record only after all its blobs, so a record never points at a blob that was not
//! completely written. Readers verify: a blob is re-hashed whenever it is copied out
//! ([`Store::restore`]), so a corrupted blob is reported and its node re-runs. The store is
//! append-only apart from `gc` and re-runs of volatile or forced nodes, which replace an action
//! record atomically. The version is in the directory name: a format change makes a new
//! `store-v2/`, and old stores are simply ignored.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::error::{EngineError, Result};
use super::fsutil;
use super::key::Digest;
use super::tree::Tree;

/// Versioned subdirectory name.
pub const STORE_VERSION_DIR: &str = "store-v1";

/// One output of an action.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutputRecord {
    /// Workspace-relative path.
    pub path: String,
    /// File digest, or tree digest for a directory.
    pub digest: Digest,
    /// File size, or the sum of a directory's file sizes.
    pub size: u64,
    /// Whether the output is a directory.
    #[serde(default)]
    pub dir: bool,
    /// Executable bit (files).
    #[serde(default)]
    pub exec: bool,
}

/// What running a node with a given key produced.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ActionRecord {
    /// Node id at the time (informational: the key is what matters).
    pub node: String,
    /// Stage kind.
    pub kind: String,
    /// Outputs in declared order.
    pub outputs: Vec<OutputRecord>,
    /// Wall time of the run.
    pub duration_ms: u64,
    /// Digest of the captured log, if any.
    pub log: Option<Digest>,
    /// Whether the node is volatile (re-run on `--rerun`).
    pub volatile: bool,
}

/// The keys of one build, for gc reachability.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct BuildRecord {
    /// Milliseconds since the epoch.
    pub time_ms: u64,
    /// Node keys the build ended with.
    pub keys: Vec<Digest>,
}

/// A problem `skyctl store check` found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The store path concerned.
    pub path: PathBuf,
    /// What is wrong.
    pub message: String,
}

/// What gc removed.
#[derive(Debug, Default)]
pub struct GcStats {
    /// Action records removed.
    pub actions: usize,
    /// Blobs removed.
    pub blobs: usize,
    /// Bytes freed.
    pub bytes: u64,
    /// Build records removed.
    pub builds: usize,
}

/// A handle on a store directory.
#[derive(Debug, Clone)]
pub struct Store {
    root: PathBuf,
}

/// Holds the store lock (shared for builds, exclusive for gc) until dropped.
#[derive(Debug)]
pub struct StoreLock {
    _file: std::fs::File,
}

impl Store {
    /// Open (creating if needed) the store under `dir`.
    pub fn open(dir: &Path) -> Result<Store> {
        let root = dir.join(STORE_VERSION_DIR);
        for sub in ["blobs", "actions", "builds", "tmp"] {
            let p = root.join(sub);
            if !p.is_dir() {
                std::fs::create_dir_all(&p).map_err(|e| EngineError::io("create", &p, e))?;
            }
        }
        let tag = dir.join("CACHEDIR.TAG");
        if !tag.exists() {
            let _ = fsutil::write_atomic(
                &tag,
                b"Signature: 8a477f597d28d172789f06886806bc55\n# This is the skyctl content store.\n",
                false,
            );
            let _ = fsutil::write_atomic(&dir.join(".gitignore"), b"*\n", false);
        }
        Ok(Store { root })
    }

    /// The versioned root (`<dir>/store-v1`).
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Take the store lock: shared (builds) or exclusive (gc).
    pub fn lock(&self, exclusive: bool) -> Result<StoreLock> {
        use rustix::fs::{flock, FlockOperation};
        let p = self.root.join("lock");
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&p)
            .map_err(|e| EngineError::io("open", &p, e))?;
        let op = if exclusive {
            FlockOperation::LockExclusive
        } else {
            FlockOperation::LockShared
        };
        flock(&file, op).map_err(|e| EngineError::io("lock", &p, e.into()))?;
        Ok(StoreLock { _file: file })
    }

    /// Path of a blob.
    pub fn blob_path(&self, d: &Digest) -> PathBuf {
        let h = d.hex();
        self.root.join("blobs").join(&h[..2]).join(&h[2..])
    }

    fn action_path(&self, key: &Digest) -> PathBuf {
        let h = key.hex();
        self.root
            .join("actions")
            .join(&h[..2])
            .join(format!("{}.json", &h[2..]))
    }

    fn tmp(&self, stem: &str) -> PathBuf {
        fsutil::temp_in(&self.root.join("tmp"), stem)
    }

    fn publish(&self, tmp: &Path, dest: &Path) -> Result<()> {
        if let Some(parent) = dest.parent() {
            std::fs::create_dir_all(parent).map_err(|e| EngineError::io("create", parent, e))?;
        }
        std::fs::rename(tmp, dest).map_err(|e| {
            let _ = std::fs::remove_file(tmp);
            EngineError::io("rename", dest, e)
        })
    }

    /// Copy a workspace file into the store; returns its digest and size.
    pub fn put_file(&self, src: &Path) -> Result<(Digest, u64)> {
        let tmp = self.tmp("blob");
        let digest = fsutil::copy_hashing(src, &tmp, false).map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            EngineError::io("copy into store", src, e)
        })?;
        let size = std::fs::metadata(&tmp).map(|m| m.len()).unwrap_or(0);
        let dest = self.blob_path(&digest);
        if dest.exists() {
            let _ = std::fs::remove_file(&tmp);
        } else {
            let _ = fsutil::set_mode(&tmp, false);
            self.publish(&tmp, &dest)?;
        }
        Ok((digest, size))
    }

    /// Store bytes; returns their digest.
    pub fn put_bytes(&self, bytes: &[u8]) -> Result<Digest> {
        let digest = Digest::of(bytes);
        let dest = self.blob_path(&digest);
        if !dest.exists() {
            let tmp = self.tmp("blob");
            std::fs::write(&tmp, bytes).map_err(|e| EngineError::io("write", &tmp, e))?;
            self.publish(&tmp, &dest)?;
        }
        Ok(digest)
    }

    /// Read a whole blob and verify it.
    pub fn get_bytes(&self, d: &Digest) -> Result<Vec<u8>> {
        let p = self.blob_path(d);
        let bytes = std::fs::read(&p).map_err(|e| EngineError::io("read", &p, e))?;
        if Digest::of(&bytes) != *d {
            return Err(EngineError::Store {
                path: p,
                message: "blob is corrupted (content does not match its digest)".into(),
            });
        }
        Ok(bytes)
    }

    /// Whether a blob file exists (not verified).
    pub fn has_blob(&self, d: &Digest) -> bool {
        self.blob_path(d).is_file()
    }

    /// Whether an action record exists for `key` (not parsed).
    pub fn has_action(&self, key: &Digest) -> bool {
        self.action_path(key).is_file()
    }

    /// The action record of `key`; `None` when absent or unreadable (treated as a cache miss).
    pub fn get_action(&self, key: &Digest) -> Option<ActionRecord> {
        let bytes = std::fs::read(self.action_path(key)).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    /// Write (or atomically replace) the action record of `key`.
    pub fn put_action(&self, key: &Digest, rec: &ActionRecord) -> Result<()> {
        let bytes = serde_json::to_vec(rec).map_err(|e| EngineError::Store {
            path: self.action_path(key),
            message: e.to_string(),
        })?;
        let tmp = self.tmp("action");
        std::fs::write(&tmp, bytes).map_err(|e| EngineError::io("write", &tmp, e))?;
        self.publish(&tmp, &self.action_path(key))
    }

    /// Record the keys of a finished build.
    pub fn put_build(&self, keys: Vec<Digest>) -> Result<()> {
        let time_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        let rec = BuildRecord { time_ms, keys };
        let bytes = serde_json::to_vec(&rec).unwrap_or_default();
        let tmp = self.tmp("build");
        std::fs::write(&tmp, bytes).map_err(|e| EngineError::io("write", &tmp, e))?;
        let unique = tmp
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("build.tmp")
            .trim_end_matches(".tmp")
            .to_string();
        self.publish(
            &tmp,
            &self
                .root
                .join("builds")
                .join(format!("{time_ms:015}-{unique}.json")),
        )
    }

    /// Copy a stored output to `dest` in the workspace, verifying every blob.
    pub fn restore(&self, out: &OutputRecord, dest: &Path) -> Result<()> {
        if !out.dir {
            return self.restore_file(&out.digest, out.exec, dest);
        }
        let tree = self.get_tree(&out.digest)?;
        let tmpdir = fsutil::temp_beside(dest);
        let res = (|| {
            std::fs::create_dir_all(&tmpdir).map_err(|e| EngineError::io("create", &tmpdir, e))?;
            for e in &tree.entries {
                self.restore_file(&e.digest, e.exec, &tmpdir.join(&e.path))?;
            }
            fsutil::remove_path(dest).map_err(|e| EngineError::io("remove", dest, e))?;
            std::fs::rename(&tmpdir, dest).map_err(|e| EngineError::io("rename", dest, e))
        })();
        if res.is_err() {
            let _ = fsutil::remove_path(&tmpdir);
        }
        res
    }

    /// The tree listing stored under `d`.
    pub fn get_tree(&self, d: &Digest) -> Result<Tree> {
        let bytes = self.get_bytes(d)?;
        Tree::decode(&bytes).ok_or_else(|| EngineError::Store {
            path: self.blob_path(d),
            message: "not a valid tree listing".into(),
        })
    }

    fn restore_file(&self, d: &Digest, exec: bool, dest: &Path) -> Result<()> {
        let src = self.blob_path(d);
        fsutil::copy_verified(&src, dest, d, exec, false).map_err(|e| match e {
            fsutil::CopyError::Corrupt { actual } => {
                // Drop the bad blob so the re-run that follows can store a good copy.
                let _ = std::fs::remove_file(&src);
                EngineError::Store {
                    path: src.clone(),
                    message: format!(
                        "blob is corrupted (content hashes to {}); removed it",
                        actual.short()
                    ),
                }
            }
            fsutil::CopyError::Io(e)
                if e.kind() == std::io::ErrorKind::NotFound && !src.exists() =>
            {
                EngineError::Store {
                    path: src.clone(),
                    message: "blob is missing".into(),
                }
            }
            fsutil::CopyError::Io(e) => EngineError::io("restore", dest, e),
        })
    }

    fn walk(&self, sub: &str) -> Vec<PathBuf> {
        let mut out: Vec<PathBuf> = walkdir::WalkDir::new(self.root.join(sub))
            .min_depth(1)
            .into_iter()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_type().is_file())
            .map(|e| e.into_path())
            .collect();
        out.sort();
        out
    }

    fn digest_from_path(p: &Path) -> Option<Digest> {
        let file = p.file_name()?.to_str()?;
        let file = file.strip_suffix(".json").unwrap_or(file);
        let dir = p.parent()?.file_name()?.to_str()?;
        Digest::from_hex(&format!("{dir}{file}"))
    }

    /// Verify every blob against its digest and every action record against its blobs.
    pub fn check(&self) -> Vec<Problem> {
        let mut problems = Vec::new();
        for p in self.walk("blobs") {
            match (Self::digest_from_path(&p), statcache_hash(&p)) {
                (Some(d), Ok(actual)) if d == actual => {}
                (Some(_), Ok(actual)) => problems.push(Problem {
                    path: p,
                    message: format!("blob content hashes to {}", actual.short()),
                }),
                (None, _) => problems.push(Problem {
                    path: p,
                    message: "not a blob name".into(),
                }),
                (_, Err(e)) => problems.push(Problem {
                    path: p,
                    message: format!("unreadable: {e}"),
                }),
            }
        }
        for p in self.walk("actions") {
            let Some(_) = Self::digest_from_path(&p) else {
                problems.push(Problem {
                    path: p,
                    message: "not an action record name".into(),
                });
                continue;
            };
            let rec: Option<ActionRecord> = std::fs::read(&p)
                .ok()
                .and_then(|b| serde_json::from_slice(&b).ok());
            let Some(rec) = rec else {
                problems.push(Problem {
                    path: p,
                    message: "unreadable action record".into(),
                });
                continue;
            };
            for d in self.referenced_blobs(&rec) {
                match d {
                    Ok(d) if self.has_blob(&d) => {}
                    Ok(d) => problems.push(Problem {
                        path: p.clone(),
                        message: format!("node `{}`: blob {} is missing", rec.node, d.short()),
                    }),
                    Err(msg) => problems.push(Problem {
                        path: p.clone(),
                        message: format!("node `{}`: {msg}", rec.node),
                    }),
                }
            }
        }
        problems
    }

    /// Every blob an action record needs (outputs, tree children, log).
    fn referenced_blobs(&self, rec: &ActionRecord) -> Vec<std::result::Result<Digest, String>> {
        let mut out = Vec::new();
        for o in &rec.outputs {
            out.push(Ok(o.digest));
            if o.dir {
                match self.get_tree(&o.digest) {
                    Ok(t) => out.extend(t.entries.iter().map(|e| Ok(e.digest))),
                    Err(e) if self.has_blob(&o.digest) => out.push(Err(e.to_string())),
                    Err(_) => {}
                }
            }
        }
        out.extend(rec.log.map(Ok));
        out
    }

    /// Remove action records and blobs not reachable from the newest `keep_last` build records,
    /// and leftover temp files. Takes the exclusive store lock.
    pub fn gc(&self, keep_last: usize) -> Result<GcStats> {
        let _lock = self.lock(true)?;
        let mut stats = GcStats::default();
        let builds = self.walk("builds");
        let split = builds.len().saturating_sub(keep_last);
        let mut keys = BTreeSet::new();
        for b in &builds[split..] {
            if let Some(rec) = std::fs::read(b)
                .ok()
                .and_then(|x| serde_json::from_slice::<BuildRecord>(&x).ok())
            {
                keys.extend(rec.keys);
            }
        }
        for b in &builds[..split] {
            if std::fs::remove_file(b).is_ok() {
                stats.builds += 1;
            }
        }
        let mut live_blobs = BTreeSet::new();
        for p in self.walk("actions") {
            let key = Self::digest_from_path(&p);
            let rec: Option<ActionRecord> = std::fs::read(&p)
                .ok()
                .and_then(|b| serde_json::from_slice(&b).ok());
            match (key, rec) {
                (Some(k), Some(rec)) if keys.contains(&k) => {
                    live_blobs.extend(
                        self.referenced_blobs(&rec)
                            .into_iter()
                            .filter_map(|d| d.ok()),
                    );
                }
                _ => {
                    if std::fs::remove_file(&p).is_ok() {
                        stats.actions += 1;
                    }
                }
            }
        }
        for p in self.walk("blobs") {
            let live = Self::digest_from_path(&p).is_some_and(|d| live_blobs.contains(&d));
            if !live {
                let size = std::fs::metadata(&p).map(|m| m.len()).unwrap_or(0);
                if std::fs::remove_file(&p).is_ok() {
                    stats.blobs += 1;
                    stats.bytes += size;
                }
            }
        }
        // No build runs while we hold the exclusive lock, so every temp file is a leftover.
        for p in self.walk("tmp") {
            let _ = std::fs::remove_file(p);
        }
        Ok(stats)
    }
}

fn statcache_hash(p: &Path) -> std::io::Result<Digest> {
    super::statcache::hash_file(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn put_restore_and_detect_corruption() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("s")).unwrap();
        let src = dir.path().join("f");
        std::fs::write(&src, b"content").unwrap();
        let (d, size) = store.put_file(&src).unwrap();
        assert_eq!((d, size), (Digest::of(b"content"), 7));
        let out = OutputRecord {
            path: "f".into(),
            digest: d,
            size,
            dir: false,
            exec: false,
        };
        let rec = ActionRecord {
            node: "n".into(),
            kind: "command".into(),
            outputs: vec![out.clone()],
            duration_ms: 1,
            log: None,
            volatile: false,
        };
        let key = Digest::of(b"key");
        store.put_action(&key, &rec).unwrap();
        assert_eq!(store.get_action(&key).unwrap().outputs, rec.outputs);
        assert!(store.check().is_empty());
        let dest = dir.path().join("w/f");
        store.restore(&out, &dest).unwrap();
        assert_eq!(std::fs::read(&dest).unwrap(), b"content");

        // Corrupt the blob: restore refuses and leaves the old file alone; check reports it.
        let bp = store.blob_path(&d);
        fsutil::set_mode(&bp, false).unwrap();
        std::fs::write(&bp, b"CONTENT").unwrap();
        std::fs::write(&dest, b"old").unwrap();
        let e = store.restore(&out, &dest).unwrap_err().to_string();
        assert!(e.contains("corrupted"), "{e}");
        assert_eq!(std::fs::read(&dest).unwrap(), b"old");
        // The bad blob is gone; the record now points at a missing blob until a re-run.
        assert!(!store.has_blob(&d));
        assert_eq!(store.check().len(), 1);
    }

    #[test]
    fn gc_keeps_reachable() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let mk = |content: &[u8], key: &[u8]| {
            let d = store.put_bytes(content).unwrap();
            let out = OutputRecord {
                path: "x".into(),
                digest: d,
                size: content.len() as u64,
                dir: false,
                exec: false,
            };
            let rec = ActionRecord {
                node: "n".into(),
                kind: "k".into(),
                outputs: vec![out],
                duration_ms: 0,
                log: None,
                volatile: false,
            };
            store.put_action(&Digest::of(key), &rec).unwrap();
            d
        };
        let old = mk(b"old", b"k1");
        let new = mk(b"new", b"k2");
        store.put_build(vec![Digest::of(b"k1")]).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(5));
        store.put_build(vec![Digest::of(b"k2")]).unwrap();
        let stats = store.gc(1).unwrap();
        assert_eq!((stats.actions, stats.blobs, stats.builds), (1, 1, 1));
        assert!(store.has_blob(&new) && !store.has_blob(&old));
        assert!(store.check().is_empty());
    }
}
