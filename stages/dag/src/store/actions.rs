//! The action log: one append-only log per build process, records checked line by line.

use super::*;

impl Store {
    pub(super) fn logs(&self) -> Vec<PathBuf> {
        let dir = self.root.join("actions");
        let mut out: Vec<PathBuf> = std::fs::read_dir(&dir)
            .map(|rd| {
                rd.flatten()
                    .map(|e| e.path())
                    .filter(|p| p.extension().is_some_and(|x| x == "log"))
                    .collect()
            })
            .unwrap_or_default();
        out.sort();
        out
    }

    pub(super) fn read_log(path: &Path) -> std::io::Result<LogContent> {
        let bytes = std::fs::read(path)?;
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

    pub(super) fn with_index<T>(
        &self,
        f: impl FnOnce(&mut HashMap<Digest, ActionRecord>) -> T,
    ) -> T {
        let mut guard = self
            .shared
            .index
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let index = guard.get_or_insert_with(|| {
            let mut index = HashMap::new();
            for p in self.logs() {
                // An unreadable log only costs cache misses.
                if let Ok(content) = Self::read_log(&p) {
                    index.extend(content.records);
                }
            }
            index
        });
        f(index)
    }

    /// Whether an action record exists for `key` (blobs not checked).
    pub fn has_action(&self, key: &Digest) -> bool {
        self.with_index(|ix| ix.contains_key(key))
    }

    /// The action record of `key`; `None` when absent (treated as a cache miss).
    pub fn get_action(&self, key: &Digest) -> Option<ActionRecord> {
        self.with_index(|ix| ix.get(key).cloned())
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
            if log.is_none() {
                let p = self.new_log_path();
                let f = std::fs::OpenOptions::new()
                    .append(true)
                    .create_new(true)
                    .open(&p)
                    .map_err(|e| DagError::io("create", &p, e))?;
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
            ix.insert(*key, rec.clone());
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

/// What one action log holds: good records in order, and the lines that are not.
#[derive(Debug, Default)]
pub(super) struct LogContent {
    pub(super) records: Vec<(Digest, ActionRecord)>,
    /// (1-based line, what is wrong) for complete lines that do not parse or check.
    pub(super) bad: Vec<(usize, String)>,
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

pub(super) fn parse_line(line: &[u8]) -> std::result::Result<(Digest, ActionRecord), String> {
    let bad = || "not an action record line".to_string();
    if line.len() < 130 || line[64] != b' ' || line[129] != b' ' {
        return Err(bad());
    }
    let hex = |b: &[u8]| std::str::from_utf8(b).ok().and_then(Digest::from_hex);
    let key = hex(&line[..64]).ok_or_else(bad)?;
    let sum = hex(&line[65..129]).ok_or_else(bad)?;
    let json = &line[130..];
    if Digest::of(json) != sum {
        return Err("action record does not match its checksum".into());
    }
    let rec = serde_json::from_slice(json).map_err(|e| format!("action record: {e}"))?;
    Ok((key, rec))
}
