//! `skyctl store`.

#![allow(clippy::print_stderr)]

use crate::outcome::Outcome;

use crate::pipeline_args::WorkspaceArgs;
use crate::remote_args::RemoteArgs;

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
    /// Upload the results of the last build to the remote cache (for results that were in
    /// the local store before the remote was set up; builds upload what they run).
    Push {
        #[command(flatten)]
        remote: RemoteArgs,
    },
}

/// Run `skyctl store`.
pub fn run(args: Args) -> anyhow::Result<Outcome> {
    let ws = args.workspace.open()?;
    if let Action::Path = args.action {
        // A query: it names the store, and never makes one.
        outln!(
            "{}",
            ws.store_dir
                .join(sky_dag::store::STORE_VERSION_DIR)
                .display()
        );
        return Ok(Outcome::Success);
    }
    // Nothing built into it yet: checking or pushing it has nothing to do, and neither makes
    // a store (only a build does).
    let version_dir = ws.store_dir.join(sky_dag::store::STORE_VERSION_DIR);
    if !version_dir.exists() {
        outln!(
            "no store yet at {}: nothing has been built into it",
            version_dir.display()
        );
        return Ok(Outcome::Success);
    }
    let store = ws.store()?;
    match args.action {
        Action::Push { remote } => {
            let Some(remote) = remote.open(&ws.manifest)? else {
                anyhow::bail!(
                    "no remote cache: give --remote-cache URL, SKYCTL_REMOTE_CACHE or [cache] remote"
                );
            };
            if remote.read_only() {
                anyhow::bail!("the remote cache is read-only here: nothing can be pushed");
            }
            let _lock = store.lock(false)?;
            let last = sky_dag::state::LastBuild::load(&ws.state);
            let pushed = remote.push(&store, last.nodes.values().map(|n| n.key));
            for w in remote.take_warnings() {
                eprintln!("skyctl: {w}");
            }
            let s = remote.stats();
            if s.uploaded > 0 || pushed > 0 {
                super::build::note_remote(&ws.ws.state, remote.shown_url());
            }
            outln!(
                "pushed {} of {pushed} results to {} ({} requests, {} bytes up, {} warnings)",
                s.uploaded,
                remote.shown_url(),
                s.requests,
                s.bytes_uploaded,
                s.warnings
            );
            Ok(if s.warnings > 0 || s.uploaded < pushed {
                Outcome::Failed
            } else {
                Outcome::Success
            })
        }
        Action::Path => Ok(Outcome::Success),
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
                outln!("{path}: {message}");
            }
            if problems.is_empty() {
                outln!("store ok: {}", store.root().display());
                Ok(Outcome::Success)
            } else {
                let n = problems.len();
                outln!("{n} problem{}", if n == 1 { "" } else { "s" });
                Ok(Outcome::Failed)
            }
        }
    }
}
