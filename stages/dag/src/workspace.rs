//! A workspace: the folder a pipeline is declared in, where its store lives, its own state,
//! and the lock that keeps two builds in it from interleaving.

use std::io::Read as _;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// The most of the lock file read ([`sky_fs::STATE`]).
const STATE_MAX: u64 = match sky_fs::STATE.max {
    Some(m) => m,
    None => u64::MAX,
};

use crate::error::{DagError, Result};
use crate::graph::Graph;
use crate::state::StatePaths;
use crate::store::Store;

/// Where things are for one workspace.
#[derive(Debug)]
pub struct Workspace {
    /// The workspace root: every spec path is relative to it.
    pub root: PathBuf,
    /// The store directory in use.
    pub store_dir: PathBuf,
    /// Workspace-private state.
    pub state: StatePaths,
}

/// Holds the workspace lock until dropped. The lock file holds the pid of the process that
/// holds it; a build that ends cleanly replaces it with `clean` and one line per folder it
/// found settled ([`WorkspaceLock::ended_cleanly`]), so the next build knows which folders
/// cannot hold a half-written file of its own.
///
/// A user who cannot write the state folder (`.skyctl` owned by another user, a read-only
/// mount) gets the lock read-only: shared, taken on the lock file opened for reading, nothing
/// written to it. Such a build serves what the state and the store hold (a no-op build, a
/// `verify` of what is built) and writes nothing; one that would have to run or restore a
/// node, or change the state, stops with [`WorkspaceLock::refuse`].
#[derive(Debug)]
pub struct WorkspaceLock {
    file: std::fs::File,
    /// The folders the last holder left settled: (ctime ns, inode) by workspace path; `None`
    /// when it did not end cleanly.
    settled: Option<std::collections::HashMap<String, (i64, u64)>>,
    /// The digest of the lock file's text as the last holder left it.
    left: crate::key::Digest,
    /// The folder this user cannot write, when the lock is read-only.
    read_only: Option<PathBuf>,
}

impl WorkspaceLock {
    /// Whether this build may write nothing to the workspace state (see [`WorkspaceLock`]).
    pub fn is_read_only(&self) -> bool {
        self.read_only.is_some()
    }

    /// The error for a read-only build that needs to write `needs` (words: "the outputs of
    /// node `x`"); `None` when the lock is not read-only.
    pub fn refuse(&self, needs: &str) -> Option<DagError> {
        let dir = self.read_only.as_ref()?;
        Some(DagError::ReadOnlyState {
            path: dir.clone(),
            owner: owner_of(dir),
            needs: needs.to_string(),
        })
    }

    /// Whether `rel` (a folder of the workspace `root`) is as the last build left it after it
    /// ended cleanly: a folder that gained an entry since (a temp file) has a newer ctime.
    /// `false` for a new workspace, a killed, failed or interrupted build, any other command
    /// that held the lock, or a folder it did not record.
    pub fn unchanged_since_clean_end(&self, root: &Path, rel: &str) -> bool {
        let Some(recorded) = self.settled.as_ref().and_then(|s| s.get(rel)) else {
            return false;
        };
        std::fs::metadata(root.join(rel)).is_ok_and(|md| {
            let st = crate::statcache::FileStat::of(&md);
            (st.ctime_ns, st.ino) == *recorded
        })
    }

    /// What the last clean end recorded of folder `rel`: (ctime ns, inode).
    pub fn settled_stamp(&self, rel: &str) -> Option<(i64, u64)> {
        self.settled.as_ref()?.get(rel).copied()
    }

    /// Whether the last holder of the lock was a build that ended cleanly.
    pub fn last_ended_cleanly(&self) -> bool {
        self.settled.is_some()
    }

    /// The digest of the lock file's text as the last holder left it.
    pub(crate) fn left_digest(&self) -> crate::key::Digest {
        self.left
    }

    /// Whether the last holder ended cleanly and every folder it recorded settled is
    /// unchanged.
    pub(crate) fn settled_unchanged(&self, root: &Path) -> bool {
        self.settled.as_ref().is_some_and(|s| {
            s.keys()
                .all(|rel| self.unchanged_since_clean_end(root, rel))
        })
    }

