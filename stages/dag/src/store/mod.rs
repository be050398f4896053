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
//! Nothing in the store is opened unless it is a regular file ([`fsutil::open_regular`]:
//! `O_NOFOLLOW | O_NONBLOCK`, then `fstat`): a blob, log or record replaced by a directory,
//! symlink or FIFO is an error at once (never a hang, never followed), reported by `check`,
//! removed by `gc`, by a restore that meets it, or when the blob is stored again.
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

use crate::error::{DagError, Result};
use crate::fsutil;
use crate::key::Digest;
use crate::tree::Tree;

mod actions;
mod blobs;
mod gc;
mod incoming;
mod materialize;
mod records;

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
    /// Blobs removed because their content did not match their name.
    pub corrupt_blobs: usize,
    /// Action records dropped because a blob they need is missing or damaged.
    pub broken_actions: usize,
    /// Entries removed from `actions/`, `builds/` or `tmp/` because they were not regular
    /// files (a directory, symlink or FIFO where a log, record or temp file belongs).
    pub odd_entries: usize,
}

/// A handle on a store directory. Clones share the action index and this process's log.
#[derive(Debug, Clone)]
pub struct Store {
    root: PathBuf,
    shared: Arc<Shared>,
    /// The store cannot be written (a cache restored read-only, a read-only mount): it still
    /// serves lookups and restores; storing a result is an error that says so.
    read_only: bool,
}

#[derive(Debug, Default)]
struct Shared {
    /// This process's action log, created with the first record.
    log: Mutex<Option<std::fs::File>>,
    /// Where every action record of every log is, loaded on the first lookup.
    index: Mutex<Option<actions::ActionIndex>>,
    /// Whether `FICLONE` works here: 0 not tried yet, [`REFLINK_YES`] or [`REFLINK_NO`].
    reflink: AtomicU8,
    /// The blob fan-out folders this process put a blob in or removed one from, a bit per
    /// first digest byte ([`Store::blob_folder_touched`]).
    touched: [std::sync::atomic::AtomicU64; 4],
}

const REFLINK_YES: u8 = 1;
const REFLINK_NO: u8 = 2;

/// Holds the store lock (shared for builds, exclusive for gc) until dropped.
#[derive(Debug)]
pub struct StoreLock {
    _file: std::fs::File,
}

/// The first entry of folder `dir` that is not a store's: anything but `store-v*/`, the
/// workspace state (`state-v*/`, beside the default store), a temp file, `CACHEDIR.TAG` and
/// `.gitignore`. A store is only made in a folder that has none: the markers it writes
/// (`CACHEDIR.TAG` makes `tar --exclude-caches-all` drop the folder, `.gitignore` hides it from
/// git) would take the user's files with it. `None` too when `dir` cannot be listed (missing).
pub fn foreign_entry(dir: &Path) -> Option<std::ffi::OsString> {
    std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .map(|e| e.file_name())
        .find(|name| {
            let name = name.to_string_lossy();
            !(name.starts_with("store-v")
                || name.starts_with("state-v")
                || name.starts_with(sky_fs::TEMP_PREFIX)
                || name == "CACHEDIR.TAG"
                || name == ".gitignore")
        })
}

