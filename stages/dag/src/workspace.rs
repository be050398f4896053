//! A workspace: the folder a pipeline is declared in, where its store lives, its own state,
//! and the lock that keeps two builds in it from interleaving.

use std::os::unix::fs::FileExt;
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

/// Holds the workspace lock until dropped. The lock file holds the pid of the process that
/// holds it; a build that ends cleanly replaces it with `clean <ns since the epoch>`
/// ([`WorkspaceLock::ended_cleanly`]), so the next build knows since when nothing of its own
/// is half written.
#[derive(Debug)]
pub struct WorkspaceLock {
    file: std::fs::File,
    clean_since: Option<i64>,
}

impl WorkspaceLock {
    /// When the last holder of the lock said it ended cleanly; `None` for a new workspace, a
    /// killed, failed or interrupted build, or any other command that held the lock.
    pub fn clean_since(&self) -> Option<i64> {
        self.clean_since
    }

    /// Say this build ended cleanly now: nothing it wrote is half done.
    pub fn ended_cleanly(&self) {
        use std::os::unix::fs::FileExt;
        let now = crate::statcache::now_ns();
        let _ = self.file.set_len(0);
        let _ = self
            .file
            .write_all_at(format!("clean {now}\n").as_bytes(), 0);
    }
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
            let who = if holder.is_empty() || holder.parse::<u32>().is_err() {
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
        let mut before = String::new();
        let _ = std::io::Read::read_to_string(&mut file, &mut before);
        let clean_since = before
            .strip_prefix("clean ")
            .and_then(|t| t.trim().parse::<i64>().ok());
        let _ = file.set_len(0);
        let _ = file.write_all_at(std::process::id().to_string().as_bytes(), 0);
        Ok(WorkspaceLock { file, clean_since })
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
