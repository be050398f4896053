//! Arguments shared by the pipeline subcommands (`build`, `status`, `explain`, `graph`,
//! `verify`, `gc`, `clean`, `store`): where the manifest and the store are.

use std::path::PathBuf;

use crate::pipeline::Pipeline;

/// `--manifest` and `--store`.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct WorkspaceArgs {
    /// The pipeline file (default: pipeline.toml in this folder or the nearest parent).
    #[arg(long, value_name = "FILE", global = true)]
    pub manifest: Option<PathBuf>,
    /// The content store directory (default: SKYCTL_STORE, else [project] store_dir).
    #[arg(long, value_name = "DIR", global = true)]
    pub store: Option<PathBuf>,
}

impl WorkspaceArgs {
    /// Open the pipeline these arguments name.
    pub fn open(&self) -> anyhow::Result<Pipeline> {
        let file = self.find()?;
        let store = self.store_override(&file.root)?;
        Pipeline::from_file(file, store, crate::kinds::planners())
    }

    /// The graph of the pipeline these arguments name, from the compiled cache when nothing it
    /// depends on changed ([`crate::pipeline::cache`]).
    pub fn open_compiled(
        &self,
        file: crate::pipeline::ManifestFile,
        registry: &sky_dag::Registry,
        looked: Option<crate::pipeline::cache::Looked>,
    ) -> anyhow::Result<crate::pipeline::cache::Compiled> {
        let store = self.store_override(&file.root)?;
        crate::pipeline::cache::open(file, store, registry, crate::kinds::planners(), looked)
    }

    /// The summary of a plain build of everything in `file`'s workspace when its no-op proof
    /// holds ([`crate::pipeline::cache::noop`]); `Err` on anything else, errors included (the
    /// usual build reports them), with what was looked at for [`Self::open_compiled`].
    pub fn noop_build(
        &self,
        file: &crate::pipeline::ManifestFile,
        registry: &sky_dag::Registry,
        remote: &crate::remote_args::RemoteArgs,
    ) -> Result<sky_dag::report::Summary, Option<crate::pipeline::cache::Looked>> {
        let store = self.store_override(&file.root).map_err(|_| None)?;
        crate::pipeline::cache::noop(file, store.as_deref(), registry, |configured| {
            !matches!(remote.url_with(configured), Ok(None))
        })
        .map_err(Some)
    }

    /// Find and read the manifest these arguments name.
    pub fn find(&self) -> anyhow::Result<crate::pipeline::ManifestFile> {
        let cwd = std::env::current_dir()?;
        crate::pipeline::ManifestFile::find(&cwd, self.manifest.as_deref())
    }

    /// `--store`, else `SKYCTL_STORE` (set but blank: an error, never the manifest's store).
    /// Either must name a store, or a folder a store may be made in: by the same rule as
    /// `store_dir` ([`crate::pipeline::store_folder_problem`]), before anything is read or written. One inside
    /// the workspace `root` is a project folder, checked with the others and located
    /// ([`Pipeline::graph`]).
    fn store_override(&self, root: &std::path::Path) -> anyhow::Result<Option<PathBuf>> {
        let var = sky_env::Var::get("SKYCTL_STORE").path("a folder for the content store")?;
        let (dir, what) = match (&self.store, var) {
            (Some(dir), _) => (dir.clone(), "--store"),
            (None, Some(dir)) => (dir, "SKYCTL_STORE"),
            (None, None) => return Ok(None),
        };
        let inside = std::path::absolute(&dir).is_ok_and(|abs| abs.starts_with(root));
        if let Some(problem) = crate::pipeline::store_folder_problem(&dir).filter(|_| !inside) {
            anyhow::bail!("{what} `{}` {problem}", dir.display());
        }
        Ok(Some(dir))
    }
}
