//! Blobs: file contents by blake3 digest, written complete before anything names them.

use super::*;

impl Store {
    /// Path of a blob.
    pub fn blob_path(&self, d: &Digest) -> PathBuf {
        let h = d.hex();
        self.root.join("blobs").join(&h[..2]).join(&h[2..])
    }

    /// Note that the fan-out folder of blob path `dest` is about to change (marked before the
    /// change, so a folder is never changed unmarked). Other paths are ignored.
    pub(super) fn touch_blob_folder(&self, dest: &Path) {
        let fan = dest
            .strip_prefix(self.root.join("blobs"))
            .ok()
            .and_then(|rel| rel.components().next())
            .and_then(|c| c.as_os_str().to_str())
            .filter(|name| name.len() == 2)
            .and_then(|name| u8::from_str_radix(name, 16).ok());
        if let Some(byte) = fan {
            let word = &self.shared.touched[usize::from(byte / 64)];
            word.fetch_or(1 << (byte % 64), std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Whether this process put a blob in, or removed one from, the fan-out folder of the
    /// blobs whose digests start with `byte` (a clean end stamps only those anew).
    pub fn blob_folder_touched(&self, byte: u8) -> bool {
        let word =
            self.shared.touched[usize::from(byte / 64)].load(std::sync::atomic::Ordering::Relaxed);
        word & (1 << (byte % 64)) != 0
    }

    pub(super) fn reflink_state(&self) -> u8 {
        self.shared.reflink.load(Ordering::Relaxed)
    }

    /// `FICLONE` `src` to the new file `dst`; `Ok(false)` (and `dst` removed) when the file
    /// system cannot, which is remembered so later calls do not try.
    pub(super) fn try_reflink(&self, src: &Path, dst: &Path) -> std::io::Result<bool> {
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
        self.refuse_write(&format!("`{}`", src.display()))?;
        let md = std::fs::symlink_metadata(src).map_err(|e| DagError::io("stat", src, e))?;
        let exec = md.mode() & 0o111 != 0;
        let size = md.len();
        let tmp = self.tmp("blob");
        if self
            .try_reflink(src, &tmp)
            .map_err(|e| DagError::io("reflink into store", src, e))?
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
            DagError::io("copy into store", src, e)
        })?;
        self.place_tmp(&tmp, &digest, exec)?;
        Ok((digest, size))
    }

    /// Hash a complete temp file in the store's tmp dir and make it the blob.
    pub(super) fn publish_verified_tmp(
        &self,
        tmp: &Path,
        exec: bool,
        size: u64,
    ) -> Result<(Digest, u64)> {
        let digest = statcache_hash(tmp).map_err(|e| {
            let _ = std::fs::remove_file(tmp);
            DagError::io("hash", tmp, e)
        })?;
        self.place_tmp(tmp, &digest, exec)?;
        Ok((digest, size))
    }

    pub(super) fn place_tmp(&self, tmp: &Path, digest: &Digest, exec: bool) -> Result<()> {
        let dest = self.blob_path(digest);
        if self.has_blob(digest) {
            let _ = std::fs::remove_file(tmp);
            return Ok(());
        }
        self.clear_odd_blob(&dest);
        let _ = fsutil::set_readonly(tmp, exec);
        self.publish(tmp, &dest)
    }

    /// Hard-link `src` as its blob; `None` when the file system refuses (copy instead).
    pub(super) fn link_in(
        &self,
        src: &Path,
        exec: bool,
        size: u64,
    ) -> Result<Option<(Digest, u64)>> {
        // Read-only before the blob name exists, so no blob is ever writable by mode.
        fsutil::set_readonly(src, exec).map_err(|e| DagError::io("chmod", src, e))?;
        let digest = statcache_hash(src).map_err(|e| DagError::io("hash", src, e))?;
        let dest = self.blob_path(&digest);
        self.clear_odd_blob(&dest);
        self.touch_blob_folder(&dest);
        match fsutil::with_parent(&dest, || std::fs::hard_link(src, &dest)) {
            Ok(()) => Ok(Some((digest, size))),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && self.has_blob(&digest) => {
                Ok(Some((digest, size)))
            }
            Err(_) => {
                // Another file system, or no hard links there: the workspace file stays ours.
                let _ = fsutil::set_mode(src, exec);
                Ok(None)
            }
        }
    }

    /// Store bytes; returns their digest.
    pub fn put_bytes(&self, bytes: &[u8]) -> Result<Digest> {
        self.refuse_write("a node log")?;
        let digest = Digest::of(bytes);
        let dest = self.blob_path(&digest);
        if !self.has_blob(&digest) {
            self.clear_odd_blob(&dest);
            let tmp = self.tmp("blob");
            std::fs::write(&tmp, bytes).map_err(|e| DagError::io("write", &tmp, e))?;
            let _ = fsutil::set_readonly(&tmp, false);
            self.publish(&tmp, &dest)?;
        }
        Ok(digest)
    }

    /// Read a whole blob and verify it.
    pub fn get_bytes(&self, d: &Digest) -> Result<Vec<u8>> {
        let p = self.blob_path(d);
        let mut bytes = Vec::new();
        fsutil::open_regular(&p)
            .and_then(|mut f| std::io::Read::read_to_end(&mut f, &mut bytes))
            .map_err(|e| {
                if fsutil::is_not_regular(&e) {
                    // Never trusted, never repaired by a re-run while it stands: it goes.
                    let _ = fsutil::remove_path(&p);
                }
                DagError::io("read", &p, e)
            })?;
        if Digest::of(&bytes) != *d {
            return Err(DagError::Store {
                path: p,
                message: "blob is corrupted (content does not match its digest)".into(),
            });
        }
        Ok(bytes)
    }

    /// Remove the blob `d` if its content no longer hashes to `d`; returns whether it did.
    pub fn drop_if_corrupt(&self, d: &Digest) -> bool {
        let p = self.blob_path(d);
        self.touch_blob_folder(&p);
        match statcache_hash(&p) {
            Ok(actual) if actual != *d => std::fs::remove_file(&p).is_ok(),
            Err(e) if fsutil::is_not_regular(&e) => fsutil::remove_path(&p).is_ok(),
            _ => false,
        }
    }

    /// Whether a blob file exists (not verified): a regular file under its name, never a
    /// symlink (not followed), directory, FIFO or device.
    pub fn has_blob(&self, d: &Digest) -> bool {
        std::fs::symlink_metadata(self.blob_path(d)).is_ok_and(|m| m.file_type().is_file())
    }

    /// Remove whatever stands at the blob path `dest` when it is not a regular file (a
    /// directory, symlink, FIFO...), and its fan-out folder when that is not a directory, so a
    /// good blob can take its place.
    pub(super) fn clear_odd_blob(&self, dest: &Path) {
        self.touch_blob_folder(dest);
        if let Some(fan) = dest.parent() {
            if std::fs::symlink_metadata(fan).is_ok_and(|m| !m.file_type().is_dir()) {
                let _ = fsutil::remove_path(fan);
                return;
            }
        }
        if std::fs::symlink_metadata(dest).is_ok_and(|m| !m.file_type().is_file()) {
            let _ = fsutil::remove_path(dest);
        }
    }
}
