//! Materialization: blobs and trees back into the workspace, by reflink, hard link or copy.

use super::*;

impl Store {
    /// Materialize a stored output at `dest` in the workspace, verifying every blob.
    /// `allow_link`: a hard link to the blob may be used (never for the release tree).
    pub fn restore(&self, out: &OutputRecord, dest: &Path, allow_link: bool) -> Result<()> {
        if !out.dir {
            return self.restore_file(&out.digest, out.exec, dest, allow_link);
        }
        let tree = self.get_tree(&out.digest)?;
        let tmpdir = fsutil::temp_beside(dest);
        let res = (|| {
            std::fs::create_dir_all(&tmpdir).map_err(|e| DagError::io("create", &tmpdir, e))?;
            for e in &tree.entries {
                self.restore_file(&e.digest, e.exec, &tmpdir.join(&e.path), allow_link)?;
            }
            fsutil::remove_path(dest).map_err(|e| DagError::io("remove", dest, e))?;
            std::fs::rename(&tmpdir, dest).map_err(|e| DagError::io("rename", dest, e))
        })();
        if res.is_err() {
            let _ = fsutil::remove_path(&tmpdir);
        }
        res
    }

    /// The tree listing stored under `d`.
    pub fn get_tree(&self, d: &Digest) -> Result<Tree> {
        let bytes = self.get_bytes(d)?;
        Tree::decode(&bytes).ok_or_else(|| DagError::Store {
            path: self.blob_path(d),
            message: "not a valid tree listing".into(),
        })
    }

    pub(super) fn restore_file(
        &self,
        d: &Digest,
        exec: bool,
        dest: &Path,
        allow_link: bool,
    ) -> Result<()> {
        let src = self.blob_path(d);
        self.materialize(&src, d, exec, dest, allow_link)
            .map_err(|e| match e {
                fsutil::CopyError::Corrupt { actual } => {
                    // Drop the bad blob so the re-run that follows can store a good copy.
                    let _ = std::fs::remove_file(&src);
                    DagError::Store {
                        path: src.clone(),
                        message: format!(
                            "blob is corrupted (content hashes to {}); removed it",
                            actual.short()
                        ),
                    }
                }
                fsutil::CopyError::Io(e) if fsutil::is_not_regular(&e) => {
                    // Never read, never trusted: drop it so the re-run can store the blob.
                    let _ = fsutil::remove_path(&src);
                    DagError::Store {
                        path: src.clone(),
                        message: format!("blob is {e}; removed it"),
                    }
                }
                fsutil::CopyError::Io(e)
                    if e.kind() == std::io::ErrorKind::NotFound && !src.exists() =>
                {
                    DagError::Store {
                        path: src.clone(),
                        message: "blob is missing".into(),
                    }
                }
                fsutil::CopyError::Io(e) => DagError::io("restore", dest, e),
            })
    }

    /// Reflink, else hard link (when allowed and the blob's exec bit is the one wanted), else
    /// copy; the content is verified against `d` before `dest` is replaced, in every case.
    pub(super) fn materialize(
        &self,
        src: &Path,
        d: &Digest,
        exec: bool,
        dest: &Path,
        allow_link: bool,
    ) -> std::result::Result<(), fsutil::CopyError> {
        // Nothing but a regular file is ever opened in the store (a FIFO would block the open).
        let ft = std::fs::symlink_metadata(src)?.file_type();
        if !ft.is_file() {
            return Err(fsutil::not_regular(fsutil::kind_name(ft)).into());
        }
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
                let md = std::fs::symlink_metadata(src)?;
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
}
