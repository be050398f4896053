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
        let cwd = std::env::current_dir()?;
        Pipeline::open(
            &cwd,
            self.manifest.as_deref(),
            self.store_override()?,
            crate::kinds::planners(),
        )
    }

    /// The graph of the pipeline these arguments name, from the compiled cache when nothing it
    /// depends on changed ([`crate::pipeline::cache`]).
    pub fn open_compiled(
        &self,
        file: crate::pipeline::ManifestFile,
        registry: &sky_dag::Registry,
    ) -> anyhow::Result<crate::pipeline::cache::Compiled> {
        crate::pipeline::cache::open(
            file,
            self.store_override()?,
            registry,
            crate::kinds::planners(),
        )
    }

    /// Find and read the manifest these arguments name.
    pub fn find(&self) -> anyhow::Result<crate::pipeline::ManifestFile> {
        let cwd = std::env::current_dir()?;
        crate::pipeline::ManifestFile::find(&cwd, self.manifest.as_deref())
    }

    /// `--store`, else `SKYCTL_STORE` (set but blank: an error, never the manifest's store).
    fn store_override(&self) -> anyhow::Result<Option<PathBuf>> {
        let var = sky_env::Var::get("SKYCTL_STORE").path("a folder for the content store")?;
        Ok(self.store.clone().or(var))
    }
}
