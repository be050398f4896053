//! The one way the workspace's crates read a file: [`read`], [`read_to_string`], or [`open`]
//! for the readers that stream or map (models, hashing, stored blobs).
//!
//! Every read names the [`Limit`] of its kind of file. The path is opened following links,
//! with `O_NONBLOCK` (a FIFO with no writer never blocks the open) and `O_NOCTTY`; the type is
//! then checked on the opened descriptor (`fstat`), so a FIFO, a device, a socket or a
//! directory is refused with a message naming the path and what it is. The size the metadata
//! gives is checked against the limit before a byte is read (a 3 GiB sparse file costs
//! nothing), and the read itself stops at the limit plus one byte (a file that grows, or a
//! `/proc` file that reports no size, cannot run past it). Errors name the path:
//!
//! ```text
//! tok/tokenizer.json: 3.0 GiB is over the 64 MiB limit for a tokenizer file
//! tok/tokenizer.json: not a regular file (a FIFO); a tokenizer file must be one
//! ```
//!
//! ```
//! let dir = tempfile::tempdir()?;
//! let path = dir.path().join("config.json");
//! sky_fs::write(&path, b"{}")?;
//! assert_eq!(sky_fs::read_to_string(&path, sky_fs::CONFIG)?, "{}");
//! let e = sky_fs::read(std::path::Path::new("/dev/zero"), sky_fs::CONFIG).unwrap_err();
//! assert!(e.to_string().starts_with("/dev/zero: not a regular file (a character device)"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::fmt;
use std::fs::File;
use std::io::{self, ErrorKind, Read};
use std::path::{Path, PathBuf};

/// What kind of file is read, and how large one may be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limit {
    /// The kind of file, with its article, for messages: "a tokenizer file".
    pub what: &'static str,
    /// The largest size accepted, in bytes; `None`: any size (the reader maps or streams it,
    /// and its own header says how much of it is looked at).
    pub max: Option<u64>,
    /// Whether a FIFO or pipe is accepted (read up to `max`): only for inputs a user may
    /// stream on purpose (`--request <(...)`).
    pub pipes: bool,
}

impl Limit {
    /// A kind of file of at most `max` bytes.
    pub const fn new(what: &'static str, max: u64) -> Limit {
        Limit {
            what,
            max: Some(max),
            pipes: false,
        }
    }

    /// A kind of file of any size (still a regular file).
    pub const fn any_size(what: &'static str) -> Limit {
        Limit {
            what,
            max: None,
            pipes: false,
        }
    }
}

const MIB: u64 = 1 << 20;

/// A checkpoint's `config.json`, `encoder/config.json`, `rl_agent_config.json`.
pub const CONFIG: Limit = Limit::new("a checkpoint config", 4 * MIB);
/// A checkpoint's `tokenizer.json`.
pub const TOKENIZER: Limit = Limit::new("a tokenizer file", 64 * MIB);
/// An `ask --request` file; a FIFO or pipe is accepted too.
pub const REQUEST: Limit = Limit {
    what: "a request",
    max: Some(64 * MIB),
    pipes: true,
};
/// A cases or expected-answers JSONL file (`tune --cases`, `golden record --cases`, a
/// `[[golden]]`'s `cases` and `expected`).
pub const CASES: Limit = Limit::new("a cases file", 64 * MIB);
/// A calibration prompt set (`--prompts`, `[calibration.<name>] prompts`).
pub const PROMPTS: Limit = Limit::new("a prompt set", 64 * MIB);
/// A calibration file (`--calibration`, `calibration.json`).
pub const CALIBRATION: Limit = Limit::new("a calibration file", 64 * MIB);
/// A policy file (`--policy`, a tuned policy).
pub const POLICY: Limit = Limit::new("a policy file", MIB);
/// A JSON report a node wrote (bench, tune, golden) read back.
pub const REPORT: Limit = Limit::new("a JSON report", 64 * MIB);
/// The pipeline manifest (`pipeline.toml`, `--manifest`).
pub const PIPELINE: Limit = Limit::new("a pipeline manifest", 4 * MIB);
/// A small text file of a workspace (`.gitignore`, a CUDA toolchain pin).
pub const TEXT: Limit = Limit::new("a workspace text file", 4 * MIB);
/// A PEM CA bundle (`SKYCTL_REMOTE_CACHE_CA`).
pub const CA_BUNDLE: Limit = Limit::new("a CA bundle", MIB);
/// A kernel source or PTX file.
pub const SOURCE: Limit = Limit::new("a kernel source", 64 * MIB);
/// A PNGOLDEN1 golden file: any size, but read only as far as its header declares.
pub const GOLDEN: Limit = Limit::any_size("a PNGOLDEN1 file");
/// A model file (GGUF, safetensors): mapped or streamed, its header bounds what is read.
pub const MODEL: Limit = Limit::any_size("a model file");
/// A file of skyctl's own state or store (journal, logs, records): written by skyctl, read
/// whole.
pub const STATE: Limit = Limit::new("a build state file", 1 << 30);
/// A file hashed, copied or uploaded as it is (a node's input or output, a stored blob).
pub const CONTENT: Limit = Limit::any_size("a file");

