//! `skyctl clean`.

use crate::outcome::Outcome;

use crate::pipeline_args::WorkspaceArgs;

/// Arguments of `skyctl clean`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    pub workspace: WorkspaceArgs,
}

/// Run `skyctl clean`: remove materialized outputs and the release tree (the store keeps them);
/// what skyctl did not make is left, and listed.
pub fn run(args: Args) -> anyhow::Result<Outcome> {
    let ws = args.workspace.open()?;
    let graph = ws.graph()?;
    let _lock = ws.lock(&mut |m| eprintln_note(m))?;
    let done = ws.clean(&graph)?;
    outln!("removed {} outputs", done.removed);
    for (path, why) in &done.left {
        outln!("left `{path}`: {why}");
    }
    Ok(Outcome::Success)
}

#[allow(clippy::print_stderr)]
fn eprintln_note(m: &str) {
    eprintln!("skyctl: {m}");
}
