//! The stat cache: (path, size, mtime_ns, ctime_ns, inode) -> digest, so that a no-op build
//! hashes nothing. The ctime is what git and Bazel add to the mtime: `touch -d` can put an
//! mtime back after an edit (through a hard link between a workspace output and its blob, say),
//! but no one can set a ctime, so such an edit is still seen and re-hashed.
//!
//! Racy files: a file's mtime only has the granularity of the clock that stamps it (a kernel
//! tick on Linux file systems with nanosecond fields, one or two seconds elsewhere). A file
//! modified within that window after we hashed it may keep the same size and mtime. So an entry
//! is only *recorded* when the file's mtime is out of the racy window ([`is_racy`]) at the moment we
//! stat it; a fresher file is re-hashed next time, when it is no longer fresh. We also stat
//! before and after hashing and record nothing when the two differ.
//!
//! A build writes the cache only when it is worth it ([`StatCache::save_if_worth`]): entries it
//! dropped because their file changed need no write (their stat is no longer the file's), and a
//! few small files cost less to hash again than the whole cache costs to rewrite.
//!
//! Format (`.skyctl/state-v1/statcache`, one read, written atomically): a
//! [`crate::codec`] frame (`SKYSTAT3`, body length, blake3 of the body) around: u64 count,
//! then per entry: u64 path length, path bytes (workspace-relative), u64 size, i64 mtime_ns,
//! i64 ctime_ns, u64 inode, 32-byte digest. All little-endian. A cache of another format, or
//! one that is truncated or damaged, is ignored (everything is hashed once more).

use std::collections::HashMap;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::key::Digest;

const MAGIC: &[u8; 8] = b"SKYSTAT3";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Entry {
    size: u64,
    mtime_ns: i64,
    ctime_ns: i64,
    ino: u64,
    digest: Digest,
}

/// What `stat` says about a file, in the fields the cache compares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileStat {
    /// Size in bytes.
    pub size: u64,
    /// Modification time, nanoseconds since the epoch.
    pub mtime_ns: i64,
    /// Status-change time, nanoseconds since the epoch.
    pub ctime_ns: i64,
    /// Inode number.
    pub ino: u64,
    /// Executable bit (any of the three x bits).
    pub exec: bool,
}

impl FileStat {
    /// From metadata.
    pub fn of(md: &std::fs::Metadata) -> FileStat {
        FileStat {
            size: md.len(),
            mtime_ns: md
                .mtime()
                .saturating_mul(1_000_000_000)
                .saturating_add(md.mtime_nsec()),
            ctime_ns: md
                .ctime()
                .saturating_mul(1_000_000_000)
                .saturating_add(md.ctime_nsec()),
            ino: md.ino(),
            exec: md.mode() & 0o111 != 0,
        }
    }

    /// From an `fstatat` result: the same fields as [`FileStat::of`] takes from metadata.
    // The `stat` fields' integer types differ between platforms.
    #[allow(clippy::unnecessary_cast)]
    pub fn of_stat(st: &rustix::fs::Stat) -> FileStat {
        let ns = |s: i64, n: i64| s.saturating_mul(1_000_000_000).saturating_add(n);
        FileStat {
            size: st.st_size as u64,
            mtime_ns: ns(st.st_mtime as i64, st.st_mtime_nsec as i64),
            ctime_ns: ns(st.st_ctime as i64, st.st_ctime_nsec as i64),
            ino: st.st_ino as u64,
            exec: st.st_mode & 0o111 != 0,
        }
    }
}

/// The cache; see the module doc.
#[derive(Debug, Default)]
pub struct StatCache {
    entries: HashMap<String, Entry, foldhash::fast::RandomState>,
    /// An entry was forgotten for good: the cache must be written.
    changed: bool,
    /// Entries added or updated since load.
    inserted: usize,
    /// Entries dropped that no longer matched their file.
    dropped: bool,
    hashed_bytes: u64,
    /// The workspace root, opened once: `fstatat` of a relative path walks fewer components
    /// than `stat` of an absolute one (a tenth of a no-op build at 5,000 nodes is stats).
    root: Option<(std::path::PathBuf, std::os::fd::OwnedFd)>,
}