/// Why a file could not be read; its message starts with the path.
#[derive(Debug)]
pub struct ReadError {
    path: PathBuf,
    what: &'static str,
    problem: Problem,
}

#[derive(Debug)]
enum Problem {
    Io(io::Error),
    NotRegular(&'static str),
    TooBig { size: Option<u64>, max: u64 },
    NotUtf8,
}

impl ReadError {
    /// The path that could not be read.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether the file does not exist.
    pub fn is_not_found(&self) -> bool {
        matches!(&self.problem, Problem::Io(e) if e.kind() == ErrorKind::NotFound)
    }

    /// What kind of file the path is, when it is not a regular file ("a FIFO").
    pub fn not_regular(&self) -> Option<&'static str> {
        match self.problem {
            Problem::NotRegular(what) => Some(what),
            _ => None,
        }
    }

    /// The message without the path, for errors that name the path themselves.
    pub fn problem(&self) -> String {
        match &self.problem {
            Problem::Io(e) => e.to_string(),
            Problem::NotRegular(kind) => {
                format!("not a regular file ({kind}); {} must be one", self.what)
            }
            Problem::TooBig {
                size: Some(size),
                max,
            } => format!(
                "{} is over the {} limit for {}",
                size_in_words(*size),
                size_in_words(*max),
                self.what
            ),
            Problem::TooBig { size: None, max } => format!(
                "more than the {} limit for {} (read no further)",
                size_in_words(*max),
                self.what
            ),
            Problem::NotUtf8 => format!("{} must be UTF-8 text, and this is not", self.what),
        }
    }
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.problem())
    }
}

impl std::error::Error for ReadError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.problem {
            Problem::Io(e) => Some(e),
            _ => None,
        }
    }
}

/// The error without the path (callers that wrap an `io::Error` with the path themselves):
/// a missing file keeps its kind; a file of the wrong type or size is `InvalidData`.
impl From<ReadError> for io::Error {
    fn from(e: ReadError) -> io::Error {
        match e.problem {
            Problem::Io(err) => err,
            _ => io::Error::new(ErrorKind::InvalidData, e.problem()),
        }
    }
}

/// A size in words: "512 bytes", "64 MiB", "3.0 GiB".
pub fn size_in_words(n: u64) -> String {
    const UNITS: [(&str, u32); 4] = [("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)];
    for (unit, shift) in UNITS {
        let one = 1u64 << shift;
        if n >= one {
            return if n.is_multiple_of(one) {
                format!("{} {unit}", n >> shift)
            } else {
                format!("{:.1} {unit}", n as f64 / one as f64)
            };
        }
    }
    if n == 1 {
        "1 byte".into()
    } else {
        format!("{n} bytes")
    }
}

/// What the file type is, in words ("a FIFO"), for messages about a path that should be a
/// regular file.
pub fn type_in_words(ft: std::fs::FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if ft.is_fifo() {
            return "a FIFO";
        }
        if ft.is_socket() {
            return "a socket";
        }
        if ft.is_char_device() {
            return "a character device";
        }
        if ft.is_block_device() {
            return "a block device";
        }
    }
    if ft.is_dir() {
        "a directory"
    } else if ft.is_symlink() {
        "a symlink"
    } else if ft.is_file() {
        "a regular file"
    } else {
        "a special file"
    }
}

/// Open `path` (following links) for reading if it is a regular file within `limit` (a FIFO
/// or pipe too where `limit.pipes`). Never blocks: see the module's documentation.
pub fn open(path: &Path, limit: Limit) -> Result<File, ReadError> {
    open_with(path, limit, true).map(|(file, _)| file)
}

/// [`open`], refusing a symlink at `path` itself (`O_NOFOLLOW`): for skyctl's own store,
/// where a link is damage.
pub fn open_nofollow(path: &Path, limit: Limit) -> Result<File, ReadError> {
    open_with(path, limit, false).map(|(file, _)| file)
}

/// The file, and its size as its `fstat` said (0 for a pipe).
fn open_with(path: &Path, limit: Limit, follow: bool) -> Result<(File, u64), ReadError> {
    let err = |problem| ReadError {
        path: path.to_path_buf(),
        what: limit.what,
        problem,
    };
    let file = open_nonblocking(path, follow).map_err(|e| {
        if !follow && is_loop(&e) {
            err(Problem::NotRegular("a symlink"))
        } else {
            err(Problem::Io(e))
        }
    })?;
    let meta = file.metadata().map_err(|e| err(Problem::Io(e)))?;
    let ft = meta.file_type();
    if ft.is_file() {
        if let Some(max) = limit.max {
            if meta.len() > max {
                return Err(err(Problem::TooBig {
                    size: Some(meta.len()),
                    max,
                }));
            }
        }
        return Ok((file, meta.len()));
    }
    if limit.pipes && is_fifo(ft) {
        // Opened without blocking; reads of a pipe from here on wait for its writer.
        set_blocking(&file).map_err(|e| err(Problem::Io(e)))?;
        return Ok((file, 0));
    }
    Err(err(Problem::NotRegular(type_in_words(ft))))
}

#[cfg(unix)]
fn open_nonblocking(path: &Path, follow: bool) -> io::Result<File> {
    use rustix::fs::OFlags;
    use std::os::unix::fs::OpenOptionsExt;
    let mut flags = OFlags::NONBLOCK | OFlags::NOCTTY;
    if !follow {
        flags |= OFlags::NOFOLLOW;
    }
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(flags.bits() as i32)
        .open(path)
}

#[cfg(not(unix))]
fn open_nonblocking(path: &Path, _follow: bool) -> io::Result<File> {
    std::fs::OpenOptions::new().read(true).open(path)
}

#[cfg(unix)]
fn is_loop(e: &io::Error) -> bool {
    e.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error())
}

