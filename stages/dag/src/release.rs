//! The release tree (`site/public` by default): assembled from the store beside the old tree,
//! then swapped in with one atomic `renameat2(RENAME_EXCHANGE)` (two renames where the file
//! system lacks it), so a reader or a crash never sees a half-written release.
//!
//! Nodes never write into the release tree: their outputs live elsewhere in the workspace and
//! `[release]` / `publish` entries name which go where. The tree is rewritten only by a full,
//! successful build, and only when its content changed.

use std::path::{Path, PathBuf};

use crate::error::{DagError, Result};
use crate::fsutil;
use crate::graph::Graph;
use crate::scan::Scanner;
use crate::state::ReleaseFile;
use crate::store::{OutputRecord, Store};

/// The release files implied by the nodes' outputs; `None` when some producer has no result.
pub fn expected(graph: &Graph, outputs: &[Option<Vec<OutputRecord>>]) -> Option<Vec<ReleaseFile>> {
    let mut files = Vec::with_capacity(graph.release.len());
    for r in &graph.release {
        let o = outputs.get(r.node)?.as_ref()?.get(r.output)?;
        files.push(ReleaseFile {
            to: r.to.clone(),
            digest: o.digest,
            dir: o.dir,
            exec: o.exec,
        });
    }
    files.sort_by(|a, b| a.to.cmp(&b.to));
    Some(files)
}

/// Whether the release directory already holds exactly `files` (as last written by us).
pub fn up_to_date(
    scanner: &mut Scanner<'_>,
    graph: &Graph,
    root: &Path,
    files: &[ReleaseFile],
    last: Option<&[ReleaseFile]>,
) -> bool {
    if last != Some(files) {
        return false;
    }
    if files.is_empty() {
        return true;
    }
    let recs: Vec<OutputRecord> = files
        .iter()
        .map(|f| OutputRecord {
            path: format!("{}/{}", graph.release_dir, f.to),
            digest: f.digest,
            size: 0,
            dir: f.dir,
            exec: f.exec,
        })
        .collect();
    root.join(&graph.release_dir).is_dir() && scanner.check_outputs(&recs).is_none()
}

/// Build the new tree beside the old one and swap it in.
pub fn write(store: &Store, root: &Path, release_dir: &str, files: &[ReleaseFile]) -> Result<()> {
    let target = root.join(release_dir);
    let parent = target
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| root.to_path_buf());
    std::fs::create_dir_all(&parent).map_err(|e| DagError::io("create", &parent, e))?;
    remove_leftovers(&target);
    let staging = sibling(&target, "new");
    let res = (|| {
        std::fs::create_dir_all(&staging).map_err(|e| DagError::io("create", &staging, e))?;
        for f in files {
            let rec = OutputRecord {
                path: f.to.clone(),
                digest: f.digest,
                size: 0,
                dir: f.dir,
                exec: f.exec,
            };
            // Never hard links: the release tree must not share inodes with the store.
            store.restore(&rec, &staging.join(&f.to), false)?;
        }
        swap_in(&staging, &target)
    })();
    let _ = fsutil::remove_path(&staging);
    res
}

/// `<parent>/.<name>.<what>-<pid>.tmp`
fn sibling(target: &Path, what: &str) -> PathBuf {
    let name = target
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("release");
    target.with_file_name(format!(".{name}.{what}-{}.tmp", std::process::id()))
}

/// Remove staging trees left by a killed build.
fn remove_leftovers(target: &Path) {
    let (Some(parent), Some(name)) = (target.parent(), target.file_name().and_then(|n| n.to_str()))
    else {
        return;
    };
    let prefix = format!(".{name}.");
    if let Ok(rd) = std::fs::read_dir(parent) {
        for e in rd.flatten() {
            let n = e.file_name();
            let n = n.to_string_lossy();
            if n.starts_with(&prefix) && n.ends_with(".tmp") {
                let _ = fsutil::remove_path(&e.path());
            }
        }
    }
}

fn swap_in(staging: &Path, target: &Path) -> Result<()> {
    if let Some(p) = target.parent() {
        // The staged files must be durable before the swap makes them the release.
        let _ = sync_tree(staging);
        let _ = fsutil::sync_dir(p);
    }
    if std::fs::symlink_metadata(target).is_err() {
        return std::fs::rename(staging, target).map_err(|e| DagError::io("rename", target, e));
    }
    use rustix::fs::{renameat_with, RenameFlags, CWD};
    match renameat_with(CWD, staging, CWD, target, RenameFlags::EXCHANGE) {
        // `staging` now holds the old tree; the caller removes it.
        Ok(()) => Ok(()),
        Err(_) => {
            let old = sibling(target, "old");
            std::fs::rename(target, &old).map_err(|e| DagError::io("rename", target, e))?;
            let r = std::fs::rename(staging, target).map_err(|e| DagError::io("rename", target, e));
            let _ = fsutil::remove_path(&old);
            r
        }
    }
}

fn sync_tree(dir: &Path) -> std::io::Result<()> {
    for e in walkdir::WalkDir::new(dir).into_iter().flatten() {
        if e.file_type().is_file() {
            std::fs::File::open(e.path())?.sync_all()?;
        }
    }
    fsutil::sync_dir(dir)
}
