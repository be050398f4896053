//! The one way the workspace's crates read a file ([`read`], [`open`]: a regular file, a
//! size limit per kind of file, a located error; see the `read` module), and atomic file
//! replacement, the one way the workspace's crates write a file that readers may
//! see: the bytes go to a temp file beside the destination (same file system), which is
//! flushed, given mode 0644, fsynced, and renamed over the destination. A reader sees the old
//! file or the new one, never half of one; a crash leaves at most a temp file named
//! `.skyctl-tmp-*` beside the destination, which cleanup can recognise.
//!
//! The fsync policy: every file is fsynced before its rename, except the ones written with
//! [`write_cache`], which hold only what can be rebuilt (a stat cache, build state) and are
//! rewritten by every build.
//!
//! The destination must be a regular file or absent: a symlink, FIFO, socket or device at
//! the path is refused ([`ErrorKind::InvalidInput`]) rather than replaced, so writing "onto"
//! `/dev/full` or through a dangling link never silently swaps a special file for a regular
//! one.
//!
//! ```
//! let dir = tempfile::tempdir()?;
//! let path = dir.path().join("model.json");
//! sky_fs::write(&path, b"{}\n")?;
//! let mut f = sky_fs::AtomicFile::create(&path)?;
//! std::io::Write::write_all(&mut f, b"{\"v\": 2}\n")?;
//! f.commit()?;
//! assert_eq!(std::fs::read(&path)?, b"{\"v\": 2}\n");
//! # Ok::<(), std::io::Error>(())
//! ```

mod read;

pub use read::{
    copy, open, open_nofollow, read, read_nofollow, read_open, read_to_string, size_in_words,
    type_in_words, Limit, ReadError, CALIBRATION, CASES, CA_BUNDLE, CONFIG, CONTENT, GOLDEN, MODEL,
    PIPELINE, POLICY, PROMPTS, REPORT, REQUEST, SOURCE, STATE, TEXT, TOKENIZER,
};

use std::io::{self, ErrorKind, Write};
use std::path::{Path, PathBuf};

/// The prefix of every temp file this crate makes.
pub const TEMP_PREFIX: &str = ".skyctl-tmp-";

/// A file being written; it replaces its destination on [`AtomicFile::commit`], and is
/// removed if dropped before. While it lives its path is in the process's list of live temp
/// files ([`remove_live_temps`]), so a signal handler that ends the process can remove it.
pub struct AtomicFile {
    tmp: tempfile::NamedTempFile,
    dest: PathBuf,
    fsync: bool,
    /// Dropped after `tmp` (fields drop in order): the path leaves the list once the file is
    /// renamed or removed.
    _live: Live,
}

/// The temp files of live [`AtomicFile`]s of this process.
static LIVE: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());

fn live() -> std::sync::MutexGuard<'static, Vec<PathBuf>> {
    LIVE.lock().unwrap_or_else(|p| p.into_inner())
}

/// One entry of [`LIVE`], removed on drop.
struct Live(PathBuf);

impl Drop for Live {
    fn drop(&mut self) {
        let mut live = live();
        if let Some(i) = live.iter().position(|p| *p == self.0) {
            live.swap_remove(i);
        }
    }
}

/// Remove the temp file of every live [`AtomicFile`], for a process about to exit on a signal
/// (the destructors that would remove them do not run). The list stays locked on return, so
/// no temp file can be created (nor renamed into place) after this: call it only right
/// before `std::process::exit`. Returns how many it removed.
pub fn remove_live_temps() -> usize {
    let live = live();
    let mut removed = 0;
    for p in live.iter() {
        if std::fs::remove_file(p).is_ok() {
            removed += 1;
        }
    }
    // Held until the process exits: a writer that creates or commits now waits for ever.
    std::mem::forget(live);
    removed
}

