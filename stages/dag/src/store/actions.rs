//! The action log: one append-only log per build process, records checked line by line.

use super::*;

impl Store {
    pub(super) fn logs(&self) -> Vec<PathBuf> {
        let dir = self.root.join("actions");
        let mut out: Vec<PathBuf> = std::fs::read_dir(&dir)
            .map(|rd| {
                rd.flatten()
                    .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
                    .map(|e| e.path())
                    .filter(|p| p.extension().is_some_and(|x| x == "log"))
                    .collect()
            })
            .unwrap_or_default();
        out.sort();
        out
    }

    pub(super) fn read_log(path: &Path) -> std::io::Result<LogContent> {
        let bytes = fsutil::read_regular(path, sky_fs::STATE)?;
        let mut out = LogContent::default();
        let mut rest = bytes.as_slice();
        let mut line_no = 0;
        // A last line without its newline is a write cut short by a kill: ignored.
        while let Some(end) = rest.iter().position(|&b| b == b'\n') {
            line_no += 1;
            let line = &rest[..end];
            rest = &rest[end + 1..];
            match parse_line(line) {
                Ok(rec) => out.records.push(rec),
                Err(msg) => out.bad.push((line_no, msg)),
            }
        }
        Ok(out)
    }

    pub(super) fn with_index<T>(&self, f: impl FnOnce(&mut ActionIndex) -> T) -> T {
        let mut guard = self
            .shared
            .index
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        f(guard.get_or_insert_with(|| ActionIndex::load(&self.logs())))
    }

    /// Read the action logs on another thread, for the lookups a build is about to make (a
    /// node whose inputs changed usually misses, and a miss reads every log). Best effort:
    /// without a thread, the first lookup reads them.
    pub fn read_actions_ahead(&self) {
        let store = self.clone();
        let _ = std::thread::Builder::new()
            .name("action-logs".into())
            .spawn(move || store.with_index(|_| ()));
    }

    /// Whether an action record exists for `key` (blobs not checked).
    pub fn has_action(&self, key: &Digest) -> bool {
        self.with_index(|ix| ix.get(key).is_some())
    }

    /// The action record of `key`; `None` when absent (treated as a cache miss).
    pub fn get_action(&self, key: &Digest) -> Option<ActionRecord> {
        self.with_index(|ix| ix.get(key))
    }

    /// Append (or supersede) the action record of `key` to this process's log.
    pub fn put_action(&self, key: &Digest, rec: &ActionRecord) -> Result<()> {
        self.refuse_write(&format!("the result of node `{}`", rec.node))?;
        let line = format_line(key, rec).map_err(|e| DagError::Store {
            path: self.root.join("actions"),
            message: e.to_string(),
        })?;
        {
            let mut log = self
                .shared
                .log
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            // A log deleted while this process runs (a node that removed `.skyctl`) takes
            // every line appended to it: start a new one.
            if log
                .as_ref()
                .is_some_and(|f| f.metadata().is_ok_and(|m| m.nlink() == 0))
            {
                *log = None;
            }
            if log.is_none() {
                let p = self.new_log_path();
                let open = || {
                    std::fs::OpenOptions::new()
                        .append(true)
                        .create_new(true)
                        .open(&p)
                };
                let f = fsutil::with_parent(&p, open).map_err(|e| DagError::io("create", &p, e))?;
                *log = Some(f);
            }
            if let Some(f) = log.as_mut() {
                // One write(2) per line (the buffer is small; `write_all` only loops on a short
                // write, which a kill can cause, leaving a torn last line that readers skip).
                f.write_all(&line)
                    .map_err(|e| DagError::io("append", self.root.join("actions"), e))?;
            }
        }
        let mut guard = self
            .shared
            .index
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(ix) = guard.as_mut() {
            ix.added.insert(*key, rec.clone());
        }
        Ok(())
    }

    pub(super) fn new_log_path(&self) -> PathBuf {
        let name = fsutil::temp_in(Path::new(""), &format!("{:015}", now_ms()));
        let name = name.to_string_lossy();
        let name = name.trim_end_matches(".tmp");
        self.root.join("actions").join(format!("{name}.log"))
    }
}

/// Every action log of the store, read once (mapped), searched for the few keys a build
/// usually looks up, or indexed (where the last line of each key is) when it looks up many: a
/// lookup parses and checks only the lines of its key (a build that looks up one new key does
/// not parse thousands of records). The later line wins; a last line that does not check (a
/// damaged log) falls back to the key's last good line, as if the damaged one were not there.
#[derive(Debug, Default)]
pub(super) struct ActionIndex {
    /// The logs' bytes (mapped when large: a log is only ever appended to, or removed whole by
    /// a compaction that holds the exclusive store lock, never cut).
    logs: Vec<crate::codec::FileBytes>,
    /// Key -> (log, start, end) of its last complete line, once built.
    last: Option<HashMap<Digest, (usize, usize, usize), foldhash::fast::RandomState>>,
    /// Lookups so far.
    lookups: usize,
    /// Records this process appended (they win).
    added: HashMap<Digest, ActionRecord>,
}

/// A line's key, when it has the shape of a record line (`<key hex> <sum hex> <json>`).
fn line_key(line: &[u8]) -> Option<Digest> {
    if line.len() < 130 || line[64] != b' ' || line[129] != b' ' {
        return None;
    }
    std::str::from_utf8(&line[..64])
        .ok()
        .and_then(Digest::from_hex)
}

