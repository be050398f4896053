//! The `pipeline.toml` front end: the schema ([`schema`]), its expansion into node specs
//! ([`expand`]), and [`Pipeline`], a workspace opened from its manifest.

pub mod cache;
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
    /// The manifest's path relative to the workspace root (`pipeline.toml`).
    pub manifest_rel: String,
}

/// A manifest file found and read, not parsed yet.
#[derive(Debug)]
pub struct ManifestFile {
    /// The file as shown in messages (relative to where the search started when inside it).
    pub shown: PathBuf,
    /// The workspace root (the file's folder), absolute.
    pub root: PathBuf,
    /// The file name (`pipeline.toml`), relative to the root.
    pub manifest_rel: String,
    /// Its text.
    pub text: String,
}

impl ManifestFile {
    /// Find `pipeline.toml` in `start` or a parent (or use `manifest` as given) and read it.
    pub fn find(start: &Path, manifest: Option<&Path>) -> anyhow::Result<ManifestFile> {
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
        let text = std::fs::read_to_string(&file).map_err(|e| DagError::io("read", &file, e))?;
        let root = std::path::absolute(&root).map_err(|e| DagError::io("resolve", &root, e))?;
        let manifest_rel = file
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or(MANIFEST)
            .to_string();
        Ok(ManifestFile {
            shown,
            root,
            manifest_rel,
            text,
        })
    }
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
        Pipeline::from_file(ManifestFile::find(start, manifest)?, store_override)
    }

    /// Parse a manifest file read with [`ManifestFile::find`] (see [`Pipeline::open`]).
    pub fn from_file(
        file: ManifestFile,
        store_override: Option<PathBuf>,
    ) -> anyhow::Result<Pipeline> {
        let manifest = Manifest::parse(&file.text, &file.shown)?;
        let store_dir = match store_override {
            Some(s) => s,
            None => file.root.join(&manifest.project.store_dir),
        };
        let ws = Workspace::new(&file.root, &store_dir)?;
        Ok(Pipeline {
            ws,
            manifest,
            manifest_rel: file.manifest_rel,
        })
    }

    /// Expand the manifest into the checked graph (reading declared environment variables).
    pub fn graph(&self) -> Result<Graph> {
        self.graph_with_env(&|v| std::env::var(v).ok())
    }

    /// [`Pipeline::graph`], with `env` reading the declared environment variables.
    pub fn graph_with_env(&self, env: &dyn Fn(&str) -> Option<String>) -> Result<Graph> {
        self.check_confined()?;
        let mut spec = expand::expand(&self.manifest, env)?;
        // The manifest is never an output (nor a folder holding it).
        spec.protected.push(self.manifest_rel.clone());
        Graph::build(spec, &self.manifest.source, &self.ws.root)
    }
}

impl Pipeline {
    /// The folders `pipeline.toml` names (store, build, command working directories) must not
    /// lead out of the workspace through a symlink (`--store` / `SKYCTL_STORE` are the user's
    /// explicit choice and may be anywhere). Outputs and the release tree are checked with the
    /// graph.
    fn check_confined(&self) -> Result<()> {
        let m = &self.manifest;
        let root = &self.ws.root;
        for (what, rel, span) in self.confined_dirs() {
            if let Some(target) = sky_dag::graph::symlink_escape(root, &rel) {
                return Err(m.error_at(
                    span,
                    format!(
                        "{what} `{rel}` leads out of the workspace through a symlink (to `{}`)",
                        target.display()
                    ),
                ));
            }
        }
        Ok(())
    }
}

impl Pipeline {
    /// The folders of [`Pipeline::check_confined`]: what names them, the path, where.
    pub fn confined_dirs(&self) -> Vec<(&'static str, String, std::ops::Range<usize>)> {
        let m = &self.manifest;
        let mut dirs = vec![(
            "build_dir",
            m.project.build_dir.get_ref().clone(),
            m.project.build_dir.span(),
        )];
        if self.store_from_manifest() {
            dirs.push(("store_dir", m.project.store_dir.clone(), 0..0));
        }
        for c in &m.command {
            if let Some(cwd) = &c.cwd {
                dirs.push(("cwd", cwd.get_ref().clone(), cwd.span()));
            }
        }
        dirs
    }

    /// Whether the store in use is the one `[project] store_dir` names.
    pub fn store_from_manifest(&self) -> bool {
        self.ws.store_dir == self.ws.root.join(&self.manifest.project.store_dir)
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