impl Store {
    /// Open the store under `dir`, creating it when `dir` has none: `dir` must then be missing,
    /// empty or hold nothing but a store's files ([`foreign_entry`]), and be a place skyctl may
    /// write ([`crate::writable::may_write`]: no `.git` in it).
    pub fn open(dir: &Path) -> Result<Store> {
        let root = dir.join(STORE_VERSION_DIR);
        fsutil::must_be_folder(dir).map_err(|e| DagError::Store {
            path: dir.to_path_buf(),
            message: e.to_string(),
        })?;
        let refuse = |message: String| DagError::Store {
            path: dir.to_path_buf(),
            message,
        };
        match std::fs::metadata(&root) {
            Ok(m) if m.is_dir() => {}
            Ok(m) => {
                return Err(DagError::Store {
                    path: root.clone(),
                    message: fsutil::NotAFolder {
                        path: root.clone(),
                        what: fsutil::kind_name(m.file_type()),
                    }
                    .to_string(),
                })
            }
            Err(_) => {
                fsutil::must_be_folder(&root).map_err(|e| DagError::Store {
                    path: root.clone(),
                    message: e.to_string(),
                })?;
                // No store here yet: make one only where it takes nothing that is not its own.
                if let Err(refusal) = crate::writable::may_write(dir, &[]) {
                    return Err(refuse(format!(
                        "no store is made here: the folder {refusal}, which is not skyctl's"
                    )));
                }
                if let Some(name) = foreign_entry(dir) {
                    return Err(refuse(format!(
                        "not a store, and it holds `{}`, which is not the store's; no store is made in a folder of other files (it writes `CACHEDIR.TAG` and `.gitignore` into it): choose a folder of its own",
                        name.to_string_lossy()
                    )));
                }
            }
        }
        for sub in ["blobs", "actions", "builds", "tmp"] {
            let p = root.join(sub);
            match std::fs::symlink_metadata(&p) {
                Ok(m) if m.is_dir() => continue,
                // A file, symlink or FIFO where a store folder belongs: nothing in it can be
                // trusted or used, so it goes (a symlink is removed, never followed).
                Ok(_) if rustix::fs::access(&root, rustix::fs::Access::WRITE_OK).is_ok() => {
                    fsutil::remove_path(&p).map_err(|e| DagError::io("remove", &p, e))?;
                }
                _ => {}
            }
            std::fs::create_dir_all(&p).map_err(|e| DagError::io("create", &p, e))?;
        }
        // Best-effort markers, each written when missing. A build killed while writing one
        // leaves a temp file here; the only writers in this folder are these markers (a
        // concurrent open losing its temp file just skips its marker), so sweep them.
        crate::fsutil::sweep_temps(dir);
        let tag = dir.join("CACHEDIR.TAG");
        if !tag.exists() {
            let _ = sky_fs::write(&tag,
                b"Signature: 8a477f597d28d172789f06886806bc55\n# This is the skyctl content store.\n");
        }
        let ignore = dir.join(".gitignore");
        if !ignore.exists() {
            let _ = sky_fs::write(&ignore, b"*\n");
        }
        let read_only = rustix::fs::access(&root, rustix::fs::Access::WRITE_OK).is_err();
        let store = Store {
            root,
            shared: Arc::default(),
            read_only,
        };
        let id = store.id_path();
        match std::fs::symlink_metadata(&id) {
            Ok(m) if m.file_type().is_file() => {}
            Ok(_) if read_only => {}
            Ok(_) => {
                // Not a file: no generation anyone could have recorded. A new one replaces it.
                fsutil::remove_path(&id).map_err(|e| DagError::io("remove", &id, e))?;
                store.new_id(false)?;
            }
            Err(_) => store.new_id(false)?,
        }
        Ok(store)
    }

    /// The versioned root (`<dir>/store-v2`).
    pub fn root(&self) -> &Path {
        &self.root
    }

    pub(crate) fn id_path(&self) -> PathBuf {
        self.root.join("id")
    }

    /// This store's generation: it changes when the store is created anew or gc removes action
    /// records. A workspace whose last build recorded the same id may trust that its records
    /// are still here.
    pub fn id(&self) -> String {
        match fsutil::read_regular(&self.id_path(), sky_fs::STATE) {
            Ok(id) => String::from_utf8(id)
                .map(|id| id.trim().to_string())
                .unwrap_or_default(),
            Err(_) => String::new(),
        }
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
        std::fs::write(&tmp, id).map_err(|e| DagError::io("write", &tmp, e))?;
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
        res.map_err(|e| DagError::io("write", &dest, e))
    }

    fn lock_file(&self) -> Result<(std::fs::File, PathBuf)> {
        let p = self.root.join("lock");
        if !self.read_only && std::fs::symlink_metadata(&p).is_ok_and(|m| !m.is_file()) {
            // A directory (or symlink, FIFO) where the lock file belongs: it holds nothing,
            // so it is replaced rather than leaving every command stuck on it.
            fsutil::remove_path(&p).map_err(|e| DagError::io("remove", &p, e))?;
        }
        let file = if self.read_only {
            // flock needs no write access; a read-only store without a lock file cannot be
            // in use by a writer either, so there is nothing to wait for.
            match std::fs::File::open(&p) {
                Ok(f) => f,
                Err(_) => {
                    std::fs::File::open(&self.root).map_err(|e| DagError::io("open", &p, e))?
                }
            }
        } else {
            std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(&p)
                .map_err(|e| DagError::io("open", &p, e))?
        };
        Ok((file, p))
    }

    /// Whether the store is read-only (see [`Store`]).
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// The error for a write to a read-only store.
    pub(super) fn refuse_write(&self, what: &str) -> Result<()> {
        if self.read_only {
            return Err(DagError::Store {
                path: self.root.clone(),
                message: format!(
                    "the store is read-only, so {what} cannot be stored; a build that runs nodes needs a writable store (--store DIR)"
                ),
            });
        }
        Ok(())
    }