impl AtomicFile {
    /// Start writing `path`. Its parent directory must exist: a mistyped output folder is an
    /// error, not a new folder.
    pub fn create(path: &Path) -> io::Result<AtomicFile> {
        check_destination(path)?;
        let dir = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        // Created with the list locked: a signal handler that removes the listed files
        // cannot run between the file's creation and its listing.
        let mut live = live();
        let tmp = tempfile::Builder::new()
            .prefix(TEMP_PREFIX)
            .tempfile_in(dir)?;
        // Absolute: the handler removes it whatever the current directory is by then.
        let listed = std::path::absolute(tmp.path()).unwrap_or_else(|_| tmp.path().to_path_buf());
        live.push(listed.clone());
        drop(live);
        let guard = Live(listed);
        Ok(AtomicFile {
            tmp,
            dest: path.to_path_buf(),
            fsync: true,
            _live: guard,
        })
    }

    /// The temp file, for writers that want a `File`.
    pub fn as_file(&self) -> &std::fs::File {
        self.tmp.as_file()
    }

    /// Flush, fsync (unless written with [`write_cache`]) and rename onto the destination.
    pub fn commit(mut self) -> io::Result<()> {
        self.tmp.flush()?;
        set_readable(self.tmp.as_file())?;
        if self.fsync {
            self.tmp.as_file().sync_all()?;
        }
        // Checked again: the destination may have changed while we wrote.
        check_destination(&self.dest)?;
        // Renamed with the list locked: a signal handler removes the temp file before the
        // rename or not at all.
        let live = live();
        let res = self.tmp.persist(&self.dest).map_err(|e| e.error);
        drop(live);
        res?;
        Ok(())
    }
}

impl Write for AtomicFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.tmp.write(buf)
    }
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        self.tmp.write_all(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.tmp.flush()
    }
}

/// Replace `path` with `bytes`, fsynced.
pub fn write(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut f = AtomicFile::create(path)?;
    f.write_all(bytes)?;
    f.commit()
}

/// Replace `path` with `bytes` without fsync: for files that only cache what can be rebuilt.
pub fn write_cache(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut f = AtomicFile::create(path)?;
    f.fsync = false;
    f.write_all(bytes)?;
    f.commit()
}

/// The destination is absent or a regular file (not followed through a symlink).
fn check_destination(path: &Path) -> io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(md) if md.file_type().is_file() => Ok(()),
        Ok(md) => {
            let what = if md.file_type().is_symlink() {
                "a symlink"
            } else if md.is_dir() {
                "a directory"
            } else {
                "not a regular file (a FIFO, socket or device)"
            };
            Err(io::Error::new(
                ErrorKind::InvalidInput,
                format!("refusing to replace `{}`: it is {what}", path.display()),
            ))
        }
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// Temp files are created 0600; what we write is meant to be read by others.
fn set_readable(f: &std::fs::File) -> io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        f.set_permissions(std::fs::Permissions::from_mode(0o644))?;
    }
    #[cfg(not(unix))]
    let _ = f;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_whole_and_leaves_no_temp() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.bin");
        write(&p, b"one").unwrap();
        write_cache(&p, b"two").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 1);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&p).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o644);
        }
    }

    #[test]
    fn an_unfinished_file_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.bin");
        let mut f = AtomicFile::create(&p).unwrap();
        f.write_all(b"half").unwrap();
        drop(f);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn a_temp_file_is_listed_while_it_lives() {
        let dir = tempfile::tempdir().unwrap();
        let listed = |f: &AtomicFile| live().contains(&f.tmp.path().to_path_buf());
        let f = AtomicFile::create(&dir.path().join("a")).unwrap();
        assert!(listed(&f));
        let path = f.tmp.path().to_path_buf();
        f.commit().unwrap();
        assert!(!live().contains(&path));
        let f = AtomicFile::create(&dir.path().join("b")).unwrap();
        let path = f.tmp.path().to_path_buf();
        drop(f);
        assert!(!live().contains(&path));
    }

    #[cfg(unix)]
    #[test]
    fn special_files_and_symlinks_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("target");
        std::fs::write(&target, "keep").unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let e = write(&link, b"x").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput);
        assert!(e.to_string().contains("it is a symlink"), "{e}");
        assert_eq!(std::fs::read(&target).unwrap(), b"keep");
        let e = write(Path::new("/dev/null"), b"x").unwrap_err();
        assert!(e.to_string().contains("FIFO, socket or device"), "{e}");
        let e = write(dir.path(), b"x").unwrap_err();
        assert!(e.to_string().contains("a directory"), "{e}");
    }
}
