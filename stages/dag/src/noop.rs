//! The no-op proof: a full build that ended cleanly leaves, beside the workspace state, every
//! path its dirty check looked at and what it found there, so that the next plain `build`
//! can tell "nothing changed" with one `lstat` per path, without decoding the graph, the last
//! build's record or computing a key.
//!
//! What a path can have been:
//! - a file whose content was hashed (or vouched for by the stat cache): its `lstat` fields
//!   ([`FileStat`]). A file modified within the stat cache's racy window
//!   ([`crate::statcache`]) when it was looked at may change again without a new stat: its
//!   digest is kept too and the check hashes it again, until its stat is old enough; then the
//!   check marks it settled, by the stat cache's own rule;
//! - a folder whose entries were listed (a source folder, a glob's walk, the release tree):
//!   its inode, mtime and ctime; any entry added, removed or renamed gives it new ones. A
//!   folder changed within the racy window cannot vouch yet: no proof is written;
//! - a folder on the way to one of the paths above: still a folder, the same inode (a folder
//!   swapped for a symlink, or for another folder, is a change);
//! - nothing (a glob's folder that does not exist);
//! - a state file (the last build's record, the failures, the store's id): exactly its stat;
//! - a blob of a recorded output in a blob folder the lock file does not record settled (one
//!   the build changed within the racy window, or did not see whole): exactly its stat.
//!
//! Besides the paths, the proof holds the front end's key (the compiled graph's: the
//! manifest, the binary, the workspace, the declared variables are the front end's to check)
//! and the digest of the lock file as the build that wrote the proof left it. Every command
//! that takes the workspace lock to change anything deletes the proof first
//! ([`crate::workspace::Workspace::lock`]); the lock file also records the folders that build
//! found settled (the store's blob folders among them), and the check compares each.
//!
//! The check answers only for a build of everything, without `--rerun`, a remote cache or
//! another executor: the proof is written only by such a build in which no node failed or was
//! skipped, and the front end asks only for such a build.
//!
//! Format (`.skyctl/state-v1/noop-proof`, written atomically): a [`crate::codec`] frame
//! (`SKYNOOP2`) around: the front end's key, the lock digest, the node count, the release
//! folder (optional string), then parts, each length-prefixed: an entry count and the entries
//! (path, tag, fields). The paths the build looked at come first, in the order it looked (its
//! sources before its outputs), split in parts that threads check side by side; the state
//! files are the last part.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use crate::codec::{frame, unframe, Reader, Writer};
use crate::key::Digest;
use crate::statcache::{now_ns, FileStat};
use crate::witness::{decode_entry, encode_part, racy, Seen, Witness};
use crate::workspace::Workspace;

const MAGIC: &[u8; 8] = b"SKYNOOP2";

/// The proof's head: the front end's key, the lock digest, the node count, the release folder.
fn encode_head(key: &Digest, lock: &Digest, nodes: usize, release_dir: Option<&str>) -> Writer {
    let mut w = Writer::default();
    w.digest(key);
    w.digest(lock);
    w.len(nodes);
    w.opt_str(release_dir);
    w
}

/// A proof as read: its parts are still encoded.
#[derive(Debug, PartialEq)]
struct Proof<'b> {
    key: Digest,
    lock: Digest,
    nodes: usize,
    release_dir: Option<&'b str>,
    parts: Vec<&'b [u8]>,
}

