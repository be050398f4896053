//! Small file-system helpers: atomic writes, verified copies, unique temp names.

use std::io::{Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::key::Digest;

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A temp path beside `target` (same directory, so a rename is atomic), unique per process and
/// call: `.skyctl-tmp-<name>.<pid>-<n>` ([`sky_fs::TEMP_PREFIX`], so a build that follows a
/// killed one can find and remove it, [`sweep_temps`]).
pub fn temp_beside(target: &Path) -> PathBuf {
    let name = target
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("file");
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    target.with_file_name(format!(
        "{}{name}.{}-{n}",
        sky_fs::TEMP_PREFIX,
        std::process::id()
    ))
}

/// Remove the temp files and directories ([`sky_fs::TEMP_PREFIX`]) in `dir` (not below it),
/// left there by a build or a node that was killed. Call with the workspace lock held: no
/// other build of this workspace is writing then. Returns how many were removed.
pub fn sweep_temps(dir: &Path) -> usize {
    use rustix::fs::{Mode, OFlags, RawDir};
    // Listed without a allocation per entry: an output folder may hold thousands of files,
    // and every build looks.
    let Ok(fd) = rustix::fs::open(
        dir,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    ) else {
        return 0;
    };
    let prefix = sky_fs::TEMP_PREFIX.as_bytes();
    let mut found = Vec::new();
    let mut buf = Vec::with_capacity(64 * 1024);
    let mut entries = RawDir::new(&fd, buf.spare_capacity_mut());
    while let Some(Ok(e)) = entries.next() {
        let name = e.file_name().to_bytes();
        if name.starts_with(prefix) {
            found.push(dir.join(std::ffi::OsStr::from_bytes(name)));
        }
    }
    found.iter().filter(|p| remove_path(p).is_ok()).count()
}

/// A unique name for a temp file inside `dir`.
pub fn temp_in(dir: &Path, stem: &str) -> PathBuf {
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    dir.join(format!("{stem}-{}-{n}-{t}.tmp", std::process::id()))
}

/// Why a verified copy failed.
#[derive(Debug)]
pub enum CopyError {
    /// The source's content does not hash to the expected digest.
    Corrupt {
        /// What it hashed to.
        actual: Digest,
    },
    /// An I/O error (including a missing source).
    Io(std::io::Error),
}

impl From<std::io::Error> for CopyError {
    fn from(e: std::io::Error) -> Self {
        CopyError::Io(e)
    }
}

/// Copy `src` to `dst` through a temp file beside `dst`, hashing as it goes; the rename happens
/// only if the content hashes to `expected`. Sets the executable bit when `exec`.
pub fn copy_verified(
    src: &Path,
    dst: &Path,
    expected: &Digest,
    exec: bool,
    fsync: bool,
) -> Result<(), CopyError> {
    if let Some(parent) = dst.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let tmp = temp_beside(dst);
    let res = (|| {
        let actual = copy_hashing(src, &tmp, fsync)?;
        if actual != *expected {
            return Err(CopyError::Corrupt { actual });
        }
        set_mode(&tmp, exec)?;
        std::fs::rename(&tmp, dst)?;
        Ok(())
    })();
    if res.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    res
}

/// Copy the regular file `src` ([`open_regular`]) to a new file `dst`, returning the blake3 of
/// what was copied.
pub fn copy_hashing(src: &Path, dst: &Path, fsync: bool) -> std::io::Result<Digest> {
    let mut input = open_regular(src)?;
    let mut out = std::fs::File::create(dst)?;
    let mut h = blake3::Hasher::new();
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        let n = match input.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        h.update(&buf[..n]);
        out.write_all(&buf[..n])?;
    }
    if fsync {
        out.sync_all()?;
    }
    Ok(Digest(*h.finalize().as_bytes()))
}

/// rw-r--r-- or rwxr-xr-x.
pub fn set_mode(path: &Path, exec: bool) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let mode = if exec { 0o755 } else { 0o644 };
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
}

