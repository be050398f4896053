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
use crate::state::{LastBuild, ReleaseFile};
use crate::store::{OutputRecord, Store};

/// The release files implied by the nodes' outputs; `None` when some producer has no result.
pub fn expected<K: AsRef<[OutputRecord]>>(
    graph: &Graph,
    outputs: &[Option<K>],
) -> Option<Vec<ReleaseFile>> {
    let mut files = Vec::with_capacity(graph.release.len());
    for r in &graph.release {
        let o = outputs.get(r.node)?.as_ref()?.as_ref().get(r.output)?;
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
    let dir = root.join(&graph.release_dir);
    dir.is_dir() && scanner.check_outputs(&recs).is_none() && only_declared(&dir, files)
}

/// Whether every file in the release tree is a declared one (or inside a declared directory):
/// a file someone or something added makes the tree stale, so the next build removes it.
fn only_declared(dir: &Path, files: &[ReleaseFile]) -> bool {
    let declared = |rel: &str| {
        files.iter().any(|f| {
            rel == f.to
                || (f.dir
                    && rel.len() > f.to.len()
                    && rel.starts_with(&f.to)
                    && rel.as_bytes()[f.to.len()] == b'/')
        })
    };
    walkdir::WalkDir::new(dir)
        .min_depth(1)
        .into_iter()
        .all(|e| match e {
            Ok(e) if e.file_type().is_dir() => true,
            Ok(e) => e
                .path()
                .strip_prefix(dir)
                .ok()
                .and_then(|p| p.to_str())
                .is_some_and(declared),
            Err(_) => false,
        })
}

/// Why a release folder is not the engine's to replace ([`check_ours`]): replacing it would
/// delete what is there.
#[derive(Debug, thiserror::Error)]
pub enum NotOurs {
    /// It could not be looked at.
    #[error("cannot be inspected: {0}")]
    Uninspectable(std::io::Error),
    /// A symlink where the folder should be.
    #[error("is a symlink, not a folder skyctl made")]
    Symlink,
    /// A file where the folder should be.
    #[error("is a file skyctl did not make, not a release tree")]
    File,
    /// Its listing failed part way.
    #[error("cannot be listed: {0}")]
    Unlistable(walkdir::Error),
    /// A file in it whose content the store does not hold.
    #[error("already exists and holds `{path}`, which skyctl did not make")]
    Foreign {
        /// The file, as shown (workspace-relative).
        path: String,
    },
    /// No store to ask and no record of writing it (`clean` without a store).
    #[error("holds files skyctl did not make")]
    Unrecorded,
}

/// Whether the release directory `release_dir` may be replaced by a new tree: it does not
/// exist, it is the folder the last build recorded writing the release to, or every file in it
/// is content the store holds (a tree skyctl wrote whose record was lost). `Err` says what is
/// there that skyctl did not make: replacing it would delete it.
pub fn check_ours(
    store: &Store,
    root: &Path,
    release_dir: &str,
    last: &LastBuild,
) -> std::result::Result<(), NotOurs> {
    let target = root.join(release_dir);
    let md = match std::fs::symlink_metadata(&target) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(NotOurs::Uninspectable(e)),
        Ok(md) => md,
    };
    if md.file_type().is_symlink() {
        return Err(NotOurs::Symlink);
    }
    if !md.is_dir() {
        return Err(NotOurs::File);
    }
    if last.release.is_some() && last.release_dir.as_deref() == Some(release_dir) {
        return Ok(());
    }
    for e in walkdir::WalkDir::new(&target)
        .min_depth(1)
        .sort_by_file_name()
    {
        let e = e.map_err(NotOurs::Unlistable)?;
        if e.file_type().is_dir() {
            continue;
        }
        let shown = e
            .path()
            .strip_prefix(root)
            .unwrap_or(e.path())
            .display()
            .to_string();
        let made = e.file_type().is_file()
            && crate::statcache::hash_file(e.path()).is_ok_and(|d| store.has_blob(&d));
        if !made {
            return Err(NotOurs::Foreign { path: shown });
        }
    }
    Ok(())
}

/// Build the new tree beside the old one and swap it in.
pub fn write(store: &Store, root: &Path, release_dir: &str, files: &[ReleaseFile]) -> Result<()> {
    let target = root.join(release_dir);
    // Checked with the graph; a folder that became a symlink since is not written through.
    if let Some((link, to)) = crate::graph::symlink_on_path(root, release_dir, true) {
        return Err(DagError::io(
            "write the release tree",
            target,
            std::io::Error::other(format!(
                "`{link}` became a symlink (to `{}`) during the build; the release tree is written only through real folders",
                to.display()
            )),
        ));
    }
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

/// `<parent>/.skyctl-tmp-<name>.<what>-<pid>`
fn sibling(target: &Path, what: &str) -> PathBuf {
    let name = target
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("release");
    target.with_file_name(format!(
        "{}{name}.{what}-{}",
        sky_fs::TEMP_PREFIX,
        std::process::id()
    ))
}

/// Remove staging trees left by a killed build.
fn remove_leftovers(target: &Path) {
    if let Some(parent) = target.parent() {
        fsutil::sweep_temps(parent);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_ours_says_what_is_in_the_way() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join(".store")).unwrap();
        let last = LastBuild::default();
        let root = dir.path();
        assert!(check_ours(&store, root, "public", &last).is_ok());
        std::fs::write(root.join("public"), "x").unwrap();
        let e = check_ours(&store, root, "public", &last).unwrap_err();
        assert!(matches!(e, NotOurs::File), "{e}");
        std::fs::remove_file(root.join("public")).unwrap();
        std::fs::create_dir_all(root.join("public/css")).unwrap();
        std::fs::write(root.join("public/css/site.css"), "theirs").unwrap();
        match check_ours(&store, root, "public", &last) {
            Err(NotOurs::Foreign { path }) => assert_eq!(path, "public/css/site.css"),
            other => panic!("{other:?}"),
        }
    }
}