    /// Take the store lock: shared (builds) or exclusive (gc).
    pub fn lock(&self, exclusive: bool) -> Result<StoreLock> {
        use rustix::fs::{flock, FlockOperation};
        let (file, p) = self.lock_file()?;
        let (op, now) = if exclusive {
            (
                FlockOperation::LockExclusive,
                FlockOperation::NonBlockingLockExclusive,
            )
        } else {
            (
                FlockOperation::LockShared,
                FlockOperation::NonBlockingLockShared,
            )
        };
        // Inside a build's node, a store lock that is taken is most likely that build's, held
        // until the node (and so this process) ends: refused rather than waited for.
        if crate::interrupt::parent_build().is_some() && flock(&file, now).is_err() {
            return Err(DagError::InsideItsBuild {
                what: "store",
                path: self.root.clone(),
            });
        }
        flock(&file, op).map_err(|e| DagError::io("lock", &p, e.into()))?;
        Ok(StoreLock { _file: file })
    }

    fn tmp(&self, stem: &str) -> PathBuf {
        let dir = self.root.join("tmp");
        if !self.read_only && !dir.is_dir() {
            // Deleted while this process runs (a node that removed `.skyctl`): made again, so
            // the results of this build can still be stored.
            let _ = std::fs::create_dir_all(&dir);
        }
        fsutil::temp_in(&dir, stem)
    }

    /// Rename a complete temp file to `dest`, creating the fan-out directory on first use.
    fn publish(&self, tmp: &Path, dest: &Path) -> Result<()> {
        self.touch_blob_folder(dest);
        let res = fsutil::with_parent(dest, || std::fs::rename(tmp, dest));
        res.map_err(|e| {
            let _ = std::fs::remove_file(tmp);
            DagError::io("rename", dest, e)
        })
    }
}

pub(super) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// blake3 of a store file; only a regular file is read ([`fsutil::open_regular`]: a FIFO, a
/// symlink or a directory in its place is an error at once, never a hang).
pub(super) fn statcache_hash(p: &Path) -> std::io::Result<Digest> {
    fsutil::hash_regular(p)
}

#[cfg(test)]
mod tests {
    use super::actions::format_line;
    use super::*;

