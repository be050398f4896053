//! The stat cache: (path, size, mtime_ns, ctime_ns, inode) -> digest, so that a no-op build
//! hashes nothing. The ctime is what git and Bazel add to the mtime: `touch -d` can put an
//! mtime back after an edit (through a hard link between a workspace output and its blob, say),
//! but no one can set a ctime, so such an edit is still seen and re-hashed.
//!
//! Racy files: a file's mtime only has the granularity of the clock that stamps it (a kernel
//! tick on Linux file systems with nanosecond fields, one or two seconds elsewhere). A file
//! modified within that window after we hashed it may keep the same size and mtime. So an entry
//! is only *recorded* when the file's mtime is older than [`racy_window_ns`] at the moment we
//! stat it; a fresher file is re-hashed next time, when it is no longer fresh. We also stat
//! before and after hashing and record nothing when the two differ.
//!
//! Format (`.skyctl/state-v1/statcache`, one read, written atomically when changed):
//! `SKYSTAT2`, u64 count, then per entry: u64 path length, path bytes (workspace-relative),
//! u64 size, i64 mtime_ns, i64 ctime_ns, u64 inode, 32-byte digest. All little-endian. A cache
//! of another format is ignored (everything is hashed once more).

use std::collections::HashMap;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::key::Digest;

const MAGIC: &[u8; 8] = b"SKYSTAT2";

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
}

/// The cache; see the module doc.
#[derive(Debug, Default)]
pub struct StatCache {
    entries: HashMap<String, Entry>,
    changed: bool,
    hashed_bytes: u64,
    /// The workspace root, opened once: `fstatat` of a relative path walks fewer components
    /// than `stat` of an absolute one (a tenth of a no-op build at 5,000 nodes is stats).
    root: Option<(std::path::PathBuf, std::os::fd::OwnedFd)>,
}

/// How long after its mtime a file counts as racy.
pub fn racy_window_ns(mtime_ns: i64) -> i64 {
    if mtime_ns % 1_000_000_000 == 0 {
        2_000_000_000 // whole-second stamps: 1 s (ext3, HFS+) or 2 s (FAT) granularity
    } else {
        50_000_000 // nanosecond fields stamped by a coarse kernel clock
    }
}

fn now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

impl StatCache {
    /// Load from `path`; a missing or malformed file gives an empty cache (it is only a cache).
    pub fn load(path: &Path) -> StatCache {
        let Ok(bytes) = std::fs::read(path) else {
            return StatCache::default();
        };
        Self::decode(&bytes).unwrap_or_default()
    }

