//! `outputs.log`: the outputs of nodes about to run.

use std::path::PathBuf;

/// The outputs of each node, noted (one appended line per path) before the node runs: a build
/// killed mid-node leaves partial outputs that nothing recorded, and the next build must know
/// they are its own to replace. Merged into [`super::LastBuild::made`] and removed when a build
/// ends normally.
#[derive(Debug)]
pub struct Journal {
    path: PathBuf,
    file: std::sync::Mutex<Option<std::fs::File>>,
}

impl Journal {
    /// The journal at `path` (created on the first note).
    pub fn new(path: PathBuf) -> Journal {
        Journal {
            path,
            file: std::sync::Mutex::new(None),
        }
    }

    /// The paths noted by builds that did not end normally.
    pub fn read(&self) -> std::collections::BTreeSet<String> {
        sky_fs::read_to_string(&self.path, sky_fs::STATE)
            .map(|t| {
                t.lines()
                    .filter(|l| !l.is_empty())
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Note `paths` before writing them (one `write(2)`).
    pub fn note(&self, paths: &[&str]) -> std::io::Result<()> {
        use std::io::Write;
        let mut f = self.file.lock().unwrap_or_else(|p| p.into_inner());
        if f.is_none() {
            *f = Some(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&self.path)?,
            );
        }
        let mut line = String::new();
        for p in paths {
            line.push_str(p);
            line.push('\n');
        }
        match f.as_mut() {
            Some(file) => file.write_all(line.as_bytes()),
            None => Ok(()),
        }
    }

    /// The build ended and recorded what it made: the journal goes.
    pub fn clear(&self) {
        *self.file.lock().unwrap_or_else(|p| p.into_inner()) = None;
        let _ = std::fs::remove_file(&self.path);
    }
}