    #[test]
    fn the_blob_folders_a_process_changes_are_the_ones_it_says_it_touched() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("s")).unwrap();
        let d = store.put_bytes(b"one").unwrap();
        let touched: Vec<u8> = (0..=255)
            .filter(|&b| store.blob_folder_touched(b))
            .collect();
        assert_eq!(touched, [d.0[0]]);
        // A blob already there is not a change; a clone shares what its process touched.
        let other = store.clone();
        other.put_bytes(b"one").unwrap();
        let f = dir.path().join("f.txt");
        std::fs::write(&f, "two").unwrap();
        let (d2, _) = other.put_file(&f).unwrap();
        let mut expected = vec![d.0[0], d2.0[0]];
        expected.sort_unstable();
        expected.dedup();
        let touched: Vec<u8> = (0..=255)
            .filter(|&b| store.blob_folder_touched(b))
            .collect();
        assert_eq!(touched, expected);
        // Another process (a new handle) has touched nothing.
        let fresh = Store::open(&dir.path().join("s")).unwrap();
        assert!((0..=255).all(|b| !fresh.blob_folder_touched(b)));
    }

    #[test]
    fn no_store_is_made_in_a_folder_of_other_files_or_in_git() {
        let dir = tempfile::tempdir().unwrap();
        let mine = dir.path().join("mine");
        std::fs::create_dir_all(&mine).unwrap();
        std::fs::write(mine.join("notes.txt"), "mine\n").unwrap();
        let e = Store::open(&mine).unwrap_err().to_string();
        assert!(
            e.contains("not a store, and it holds `notes.txt`, which is not the store's"),
            "{e}"
        );
        let left: Vec<_> = std::fs::read_dir(&mine).unwrap().flatten().collect();
        assert_eq!(left.len(), 1, "nothing written beside the user's file");
        let e = Store::open(&dir.path().join("repo/.git/cache"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("lies inside version control's folder"), "{e}");
        assert!(!dir.path().join("repo").exists());
        // A store already there is used, whatever lies beside it; a missing or empty folder,
        // or one holding only the store's own files, gets one.
        let s = dir.path().join("s");
        Store::open(&s).unwrap();
        std::fs::write(s.join("README"), "about this cache\n").unwrap();
        Store::open(&s).unwrap();
        assert_eq!(foreign_entry(&s).as_deref(), Some("README".as_ref()));
        let state = dir.path().join("dot");
        std::fs::create_dir_all(state.join("state-v1")).unwrap();
        Store::open(&state).unwrap();
    }

    #[test]
    fn open_sweeps_a_killed_marker_write_and_writes_each_missing_marker() {
        let dir = tempfile::tempdir().unwrap();
        let s = dir.path().join("s");
        Store::open(&s).unwrap();
        // A build killed after the tag, while writing .gitignore through its temp file.
        std::fs::remove_file(s.join(".gitignore")).unwrap();
        let temp = s.join(format!("{}gitignore", sky_fs::TEMP_PREFIX));
        std::fs::write(&temp, b"").unwrap();
        Store::open(&s).unwrap();
        assert!(!temp.exists(), "the temp file is swept");
        assert_eq!(std::fs::read(s.join(".gitignore")).unwrap(), b"*\n");
        assert!(s.join("CACHEDIR.TAG").is_file());
    }

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
    fn a_blob_of_another_kind_is_never_opened_reported_and_removed() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("s")).unwrap();
        let d = store.put_bytes(b"content").unwrap();
        let bp = store.blob_path(&d);
        std::fs::remove_file(&bp).unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &bp,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        assert!(!store.has_blob(&d));
        let problems = store.check();
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert_eq!(problems[0].message, "a FIFO, not a regular file");
        assert!(
            matches!(
                store.blob_entries().as_slice(),
                [(p, Err(gc::BadBlobEntry::NotAFile("a FIFO")))] if *p == bp
            ),
            "{:?}",
            store.blob_entries()
        );
        let out = OutputRecord {
            path: "f".into(),
            digest: d,
            size: 7,
            dir: false,
            exec: false,
        };
        let e = store
            .restore(&out, &dir.path().join("w/f"), true)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("blob is not a regular file: a FIFO; removed it"),
            "{e}"
        );
        assert!(std::fs::symlink_metadata(&bp).is_err());
        // A symlink in its place: never followed, and storing the blob again replaces it.
        std::os::unix::fs::symlink("/etc/passwd", &bp).unwrap();
        assert!(!store.has_blob(&d));
        assert!(store.get_bytes(&d).is_err());
        std::os::unix::fs::symlink("/etc/passwd", &bp).unwrap();
        assert_eq!(store.put_bytes(b"content").unwrap(), d);
        assert!(store.has_blob(&d));
        assert_eq!(store.get_bytes(&d).unwrap(), b"content");
        assert!(store.check().is_empty());
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

    #[test]
    fn a_bad_log_line_says_why() {
        use super::actions::{parse_line, BadLine};
        let line = format_line(&Digest::of(b"k"), &record("n", Digest::of(b"d"))).unwrap();
        let line = &line[..line.len() - 1];
        assert!(parse_line(line).is_ok());
        assert!(matches!(parse_line(&line[..100]), Err(BadLine::Malformed)));
        let mut flipped = line.to_vec();
        *flipped.last_mut().unwrap() ^= 1;
        assert!(matches!(parse_line(&flipped), Err(BadLine::Checksum)));
        let json = b"{}";
        let mut wrong =
            format!("{} {} ", Digest::of(b"k").hex(), Digest::of(json).hex()).into_bytes();
        wrong.extend_from_slice(json);
        let e = parse_line(&wrong).unwrap_err();
        assert!(matches!(e, BadLine::Json(_)), "{e:?}");
        assert!(e.to_string().starts_with("action record: "), "{e}");
        assert!(std::error::Error::source(&e).is_some());
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
    fn lookups_by_search_and_by_map_agree_on_the_last_good_line() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let d1 = store.put_bytes(b"1").unwrap();
        let d2 = store.put_bytes(b"2").unwrap();
        let keys: Vec<Digest> = (0..40)
            .map(|i| Digest::of(format!("k{i}").as_bytes()))
            .collect();
        for k in &keys {
            store.put_action(k, &record("n", d1)).unwrap();
        }
        // Another process supersedes k0 (later log), then a damaged line for k1 and a torn one
        // for k2 follow in that log.
        let other = Store::open(dir.path()).unwrap();
        other.put_action(&keys[0], &record("n", d2)).unwrap();
        let log = other.logs().into_iter().last().unwrap();
        let mut f = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
        let mut bad = format_line(&keys[1], &record("n", d2)).unwrap();
        let n = bad.len();
        bad[n - 3] ^= 1;
        f.write_all(&bad).unwrap();
        let torn = format_line(&keys[2], &record("n", d2)).unwrap();
        f.write_all(&torn[..torn.len() - 1]).unwrap();
        // Within one log, a later line of a key supersedes an earlier one.
        let first = store.logs().into_iter().next().unwrap();
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&first)
            .unwrap();
        f.write_all(&format_line(&keys[3], &record("n", d2)).unwrap())
            .unwrap();
        // A digest that appears inside a line but not as its key is not a record of it.
        let inside = d1;
        let expect = |key: &Digest| -> Option<Digest> {
            if *key == keys[0] || *key == keys[3] {
                Some(d2)
            } else if keys.contains(key) {
                Some(d1)
            } else {
                None
            }
        };
        let fresh = Store::open(dir.path()).unwrap();
        // The first lookups search; after enough of them the map answers.
        for round in 0..3 {
            for k in keys.iter().chain([&inside, &Digest::of(b"absent")]) {
                let got = fresh.get_action(k).map(|r| r.outputs[0].digest);
                assert_eq!(got, expect(k), "round {round}");
            }
        }
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
