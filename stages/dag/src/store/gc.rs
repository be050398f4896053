//! Keeping the store sound: `check` reports problems, `gc` and compaction drop what no build needs.

use super::actions::format_line;
use super::*;

/// What is wrong with an entry of `blobs/` ([`Store::blob_entries`]).
#[derive(Debug, thiserror::Error)]
pub(super) enum BadBlobEntry {
    /// Not a folder among the fan-out folders: what it is instead.
    #[error("{0}, not a blob folder")]
    NotAFolder(&'static str),
    /// Not a regular file in a blob's place: what it is instead.
    #[error("{0}, not a regular file")]
    NotAFile(&'static str),
    /// A name that is not `<2 hex>/<62 hex>`.
    #[error("not a blob name")]
    NotABlobName,
    /// Its type could not be read.
    #[error("unreadable: {0}")]
    Unreadable(#[source] std::io::Error),
}

impl Store {
    /// Remove the temp files (`tmp/<stem>-<pid>-<n>-<t>.tmp`) of processes that no longer run:
    /// what a build killed mid-write left. Other processes' live temp files stay (builds of
    /// other workspaces may share the store). Returns how many were removed.
    pub fn sweep_dead_temps(&self) -> usize {
        let mut removed = 0;
        for p in self.walk("tmp") {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            let pid = name
                .rsplit('-')
                .nth(2)
                .and_then(|s| s.parse::<i32>().ok())
                .and_then(rustix::process::Pid::from_raw);
            let alive = match pid {
                Some(pid) => !matches!(
                    rustix::process::test_kill_process(pid),
                    Err(rustix::io::Errno::SRCH)
                ),
                None => true,
            };
            if !alive && std::fs::remove_file(&p).is_ok() {
                removed += 1;
            }
        }
        removed
    }

    pub(super) fn walk(&self, sub: &str) -> Vec<PathBuf> {
        let mut out: Vec<PathBuf> = walkdir::WalkDir::new(self.root.join(sub))
            .min_depth(1)
            .into_iter()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_type().is_file())
            .map(|e| e.into_path())
            .collect();
        out.sort();
        out
    }

    /// Every entry of `blobs/`, each with its digest when it is what a blob should be (a
    /// regular file named `<2 hex>/<62 hex>` in a fan-out folder), else what is wrong with it.
    /// A directory, symlink or FIFO in a blob's place is listed, never entered or opened.
    pub(super) fn blob_entries(&self) -> Vec<(PathBuf, std::result::Result<Digest, BadBlobEntry>)> {
        let mut out = Vec::new();
        let Ok(fans) = std::fs::read_dir(self.root.join("blobs")) else {
            return out;
        };
        for fan in fans.flatten() {
            let path = fan.path();
            match fan.file_type() {
                Ok(t) if t.is_dir() => {}
                Ok(t) => {
                    out.push((path, Err(BadBlobEntry::NotAFolder(fsutil::kind_name(t)))));
                    continue;
                }
                Err(e) => {
                    out.push((path, Err(BadBlobEntry::Unreadable(e))));
                    continue;
                }
            }
            let Ok(entries) = std::fs::read_dir(&path) else {
                continue;
            };
            for e in entries.flatten() {
                let p = e.path();
                let verdict = match (e.file_type(), Self::digest_from_path(&p)) {
                    (Ok(t), Some(d)) if t.is_file() => Ok(d),
                    (Ok(t), Some(_)) => Err(BadBlobEntry::NotAFile(fsutil::kind_name(t))),
                    (Ok(_), None) => Err(BadBlobEntry::NotABlobName),
                    (Err(e), _) => Err(BadBlobEntry::Unreadable(e)),
                };
                out.push((p, verdict));
            }
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// The entries of the flat folder `sub` (`actions`, `builds`, `tmp`) that are not regular
    /// files, each with what it is.
    pub(super) fn odd_entries(&self, sub: &str) -> Vec<(PathBuf, &'static str)> {
        let mut out: Vec<(PathBuf, &'static str)> = std::fs::read_dir(self.root.join(sub))
            .map(|rd| {
                rd.flatten()
                    .filter_map(|e| {
                        let t = e.file_type().ok()?;
                        (!t.is_file()).then(|| (e.path(), fsutil::kind_name(t)))
                    })
                    .collect()
            })
            .unwrap_or_default();
        out.sort();
        out
    }

    pub(super) fn digest_from_path(p: &Path) -> Option<Digest> {
        let file = p.file_name()?.to_str()?;
        let dir = p.parent()?.file_name()?.to_str()?;
        Digest::from_hex(&format!("{dir}{file}"))
    }

    /// Verify every blob against its digest and every action record against its blobs (the
    /// record in force for each key: the last one logged).
    pub fn check(&self) -> Vec<Problem> {
        let mut problems = Vec::new();
        for (p, entry) in self.blob_entries() {
            match entry.map(|d| (d, statcache_hash(&p))) {
                Ok((d, Ok(actual))) if d == actual => {}
                Ok((_, Ok(actual))) => problems.push(Problem {
                    path: p,
                    message: format!("blob content hashes to {}", actual.short()),
                }),
                Err(bad) => problems.push(Problem {
                    path: p,
                    message: bad.to_string(),
                }),
                Ok((_, Err(e))) => problems.push(Problem {
                    path: p,
                    message: format!("unreadable: {e}"),
                }),
            }
        }
        for sub in ["actions", "builds", "tmp"] {
            for (path, what) in self.odd_entries(sub) {
                problems.push(Problem {
                    path,
                    message: format!("{what}, not a regular file"),
                });
            }
        }
        let mut in_force: HashMap<Digest, (PathBuf, ActionRecord)> = HashMap::new();
        for p in self.walk("actions") {
            if p.extension().is_none_or(|x| x != "log") {
                problems.push(Problem {
                    path: p,
                    message: "not an action log".into(),
                });
                continue;
            }
            match Self::read_log(&p) {
                Ok(content) => {
                    for (line, msg) in content.bad {
                        problems.push(Problem {
                            path: p.clone(),
                            message: format!("line {line}: {msg}"),
                        });
                    }
                    for (k, rec) in content.records {
                        in_force.insert(k, (p.clone(), rec));
                    }
                }
                Err(e) => problems.push(Problem {
                    path: p,
                    message: format!("unreadable: {e}"),
                }),
            }
        }
        let mut keys: Vec<&Digest> = in_force.keys().collect();
        keys.sort();
        for k in keys {
            let (p, rec) = &in_force[k];
            for d in self.referenced_blobs(rec) {
                match d {
                    Ok(d) if self.has_blob(&d) => {}
                    Ok(d) => problems.push(Problem {
                        path: p.clone(),
                        message: format!("node `{}`: blob {} is missing", rec.node, d.short()),
                    }),
                    Err(msg) => problems.push(Problem {
                        path: p.clone(),
                        message: format!("node `{}`: {msg}", rec.node),
                    }),
                }
            }
        }
        problems
    }

    /// Every blob an action record needs (outputs, tree children, log); a tree blob that is
    /// here but does not read as a tree is its error.
    pub(super) fn referenced_blobs(&self, rec: &ActionRecord) -> Vec<Result<Digest>> {
        let mut out = Vec::new();
        for o in &rec.outputs {
            out.push(Ok(o.digest));
            if o.dir {
                match self.get_tree(&o.digest) {
                    Ok(t) => out.extend(t.entries.iter().map(|e| Ok(e.digest))),
                    Err(e) if self.has_blob(&o.digest) => out.push(Err(e)),
                    Err(_) => {}
                }
            }
        }
        out.extend(rec.log.map(Ok));
        out
    }

    /// Rewrite every action log into one holding the records of `keep` (all when `None`), then
    /// remove the old logs. Needs the exclusive lock (no appender is running). Returns how many
    /// keys were dropped.
    pub(super) fn compact(
        &self,
        keep: Option<&BTreeSet<Digest>>,
    ) -> Result<(usize, Vec<ActionRecord>)> {
        let logs = self.logs();
        let mut index: HashMap<Digest, ActionRecord> = HashMap::new();
        // Damaged lines are dropped by the rewrite; each may have been a record, so they count
        // as dropped (the store's generation then changes).
        let mut bad = 0;
        for p in &logs {
            if let Ok(content) = Self::read_log(p) {
                bad += content.bad.len();
                index.extend(content.records);
            }
        }
        let mut kept: Vec<(Digest, ActionRecord)> = Vec::new();
        let mut dropped = bad;
        for (k, rec) in index {
            if keep.is_none_or(|keys| keys.contains(&k)) {
                kept.push((k, rec));
            } else {
                dropped += 1;
            }
        }
        kept.sort_by_key(|a| a.0);
        if logs.len() <= 1 && dropped == 0 {
            return Ok((0, kept.into_iter().map(|(_, r)| r).collect()));
        }
        let mut bytes = Vec::new();
        for (k, rec) in &kept {
            bytes.extend(format_line(k, rec).map_err(|e| DagError::Store {
                path: self.root.join("actions"),
                message: e.to_string(),
            })?);
        }
        let tmp = self.tmp("actions");
        let write = (|| {
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(&bytes)?;
            f.sync_all()
        })();
        write.map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            DagError::io("write", &tmp, e)
        })?;
        let dest = self.new_log_path();
        self.publish(&tmp, &dest)?;
        // Before the old logs go: a crash in between only leaves duplicate lines.
        let _ = fsutil::sync_dir(&self.root.join("actions"));
        for p in logs {
            if p != dest {
                let _ = std::fs::remove_file(p);
            }
        }
        *self
            .shared
            .index
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = None;
        Ok((dropped, kept.into_iter().map(|(_, r)| r).collect()))
    }

    /// Merge the action logs into one when there are more than `max_logs` and no other process
    /// uses the store right now (never waits). Called at the end of a build.
    pub fn compact_if_many(&self, max_logs: usize) -> Result<()> {
        if self.logs().len() <= max_logs {
            return Ok(());
        }
        use rustix::fs::{flock, FlockOperation};
        let (file, _) = self.lock_file()?;
        if flock(&file, FlockOperation::NonBlockingLockExclusive).is_err() {
            return Ok(());
        }
        // Our own log is complete (one write per record): it is merged like the others.
        *self
            .shared
            .log
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = None;
        self.compact(None).map(|_| ())
    }

    /// Remove action records and blobs not reachable from the newest `keep_last` build records,
    /// and leftover temp files. Takes the exclusive store lock.
    pub fn gc(&self, keep_last: usize) -> Result<GcStats> {
        let _lock = self.lock(true)?;
        let mut stats = GcStats::default();
        let builds = self.walk("builds");
        let split = builds.len().saturating_sub(keep_last);
        let mut keys = BTreeSet::new();
        for b in &builds[split..] {
            let mut bytes = Vec::new();
            if let Some(rec) = fsutil::open_regular(b)
                .and_then(|mut f| std::io::Read::read_to_end(&mut f, &mut bytes))
                .ok()
                .map(|_| bytes)
                .and_then(|x| serde_json::from_slice::<BuildRecord>(&x).ok())
            {
                keys.extend(rec.keys);
            }
        }
        for b in &builds[..split] {
            if std::fs::remove_file(b).is_ok() {
                stats.builds += 1;
            }
        }
        // Repair first: a blob whose content does not match its name goes, and so does every
        // record that needs a blob that is not (or no longer) here; their nodes re-run. Damaged
        // log lines go with the compaction below. The store then passes `check`.
        // Anything in a blob's place that is not a regular file goes too (never opened), and
        // so does anything but a regular file among the logs, build records and temp files.
        for (p, entry) in self.blob_entries() {
            let bad = match entry {
                Ok(d) => statcache_hash(&p).ok() != Some(d),
                Err(_) => true,
            };
            if bad && fsutil::remove_path(&p).is_ok() {
                stats.corrupt_blobs += 1;
            }
        }
        for sub in ["actions", "builds", "tmp"] {
            for (p, _) in self.odd_entries(sub) {
                if fsutil::remove_path(&p).is_ok() {
                    stats.odd_entries += 1;
                }
            }
        }
        let mut all = HashMap::new();
        for p in &self.logs() {
            if let Ok(content) = Self::read_log(p) {
                all.extend(content.records);
            }
        }
        for (k, rec) in &all {
            let healthy = self
                .referenced_blobs(rec)
                .iter()
                .all(|d| d.as_ref().is_ok_and(|d| self.has_blob(d)));
            if !healthy && keys.remove(k) {
                stats.broken_actions += 1;
            }
        }
        let (dropped, kept) = self.compact(Some(&keys))?;
        stats.actions = dropped;
        if dropped > 0 {
            // Workspaces that trusted this store's records must look again.
            self.new_id(true)?;
        }
        let live_blobs: BTreeSet<Digest> = kept
            .iter()
            .flat_map(|rec| self.referenced_blobs(rec))
            .filter_map(|d| d.ok())
            .collect();
        for p in self.walk("blobs") {
            let live = Self::digest_from_path(&p).is_some_and(|d| live_blobs.contains(&d));
            if !live {
                let size = std::fs::metadata(&p).map(|m| m.len()).unwrap_or(0);
                if std::fs::remove_file(&p).is_ok() {
                    stats.blobs += 1;
                    stats.bytes += size;
                }
            }
        }
        // No build runs while we hold the exclusive lock, so every temp file is a leftover.
        for p in self.walk("tmp") {
            let _ = std::fs::remove_file(p);
        }
        Ok(stats)
    }
}
