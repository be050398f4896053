//! The content store: blobs by digest, action records by node key, build records for gc.
//!
//! # Format
//!
//! ```text
//! <store_dir>/CACHEDIR.TAG, .gitignore ("*")
//! <store_dir>/store-v2/
//!   blobs/<2 hex>/<62 hex>          file content, read-only; the name is the blake3 of it
//!   actions/<ms>-<pid>-<n>.log      action logs: one per build process that recorded results
//!   builds/<ms>-<pid>-<n>.json      BuildRecord: the keys one build produced or used
//!   tmp/                            temp files, renamed into place when complete
//!   id                              this store's generation (new store, or gc removed records)
//!   lock                            flock: builds hold it shared, gc exclusive
//! ```
//!
//! An action log holds one line per [`ActionRecord`]: `<key hex> <blake3 hex of json> <json>`.
//! A process appends to its own log only, one `write(2)` per line (`O_APPEND`), so two builds
//! sharing a store never interleave; a line is only trusted when it ends in a newline and its
//! checksum matches, so a build killed mid-write leaves at most a torn last line, which readers
//! and `store check` ignore. The later line wins when a key appears twice (a re-run volatile or
//! forced node); `gc` compacts every log into one.
//!
//! Blobs are written before any record naming them, so a record never points at a blob that was
//! not completely written: a blob appears by `link(2)` of a complete file or by rename of a
//! complete temp file. Readers verify: a blob is re-hashed whenever it is materialized
//! ([`Store::restore`]), so a corrupted blob is reported, removed, and its node re-runs.
//!
//! # Materialization
//!
//! Outputs move between the workspace and the store by reflink (`FICLONE`, an independent
//! copy-on-write file) where the file system has it, else by hard link, else by copy. A hard
//! link shares the inode, so it is only used where the blob cannot be changed through the
//! workspace name: blobs and their linked workspace files are read-only; the builder unlinks a
//! node's declared outputs before the node runs (so `cp x out` or `> out` makes a new file) and
//! fails a node that modifies a declared input in place; and a workspace file is linked into
//! the store only while it has no other name (`nlink == 1`). Running as root, read-only modes
//! do not stop a person editing a linked output by hand; such a change is still never used: the
//! stat cache sees the new mtime, the restore re-hashes the blob, finds it corrupted, removes it
//! and re-runs the node. The release tree never shares inodes with the store
//! (`allow_link = false`).
//!
//! The version is in the directory name: a format change makes a new `store-vN/`, and old
//! stores are simply ignored.

use std::collections::{BTreeSet, HashMap};
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

use super::error::{EngineError, Result};
use super::fsutil;
use super::key::Digest;
use super::tree::Tree;

/// Versioned subdirectory name.
pub const STORE_VERSION_DIR: &str = "store-v2";

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

/// A handle on a store directory. Clones share the action index and this process's log.
#[derive(Debug, Clone)]
pub struct Store {
    root: PathBuf,
    shared: Arc<Shared>,
}

#[derive(Debug, Default)]
struct Shared {
    /// This process's action log, created with the first record.
    log: Mutex<Option<std::fs::File>>,
    /// Every action record of every log, loaded on the first lookup.
    index: Mutex<Option<HashMap<Digest, ActionRecord>>>,
    /// Whether `FICLONE` works here: 0 not tried yet, [`REFLINK_YES`] or [`REFLINK_NO`].
    reflink: AtomicU8,
}

const REFLINK_YES: u8 = 1;
const REFLINK_NO: u8 = 2;

/// Holds the store lock (shared for builds, exclusive for gc) until dropped.
#[derive(Debug)]
pub struct StoreLock {
    _file: std::fs::File,
}