impl<'b> Proof<'b> {
    /// The head and parts of `bytes`, its digest not checked yet ([`crate::codec::frame_body`]):
    /// a damaged proof can only fail the check sooner, and one that passes is checked whole
    /// before it answers.
    fn decode(bytes: &'b [u8]) -> Option<Proof<'b>> {
        let mut r = Reader::new(crate::codec::frame_body(MAGIC, bytes)?);
        let key = r.digest()?;
        let lock = r.digest()?;
        let nodes = r.index()?;
        let release_dir = r.opt_str()?;
        let mut parts = Vec::new();
        while !r.is_empty() {
            parts.push(r.bytes()?);
        }
        Some(Proof {
            key,
            lock,
            nodes,
            release_dir,
            parts,
        })
    }

    /// Every entry, in order; `None` when a part is damaged.
    fn entries(&self) -> Option<Vec<Vec<(&'b str, Seen)>>> {
        self.parts
            .iter()
            .map(|part| {
                let mut r = Reader::new(part);
                let n = r.count(5)?;
                let mut out = Vec::with_capacity(n);
                for _ in 0..n {
                    out.push(decode_entry(&mut r)?);
                }
                r.is_empty().then_some(out)
            })
            .collect()
    }

    fn encode(&self, parts: &[Vec<(&str, Seen)>]) -> Vec<u8> {
        let mut w = encode_head(&self.key, &self.lock, self.nodes, self.release_dir);
        for part in parts {
            encode_part(&mut w, part.iter().map(|(p, s)| (*p, *s)));
        }
        frame(MAGIC, &w.buf)
    }
}

/// What a full build that may leave a proof hands over to its clean end: the proof so far,
/// with room for the frame and the lock digest.
pub(crate) struct Draft {
    w: Writer,
}

/// Where the lock digest is in a draft: after the frame's room and the key.
const LOCK_AT: usize = crate::codec::FRAME_HEADER + 32;

impl Draft {
    /// The draft of a build of `nodes` nodes under the front end's `key`, which published
    /// `release_dir`; `None` when the witness is spoiled.
    pub(crate) fn new(
        key: Digest,
        witness: Witness<'_>,
        root: &Path,
        nodes: usize,
        release_dir: Option<String>,
    ) -> Option<Draft> {
        let mut w = Writer::default();
        w.buf.resize(crate::codec::FRAME_HEADER, 0);
        let head = encode_head(&key, &Digest([0; 32]), nodes, release_dir.as_deref());
        w.buf.extend_from_slice(&head.buf);
        witness.finish(root, &mut w).then_some(Draft { w })
    }
}

/// Write the proof of `draft` for the workspace whose lock file now holds text with digest
/// `lock`, with the state files as they are now, and `blobs` (those in blob folders the lock
/// file does not record settled) as they are now. Best effort: it is only a shortcut, and
/// without it a build checks everything.
pub(crate) fn write(
    ws: &Workspace,
    store_id: &Path,
    draft: Draft,
    lock: Digest,
    blobs: &[std::path::PathBuf],
) {
    let mut state = Vec::new();
    let paths = [
        ws.state.last_build(),
        ws.state.last_build_log(),
        ws.state.failures(),
        store_id.to_path_buf(),
    ];
    for (path, blob) in paths
        .iter()
        .map(|p| (p, false))
        .chain(blobs.iter().map(|p| (p, true)))
    {
        let seen = match std::fs::symlink_metadata(path) {
            Ok(md) if md.is_file() => Seen::Exact(FileStat::of(&md)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !blob => Seen::Missing,
            _ => return,
        };
        let Some(path) = path.to_str() else {
            return;
        };
        state.push((path, seen));
    }
    let mut w = draft.w;
    w.buf[LOCK_AT..LOCK_AT + 32].copy_from_slice(&lock.0);
    encode_part(&mut w, state.iter().map(|(p, s)| (*p, *s)));
    crate::codec::frame_in_place(MAGIC, &mut w.buf);
    let _ = sky_fs::write_cache(&ws.state.noop_proof(), &w.buf);
}

/// How one entry compares with the disk now.
enum Check {
    Same,
    /// The same, and a file not settled before now is.
    Settled,
    /// A workspace file that is still a regular file, with another stat or content: an edit
    /// the build can follow to the nodes it leads to ([`Edited`]).
    Edited,
    /// Anything else (a state file, a folder, a path that appeared, went or changed kind).
    Changed,
}

/// How a part's paths are `lstat`ed: relative to the workspace folder, except that a run of
/// paths in one folder is looked up in that folder, opened once (the kernel then walks one
/// name per path, not the whole path; most outputs share a folder).
struct Lookup<'f, 'b> {
    root: &'f std::os::fd::OwnedFd,
    /// The folder of the path before.
    last: Option<&'b str>,
    /// The folder opened for the run of paths in it.
    open: Option<(&'b str, std::os::fd::OwnedFd)>,
    /// A folder that could not be opened (a symlink, say): not tried again in this run.
    unopened: Option<&'b str>,
}

impl<'f, 'b> Lookup<'f, 'b> {
    fn new(root: &'f std::os::fd::OwnedFd) -> Lookup<'f, 'b> {
        Lookup {
            root,
            last: None,
            open: None,
            unopened: None,
        }
    }

    /// `lstat` of `path`: absolute (a state file), or relative to the workspace folder.
    fn lstat(&mut self, path: &'b str) -> rustix::io::Result<rustix::fs::Stat> {
        use rustix::fs::{AtFlags, OFlags};
        let nofollow = AtFlags::SYMLINK_NOFOLLOW;
        if path.starts_with('/') {
            return rustix::fs::lstat(path);
        }
        let Some((folder, name)) = path.rsplit_once('/') else {
            // "": the workspace folder itself (a glob walked from the top).
            let rel = if path.is_empty() { "." } else { path };
            return rustix::fs::statat(self.root, rel, nofollow);
        };
        if let Some((open, fd)) = &self.open {
            if *open == folder {
                return rustix::fs::statat(fd, name, nofollow);
            }
        }
        // The second path in a row in this folder opens it. Not through a symlink at its end
        // (the path's own lookup follows one there: it stands as before).
        if self.last == Some(folder) && self.unopened != Some(folder) {
            let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
            match rustix::fs::openat(self.root, folder, flags, rustix::fs::Mode::empty()) {
                Ok(fd) => {
                    let st = rustix::fs::statat(&fd, name, nofollow);
                    self.open = Some((folder, fd));
                    return st;
                }
                Err(_) => self.unopened = Some(folder),
            }
        }
        self.last = Some(folder);
        rustix::fs::statat(self.root, path, nofollow)
    }
}

fn check<'b>(lookup: &mut Lookup<'_, 'b>, root: &Path, path: &'b str, seen: &Seen) -> Check {
    use rustix::fs::FileType;
    let st = lookup.lstat(path);
    let st = match (st, seen) {
        (Err(rustix::io::Errno::NOENT), Seen::Missing) => return Check::Same,
        (Err(_), _) | (Ok(_), Seen::Missing) => return Check::Changed,
        (Ok(st), _) => st,
    };
    let ft = FileType::from_raw_mode(st.st_mode);
    let now = FileStat::of_stat(&st);
    // A file of the workspace (state files are absolute) that is still a regular file.
    let edited = if ft == FileType::RegularFile && !path.starts_with('/') {
        Check::Edited
    } else {
        Check::Changed
    };
    let same = match *seen {
        Seen::Exact(st) => ft == FileType::RegularFile && now == st,
        Seen::Settled(st) => {
            if now != st {
                return edited;
            }
            ft == FileType::RegularFile
        }
        Seen::Fresh(st, digest) => {
            if ft != FileType::RegularFile {
                return Check::Changed;
            }
            if now != st {
                return edited;
            }
            // Hashed after the stat: a change after it gives a new stat once the stat is out
            // of the racy window (then it is settled for good).
            let looked = now_ns();
            if crate::statcache::hash_file(&root.join(path)).ok() != Some(digest) {
                return edited;
            }
            return if racy(&st, looked) {
                Check::Same
            } else {
                Check::Settled
            };
        }
        Seen::Listed {
            ino,
            mtime_ns,
            ctime_ns,
        } => {
            ft == FileType::Directory
                && (now.ino, now.mtime_ns, now.ctime_ns) == (ino, mtime_ns, ctime_ns)
        }
        Seen::Folder { ino } => ft == FileType::Directory && now.ino == ino,
        Seen::Missing => false,
    };
    if same {
        Check::Same
    } else {
        Check::Changed
    }
}

/// The most edited files a check follows: past them it gives up (the build then looks at
/// everything, as it would without a proof).
const MAX_EDITED: usize = 1024;

/// What the part checks found, shared between their threads.
struct Found<'b> {
    /// Set on a change no file edit explains (or too many edits): the check can only fail.
    stop: AtomicBool,
    /// The files found edited so far.
    edited: std::sync::Mutex<Vec<&'b str>>,
}

impl<'b> Found<'b> {
    fn new() -> Found<'b> {
        Found {
            stop: AtomicBool::new(false),
            edited: std::sync::Mutex::new(Vec::new()),
        }
    }