/// New entries that make a save worth it.
const SAVE_AFTER_ENTRIES: usize = 32;
/// Bytes hashed that make a save worth it.
const SAVE_AFTER_BYTES: u64 = 16 << 20;

/// How long after its mtime a file counts as racy.
fn racy_window_ns(mtime_ns: i64) -> i64 {
    if mtime_ns % 1_000_000_000 == 0 {
        2_000_000_000 // whole-second stamps: 1 s (ext3, HFS+) or 2 s (FAT) granularity
    } else {
        50_000_000 // nanosecond fields stamped by a coarse kernel clock
    }
}

/// Whether a file or folder time `stamp_ns`, read no earlier than `now`, is racy: a change
/// after the read may leave the same time (the clock that stamps file times is coarse, some
/// file systems keep whole seconds). The one rule for every stat that vouches for what it
/// does not read again: the stat cache's entries, the no-op proof's files and listed
/// folders, the folders a clean end records settled.
pub fn is_racy(stamp_ns: i64, now: i64) -> bool {
    now - stamp_ns < racy_window_ns(stamp_ns)
}

/// Now, in nanoseconds since the epoch.
pub fn now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

impl StatCache {
    /// Load from `path`; a missing or malformed file gives an empty cache (it is only a cache).
    pub fn load(path: &Path) -> StatCache {
        let Ok(bytes) = crate::codec::FileBytes::read(path) else {
            return StatCache::default();
        };
        Self::decode(&bytes).unwrap_or_default()
    }

    fn decode(bytes: &[u8]) -> Option<StatCache> {
        let mut r = crate::codec::unframe(MAGIC, bytes)?;
        let u64_ = |r: &mut &[u8]| -> Option<u64> {
            let (h, t) = r.split_first_chunk::<8>()?;
            *r = t;
            Some(u64::from_le_bytes(*h))
        };
        let n = u64_(&mut r)?;
        if n > (r.len() / 72) as u64 {
            return None;
        }
        let mut entries = HashMap::with_capacity_and_hasher(n as usize, Default::default());
        for _ in 0..n {
            let len = u64_(&mut r)? as usize;
            if len > r.len() {
                return None;
            }
            let (p, t) = r.split_at(len);
            r = t;
            let path = std::str::from_utf8(p).ok()?.to_string();
            let size = u64_(&mut r)?;
            let mtime_ns = u64_(&mut r)? as i64;
            let ctime_ns = u64_(&mut r)? as i64;
            let ino = u64_(&mut r)?;
            let (d, t) = r.split_first_chunk::<32>()?;
            r = t;
            entries.insert(
                path,
                Entry {
                    size,
                    mtime_ns,
                    ctime_ns,
                    ino,
                    digest: Digest(*d),
                },
            );
        }
        Some(StatCache {
            root: None,
            entries,
            changed: false,
            inserted: 0,
            dropped: false,
            hashed_bytes: 0,
        })
    }

    /// Write atomically when anything changed. Errors are ignored by callers on purpose: a
    /// lost stat cache costs one re-hash, never a wrong result.
    pub fn save(&mut self, path: &Path) -> std::io::Result<()> {
        if !self.changed && !self.dropped && self.inserted == 0 {
            return Ok(());
        }
        self.write(path)
    }

    /// [`StatCache::save`] when it must be (an entry was forgotten with
    /// [`StatCache::forget`]) or when it is worth it: enough new entries, or enough bytes
    /// hashed, that the next build would otherwise hash them again (a few small files cost
    /// less to hash again than the whole cache costs to rewrite: a one-node rebuild of a big
    /// pipeline writes nothing). Entries dropped because their file changed need no write:
    /// the stat they hold is no longer the file's (a ctime cannot be set back).
    pub fn save_if_worth(&mut self, path: &Path) -> std::io::Result<()> {
        let worth = self.inserted >= SAVE_AFTER_ENTRIES || self.hashed_bytes >= SAVE_AFTER_BYTES;
        if !self.changed && !worth {
            return Ok(());
        }
        self.write(path)
    }