    /// Say this build ended cleanly (nothing it wrote is half done), recording which of
    /// `dirs` are settled: any later change gives them a newer ctime. That holds once the
    /// folder's ctime is out of the racy window ([`crate::statcache::is_racy`]); a folder
    /// changed within it is not recorded (the next build lists it) and is returned.
    /// `ours`: folders whose stamp only says that they hold no temp file of a build: recorded
    /// as they are, whatever the clock, since only a holder of this lock writes one there, and
    /// one that does not end cleanly leaves its pid in the lock file instead of the stamps.
    /// `kept`: folders known unchanged since the stamp recorded for them, recorded as they
    /// are without a `stat`. Returns the digest of the text written and the folders of `dirs`
    /// not recorded (`None`: nothing written).
    pub fn ended_cleanly<'d>(
        &self,
        root: &Path,
        ours: impl IntoIterator<Item = &'d str>,
        dirs: impl IntoIterator<Item = &'d str>,
        kept: impl IntoIterator<Item = (String, (i64, u64))>,
    ) -> Option<(crate::key::Digest, Vec<&'d str>)> {
        if self.is_read_only() {
            return None;
        }
        let now = crate::statcache::now_ns();
        let mut unrecorded = Vec::new();
        // Which holder left the text: no two clean ends leave the same text, so its digest
        // tells whether anything took the lock since (a proof checked before this build took
        // it relies on that: [`crate::noop`]). Not a folder line (the parse skips it).
        let wall = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let mut text = format!("clean\nholder {} {wall}\n", std::process::id());
        let any_time = ours.into_iter().map(|d| (d, true));
        for (d, ours) in any_time.chain(dirs.into_iter().map(|d| (d, false))) {
            let stamp = std::fs::metadata(root.join(d))
                .ok()
                .map(|md| crate::statcache::FileStat::of(&md))
                .filter(|st| {
                    !d.contains('\n') && (ours || !crate::statcache::is_racy(st.ctime_ns, now))
                });
            match stamp {
                Some(st) => text.push_str(&format!("{} {} {d}\n", st.ctime_ns, st.ino)),
                None if !ours => unrecorded.push(d),
                None => {}
            }
        }
        for (d, (ctime_ns, ino)) in kept {
            if !d.contains('\n') {
                text.push_str(&format!("{ctime_ns} {ino} {d}\n"));
            }
        }
        let _ = self.file.set_len(0);
        self.file.write_all_at(text.as_bytes(), 0).ok()?;
        Some((crate::key::Digest::of(text.as_bytes()), unrecorded))
    }
}

/// Who owns `dir`, in words: "root", "user alice" or "uid 1000".
fn owner_of(dir: &Path) -> String {
    use std::os::unix::fs::MetadataExt;
    let Ok(md) = std::fs::metadata(dir) else {
        return "another user".to_string();
    };
    let uid = md.uid();
    let name = sky_fs::read_to_string(Path::new("/etc/passwd"), sky_fs::TEXT)
        .ok()
        .and_then(|text| {
            text.lines().find_map(|l| {
                let mut f = l.split(':');
                let name = f.next()?;
                (f.nth(1)?.parse::<u32>().ok()? == uid).then(|| name.to_string())
            })
        });
    match name {
        Some(n) if uid == 0 => n,
        Some(n) => format!("user {n}"),
        None => format!("uid {uid}"),
    }
}

/// Whether this process can write `dir` (an existing folder).
fn writable(dir: &Path) -> bool {
    rustix::fs::access(
        dir,
        rustix::fs::Access::WRITE_OK | rustix::fs::Access::EXEC_OK,
    )
    .is_ok()
}

/// The text of the lock file, open already (it is what is locked): no more than a state file.
fn lock_text(file: &std::fs::File) -> String {
    let mut before = String::new();
    let _ = std::io::Read::read_to_string(&mut file.take(STATE_MAX), &mut before);
    before
}