    /// Note edited file `path`; `false` when that is one too many.
    fn edited(&self, path: &'b str) -> bool {
        let mut edited = self.edited.lock().unwrap_or_else(|p| p.into_inner());
        edited.push(path);
        edited.len() <= MAX_EDITED
    }
}

/// One encoded part being compared with the disk, entry by entry.
struct PartCheck<'b> {
    r: Reader<'b>,
    left: usize,
    /// A file hashed again is settled now.
    settled: bool,
}

impl<'b> PartCheck<'b> {
    /// `None` when the part is damaged.
    fn new(part: &'b [u8]) -> Option<PartCheck<'b>> {
        let mut r = Reader::new(part);
        let left = r.count(5)?;
        Some(PartCheck {
            r,
            left,
            settled: false,
        })
    }

    /// Compare up to `limit` more entries, noting edited files in `found`, until its `stop`
    /// is set (here or by another part's check); `false` then, or on damage.
    fn run(
        &mut self,
        fd: &std::os::fd::OwnedFd,
        root: &Path,
        limit: usize,
        found: &Found<'b>,
    ) -> bool {
        let mut lookup = Lookup::new(fd);
        for _ in 0..limit.min(self.left) {
            if found.stop.load(Ordering::Relaxed) {
                return false;
            }
            self.left -= 1;
            let entry = decode_entry(&mut self.r);
            let verdict = entry.map(|(p, seen)| (p, check(&mut lookup, root, p, &seen)));
            let go_on = match verdict {
                Some((_, Check::Same)) => true,
                Some((_, Check::Settled)) => {
                    self.settled = true;
                    true
                }
                Some((path, Check::Edited)) => found.edited(path),
                Some((_, Check::Changed)) | None => false,
            };
            if !go_on {
                found.stop.store(true, Ordering::Relaxed);
                return false;
            }
        }
        true
    }
}

/// [`PartCheck`] of a whole part: `Some(any file settled now)`, `None` on a change that is
/// not an edit.
fn check_part<'b>(
    fd: &std::os::fd::OwnedFd,
    root: &Path,
    part: &'b [u8],
    found: &Found<'b>,
) -> Option<bool> {
    let mut c = PartCheck::new(part)?;
    c.run(fd, root, usize::MAX, found).then_some(c.settled)
}