    fn write(&mut self, path: &Path) -> std::io::Result<()> {
        let mut paths: Vec<&String> = self.entries.keys().collect();
        paths.sort();
        let mut out = Vec::with_capacity(8 + paths.len() * 96);
        out.extend_from_slice(&(paths.len() as u64).to_le_bytes());
        for p in paths {
            let e = &self.entries[p];
            out.extend_from_slice(&(p.len() as u64).to_le_bytes());
            out.extend_from_slice(p.as_bytes());
            out.extend_from_slice(&e.size.to_le_bytes());
            out.extend_from_slice(&(e.mtime_ns as u64).to_le_bytes());
            out.extend_from_slice(&(e.ctime_ns as u64).to_le_bytes());
            out.extend_from_slice(&e.ino.to_le_bytes());
            out.extend_from_slice(&e.digest.0);
        }
        sky_fs::write_cache(path, &crate::codec::frame(MAGIC, &out))?;
        self.changed = false;
        self.dropped = false;
        self.inserted = 0;
        Ok(())
    }

    /// Bytes hashed since load (0 on a no-op build).
    pub fn hashed_bytes(&self) -> u64 {
        self.hashed_bytes
    }

    /// The digest of `root/rel` (a regular file), from the cache when its stat still matches.
    pub fn digest(&mut self, root: &Path, rel: &str) -> std::io::Result<(Digest, FileStat)> {
        let st = self.stat(root, rel)?;
        self.digest_with(root, rel, st)
    }

    /// `stat` of `root/rel` (following symlinks), which must be a regular file.
    fn stat(&mut self, root: &Path, rel: &str) -> std::io::Result<FileStat> {
        if self.root.as_ref().map(|(p, _)| p.as_path()) != Some(root) {
            self.root = Some((root.to_path_buf(), open_root(root)?));
        }
        let Some((_, fd)) = &self.root else {
            return Err(std::io::Error::other("workspace root not open"));
        };
        stat_at(fd, rel)
    }

    /// [`StatCache::digest`] with the file's stat already taken (by a [`Prefetch`]).
    pub fn digest_with(
        &mut self,
        root: &Path,
        rel: &str,
        st: FileStat,
    ) -> std::io::Result<(Digest, FileStat)> {
        if let Some(e) = self.entries.get(rel) {
            if e.size == st.size
                && e.mtime_ns == st.mtime_ns
                && e.ctime_ns == st.ctime_ns
                && e.ino == st.ino
            {
                return Ok((e.digest, st));
            }
        }
        let abs = root.join(rel);
        let digest = hash_file(&abs)?;
        self.hashed_bytes += st.size;
        let after = FileStat::of(&std::fs::metadata(&abs)?);
        self.record(rel, after, digest, after == st);
        Ok((digest, st))
    }

    /// Record that `rel`, with stat `st`, has `digest` (e.g. right after we wrote it).
    pub fn remember(&mut self, rel: &str, st: FileStat, digest: Digest) {
        self.record(rel, st, digest, true);
    }

    fn record(&mut self, rel: &str, st: FileStat, digest: Digest, stable: bool) {
        let racy = is_racy(st.mtime_ns, now_ns());
        if stable && !racy {
            let e = Entry {
                size: st.size,
                mtime_ns: st.mtime_ns,
                ctime_ns: st.ctime_ns,
                ino: st.ino,
                digest,
            };
            if self.entries.insert(rel.to_string(), e) != Some(e) {
                self.inserted += 1;
            }
        } else if self.entries.remove(rel).is_some() {
            // The entry's stat is not the file's any more: dropping it need not be written.
            self.dropped = true;
        }
    }

