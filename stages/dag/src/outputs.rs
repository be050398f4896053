//! Declared outputs, checked and put into the store: shared by the builder (a node run here)
//! and the executors (a node's outputs taken in after it ran).

use std::path::Path;

use crate::failure::NodeFailure;
use crate::store::{OutputRecord, Store};
use crate::tree::{list_files, Tree, TreeEntry};

/// `Err` when a folder on the way to output `rel` is a symlink: the engine writes and reads
/// outputs only through real folders, so nothing it does lands where a link points.
pub(crate) fn through_real_folders(root: &Path, rel: &str) -> std::result::Result<(), NodeFailure> {
    match crate::graph::symlink_on_path(root, rel, false) {
        None => Ok(()),
        Some((link, target)) => Err(NodeFailure::OutputThroughSymlink {
            path: rel.to_string(),
            message: format!(
                "output `{rel}`: `{link}` is a symlink (to `{}`); outputs are written only through real folders",
                target.display()
            ),
        }),
    }
}

/// Check one declared output and put it into the store.
pub(crate) fn ingest(
    store: &Store,
    root: &Path,
    rel: &str,
    dir: bool,
) -> std::result::Result<OutputRecord, NodeFailure> {
    through_real_folders(root, rel)?;
    let abs = root.join(rel);
    let md = std::fs::symlink_metadata(&abs).map_err(|_| NodeFailure::MissingOutput {
        path: rel.to_string(),
        strays: Vec::new(),
    })?;
    if dir != md.is_dir() || md.file_type().is_symlink() {
        return Err(NodeFailure::WrongOutputType {
            path: rel.to_string(),
            dir,
        });
    }
    let io = |e: crate::DagError| NodeFailure::io(e.to_string());
    if !dir {
        let (digest, size) = store.put_file(&abs).map_err(io)?;
        let exec = std::os::unix::fs::PermissionsExt::mode(&md.permissions()) & 0o111 != 0;
        return Ok(OutputRecord {
            path: rel.to_string(),
            digest,
            size,
            dir: false,
            exec,
        });
    }
    let files = list_files(&abs).map_err(|e| NodeFailure::io(format!("output `{rel}`: {e}")))?;
    let mut tree = Tree::default();
    let mut total = 0;
    for f in files {
        let p = abs.join(&f);
        let (digest, size) = store.put_file(&p).map_err(io)?;
        let exec = std::fs::metadata(&p)
            .map(|m| std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o111 != 0)
            .unwrap_or(false);
        total += size;
        tree.entries.push(TreeEntry {
            path: f,
            digest,
            size,
            exec,
        });
    }
    let digest = store.put_bytes(&tree.encode()).map_err(io)?;
    Ok(OutputRecord {
        path: rel.to_string(),
        digest,
        size: total,
        dir: true,
        exec: false,
    })
}