/// Entries of the first part compared before any other thread starts: the sources come
/// first, and a build after an edit should not pay for threads.
const FIRST_ALONE: usize = 64;

/// What [`check_parts`] found when nothing but files' contents changed.
struct Looked<'b> {
    /// A file hashed again is settled now.
    settled: bool,
    /// The files edited (empty: the proof holds).
    edited: Vec<&'b str>,
}

/// Compare every part with the disk, the first on this thread, each other on one of its own,
/// all stopping at the first change that is not a file's edit; `None` on such a change.
fn check_parts<'b>(root: &Path, parts: &[&'b [u8]]) -> Option<Looked<'b>> {
    let root_fd = rustix::fs::open(
        root,
        rustix::fs::OFlags::PATH | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .ok()?;
    let found = Found::new();
    let (first, others) = parts.split_first()?;
    let mut head = PartCheck::new(first)?;
    if !head.run(&root_fd, root, FIRST_ALONE, &found) {
        return None;
    }
    let parallel = std::thread::available_parallelism().is_ok_and(|n| n.get() > 1);
    let settled = std::thread::scope(|scope| {
        let spawned: Vec<_> = others
            .iter()
            .map(|part| {
                let job = || check_part(&root_fd, root, part, &found);
                (
                    part,
                    parallel.then(|| std::thread::Builder::new().spawn_scoped(scope, job)),
                )
            })
            .collect();
        let mut settled = head
            .run(&root_fd, root, usize::MAX, &found)
            .then_some(head.settled);
        for (part, handle) in spawned {
            // No thread (one core, or the system refused one): this thread takes the part.
            let part_settled = match handle {
                Some(Ok(h)) => h.join().ok().flatten(),
                _ => check_part(&root_fd, root, part, &found),
            };
            settled = match (settled, part_settled) {
                (Some(a), Some(b)) => Some(a || b),
                _ => None,
            };
        }
        settled
    })?;
    let edited = found.edited.into_inner().unwrap_or_else(|p| p.into_inner());
    Some(Looked { settled, edited })
}

/// What a proof that holds says of the build it stands for ([`crate::report::Summary`] has
/// `From` it): every node cached.
#[derive(Debug)]
pub struct Proved {
    /// The nodes a plain build selects, all cached.
    pub nodes: usize,
    /// The release folder the last build published (`None`: the graph publishes nothing).
    pub release_dir: Option<String>,
    /// How long the check took.
    pub seconds: f64,
}

/// A proof that held for every path but a few workspace files, each still a regular file
/// with another stat or content (edited sources, say). The build of the graph it was written
/// under need only look at the nodes those files lead to: the proof vouches for every other
/// node's inputs and outputs, and the last build's record holds their keys
/// ([`crate::builder::BuildOptions::edited`]).
#[derive(Debug)]
pub struct Edited {
    key: Digest,
    lock: Digest,
    /// The files, workspace-relative, sorted.
    paths: Vec<String>,
    /// The proof: the next one carries over its entries for what the build does not look at.
    bytes: crate::codec::FileBytes,
}