/// The settled folders of a lock file written by [`WorkspaceLock::ended_cleanly`].
fn parse_settled(text: &str) -> Option<std::collections::HashMap<String, (i64, u64)>> {
    let mut lines = text.lines();
    if lines.next() != Some("clean") {
        return None;
    }
    let mut out = std::collections::HashMap::new();
    for line in lines {
        let mut parts = line.splitn(3, ' ');
        let (Some(c), Some(i), Some(d)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        if let (Ok(c), Ok(i)) = (c.parse(), i.parse()) {
            out.insert(d.to_string(), (c, i));
        }
    }
    Some(out)
}

impl Workspace {
    /// The workspace rooted at `root` (made absolute) with its store at `store_dir`.
    pub fn new(root: &Path, store_dir: &Path) -> Result<Workspace> {
        let root = std::path::absolute(root).map_err(|e| DagError::io("resolve", root, e))?;
        let store_dir =
            std::path::absolute(store_dir).map_err(|e| DagError::io("resolve", store_dir, e))?;
        let state = StatePaths::new(&root);
        Ok(Workspace {
            root,
            store_dir,
            state,
        })
    }

    /// Open the store.
    pub fn store(&self) -> Result<Store> {
        Store::open(&self.store_dir)
    }

    /// Take the workspace lock; `on_wait` is called once if another process holds it.
    pub fn lock(&self, on_wait: &mut dyn FnMut(&str)) -> Result<WorkspaceLock> {
        use rustix::fs::{flock, FlockOperation};
        let p = self.state.lock();
        if let Some(dot) = self.state.dir.parent() {
            crate::fsutil::must_be_folder(dot).map_err(|e| DagError::Store {
                path: dot.to_path_buf(),
                message: e.to_string(),
            })?;
        }
        // A state folder this user cannot write, or before the first build the nearest folder
        // that would hold it (`.skyctl`, or the workspace when there is none): the read-only
        // lock.
        let unwritable = self
            .state
            .dir
            .ancestors()
            .find(|d| d.is_dir())
            .filter(|d| !writable(d))
            .map(Path::to_path_buf);
        if let Some(dir) = unwritable {
            return self.lock_read_only(dir, on_wait);
        }
        // The state is a cache: a file (or symlink) where its folder belongs, or a directory
        // where its lock file belongs, is removed rather than leaving every command stuck.
        for (path, want_dir) in [(&self.state.dir, true), (&p, false)] {
            let misplaced = std::fs::symlink_metadata(path).is_ok_and(|m| {
                let t = m.file_type();
                if want_dir {
                    !t.is_dir()
                } else {
                    !t.is_file()
                }
            });
            if misplaced {
                crate::fsutil::remove_path(path).map_err(|e| DagError::io("remove", path, e))?;
            }
            if want_dir {
                std::fs::create_dir_all(path).map_err(|e| DagError::io("create", path, e))?;
            }
        }
        // Every entry of the state folder is a file: anything else in one's place (a FIFO
        // would block its reader, a directory its writer) is removed; it held nothing.
        if let Ok(entries) = std::fs::read_dir(&self.state.dir) {
            for e in entries.flatten() {
                if e.file_type().is_ok_and(|t| !t.is_file()) {
                    let path = e.path();
                    crate::fsutil::remove_path(&path)
                        .map_err(|err| DagError::io("remove", &path, err))?;
                }
            }
        }
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&p)
            .map_err(|e| DagError::io("open", &p, e))?;
        if flock(&file, FlockOperation::NonBlockingLockExclusive).is_err() {
            // Started by a node of the build that holds this lock: it is held until we end.
            if crate::interrupt::parent_build().as_deref() == Some(self.state.children().as_path())
            {
                return Err(DagError::InsideItsBuild {
                    what: "workspace",
                    path: self.root.clone(),
                });
            }
            let holder = sky_fs::read_to_string(&p, sky_fs::STATE).unwrap_or_default();
            let holder = holder.trim();
            let who = if holder.is_empty() || holder.parse::<u32>().is_err() {
                String::new()
            } else {
                format!(" (pid {holder})")
            };
            on_wait(&format!(
                "waiting for another skyctl build in this workspace{who} to finish..."
            ));
            flock(&file, FlockOperation::LockExclusive)
                .map_err(|e| DagError::io("lock", &p, e.into()))?;
        }
        let before = lock_text(&file);
        let settled = parse_settled(&before);
        let _ = file.set_len(0);
        let _ = file.write_all_at(std::process::id().to_string().as_bytes(), 0);
        // Whatever this holder does, the last build's no-op proof no longer stands.
        let proof = self.state.noop_proof();
        if let Err(e) = std::fs::remove_file(&proof) {
            if e.kind() != std::io::ErrorKind::NotFound {
                return Err(DagError::io("remove", &proof, e));
            }
        }
        Ok(WorkspaceLock {
            file,
            settled,
            left: crate::key::Digest::of(before.as_bytes()),
            read_only: None,
        })
    }

    /// The lock shared and at once, for a check that writes nothing to the workspace
    /// (the no-op proof's check): `None` when another build holds it or there is no
    /// lock file. The lock file is left as the last holder left it.
    pub(crate) fn try_lock_shared(&self) -> Option<WorkspaceLock> {
        use rustix::fs::{flock, FlockOperation};
        let file = sky_fs::open_nofollow(&self.state.lock(), sky_fs::STATE).ok()?;
        flock(&file, FlockOperation::NonBlockingLockShared).ok()?;
        let before = lock_text(&file);
        Some(WorkspaceLock {
            file,
            settled: parse_settled(&before),
            left: crate::key::Digest::of(before.as_bytes()),
            read_only: Some(self.state.dir.clone()),
        })
    }

    /// The lock of a user who cannot write `dir` (the state folder, or `.skyctl` when there is
    /// no state yet): shared, on the lock file opened for reading (or on the folder when
    /// there is no lock file), so it waits for a writer's build and lets other readers in.
    /// Nothing is removed, created or written.
    fn lock_read_only(&self, dir: PathBuf, on_wait: &mut dyn FnMut(&str)) -> Result<WorkspaceLock> {
        use rustix::fs::{flock, FlockOperation};
        let p = self.state.lock();
        let file = match sky_fs::open_nofollow(&p, sky_fs::STATE) {
            Ok(f) => f,
            Err(_) => std::fs::File::open(&dir).map_err(|e| DagError::io("open", &dir, e))?,
        };
        if flock(&file, FlockOperation::NonBlockingLockShared).is_err() {
            on_wait("waiting for another skyctl build in this workspace to finish...");
            flock(&file, FlockOperation::LockShared)
                .map_err(|e| DagError::io("lock", &p, e.into()))?;
        }
        let before = lock_text(&file);
        Ok(WorkspaceLock {
            file,
            settled: parse_settled(&before),
            left: crate::key::Digest::of(before.as_bytes()),
            read_only: Some(dir),
        })
    }
}