/// What one action log holds: good records in order, and the lines that are not.
#[derive(Debug, Default)]
struct LogContent {
    records: Vec<(Digest, ActionRecord)>,
    /// (1-based line, what is wrong) for complete lines that do not parse or check.
    bad: Vec<(usize, String)>,
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
        let store = Store {
            root,
            shared: Arc::default(),
        };
        if !store.id_path().is_file() {
            store.new_id(false)?;
        }
        Ok(store)
    }

    /// The versioned root (`<dir>/store-v2`).
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn id_path(&self) -> PathBuf {
        self.root.join("id")
    }

    /// This store's generation: it changes when the store is created anew or gc removes action
    /// records. A workspace whose last build recorded the same id may trust that its records
    /// are still here.
    pub fn id(&self) -> String {
        std::fs::read_to_string(self.id_path())
            .map(|s| s.trim().to_string())
            .unwrap_or_default()
    }

    /// Write a fresh generation id; `replace = false` keeps one another process wrote first.
    fn new_id(&self, replace: bool) -> Result<()> {
        let seed = format!(
            "{} {} {:?}",
            std::process::id(),
            self.root.display(),
            std::time::SystemTime::now()
        );
        let id = Digest::of(seed.as_bytes()).hex();
        let tmp = self.tmp("id");
        std::fs::write(&tmp, id).map_err(|e| EngineError::io("write", &tmp, e))?;
        let dest = self.id_path();
        let res = if replace {
            std::fs::rename(&tmp, &dest)
        } else {
            // link(2) fails when the id exists: a concurrent opener's id stands.
            match std::fs::hard_link(&tmp, &dest) {
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
                r => r,
            }
        };
        let _ = std::fs::remove_file(&tmp);
        res.map_err(|e| EngineError::io("write", &dest, e))
    }

    fn lock_file(&self) -> Result<(std::fs::File, PathBuf)> {
        let p = self.root.join("lock");
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&p)
            .map_err(|e| EngineError::io("open", &p, e))?;
        Ok((file, p))
    }

    /// Take the store lock: shared (builds) or exclusive (gc).
    pub fn lock(&self, exclusive: bool) -> Result<StoreLock> {
        use rustix::fs::{flock, FlockOperation};
        let (file, p) = self.lock_file()?;
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

    fn tmp(&self, stem: &str) -> PathBuf {
        fsutil::temp_in(&self.root.join("tmp"), stem)
    }

    /// Rename a complete temp file to `dest`, creating the fan-out directory on first use.
    fn publish(&self, tmp: &Path, dest: &Path) -> Result<()> {
        let res = fsutil::with_parent(dest, || std::fs::rename(tmp, dest));
        res.map_err(|e| {
            let _ = std::fs::remove_file(tmp);
            EngineError::io("rename", dest, e)
        })
    }

    fn reflink_state(&self) -> u8 {
        self.shared.reflink.load(Ordering::Relaxed)
    }

    /// `FICLONE` `src` to the new file `dst`; `Ok(false)` (and `dst` removed) when the file
    /// system cannot, which is remembered so later calls do not try.
    fn try_reflink(&self, src: &Path, dst: &Path) -> std::io::Result<bool> {
        if self.reflink_state() == REFLINK_NO {
            return Ok(false);
        }
        match fsutil::reflink(src, dst) {
            Ok(()) => {
                self.shared.reflink.store(REFLINK_YES, Ordering::Relaxed);
                Ok(true)
            }
            Err(e) => {
                let _ = std::fs::remove_file(dst);
                if fsutil::is_unsupported(&e) {
                    self.shared.reflink.store(REFLINK_NO, Ordering::Relaxed);
                    Ok(false)
                } else {
                    Err(e)
                }
            }
        }
    }

    /// Put a workspace file into the store; returns its digest and size. By reflink when the
    /// file system has it; else by hard link when `src` has no other name (it becomes
    /// read-only: it is the blob); else by copy.
    pub fn put_file(&self, src: &Path) -> Result<(Digest, u64)> {
        let md = std::fs::symlink_metadata(src).map_err(|e| EngineError::io("stat", src, e))?;
        let exec = md.mode() & 0o111 != 0;
        let size = md.len();
        let tmp = self.tmp("blob");
        if self
            .try_reflink(src, &tmp)
            .map_err(|e| EngineError::io("reflink into store", src, e))?
        {
            return self.publish_verified_tmp(&tmp, exec, size);
        }
        if md.nlink() == 1 && md.is_file() {
            if let Some(done) = self.link_in(src, exec, size)? {
                return Ok(done);
            }
        }
        let digest = fsutil::copy_hashing(src, &tmp, false).map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            EngineError::io("copy into store", src, e)
        })?;
        self.place_tmp(&tmp, &digest, exec)?;
        Ok((digest, size))
    }

    /// Hash a complete temp file in the store's tmp dir and make it the blob.
    fn publish_verified_tmp(&self, tmp: &Path, exec: bool, size: u64) -> Result<(Digest, u64)> {
        let digest = statcache_hash(tmp).map_err(|e| {
            let _ = std::fs::remove_file(tmp);
            EngineError::io("hash", tmp, e)
        })?;
        self.place_tmp(tmp, &digest, exec)?;
        Ok((digest, size))
    }

    fn place_tmp(&self, tmp: &Path, digest: &Digest, exec: bool) -> Result<()> {
        let dest = self.blob_path(digest);
        if dest.exists() {
            let _ = std::fs::remove_file(tmp);
            return Ok(());
        }
        let _ = fsutil::set_readonly(tmp, exec);
        self.publish(tmp, &dest)
    }

    /// Hard-link `src` as its blob; `None` when the file system refuses (copy instead).
    fn link_in(&self, src: &Path, exec: bool, size: u64) -> Result<Option<(Digest, u64)>> {
        // Read-only before the blob name exists, so no blob is ever writable by mode.
        fsutil::set_readonly(src, exec).map_err(|e| EngineError::io("chmod", src, e))?;
        let digest = statcache_hash(src).map_err(|e| EngineError::io("hash", src, e))?;
        let dest = self.blob_path(&digest);
        match fsutil::with_parent(&dest, || std::fs::hard_link(src, &dest)) {
            Ok(()) => Ok(Some((digest, size))),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(Some((digest, size))),
            Err(_) => {
                // Another file system, or no hard links there: the workspace file stays ours.
                let _ = fsutil::set_mode(src, exec);
                Ok(None)
            }
        }
    }

    /// Store bytes; returns their digest.
    pub fn put_bytes(&self, bytes: &[u8]) -> Result<Digest> {
        let digest = Digest::of(bytes);
        let dest = self.blob_path(&digest);
        if !dest.exists() {
            let tmp = self.tmp("blob");
            std::fs::write(&tmp, bytes).map_err(|e| EngineError::io("write", &tmp, e))?;
            let _ = fsutil::set_readonly(&tmp, false);
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

    /// Remove the blob `d` if its content no longer hashes to `d`; returns whether it did.
    pub fn drop_if_corrupt(&self, d: &Digest) -> bool {
        let p = self.blob_path(d);
        match statcache_hash(&p) {
            Ok(actual) if actual != *d => std::fs::remove_file(&p).is_ok(),
            _ => false,
        }
    }

    /// Whether a blob file exists (not verified).
    pub fn has_blob(&self, d: &Digest) -> bool {
        self.blob_path(d).is_file()
    }

    fn logs(&self) -> Vec<PathBuf> {
        let dir = self.root.join("actions");
        let mut out: Vec<PathBuf> = std::fs::read_dir(&dir)
            .map(|rd| {
                rd.flatten()
                    .map(|e| e.path())
                    .filter(|p| p.extension().is_some_and(|x| x == "log"))
                    .collect()
            })
            .unwrap_or_default();
        out.sort();
        out
    }

    fn read_log(path: &Path) -> std::io::Result<LogContent> {
        let bytes = std::fs::read(path)?;
        let mut out = LogContent::default();
        let mut rest = bytes.as_slice();
        let mut line_no = 0;
        // A last line without its newline is a write cut short by a kill: ignored.
        while let Some(end) = rest.iter().position(|&b| b == b'\n') {
            line_no += 1;
            let line = &rest[..end];
            rest = &rest[end + 1..];
            match parse_line(line) {
                Ok(rec) => out.records.push(rec),
                Err(msg) => out.bad.push((line_no, msg)),
            }
        }
        Ok(out)
    }

    fn with_index<T>(&self, f: impl FnOnce(&mut HashMap<Digest, ActionRecord>) -> T) -> T {
        let mut guard = self
            .shared
            .index
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let index = guard.get_or_insert_with(|| {
            let mut index = HashMap::new();
            for p in self.logs() {
                // An unreadable log only costs cache misses.
                if let Ok(content) = Self::read_log(&p) {
                    index.extend(content.records);
                }
            }
            index
        });
        f(index)
    }

    /// Whether an action record exists for `key` (blobs not checked).
    pub fn has_action(&self, key: &Digest) -> bool {
        self.with_index(|ix| ix.contains_key(key))
    }

    /// The action record of `key`; `None` when absent (treated as a cache miss).
    pub fn get_action(&self, key: &Digest) -> Option<ActionRecord> {
        self.with_index(|ix| ix.get(key).cloned())
    }

    /// Append (or supersede) the action record of `key` to this process's log.
    pub fn put_action(&self, key: &Digest, rec: &ActionRecord) -> Result<()> {
        let line = format_line(key, rec).map_err(|e| EngineError::Store {
            path: self.root.join("actions"),
            message: e.to_string(),
        })?;
        {
            let mut log = self
                .shared
                .log
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            if log.is_none() {
                let p = self.new_log_path();
                let f = std::fs::OpenOptions::new()
                    .append(true)
                    .create_new(true)
                    .open(&p)
                    .map_err(|e| EngineError::io("create", &p, e))?;
                *log = Some(f);
            }
            if let Some(f) = log.as_mut() {
                // One write(2) per line (the buffer is small; `write_all` only loops on a short
                // write, which a kill can cause, leaving a torn last line that readers skip).
                f.write_all(&line)
                    .map_err(|e| EngineError::io("append", self.root.join("actions"), e))?;
            }
        }
        let mut guard = self
            .shared
            .index
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(ix) = guard.as_mut() {
            ix.insert(*key, rec.clone());
        }
        Ok(())
    }

    fn new_log_path(&self) -> PathBuf {
        let name = fsutil::temp_in(Path::new(""), &format!("{:015}", now_ms()));
        let name = name.to_string_lossy();
        let name = name.trim_end_matches(".tmp");
        self.root.join("actions").join(format!("{name}.log"))
    }

    /// Record the keys of a finished build.
    pub fn put_build(&self, keys: Vec<Digest>) -> Result<()> {
        let time_ms = now_ms();
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

    /// Materialize a stored output at `dest` in the workspace, verifying every blob.
    /// `allow_link`: a hard link to the blob may be used (never for the release tree).
    pub fn restore(&self, out: &OutputRecord, dest: &Path, allow_link: bool) -> Result<()> {
        if !out.dir {
            return self.restore_file(&out.digest, out.exec, dest, allow_link);
        }
        let tree = self.get_tree(&out.digest)?;
        let tmpdir = fsutil::temp_beside(dest);
        let res = (|| {
            std::fs::create_dir_all(&tmpdir).map_err(|e| EngineError::io("create", &tmpdir, e))?;
            for e in &tree.entries {
                self.restore_file(&e.digest, e.exec, &tmpdir.join(&e.path), allow_link)?;
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

    fn restore_file(&self, d: &Digest, exec: bool, dest: &Path, allow_link: bool) -> Result<()> {
        let src = self.blob_path(d);
        self.materialize(&src, d, exec, dest, allow_link)
            .map_err(|e| match e {
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

    /// Reflink, else hard link (when allowed and the blob's exec bit is the one wanted), else
    /// copy; the content is verified against `d` before `dest` is replaced, in every case.
    fn materialize(
        &self,
        src: &Path,
        d: &Digest,
        exec: bool,
        dest: &Path,
        allow_link: bool,
    ) -> std::result::Result<(), fsutil::CopyError> {
        let tmp = fsutil::temp_beside(dest);
        let res = (|| {
            let reflinked = fsutil::with_parent(dest, || self.try_reflink(src, &tmp))?;
            if reflinked {
                let actual = statcache_hash(&tmp)?;
                if actual != *d {
                    return Err(fsutil::CopyError::Corrupt { actual });
                }
                fsutil::set_mode(&tmp, exec)?;
                std::fs::rename(&tmp, dest)?;
                return Ok(());
            }
            if allow_link {
                let md = std::fs::metadata(src)?;
                if (md.mode() & 0o111 != 0) == exec {
                    let actual = statcache_hash(src)?;
                    if actual != *d {
                        return Err(fsutil::CopyError::Corrupt { actual });
                    }
                    match fsutil::with_parent(dest, || std::fs::hard_link(src, &tmp)) {
                        Ok(()) => {
                            std::fs::rename(&tmp, dest)?;
                            return Ok(());
                        }
                        // Another file system: copy.
                        Err(e) if e.kind() == std::io::ErrorKind::CrossesDevices => {}
                        Err(e) if fsutil::is_unsupported(&e) => {}
                        Err(e) => return Err(e.into()),
                    }
                }
            }
            fsutil::copy_verified(src, dest, d, exec, false)
        })();
        if res.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        res
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
        let dir = p.parent()?.file_name()?.to_str()?;
        Digest::from_hex(&format!("{dir}{file}"))
    }

    /// Verify every blob against its digest and every action record against its blobs (the
    /// record in force for each key: the last one logged).
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
        let mut in_force: HashMap<Digest, (PathBuf, ActionRecord)> = HashMap::new();
        for p in self.walk("actions") {
            if p.extension().is_none_or(|x| x != "log") {
                problems.push(Problem {
                    path: p,
                    message: "not an action log".into(),
                });
                continue;
            }
            match Self::read_log(&p) {
                Ok(content) => {
                    for (line, msg) in content.bad {
                        problems.push(Problem {
                            path: p.clone(),
                            message: format!("line {line}: {msg}"),
                        });
                    }
                    for (k, rec) in content.records {
                        in_force.insert(k, (p.clone(), rec));
                    }
                }
                Err(e) => problems.push(Problem {
                    path: p,
                    message: format!("unreadable: {e}"),
                }),
            }
        }
        let mut keys: Vec<&Digest> = in_force.keys().collect();
        keys.sort();
        for k in keys {
            let (p, rec) = &in_force[k];
            for d in self.referenced_blobs(rec) {
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

    /// Rewrite every action log into one holding the records of `keep` (all when `None`), then
    /// remove the old logs. Needs the exclusive lock (no appender is running). Returns how many
    /// keys were dropped.
    fn compact(&self, keep: Option<&BTreeSet<Digest>>) -> Result<(usize, Vec<ActionRecord>)> {
        let logs = self.logs();
        let mut index: HashMap<Digest, ActionRecord> = HashMap::new();
        for p in &logs {
            if let Ok(content) = Self::read_log(p) {
                index.extend(content.records);
            }
        }
        let mut kept: Vec<(Digest, ActionRecord)> = Vec::new();
        let mut dropped = 0;
        for (k, rec) in index {
            if keep.is_none_or(|keys| keys.contains(&k)) {
                kept.push((k, rec));
            } else {
                dropped += 1;
            }
        }
        kept.sort_by_key(|a| a.0);
        if logs.len() <= 1 && dropped == 0 {
            return Ok((0, kept.into_iter().map(|(_, r)| r).collect()));
        }
        let mut bytes = Vec::new();
        for (k, rec) in &kept {
            bytes.extend(format_line(k, rec).map_err(|e| EngineError::Store {
                path: self.root.join("actions"),
                message: e.to_string(),
            })?);
        }
        let tmp = self.tmp("actions");
        let write = (|| {
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(&bytes)?;
            f.sync_all()
        })();
        write.map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            EngineError::io("write", &tmp, e)
        })?;
        let dest = self.new_log_path();
        self.publish(&tmp, &dest)?;
        // Before the old logs go: a crash in between only leaves duplicate lines.
        let _ = fsutil::sync_dir(&self.root.join("actions"));
        for p in logs {
            if p != dest {
                let _ = std::fs::remove_file(p);
            }
        }
        *self
            .shared
            .index
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = None;
        Ok((dropped, kept.into_iter().map(|(_, r)| r).collect()))
    }

    /// Merge the action logs into one when there are more than `max_logs` and no other process
    /// uses the store right now (never waits). Called at the end of a build.
    pub fn compact_if_many(&self, max_logs: usize) -> Result<()> {
        if self.logs().len() <= max_logs {
            return Ok(());
        }
        use rustix::fs::{flock, FlockOperation};
        let (file, _) = self.lock_file()?;
        if flock(&file, FlockOperation::NonBlockingLockExclusive).is_err() {
            return Ok(());
        }
        // Our own log is complete (one write per record): it is merged like the others.
        *self
            .shared
            .log
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = None;
        self.compact(None).map(|_| ())
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
        let (dropped, kept) = self.compact(Some(&keys))?;
        stats.actions = dropped;
        if dropped > 0 {
            // Workspaces that trusted this store's records must look again.
            self.new_id(true)?;
        }
        let live_blobs: BTreeSet<Digest> = kept
            .iter()
            .flat_map(|rec| self.referenced_blobs(rec))
            .filter_map(|d| d.ok())
            .collect();
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

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// `<key hex> <blake3 hex of json> <json>\n`
fn format_line(key: &Digest, rec: &ActionRecord) -> serde_json::Result<Vec<u8>> {
    let json = serde_json::to_vec(rec)?;
    let mut line = Vec::with_capacity(json.len() + 131);
    line.extend_from_slice(key.hex().as_bytes());
    line.push(b' ');
    line.extend_from_slice(Digest::of(&json).hex().as_bytes());
    line.push(b' ');
    line.extend_from_slice(&json);
    line.push(b'\n');
    Ok(line)
}

fn parse_line(line: &[u8]) -> std::result::Result<(Digest, ActionRecord), String> {
    let bad = || "not an action record line".to_string();
    if line.len() < 130 || line[64] != b' ' || line[129] != b' ' {
        return Err(bad());
    }
    let hex = |b: &[u8]| std::str::from_utf8(b).ok().and_then(Digest::from_hex);
    let key = hex(&line[..64]).ok_or_else(bad)?;
    let sum = hex(&line[65..129]).ok_or_else(bad)?;
    let json = &line[130..];
    if Digest::of(json) != sum {
        return Err("action record does not match its checksum".into());
    }
    let rec = serde_json::from_slice(json).map_err(|e| format!("action record: {e}"))?;
    Ok((key, rec))
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
        store.restore(&out, &dest, false).unwrap();
        assert_eq!(std::fs::read(&dest).unwrap(), b"content");

        // Corrupt the blob: restore refuses and leaves the old file alone; check reports it.
        let bp = store.blob_path(&d);
        fsutil::set_mode(&bp, false).unwrap();
        std::fs::write(&bp, b"CONTENT").unwrap();
        std::fs::write(&dest, b"old").unwrap();
        let e = store.restore(&out, &dest, false).unwrap_err().to_string();
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

    fn record(node: &str, d: Digest) -> ActionRecord {
        ActionRecord {
            node: node.into(),
            kind: "command".into(),
            outputs: vec![OutputRecord {
                path: "x".into(),
                digest: d,
                size: 1,
                dir: false,
                exec: false,
            }],
            duration_ms: 0,
            log: None,
            volatile: false,
        }
    }

    #[test]
    fn action_log_torn_lines_later_records_and_other_processes() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let d1 = store.put_bytes(b"1").unwrap();
        let d2 = store.put_bytes(b"2").unwrap();
        let (k1, k2) = (Digest::of(b"k1"), Digest::of(b"k2"));
        store.put_action(&k1, &record("one", d1)).unwrap();
        store.put_action(&k2, &record("two", d1)).unwrap();
        // A re-run supersedes: the later line wins, here and for a fresh reader.
        store.put_action(&k2, &record("two", d2)).unwrap();
        assert_eq!(store.get_action(&k2).unwrap().outputs[0].digest, d2);
        let logs = store.logs();
        assert_eq!(logs.len(), 1, "one log per process");
        let fresh = Store::open(dir.path()).unwrap();
        assert_eq!(fresh.get_action(&k2).unwrap().outputs[0].digest, d2);
        assert!(fresh.check().is_empty(), "{:?}", fresh.check());

        // A build killed mid-write: a torn last line (no newline) is ignored, even by check.
        let full = format_line(&Digest::of(b"k3"), &record("three", d1)).unwrap();
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&logs[0])
            .unwrap();
        f.write_all(&full[..full.len() / 2]).unwrap();
        let fresh = Store::open(dir.path()).unwrap();
        assert!(fresh.get_action(&Digest::of(b"k3")).is_none());
        assert!(fresh.get_action(&k1).is_some());
        assert!(fresh.check().is_empty(), "{:?}", fresh.check());

        // A complete line that does not match its checksum is reported and never used.
        let mut bad = format_line(&Digest::of(b"k4"), &record("four", d1)).unwrap();
        let n = bad.len();
        bad[n - 3] ^= 1;
        f.write_all(b"\n").unwrap(); // ends the torn line: now a complete, bad one
        f.write_all(&bad).unwrap();
        let fresh = Store::open(dir.path()).unwrap();
        assert!(fresh.get_action(&Digest::of(b"k4")).is_none());
        let problems = fresh.check();
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[1].message.contains("checksum"), "{problems:?}");

        // A second process appends to its own log; a reader sees both.
        let other = Store::open(dir.path()).unwrap();
        other
            .put_action(&Digest::of(b"k5"), &record("five", d2))
            .unwrap();
        assert_eq!(other.logs().len(), 2);
        assert!(Store::open(dir.path())
            .unwrap()
            .get_action(&Digest::of(b"k5"))
            .is_some());
    }

    #[test]
    fn gc_merges_the_logs_and_changes_the_id() {
        let dir = tempfile::tempdir().unwrap();
        let d = Store::open(dir.path()).unwrap().put_bytes(b"x").unwrap();
        for k in [b"a", b"b", b"c"] {
            // One store handle per "process": one log each.
            let s = Store::open(dir.path()).unwrap();
            s.put_action(&Digest::of(k), &record("n", d)).unwrap();
        }
        let store = Store::open(dir.path()).unwrap();
        assert_eq!(store.logs().len(), 3);
        let id = store.id();
        store
            .put_build(vec![Digest::of(b"a"), Digest::of(b"c")])
            .unwrap();
        let stats = store.gc(1).unwrap();
        assert_eq!(stats.actions, 1);
        assert_eq!(store.logs().len(), 1);
        assert_ne!(store.id(), id);
        assert!(store.has_action(&Digest::of(b"a")) && store.has_action(&Digest::of(b"c")));
        assert!(!store.has_action(&Digest::of(b"b")));
        assert!(store.check().is_empty());
        // Nothing dropped: the id stays.
        let id = store.id();
        store.gc(1).unwrap();
        assert_eq!(store.id(), id);
    }

    #[test]
    fn files_go_in_and_out_by_link_when_no_reflink() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("s")).unwrap();
        let src = dir.path().join("f");
        std::fs::write(&src, b"linked").unwrap();
        let (d, _) = store.put_file(&src).unwrap();
        let reflinked = store.reflink_state() == REFLINK_YES;
        let ino = |p: &Path| std::fs::metadata(p).unwrap().ino();
        let blob = store.blob_path(&d);
        assert_eq!(std::fs::metadata(&blob).unwrap().mode() & 0o777, 0o444);
        assert_eq!(ino(&src) == ino(&blob), !reflinked);
        // A file with a second name is never linked in (the other name could change it).
        let shared = dir.path().join("g");
        std::fs::write(&shared, b"two names").unwrap();
        std::fs::hard_link(&shared, dir.path().join("g2")).unwrap();
        let (d2, _) = store.put_file(&shared).unwrap();
        assert_ne!(ino(&shared), ino(&store.blob_path(&d2)));
        // Out: a link when allowed and the exec bit matches, a copy otherwise.
        let out = OutputRecord {
            path: "o".into(),
            digest: d,
            size: 6,
            dir: false,
            exec: false,
        };
        let dest = dir.path().join("w/o");
        store.restore(&out, &dest, true).unwrap();
        assert_eq!(ino(&dest) == ino(&blob), !reflinked);
        store.restore(&out, &dest, false).unwrap();
        assert_ne!(ino(&dest), ino(&blob));
        let exec_out = OutputRecord { exec: true, ..out };
        store.restore(&exec_out, &dest, true).unwrap();
        assert_ne!(ino(&dest), ino(&blob));
        assert_eq!(std::fs::read(&dest).unwrap(), b"linked");
    }
}