    /// Forget `rel` for good: its content may have changed without its stat (bit rot found
    /// by a check). The next save writes the cache.
    pub fn forget(&mut self, rel: &str) {
        if self.entries.remove(rel).is_some() {
            self.changed = true;
        }
    }

    /// Forget `rel`, a file about to be replaced (removed and written anew: a new inode, so
    /// the entry could not match it anyway; no write needed).
    pub fn forget_replaced(&mut self, rel: &str) {
        if self.entries.remove(rel).is_some() {
            self.dropped = true;
        }
    }
}

fn open_root(root: &Path) -> std::io::Result<std::os::fd::OwnedFd> {
    use rustix::fs::{Mode, OFlags};
    Ok(rustix::fs::open(
        root,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?)
}

/// `stat` of `rel` under the directory `fd` (following symlinks); a regular file or an error.
fn stat_at(fd: &std::os::fd::OwnedFd, rel: &str) -> std::io::Result<FileStat> {
    use rustix::fs::{AtFlags, FileType};
    let st = rustix::fs::statat(fd, rel, AtFlags::empty())?;
    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
        return Err(std::io::Error::other(format!(
            "`{rel}` is not a regular file"
        )));
    }
    Ok(FileStat::of_stat(&st))
}

/// Stats taken ahead, on another thread, of the files a build is about to check: a no-op
/// build of thousands of nodes is mostly `stat`, and the coordinator checking keys and
/// records one node after the other need not wait for each. Slot `i` is filled at most once
/// with what `stat` said of path `i` (`None`: it is not a regular file, or `stat` failed:
/// the caller then looks itself, for the error). A slot not filled yet is no answer: the
/// caller stats the file itself. A stat taken a moment earlier is as good as one taken now:
/// nothing the build relies on is between the two.
#[derive(Debug)]
pub struct Prefetch {
    slots: Vec<std::sync::OnceLock<Option<FileStat>>>,
    stop: std::sync::atomic::AtomicBool,
}

