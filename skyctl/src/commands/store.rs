//! `skyctl store`.

#![allow(clippy::print_stdout)]

use crate::outcome::Outcome;

use crate::pipeline_args::WorkspaceArgs;

/// Arguments of `skyctl store`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(subcommand)]
    pub action: Action,
    #[command(flatten)]
    pub workspace: WorkspaceArgs,
}

/// What to do with the store.
#[derive(clap::Subcommand, Debug)]
pub enum Action {
    /// Verify every blob against its digest and every action record against its blobs.
    Check,
    /// Print the store directory in use.
    Path,
}

/// Run `skyctl store`.
pub fn run(args: Args) -> anyhow::Result<Outcome> {
    let ws = args.workspace.open()?;
    let store = ws.store()?;
    match args.action {
        Action::Path => {
            println!("{}", store.root().display());
            Ok(Outcome::Success)
        }
        Action::Check => {
            let mut problems: Vec<(String, String)> = store
                .check()
                .into_iter()
                .map(|p| (p.path.display().to_string(), p.message))
                .collect();
            // The workspace too: the materialized outputs and the release tree.
            let release_dir = sky_dag::graph::clean_rel(ws.manifest.project.release_dir.get_ref())
                .unwrap_or_default();
            problems.extend(sky_dag::query::check_materialized(&ws, &release_dir));
            for (path, message) in &problems {
                println!("{path}: {message}");
            }
            if problems.is_empty() {
                println!("store ok: {}", store.root().display());
                Ok(Outcome::Success)
            } else {
                let n = problems.len();
                println!("{n} problem{}", if n == 1 { "" } else { "s" });
                Ok(Outcome::Failed)
            }
        }
    }
}
