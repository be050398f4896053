//! A workspace: the folder holding `pipeline.toml`, where its store lives, its own state, and
//! the lock that keeps two builds in it from interleaving.

use std::io::Write;
use std::path::{Path, PathBuf};

use super::error::{EngineError, Result};
use super::graph::Graph;
use super::manifest::Manifest;
use super::state::StatePaths;
use super::store::Store;

/// Manifest file name.
pub const MANIFEST: &str = "pipeline.toml";

/// Where things are for one workspace.
#[derive(Debug)]
pub struct Workspace {
    /// The directory holding `pipeline.toml`.
    pub root: PathBuf,
    /// The parsed manifest.
    pub manifest: Manifest,
    /// The store directory in use (`--store`, `SKYCTL_STORE`, or `[project] store_dir`).
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
    /// Find `pipeline.toml` in `start` or a parent (or use `manifest` as given), parse it, and
    /// resolve the store: `store_override` (from `--store` or `SKYCTL_STORE`) wins.
    pub fn open(
        start: &Path,
        manifest: Option<&Path>,
        store_override: Option<PathBuf>,
    ) -> Result<Workspace> {
        let file = match manifest {
            Some(m) => m.to_path_buf(),
            None => find_manifest(start)?,
        };
        let root = match file.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let root = std::path::absolute(&root).map_err(|e| EngineError::io("resolve", &root, e))?;
        let shown = file
            .strip_prefix(start)
            .map(Path::to_path_buf)
            .unwrap_or_else(|_| file.clone());
        let source =
            std::fs::read_to_string(&file).map_err(|e| EngineError::io("read", &file, e))?;
        let manifest = Manifest::parse(&source, &shown)?;
        let store_dir = match store_override {
            Some(s) => std::path::absolute(&s).map_err(|e| EngineError::io("resolve", &s, e))?,
            None => root.join(&manifest.project.store_dir),
        };
        let state = StatePaths::new(&root);
        Ok(Workspace {
            root,
            manifest,
            store_dir,
            state,
        })
    }

    /// Expand the manifest into the graph (reading declared environment variables).
    pub fn graph(&self) -> Result<Graph> {
        Graph::build(&self.manifest, &self.root, &|v| std::env::var(v).ok())
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
            .map_err(|e| EngineError::io("create", &self.state.dir, e))?;
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&p)
            .map_err(|e| EngineError::io("open", &p, e))?;
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
                .map_err(|e| EngineError::io("lock", &p, e.into()))?;
        }
        let _ = file.set_len(0);
        let _ = write!(file, "{}", std::process::id());
        Ok(WorkspaceLock { _file: file })
    }
}

fn find_manifest(start: &Path) -> Result<PathBuf> {
    let abs = std::path::absolute(start).map_err(|e| EngineError::io("resolve", start, e))?;
    let mut dir = Some(abs.as_path());
    while let Some(d) = dir {
        let f = d.join(MANIFEST);
        if f.is_file() {
            return Ok(f);
        }
        dir = d.parent();
    }
    Err(EngineError::NoManifest(start.to_path_buf()))
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
                super::fsutil::remove_path(&abs).map_err(|e| EngineError::io("remove", &abs, e))?;
                removed += 1;
            }
        }
        Ok(removed)
    }
}