impl Prefetch {
    /// Room for `n` paths.
    pub fn new(n: usize) -> Prefetch {
        Prefetch {
            slots: (0..n).map(|_| std::sync::OnceLock::new()).collect(),
            stop: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Stat `paths[i]` into slot `i`, in order, until done or [`Prefetch::stop`] (run this
    /// on its own thread).
    pub fn run<'p>(&self, root: &Path, paths: impl IntoIterator<Item = &'p str>) {
        use std::sync::atomic::Ordering;
        let Ok(fd) = open_root(root) else {
            return;
        };
        for (slot, rel) in self.slots.iter().zip(paths) {
            if self.stop.load(Ordering::Relaxed) {
                return;
            }
            let _ = slot.set(stat_at(&fd, rel).ok());
        }
    }

    /// Fill slot `i` with a stat taken elsewhere (`None`: not a regular file, or none taken).
    pub fn fill(&self, i: usize, st: Option<FileStat>) {
        if let Some(slot) = self.slots.get(i) {
            let _ = slot.set(st);
        }
    }

    /// The stat of path `i`, if taken yet and the file is a regular one.
    pub fn get(&self, i: usize) -> Option<FileStat> {
        self.slots.get(i)?.get().copied().flatten()
    }

    /// Stop [`Prefetch::run`] early.
    pub fn stop(&self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// blake3 of a file's content, read in chunks. Never memory-mapped: a file that another
/// process truncates while we hash it would kill the whole build with SIGBUS; read, it only
/// ends early, and the stat taken after hashing differs, so the digest is not trusted.
pub fn hash_file(path: &Path) -> std::io::Result<Digest> {
    let mut f = std::fs::File::open(path)?;
    let mut h = blake3::Hasher::new();
    // Most files a build hashes are small: they fit the buffer on the stack, and a large
    // zeroed buffer on the heap would cost more than hashing them.
    let mut small = [0u8; 16 * 1024];
    if !hash_into(&mut f, &mut h, &mut small)? {
        let mut large = vec![0u8; 256 * 1024];
        while !hash_into(&mut f, &mut h, &mut large)? {}
    }
    Ok(Digest(*h.finalize().as_bytes()))
}

/// Hash what `f` reads into `buf` until the end of the file (`true`) or until `buf` was
/// filled once (`false`: there may be more).
fn hash_into(
    f: &mut std::fs::File,
    h: &mut blake3::Hasher,
    buf: &mut [u8],
) -> std::io::Result<bool> {
    let mut filled = 0;
    while filled < buf.len() {
        match f.read(&mut buf[filled..]) {
            Ok(0) => {
                h.update(&buf[..filled]);
                return Ok(true);
            }
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    h.update(buf);
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Write `text` to `path` with an mtime 10 s in the past (old enough to be trusted).
    fn write_old(path: &Path, text: &[u8]) {
        std::fs::write(path, text).unwrap();
        let old = std::time::SystemTime::now() - std::time::Duration::from_secs(10);
        std::fs::File::options()
            .write(true)
            .open(path)
            .unwrap()
            .set_modified(old)
            .unwrap();
    }

    /// The stat cache, the proof and the output checks compare stats taken through std's
    /// metadata and through `fstatat`: both give the same fields, sub-second times and the
    /// exec bit included.
    #[test]
    fn a_file_hashes_to_the_blake3_of_its_bytes_at_every_buffer_boundary() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        let small = 16 * 1024;
        let large = 256 * 1024;
        for len in [
            0,
            1,
            small - 1,
            small,
            small + 1,
            small + large - 1,
            small + large,
            small + large + 1,
            small + 3 * large + 7,
        ] {
            let bytes: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
            std::fs::write(&p, &bytes).unwrap();
            assert_eq!(
                hash_file(&p).unwrap().0,
                *blake3::hash(&bytes).as_bytes(),
                "{len} bytes"
            );
        }
    }

    #[test]
    fn a_stat_reads_the_same_through_metadata_and_fstatat() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        for (name, mode) in [("plain", 0o644), ("tool", 0o750)] {
            let path = dir.path().join(name);
            std::fs::write(&path, b"some bytes").unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            let when = std::time::UNIX_EPOCH + std::time::Duration::new(1_700_000_000, 123_456_789);
            std::fs::File::options()
                .write(true)
                .open(&path)
                .unwrap()
                .set_modified(when)
                .unwrap();
            let std_view = FileStat::of(&std::fs::symlink_metadata(&path).unwrap());
            let fd = open_root(dir.path()).unwrap();
            let st = rustix::fs::statat(&fd, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW).unwrap();
            assert_eq!(FileStat::of_stat(&st), std_view, "{name}");
            assert_eq!(std_view.mtime_ns, 1_700_000_000_123_456_789, "{name}");
            assert_eq!(std_view.exec, mode & 0o111 != 0, "{name}");
        }
    }

    #[test]
    fn fresh_files_are_not_trusted_old_ones_are() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a"), b"one").unwrap();
        let mut c = StatCache::default();
        let (d1, _) = c.digest(dir.path(), "a").unwrap();
        assert_eq!(d1, Digest::of(b"one"));
        // Just written: racy, so not recorded.
        assert!(c.entries.is_empty());
        // Same size, rewritten: detected because nothing was trusted.
        std::fs::write(dir.path().join("a"), b"two").unwrap();
        assert_eq!(c.digest(dir.path(), "a").unwrap().0, Digest::of(b"two"));
        // Make it old: now recorded, and a second lookup hashes nothing.
        write_old(&dir.path().join("a"), b"two");
        c.digest(dir.path(), "a").unwrap();
        let before = c.hashed_bytes();
        c.digest(dir.path(), "a").unwrap();
        assert_eq!(c.hashed_bytes(), before);
    }

    #[test]
    fn prefetched_stats_are_the_stats() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a"), b"one").unwrap();
        std::fs::create_dir(dir.path().join("d")).unwrap();
        let p = Prefetch::new(4);
        assert_eq!(p.get(0), None);
        p.run(dir.path(), ["a", "d", "missing", "a"]);
        let mut c = StatCache::default();
        let (_, st) = c.digest(dir.path(), "a").unwrap();
        assert_eq!((p.get(0), p.get(3)), (Some(st), Some(st)));
        // Not a regular file, missing, out of range: no answer (the caller looks itself).
        assert_eq!((p.get(1), p.get(2), p.get(9)), (None, None, None));
        assert_eq!(
            c.digest_with(dir.path(), "a", st).unwrap().0,
            Digest::of(b"one")
        );
        let stopped = Prefetch::new(2);
        stopped.stop();
        stopped.run(dir.path(), ["a", "a"]);
        assert_eq!(stopped.get(0), None);
    }

    #[test]
    fn a_save_is_skipped_only_where_no_entry_can_mislead() {
        let dir = tempfile::tempdir().unwrap();
        let make = |name: &str, text: &str| write_old(&dir.path().join(name), text.as_bytes());
        let p = dir.path().join("cache");
        make("a", "one");
        let mut c = StatCache::default();
        c.digest(dir.path(), "a").unwrap();
        c.save(&p).unwrap();
        // One file changed and hashed again: not worth a write; the stale entry on disk cannot
        // match the file's new stat.
        make("a", "two");
        let mut c = StatCache::load(&p);
        assert_eq!(c.digest(dir.path(), "a").unwrap().0, Digest::of(b"two"));
        c.save_if_worth(&p).unwrap();
        let mut again = StatCache::load(&p);
        assert_eq!(again.digest(dir.path(), "a").unwrap().0, Digest::of(b"two"));
        assert!(again.hashed_bytes() > 0);
        // Forgetting for good (content changed, stat not) is always written.
        let mut c = StatCache::load(&p);
        c.forget("a");
        c.save_if_worth(&p).unwrap();
        assert!(StatCache::load(&p).entries.is_empty());
        // Enough new entries: written.
        let mut c = StatCache::load(&p);
        for i in 0..SAVE_AFTER_ENTRIES {
            make(&format!("f{i}"), "x");
            c.digest(dir.path(), &format!("f{i}")).unwrap();
        }
        c.save_if_worth(&p).unwrap();
        assert_eq!(StatCache::load(&p).entries.len(), SAVE_AFTER_ENTRIES);
    }

    #[test]
    fn save_load_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("a");
        write_old(&f, b"x");
        let mut c = StatCache::default();
        c.digest(dir.path(), "a").unwrap();
        let p = dir.path().join("cache");
        c.save(&p).unwrap();
        let mut c2 = StatCache::load(&p);
        assert_eq!(c2.entries, c.entries);
        c2.digest(dir.path(), "a").unwrap();
        assert_eq!(c2.hashed_bytes(), 0);
        std::fs::write(&p, b"SKYSTAT1\xff\xff\xff\xff\xff\xff\xff\xff").unwrap();
        assert!(StatCache::load(&p).entries.is_empty());
        // A flipped bit anywhere (a digest, say) or a cut: ignored, never trusted.
        c.changed = true;
        c.save(&p).unwrap();
        let good = std::fs::read(&p).unwrap();
        assert_eq!(StatCache::load(&p).entries, c.entries);
        for i in 0..good.len() {
            let mut bad = good.clone();
            bad[i] ^= 0x08;
            std::fs::write(&p, &bad).unwrap();
            assert!(StatCache::load(&p).entries.is_empty(), "bit flip at {i}");
        }
        std::fs::write(&p, &good[..good.len() - 1]).unwrap();
        assert!(StatCache::load(&p).entries.is_empty());
    }
}
