//! A workspace: the folder a pipeline is declared in, where its store lives, its own state,
//! and the lock that keeps two builds in it from interleaving.

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::error::{DagError, Result};
use crate::graph::Graph;
use crate::state::StatePaths;
use crate::store::Store;

/// Where things are for one workspace.
#[derive(Debug)]
pub struct Workspace {
    /// The workspace root: every spec path is relative to it.
    pub root: PathBuf,
    /// The store directory in use.
    pub store_dir: PathBuf,
    /// Workspace-private state.
    pub state: StatePaths,
}

/// Holds the workspace lock until dropped.
#[derive(Debug)]
pub struct WorkspaceLock {
    _file: std::fs::File,
}

impl Workspace {
    /// The workspace rooted at `root` (made absolute) with its store at `store_dir`.
    pub fn new(root: &Path, store_dir: &Path) -> Result<Workspace> {
        let root = std::path::absolute(root).map_err(|e| DagError::io("resolve", root, e))?;
        let store_dir =
            std::path::absolute(store_dir).map_err(|e| DagError::io("resolve", store_dir, e))?;
        let state = StatePaths::new(&root);
        Ok(Workspace {
            root,
            store_dir,
            state,
        })
    }

    /// Open the store.
    pub fn store(&self) -> Result<Store> {
        Store::open(&self.store_dir)
    }

    /// Take the workspace lock; `on_wait` is called once if another process holds it.
    pub fn lock(&self, on_wait: &mut dyn FnMut(&str)) -> Result<WorkspaceLock> {
        use rustix::fs::{flock, FlockOperation};
        let p = self.state.lock();
        std::fs::create_dir_all(&self.state.dir)
            .map_err(|e| DagError::io("create", &self.state.dir, e))?;
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&p)
            .map_err(|e| DagError::io("open", &p, e))?;
        if flock(&file, FlockOperation::NonBlockingLockExclusive).is_err() {
            let holder = std::fs::read_to_string(&p).unwrap_or_default();
            let holder = holder.trim();
            let who = if holder.is_empty() {
                String::new()
            } else {
                format!(" (pid {holder})")
            };
            on_wait(&format!(
                "waiting for another skyctl build in this workspace{who} to finish..."
            ));
            flock(&file, FlockOperation::LockExclusive)
                .map_err(|e| DagError::io("lock", &p, e.into()))?;
        }
        let _ = file.set_len(0);
        let _ = write!(file, "{}", std::process::id());
        Ok(WorkspaceLock { _file: file })
    }
}

impl Workspace {
    /// Remove every declared output and the release tree from the workspace (the store keeps
    /// them; the next build restores them without running anything). Returns how many paths
    /// were removed.
    pub fn clean(&self, graph: &Graph) -> Result<usize> {
        let mut removed = 0;
        let mut paths: Vec<&str> = graph
            .nodes
            .iter()
            .flat_map(|n| n.outputs.iter().map(|o| o.path.as_str()))
            .collect();
        paths.push(&graph.release_dir);
        for rel in paths {
            let abs = self.root.join(rel);
            if std::fs::symlink_metadata(&abs).is_ok() {
                crate::fsutil::remove_path(&abs).map_err(|e| DagError::io("remove", &abs, e))?;
                removed += 1;
            }
        }
        Ok(removed)
    }
}