impl Edited {
    /// The edited files, workspace-relative.
    pub fn paths(&self) -> &[String] {
        &self.paths
    }

    /// Whether an edited file is `rel`, or lies inside folder `rel` (`""`: the workspace).
    pub fn touches(&self, rel: &str) -> bool {
        if rel.is_empty() {
            return !self.paths.is_empty();
        }
        // Sorted: the paths that start with `rel` follow one another from the first at or
        // after it (`rel` itself, then `rel-x`, `rel.x`, then `rel/...`).
        let from = self.paths.partition_point(|p| p.as_str() < rel);
        self.paths[from..]
            .iter()
            .take_while(|p| p.starts_with(rel))
            .any(|p| p.len() == rel.len() || p.as_bytes()[rel.len()] == b'/')
    }

    /// Whether the proof still vouches for every declared output of `graph`: no edited file
    /// is one, or lies inside one (a damaged output is the usual build's to find).
    pub fn vouches_for_outputs(&self, graph: &crate::graph::Graph) -> bool {
        let outputs = graph.nodes.iter().flat_map(|n| &n.outputs);
        outputs.into_iter().all(|o| !self.touches(&o.path))
    }

    /// Whether the proof was written under `key` and the lock file is still as its build
    /// left it (`left`: its digest when the build took the lock).
    pub(crate) fn stands(&self, key: Option<&Digest>, left: &Digest) -> bool {
        key == Some(&self.key) && *left == self.lock
    }

    /// The proof's entries for the paths of the workspace, to carry over into the next
    /// proof for what the build does not look at again, less the edited files; `None` when
    /// the proof cannot be read again.
    pub(crate) fn carried(&self) -> Option<crate::witness::Carried<'_>> {
        let mut parts = Proof::decode(&self.bytes)?.parts;
        // The last part is the state files', written anew with each proof.
        parts.pop()?;
        Some(crate::witness::Carried {
            parts,
            dropped: self.paths.iter().map(String::as_str).collect(),
        })
    }
}