/// What [`Workspace::clean`] did.
#[derive(Debug, Default)]
pub struct Cleaned {
    /// How many paths it removed.
    pub removed: usize,
    /// The paths it left, each with why: they hold what skyctl did not make.
    pub left: Vec<(String, String)>,
}

impl Workspace {
    /// Remove the declared outputs and the release tree from the workspace (the store keeps
    /// them; the next build restores them without running anything). Only what the engine
    /// made goes: an output the last build recorded, that a failed run or a killed build
    /// wrote, or a file whose content the store holds (an empty folder too); the release tree
    /// when [`crate::release::check_ours`] says it is one the engine wrote. Anything else is
    /// left, and listed.
    pub fn clean(&self, graph: &Graph) -> Result<Cleaned> {
        let last = crate::state::LastBuild::load(&self.state);
        let journaled = crate::state::Journal::new(self.state.journal()).read();
        // Not created here when there is none: then nothing is content of the store.
        let store = if self
            .store_dir
            .join(crate::store::STORE_VERSION_DIR)
            .is_dir()
        {
            Some(self.store()?)
        } else {
            None
        };
        let recorded: std::collections::HashSet<&str> = last
            .nodes
            .values()
            .flat_map(|st| st.outputs.iter().map(|o| o.path.as_str()))
            .collect();
        let in_store = |abs: &Path| {
            store
                .as_ref()
                .is_some_and(|s| crate::statcache::hash_file(abs).is_ok_and(|d| s.has_blob(&d)))
        };
        let mut done = Cleaned::default();
        for rel in graph
            .nodes
            .iter()
            .flat_map(|n| n.outputs.iter().map(|o| o.path.as_str()))
        {
            let abs = self.root.join(rel);
            let Ok(md) = std::fs::symlink_metadata(&abs) else {
                continue;
            };
            if let Some((link, _)) = crate::graph::symlink_on_path(&self.root, rel, false) {
                done.left
                    .push((rel.to_string(), format!("`{link}` is a symlink")));
                continue;
            }
            let ours = recorded.contains(rel)
                || last.made.contains(rel)
                || journaled.contains(rel)
                || (md.is_file() && in_store(&abs))
                || (md.is_dir() && std::fs::read_dir(&abs).is_ok_and(|mut d| d.next().is_none()));
            if !ours {
                done.left
                    .push((rel.to_string(), "not made by skyctl".to_string()));
                continue;
            }
            crate::fsutil::remove_path(&abs).map_err(|e| DagError::io("remove", &abs, e))?;
            done.removed += 1;
        }
        let release = &graph.release_dir;
        let abs = self.root.join(release);
        if !release.is_empty() && std::fs::symlink_metadata(&abs).is_ok() {
            let ours = match &store {
                Some(s) => crate::release::check_ours(s, &self.root, release, &last),
                None if last.release_dir.as_deref() == Some(release.as_str()) => Ok(()),
                None => Err(crate::release::NotOurs::Unrecorded),
            };
            match ours {
                Ok(()) => {
                    crate::fsutil::remove_path(&abs)
                        .map_err(|e| DagError::io("remove", &abs, e))?;
                    done.removed += 1;
                }
                Err(why) => done.left.push((release.clone(), why.to_string())),
            }
        }
        Ok(done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_two_clean_ends_leave_the_same_lock_text() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::new(dir.path(), &dir.path().join(".skyctl")).unwrap();
        std::fs::create_dir_all(dir.path().join("out")).unwrap();
        let lock = |ws: &Workspace| ws.lock(&mut |_| {}).unwrap();
        let l = lock(&ws);
        let (first, _) = l.ended_cleanly(&ws.root, ["out"], [], []).unwrap();
        drop(l);
        // The same folders, as they were: another holder's text all the same.
        let l = lock(&ws);
        assert_eq!(l.left_digest(), first);
        assert!(l.unchanged_since_clean_end(&ws.root, "out"));
        let (second, _) = l.ended_cleanly(&ws.root, ["out"], [], []).unwrap();
        drop(l);
        assert_ne!(first, second);
        assert_eq!(lock(&ws).left_digest(), second);
    }

    #[test]
    fn a_folder_is_vouched_for_only_as_a_clean_end_left_it() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::new(dir.path(), &dir.path().join(".store")).unwrap();
        std::fs::create_dir_all(dir.path().join("out")).unwrap();
        let lock = |ws: &Workspace| ws.lock(&mut |_| {}).unwrap();
        // A new workspace: nothing vouched for.
        let l = lock(&ws);
        assert!(!l.unchanged_since_clean_end(&ws.root, "out"));
        // Just made: within the racy window, so not recorded (and said so).
        let (_, unrecorded) = l.ended_cleanly(&ws.root, [], ["out"], []).unwrap();
        assert_eq!(unrecorded, ["out"]);
        drop(l);
        let l = lock(&ws);
        assert!(!l.unchanged_since_clean_end(&ws.root, "out"));
        // Past the racy window, it is recorded.
        std::thread::sleep(std::time::Duration::from_millis(60));
        let (_, unrecorded) = l
            .ended_cleanly(&ws.root, [], ["out", "missing", "odd\nname"], [])
            .unwrap();
        assert_eq!(unrecorded, ["missing", "odd\nname"]);
        drop(l);
        let l = lock(&ws);
        assert!(l.unchanged_since_clean_end(&ws.root, "out"));
        assert!(!l.unchanged_since_clean_end(&ws.root, "missing"));
        // A file appears: the folder is listed again.
        std::fs::write(dir.path().join("out/.skyctl-tmp-x"), "half").unwrap();
        assert!(!l.unchanged_since_clean_end(&ws.root, "out"));
        // A folder only this workspace's builds write temp files into is vouched for even
        // when it changed within the current tick.
        std::fs::create_dir_all(dir.path().join("ours")).unwrap();
        l.ended_cleanly(&ws.root, ["ours"], [], []);
        drop(l);
        let l = lock(&ws);
        assert!(l.unchanged_since_clean_end(&ws.root, "ours"));
        std::thread::sleep(std::time::Duration::from_millis(60));
        l.ended_cleanly(&ws.root, [], ["out"], []);
        drop(l);
        // A holder that did not end cleanly (killed: its pid stays) vouches for nothing.
        let l = lock(&ws);
        drop(l);
        let l = lock(&ws);
        assert!(!l.unchanged_since_clean_end(&ws.root, "out"));
        assert_eq!(parse_settled("123"), None);
        assert_eq!(
            parse_settled("clean\nbad line\n1 2 a b\n").map(|m| m.len()),
            Some(1)
        );
    }
}