    fn decode(bytes: &[u8]) -> Option<StatCache> {
        let mut r = bytes.strip_prefix(MAGIC.as_slice())?;
        let u64_ = |r: &mut &[u8]| -> Option<u64> {
            let (h, t) = r.split_first_chunk::<8>()?;
            *r = t;
            Some(u64::from_le_bytes(*h))
        };
        let n = u64_(&mut r)?;
        if n > (r.len() / 72) as u64 {
            return None;
        }
        let mut entries = HashMap::with_capacity(n as usize);
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
            hashed_bytes: 0,
        })
    }

    /// Write atomically when anything changed. Errors are ignored by callers on purpose: a
    /// lost stat cache costs one re-hash, never a wrong result.
    pub fn save(&mut self, path: &Path) -> std::io::Result<()> {
        if !self.changed {
            return Ok(());
        }
        let mut paths: Vec<&String> = self.entries.keys().collect();
        paths.sort();
        let mut out = Vec::with_capacity(16 + paths.len() * 96);
        out.extend_from_slice(MAGIC);
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
        sky_fs::write_cache(path, &out)?;
        self.changed = false;
        Ok(())
    }

    /// Bytes hashed since load (0 on a no-op build).
    pub fn hashed_bytes(&self) -> u64 {
        self.hashed_bytes
    }

    /// The digest of `root/rel` (a regular file), from the cache when its stat still matches.
    pub fn digest(&mut self, root: &Path, rel: &str) -> std::io::Result<(Digest, FileStat)> {
        let abs = root.join(rel);
        let st = self.stat(root, rel)?;
        if let Some(e) = self.entries.get(rel) {
            if e.size == st.size
                && e.mtime_ns == st.mtime_ns
                && e.ctime_ns == st.ctime_ns
                && e.ino == st.ino
            {
                return Ok((e.digest, st));
            }
        }
        let digest = hash_file(&abs)?;
        self.hashed_bytes += st.size;
        let after = FileStat::of(&std::fs::metadata(&abs)?);
        self.record(rel, after, digest, after == st);
        Ok((digest, st))
    }

    /// `stat` of `root/rel` (following symlinks), which must be a regular file.
    fn stat(&mut self, root: &Path, rel: &str) -> std::io::Result<FileStat> {
        use rustix::fs::{AtFlags, FileType, Mode, OFlags};
        if self.root.as_ref().map(|(p, _)| p.as_path()) != Some(root) {
            let fd = rustix::fs::open(
                root,
                OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
                Mode::empty(),
            )?;
            self.root = Some((root.to_path_buf(), fd));
        }
        let Some((_, fd)) = &self.root else {
            return Err(std::io::Error::other("workspace root not open"));
        };
        let st = rustix::fs::statat(fd, rel, AtFlags::empty())?;
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
            return Err(std::io::Error::other(format!(
                "`{rel}` is not a regular file"
            )));
        }
        Ok(FileStat {
            size: st.st_size as u64,
            mtime_ns: (st.st_mtime as i64)
                .saturating_mul(1_000_000_000)
                .saturating_add(st.st_mtime_nsec as i64),
            ctime_ns: (st.st_ctime as i64)
                .saturating_mul(1_000_000_000)
                .saturating_add(st.st_ctime_nsec as i64),
            ino: st.st_ino as u64,
            exec: st.st_mode & 0o111 != 0,
        })
    }

    /// Record that `rel`, with stat `st`, has `digest` (e.g. right after we wrote it).
    pub fn remember(&mut self, rel: &str, st: FileStat, digest: Digest) {
        self.record(rel, st, digest, true);
    }

    fn record(&mut self, rel: &str, st: FileStat, digest: Digest, stable: bool) {
        let racy = now_ns() - st.mtime_ns < racy_window_ns(st.mtime_ns);
        if stable && !racy {
            let e = Entry {
                size: st.size,
                mtime_ns: st.mtime_ns,
                ctime_ns: st.ctime_ns,
                ino: st.ino,
                digest,
            };
            if self.entries.insert(rel.to_string(), e) != Some(e) {
                self.changed = true;
            }
        } else if self.entries.remove(rel).is_some() {
            self.changed = true;
        }
    }

    /// Forget `rel` (a file we are about to replace).
    pub fn forget(&mut self, rel: &str) {
        if self.entries.remove(rel).is_some() {
            self.changed = true;
        }
    }
}

/// blake3 of a file's content (memory-mapped when large).
pub fn hash_file(path: &Path) -> std::io::Result<Digest> {
    let mut f = std::fs::File::open(path)?;
    let len = f.metadata()?.len();
    let mut h = blake3::Hasher::new();
    if len >= 1 << 20 {
        // SAFETY: the map is read-only and dropped before returning; if another process
        // truncates the file meanwhile we may read zeros or fault, which is why the caller
        // re-stats afterwards and never records a file whose stat changed while hashing.
        let map = unsafe { memmap2::Mmap::map(&f)? };
        h.update(&map);
    } else {
        let mut buf = Vec::with_capacity(len as usize);
        f.read_to_end(&mut buf)?;
        h.update(&buf);
    }
    Ok(Digest(*h.finalize().as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let old = std::time::SystemTime::now() - std::time::Duration::from_secs(10);
        std::fs::File::options()
            .write(true)
            .open(dir.path().join("a"))
            .unwrap()
            .set_modified(old)
            .unwrap();
        c.digest(dir.path(), "a").unwrap();
        let before = c.hashed_bytes();
        c.digest(dir.path(), "a").unwrap();
        assert_eq!(c.hashed_bytes(), before);
    }

    #[test]
    fn save_load_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("a");
        std::fs::write(&f, b"x").unwrap();
        let old = std::time::SystemTime::now() - std::time::Duration::from_secs(10);
        std::fs::File::options()
            .write(true)
            .open(&f)
            .unwrap()
            .set_modified(old)
            .unwrap();
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
    }
}
