//! The `pipeline.toml` front end: the schema ([`schema`]), its expansion into node specs
//! ([`expand`]), and [`Pipeline`], a workspace opened from its manifest.

pub mod expand;
pub mod schema;

use std::path::{Path, PathBuf};

use sky_dag::{DagError, Graph, Result, Workspace};

pub use schema::{Manifest, EXAMPLE};

/// Manifest file name.
pub const MANIFEST: &str = "pipeline.toml";

/// A workspace and the manifest it was opened from.
#[derive(Debug)]
pub struct Pipeline {
    /// Where things are.
    pub ws: Workspace,
    /// The parsed manifest.
    pub manifest: Manifest,
}

impl Pipeline {
    /// Find `pipeline.toml` in `start` or a parent (or use `manifest` as given), parse it, and
    /// resolve the store: `store_override` (from `--store` or `SKYCTL_STORE`) wins over
    /// `[project] store_dir`.
    pub fn open(
        start: &Path,
        manifest: Option<&Path>,
        store_override: Option<PathBuf>,
    ) -> anyhow::Result<Pipeline> {
        let file = match manifest {
            Some(m) => m.to_path_buf(),
            None => find_manifest(start)?,
        };
        let root = match file.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let shown = file
            .strip_prefix(start)
            .map(Path::to_path_buf)
            .unwrap_or_else(|_| file.clone());
        let source = std::fs::read_to_string(&file).map_err(|e| DagError::io("read", &file, e))?;
        let manifest = Manifest::parse(&source, &shown)?;
        let root = std::path::absolute(&root).map_err(|e| DagError::io("resolve", &root, e))?;
        let store_dir = match store_override {
            Some(s) => s,
            None => root.join(&manifest.project.store_dir),
        };
        let ws = Workspace::new(&root, &store_dir)?;
        Ok(Pipeline { ws, manifest })
    }

    /// Expand the manifest into the checked graph (reading declared environment variables).
    pub fn graph(&self) -> Result<Graph> {
        let spec = expand::expand(&self.manifest, &|v| std::env::var(v).ok())?;
        Graph::build(spec, &self.manifest.source, &self.ws.root)
    }
}

/// No `pipeline.toml` in `start` or any parent.
#[derive(Debug, thiserror::Error)]
#[error("no pipeline.toml in `{0}` or any parent directory (run `skyctl init` to create one)")]
pub struct NoManifest(pub PathBuf);

fn find_manifest(start: &Path) -> anyhow::Result<PathBuf> {
    let abs = std::path::absolute(start).map_err(|e| DagError::io("resolve", start, e))?;
    let mut dir = Some(abs.as_path());
    while let Some(d) = dir {
        let f = d.join(MANIFEST);
        if f.is_file() {
            return Ok(f);
        }
        dir = d.parent();
    }
    Err(NoManifest(start.to_path_buf()).into())
}

/// A pipeline is used where its workspace is wanted (store, lock, state, queries).
impl std::ops::Deref for Pipeline {
    type Target = Workspace;
    fn deref(&self) -> &Workspace {
        &self.ws
    }
}