/// r--r--r-- or r-xr-xr-x: blobs, and workspace files that are hard links to blobs.
pub fn set_readonly(path: &Path, exec: bool) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let mode = if exec { 0o555 } else { 0o444 };
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
}

/// Run `op` (which creates `path`); when it fails because the parent directory is missing,
/// create the parent and run it once more. Saves a `mkdir` per file where parents exist.
///
/// The retry does not depend on whether the parent is missing *now*: another thread may
/// have created it between the failure and the check (two nodes restoring into one fresh
/// directory), and giving up then made a remote-cache hit run the node instead.
pub fn with_parent<T>(
    path: &Path,
    mut op: impl FnMut() -> std::io::Result<T>,
) -> std::io::Result<T> {
    match op() {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => match path.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => {
                std::fs::create_dir_all(parent)?;
                op()
            }
            _ => Err(e),
        },
        r => r,
    }
}

/// Make the new file `dst` a copy-on-write clone of `src` (`FICLONE`: btrfs, XFS, bcachefs,
/// ...). Fails with an error that [`is_unsupported`] accepts where the file system cannot.
pub fn reflink(src: &Path, dst: &Path) -> std::io::Result<()> {
    let input = open_regular(src)?;
    let out = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(dst)?;
    rustix::fs::ioctl_ficlone(&out, &input).map_err(std::io::Error::from)
}

/// Whether an error from a reflink or hard link means "not possible here" (copy instead) rather
/// than a real failure.
pub fn is_unsupported(e: &std::io::Error) -> bool {
    use rustix::io::Errno;
    if e.kind() == std::io::ErrorKind::CrossesDevices || e.kind() == std::io::ErrorKind::Unsupported
    {
        return true;
    }
    e.raw_os_error().is_some_and(|code| {
        [
            Errno::OPNOTSUPP,
            Errno::XDEV,
            Errno::INVAL,
            Errno::NOTTY,
            Errno::NOSYS,
            Errno::PERM,
            Errno::MLINK,
        ]
        .iter()
        .any(|x| x.raw_os_error() == code)
    })
}

/// Remove a file or a directory tree; a missing path is fine.
pub fn remove_path(path: &Path) -> std::io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(md) if md.is_dir() => std::fs::remove_dir_all(path),
        Ok(_) => std::fs::remove_file(path),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// What kind of file `ft` is, in words ("a FIFO"), for messages about a path that should be
/// a regular file.
pub fn kind_name(ft: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if ft.is_dir() {
        "a directory"
    } else if ft.is_symlink() {
        "a symlink"
    } else if ft.is_fifo() {
        "a FIFO"
    } else if ft.is_socket() {
        "a socket"
    } else if ft.is_block_device() || ft.is_char_device() {
        "a device"
    } else {
        "a regular file"
    }
}

/// A path that must be a folder and is something else ([`must_be_folder`]); the message says
/// what it is and that it must be deleted, in one line.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("is {what}, not a folder skyctl can use: delete it (`rm {}`) and run again", path.display())]
pub struct NotAFolder {
    /// The path.
    pub path: std::path::PathBuf,
    /// What it is ([`kind_name`], or "a symlink to nothing usable").
    pub what: &'static str,
}

/// `Err` when `path` exists and is not a directory (nor a symlink to one, which a `--store`
/// may be).
pub fn must_be_folder(path: &Path) -> Result<(), NotAFolder> {
    let what = match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => return Ok(()),
        Ok(m) => kind_name(m.file_type()),
        Err(_) if std::fs::symlink_metadata(path).is_ok() => "a symlink to nothing usable",
        Err(_) => return Ok(()),
    };
    Err(NotAFolder {
        path: path.to_path_buf(),
        what,
    })
}

/// The error for a path that should be a regular file and is `what` ([`kind_name`]). Its kind
/// is [`std::io::ErrorKind::InvalidData`]; [`is_not_regular`] recognizes it.
pub fn not_regular(what: &str) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        format!("{NOT_REGULAR}{what}"),
    )
}

const NOT_REGULAR: &str = "not a regular file: ";