/// What a plain full build of `ws` would report when its proof, written under `key`, still
/// holds: every path as the build that wrote it found it, the lock file as it left it and
/// the folders it recorded settled unchanged. `Err(Some)`: the proof held but for edited
/// files; `Err(None)`: the build must run the usual way (no proof, another key, any other
/// change, or another build holds the lock).
pub fn check_noop(ws: &Workspace, key: &Digest) -> Result<Proved, Option<Edited>> {
    let t0 = Instant::now();
    let path = ws.state.noop_proof();
    let bytes = crate::codec::FileBytes::read(&path).map_err(|_| None)?;
    let proof = Proof::decode(&bytes).ok_or(None)?;
    if proof.key != *key {
        return Err(None);
    }
    // Held while the paths are compared: no build of this workspace changes them meanwhile.
    let lock = ws.try_lock_shared().ok_or(None)?;
    if lock.left_digest() != proof.lock {
        return Err(None);
    }
    crate::timings::mark("no-op proof read");
    let looked = check_parts(&ws.root, &proof.parts).ok_or(None)?;
    if unframe(MAGIC, &bytes).is_none() {
        return Err(None);
    }
    // The settled folders are the build's to look at after an edit: it sweeps the output
    // folders that changed, and takes the proof only while the blob folders are unchanged
    // ([`crate::builder::BuildOptions::edited`]).
    if !looked.edited.is_empty() {
        crate::timings::mark("no-op proof: edited files");
        let mut paths: Vec<String> = looked.edited.iter().map(|p| p.to_string()).collect();
        paths.sort_unstable();
        paths.dedup();
        let lock = proof.lock;
        drop(proof);
        return Err(Some(Edited {
            key: *key,
            lock,
            paths,
            bytes,
        }));
    }
    if !lock.settled_unchanged(&ws.root) {
        return Err(None);
    }
    crate::timings::mark("no-op proof checked");
    if looked.settled {
        // Files hashed again and now out of the racy window: the next check need not hash them.
        let now = now_ns();
        if let Some(mut parts) = proof.entries() {
            for (_, seen) in parts.iter_mut().flatten() {
                if let Seen::Fresh(st, _) = *seen {
                    if !racy(&st, now) {
                        *seen = Seen::Settled(st);
                    }
                }
            }
            let _ = sky_fs::write_cache(&path, &proof.encode(&parts));
        }
    }
    drop(lock);
    Ok(Proved {
        nodes: proof.nodes,
        release_dir: proof.release_dir.map(str::to_string),
        seconds: t0.elapsed().as_secs_f64(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_of_paths_in_one_folder_is_looked_up_there_with_the_same_answers() {
        use rustix::fs::{AtFlags, Mode, OFlags};
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("d/e")).unwrap();
        for f in ["d/a", "d/b", "d/e/c", "top"] {
            std::fs::write(root.join(f), f).unwrap();
        }
        std::os::unix::fs::symlink("d", root.join("l")).unwrap();
        std::os::unix::fs::symlink("a", root.join("d/link")).unwrap();
        let fd = rustix::fs::open(root, OFlags::PATH | OFlags::DIRECTORY, Mode::empty()).unwrap();
        let paths = [
            "d/a", "d/b", "d/link", "d/none", "d/e/c", "d/e/c", "l/a", "l/b", "l/none", "gone/x",
            "gone/y", "top", "", "d/a",
        ];
        let answer = |st: rustix::io::Result<rustix::fs::Stat>| match st {
            Ok(st) => Ok((st.st_ino, st.st_mode)),
            Err(e) => Err(e),
        };
        let mut lookup = Lookup::new(&fd);
        for p in paths {
            let rel = if p.is_empty() { "." } else { p };
            let expected = rustix::fs::statat(&fd, rel, AtFlags::SYMLINK_NOFOLLOW);
            assert_eq!(answer(lookup.lstat(p)), answer(expected), "{p}");
        }
        // The last run looked up in its folder was `d/e`'s; the symlink `l` was not opened as
        // a folder (its paths' lookups follow it, as a whole path's does).
        assert!(lookup.open.as_ref().is_some_and(|(f, _)| *f == "d/e"));
        assert_eq!(lookup.unopened, Some("gone"));
    }

    #[test]
    fn an_edited_file_touches_itself_and_the_folders_it_lies_in() {
        let edited = |paths: &[&str]| Edited {
            key: Digest::of(b"k"),
            lock: Digest::of(b"l"),
            paths: paths.iter().map(|p| p.to_string()).collect(),
            bytes: crate::codec::FileBytes::Owned(Vec::new()),
        };
        // Sorted as `check_noop` leaves them: `a-b/c` and `a.txt` sort between `a` and `a/`.
        let e = edited(&["a-b/c", "a.txt", "a/b.txt", "dir/x/y.txt", "top.txt"]);
        for rel in [
            "",
            "a",
            "a-b",
            "a.txt",
            "a/b.txt",
            "dir",
            "dir/x",
            "dir/x/y.txt",
            "top.txt",
        ] {
            assert!(e.touches(rel), "{rel}");
        }
        for rel in [
            "a/b",
            "a/b.txt/c",
            "di",
            "dir/x/y",
            "dir/y",
            "top",
            "z",
            "a-b/c/d",
        ] {
            assert!(!e.touches(rel), "{rel}");
        }
        assert!(!edited(&[]).touches(""));
    }

    #[test]
    fn proofs_round_trip_and_damage_is_refused() {
        let st = FileStat {
            size: 3,
            mtime_ns: -5,
            ctime_ns: 7,
            ino: 9,
            exec: true,
        };
        let entries = vec![
            ("a", Seen::Fresh(st, Digest::of(b"a"))),
            ("b", Seen::Settled(st)),
            (
                "c",
                Seen::Listed {
                    ino: 1,
                    mtime_ns: 2,
                    ctime_ns: 3,
                },
            ),
            ("d", Seen::Folder { ino: 8 }),
            ("e", Seen::Missing),
        ];
        let state = vec![("/f", Seen::Exact(st))];
        let head = Proof {
            key: Digest::of(b"k"),
            lock: Digest::of(b"l"),
            nodes: 4,
            release_dir: Some("dist"),
            parts: Vec::new(),
        };
        let parts = vec![entries, state];
        let b = head.encode(&parts);
        let back = Proof::decode(&b).unwrap();
        assert_eq!(
            (back.key, back.lock, back.nodes, back.release_dir),
            (head.key, head.lock, 4, Some("dist"))
        );
        assert_eq!(back.entries(), Some(parts));
        for cut in 0..b.len() {
            let damaged = Proof::decode(&b[..cut]).and_then(|p| p.entries());
            assert_eq!(damaged, None, "cut at {cut}");
        }
    }
}