#[cfg(not(unix))]
fn is_loop(_: &io::Error) -> bool {
    false
}

#[cfg(unix)]
fn is_fifo(ft: std::fs::FileType) -> bool {
    std::os::unix::fs::FileTypeExt::is_fifo(&ft)
}

#[cfg(not(unix))]
fn is_fifo(_: std::fs::FileType) -> bool {
    false
}

#[cfg(unix)]
fn set_blocking(file: &File) -> io::Result<()> {
    use rustix::fs::{fcntl_getfl, fcntl_setfl, OFlags};
    let flags = fcntl_getfl(file)?;
    fcntl_setfl(file, flags - OFlags::NONBLOCK)?;
    Ok(())
}

#[cfg(not(unix))]
fn set_blocking(_: &File) -> io::Result<()> {
    Ok(())
}

/// The bytes of the regular file at `path`, at most `limit.max` of them.
pub fn read(path: &Path, limit: Limit) -> Result<Vec<u8>, ReadError> {
    let (file, size) = open_with(path, limit, true)?;
    read_sized(file, size, path, limit)
}

/// [`read`], refusing a symlink at `path` itself ([`open_nofollow`]).
pub fn read_nofollow(path: &Path, limit: Limit) -> Result<Vec<u8>, ReadError> {
    let (file, size) = open_with(path, limit, false)?;
    read_sized(file, size, path, limit)
}

/// The text of the regular file at `path` ([`read`], then UTF-8).
pub fn read_to_string(path: &Path, limit: Limit) -> Result<String, ReadError> {
    let bytes = read(path, limit)?;
    String::from_utf8(bytes).map_err(|_| ReadError {
        path: path.to_path_buf(),
        what: limit.what,
        problem: Problem::NotUtf8,
    })
}

/// Read a file [`open`]ed with `limit` to its end, stopping one byte past `limit.max`.
pub fn read_open(file: File, path: &Path, limit: Limit) -> Result<Vec<u8>, ReadError> {
    let size = file.metadata().map(|m| m.len()).unwrap_or(0);
    read_sized(file, size, path, limit)
}

/// [`read_open`] of a file whose `fstat` said `size` (the capacity first allocated).
fn read_sized(file: File, size: u64, path: &Path, limit: Limit) -> Result<Vec<u8>, ReadError> {
    let err = |problem| ReadError {
        path: path.to_path_buf(),
        what: limit.what,
        problem,
    };
    let max = limit.max.unwrap_or(u64::MAX);
    let mut bytes = Vec::with_capacity(size.min(max).min(64 * MIB) as usize);
    file.take(max.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| err(Problem::Io(e)))?;
    if bytes.len() as u64 > max {
        return Err(err(Problem::TooBig { size: None, max }));
    }
    Ok(bytes)
}