/// The complete lines of a log (a last line without its newline is a write cut short).
fn lines(bytes: &[u8]) -> impl Iterator<Item = (usize, usize)> + '_ {
    let mut start = 0;
    memchr::memchr_iter(b'\n', bytes).map(move |end| {
        let line = (start, end);
        start = end + 1;
        line
    })
}

/// Lookups answered by searching the logs for the key before the map of every key is built (a
/// search is one pass of `memmem` over the logs; the map costs a few of them, and pays off when
/// many nodes look up keys, a cold build say).
const SEARCHES: usize = 8;

impl ActionIndex {
    fn load(paths: &[PathBuf]) -> ActionIndex {
        let mut ix = ActionIndex::default();
        for p in paths {
            // An unreadable log only costs cache misses.
            if let Ok(bytes) = crate::codec::FileBytes::read(p) {
                ix.logs.push(bytes);
            }
        }
        ix
    }

    /// The map of every key's last line.
    fn map(&mut self) -> &HashMap<Digest, (usize, usize, usize), foldhash::fast::RandomState> {
        let logs = &self.logs;
        self.last.get_or_insert_with(|| {
            let mut last = HashMap::default();
            for (log, bytes) in logs.iter().enumerate() {
                last.reserve(bytes.len() / 256);
                for (start, end) in lines(bytes) {
                    if let Some(key) = line_key(&bytes[start..end]) {
                        last.insert(key, (log, start, end));
                    }
                }
            }
            last
        })
    }

    fn get(&mut self, key: &Digest) -> Option<ActionRecord> {
        if let Some(rec) = self.added.get(key) {
            return Some(rec.clone());
        }
        self.lookups += 1;
        if self.last.is_none() && self.lookups <= SEARCHES {
            return self.search(key);
        }
        let &(log, start, end) = self.map().get(key)?;
        let line = self.logs.get(log)?.get(start..end)?;
        if let Ok((_, rec)) = parse_line(line) {
            return Some(rec);
        }
        // The last line of this key is damaged: the last good one counts.
        self.search(key)
    }

    /// The last good line of `key`, found by searching the logs from the last for the key at
    /// the start of a complete line, each log's lines from its last.
    fn search(&self, key: &Digest) -> Option<ActionRecord> {
        let mut hex = Vec::with_capacity(64);
        key.write_hex(&mut hex);
        // memchr's forward searcher runs a vector prefilter and its reverse one does not (5x
        // slower over a 1.8 MB log); a key not in the store, which a node run for the first
        // time looks up, reads every log whole either way.
        let finder = memchr::memmem::Finder::new(&hex);
        for bytes in self.logs.iter().rev() {
            let starts: Vec<usize> = finder
                .find_iter(bytes)
                .filter(|&at| at == 0 || bytes[at - 1] == b'\n')
                .collect();
            for &at in starts.iter().rev() {
                let Some(len) = memchr::memchr(b'\n', &bytes[at..]) else {
                    continue;
                };
                if let Ok((k, rec)) = parse_line(&bytes[at..at + len]) {
                    if k == *key {
                        return Some(rec);
                    }
                }
            }
        }
        None
    }
}

/// What one action log holds: good records in order, and the lines that are not.
#[derive(Debug, Default)]
pub(super) struct LogContent {
    pub(super) records: Vec<(Digest, ActionRecord)>,
    /// (1-based line, what is wrong) for complete lines that do not parse or check.
    pub(super) bad: Vec<(usize, BadLine)>,
}

/// Why a complete line of an action log is not a record.
#[derive(Debug, thiserror::Error)]
pub(super) enum BadLine {
    /// Not `<key hex> <blake3 hex> <json>`.
    #[error("not an action record line")]
    Malformed,
    /// The JSON does not hash to the line's checksum.
    #[error("action record does not match its checksum")]
    Checksum,
    /// The JSON checks but is not an action record.
    #[error("action record: {0}")]
    Json(#[source] serde_json::Error),
}

/// `<key hex> <blake3 hex of json> <json>\n`
pub(super) fn format_line(key: &Digest, rec: &ActionRecord) -> serde_json::Result<Vec<u8>> {
    let json = serde_json::to_vec(rec)?;
    let mut line = Vec::with_capacity(json.len() + 131);
    line.extend_from_slice(key.hex().as_bytes());
    line.push(b' ');
    line.extend_from_slice(Digest::of(&json).hex().as_bytes());
    line.push(b' ');
    line.extend_from_slice(&json);
    line.push(b'\n');
    Ok(line)
}

pub(super) fn parse_line(line: &[u8]) -> std::result::Result<(Digest, ActionRecord), BadLine> {
    if line.len() < 130 || line[64] != b' ' || line[129] != b' ' {
        return Err(BadLine::Malformed);
    }
    let hex = |b: &[u8]| std::str::from_utf8(b).ok().and_then(Digest::from_hex);
    let key = hex(&line[..64]).ok_or(BadLine::Malformed)?;
    let sum = hex(&line[65..129]).ok_or(BadLine::Malformed)?;
    let json = &line[130..];
    if Digest::of(json) != sum {
        return Err(BadLine::Checksum);
    }
    let rec = serde_json::from_slice(json).map_err(BadLine::Json)?;
    Ok((key, rec))
}