/// Whether `e` came from [`open_regular`] finding something other than a regular file.
pub fn is_not_regular(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::InvalidData && e.to_string().starts_with(NOT_REGULAR)
}

/// Open `path` for reading only if it is a regular file: never follows a symlink
/// (`O_NOFOLLOW`), never blocks on a FIFO (`O_NONBLOCK`: the open returns at once, and the
/// `fstat` that follows refuses it), never reads a directory or a device
/// ([`sky_fs::open_nofollow`]). What the store reads goes through here, so a blob replaced by
/// something else is an error, not a hang.
pub fn open_regular(path: &Path) -> std::io::Result<std::fs::File> {
    sky_fs::open_nofollow(path, sky_fs::CONTENT).map_err(regular_error)
}

/// A read error as the `io::Error` of this module: [`not_regular`] for a file of the wrong
/// type, the error without its path otherwise.
fn regular_error(e: sky_fs::ReadError) -> std::io::Error {
    match e.not_regular() {
        Some(what) => not_regular(what),
        None => e.into(),
    }
}

/// The content of a regular file, opened as [`open_regular`] does, at most `limit.max` bytes.
pub fn read_regular(path: &Path, limit: sky_fs::Limit) -> std::io::Result<Vec<u8>> {
    sky_fs::read_nofollow(path, limit).map_err(regular_error)
}

/// blake3 of a regular file's content, opened with [`open_regular`].
pub fn hash_regular(path: &Path) -> std::io::Result<Digest> {
    let mut f = open_regular(path)?;
    let mut h = blake3::Hasher::new();
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        let n = match f.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        h.update(&buf[..n]);
    }
    Ok(Digest(*h.finalize().as_bytes()))
}

/// fsync a directory (so a rename inside it is durable).
pub fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn must_be_folder_names_what_is_there() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(must_be_folder(dir.path()), Ok(()));
        assert_eq!(must_be_folder(&dir.path().join("none")), Ok(()));
        let file = dir.path().join("f");
        std::fs::write(&file, "x").unwrap();
        let e = must_be_folder(&file).unwrap_err();
        assert_eq!(
            (e.path.as_path(), e.what),
            (file.as_path(), "a regular file")
        );
        assert!(
            e.to_string()
                .starts_with("is a regular file, not a folder skyctl can use"),
            "{e}"
        );
    }

    #[test]
    fn with_parent_retries_when_another_thread_made_the_parent_first() {
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("fresh/sub/file");
        let mut calls = 0;
        // The interleaving of two restores into one new directory: the first try fails for
        // want of the parent, which the other thread creates before this one looks.
        let res = with_parent(&dest, || {
            calls += 1;
            if calls == 1 {
                std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
                return Err(std::io::Error::from(std::io::ErrorKind::NotFound));
            }
            std::fs::write(&dest, b"x")
        });
        assert!(res.is_ok(), "{res:?}");
        assert_eq!(calls, 2);
        assert_eq!(std::fs::read(&dest).unwrap(), b"x");
    }

    #[test]
    fn open_regular_refuses_fifos_symlinks_and_directories_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, b"x").unwrap();
        assert_eq!(hash_regular(&file).unwrap(), Digest::of(b"x"));
        let fifo = dir.path().join("fifo");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        for (p, what) in [
            (&fifo, "a FIFO"),
            (&link, "a symlink"),
            (&dir.path().to_path_buf(), "a directory"),
        ] {
            let e = open_regular(p).unwrap_err();
            assert!(is_not_regular(&e), "{e}");
            assert_eq!(e.to_string(), format!("not a regular file: {what}"));
            assert!(copy_hashing(p, &dir.path().join("out"), false).is_err());
        }
    }

    #[test]
    fn with_parent_reports_a_missing_source_after_one_retry() {
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("d/file");
        let mut calls = 0;
        let res = with_parent(&dest, || {
            calls += 1;
            std::fs::rename(dir.path().join("no-such-source"), &dest)
        });
        assert_eq!(res.unwrap_err().kind(), std::io::ErrorKind::NotFound);
        assert_eq!(calls, 2);
        assert!(dest.parent().unwrap().is_dir());
    }
}