/// Copy the regular file `src` (opened as [`open`] does, within `limit`) to `dst`, created or
/// truncated; returns the bytes copied. An error writing names `dst`.
pub fn copy(src: &Path, dst: &Path, limit: Limit) -> Result<u64, ReadError> {
    let file = open(src, limit)?;
    let at = |path: &Path| {
        let path = path.to_path_buf();
        move |e| ReadError {
            path,
            what: limit.what,
            problem: Problem::Io(e),
        }
    };
    let mut out = File::create(dst).map_err(at(dst))?;
    let copied = io::copy(&mut file.take(limit.max.unwrap_or(u64::MAX)), &mut out);
    copied.map_err(at(src))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fifo(dir: &Path) -> PathBuf {
        let p = dir.join("fifo");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &p,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        p
    }

    #[test]
    fn sizes_in_words() {
        assert_eq!(size_in_words(0), "0 bytes");
        assert_eq!(size_in_words(1), "1 byte");
        assert_eq!(size_in_words(1023), "1023 bytes");
        assert_eq!(size_in_words(64 << 20), "64 MiB");
        assert_eq!(size_in_words(3 << 30), "3 GiB");
        assert_eq!(size_in_words((3 << 30) + (1 << 29)), "3.5 GiB");
        assert_eq!(size_in_words(1536), "1.5 KiB");
    }

    #[test]
    fn a_regular_file_within_its_limit_is_read_through_links() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, b"hello").unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&p, &link).unwrap();
        assert_eq!(read(&link, Limit::new("a test file", 5)).unwrap(), b"hello");
        assert_eq!(read_to_string(&p, CONFIG).unwrap(), "hello");
        let e = open_nofollow(&link, CONFIG).unwrap_err();
        assert_eq!(e.not_regular(), Some("a symlink"));
        let e = read(&p, Limit::new("a test file", 4)).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "{}: 5 bytes is over the 4 bytes limit for a test file",
                p.display()
            )
        );
        std::fs::write(&p, [0xff, 0xfe]).unwrap();
        let e = read_to_string(&p, CONFIG).unwrap_err();
        assert!(e
            .to_string()
            .ends_with("must be UTF-8 text, and this is not"));
        let e = read(&dir.path().join("none"), CONFIG).unwrap_err();
        assert!(e.is_not_found());
        assert_eq!(io::Error::from(e).kind(), ErrorKind::NotFound);
    }

    #[test]
    fn special_files_are_refused_without_blocking_or_reading() {
        let dir = tempfile::tempdir().unwrap();
        let f = fifo(dir.path());
        let e = read(&f, TOKENIZER).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "{}: not a regular file (a FIFO); a tokenizer file must be one",
                f.display()
            )
        );
        let zero_link = dir.path().join("zero");
        std::os::unix::fs::symlink("/dev/zero", &zero_link).unwrap();
        let e = read(&zero_link, TOKENIZER).unwrap_err();
        assert_eq!(e.not_regular(), Some("a character device"));
        let e = read(dir.path(), CONFIG).unwrap_err();
        assert_eq!(e.not_regular(), Some("a directory"));
        // A pipe where pipes are accepted: no writer, so the read ends at once, empty.
        assert_eq!(read(&f, REQUEST).unwrap(), b"");
    }

    #[test]
    fn a_huge_sparse_file_is_refused_by_its_size_unread() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("big");
        File::create(&p).unwrap().set_len(3 << 30).unwrap();
        let e = read(&p, TOKENIZER).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "{}: 3 GiB is over the 64 MiB limit for a tokenizer file",
                p.display()
            )
        );
        assert_eq!(io::Error::from(e).kind(), ErrorKind::InvalidData);
        // A file of any size opens; its reader decides what to look at.
        assert!(open(&p, MODEL).is_ok());
        let e = copy(&p, &dir.path().join("copy"), TOKENIZER).unwrap_err();
        assert!(e.to_string().contains("over the 64 MiB limit"), "{e}");
        std::fs::write(&p, b"small").unwrap();
        assert_eq!(copy(&p, &dir.path().join("copy"), TOKENIZER).unwrap(), 5);
        assert_eq!(std::fs::read(dir.path().join("copy")).unwrap(), b"small");
    }

    #[test]
    fn a_file_that_reports_no_size_is_still_cut_at_the_limit() {
        // /proc files report a size of 0.
        let p = Path::new("/proc/self/status");
        if p.exists() {
            let e = read(p, Limit::new("a test file", 8)).unwrap_err();
            assert!(e.to_string().contains("more than the 8 bytes limit"), "{e}");
        }
    }
}
