//! `skyctl gc`.

#![allow(clippy::print_stdout)]

use crate::outcome::Outcome;

use crate::pipeline_args::WorkspaceArgs;

/// Arguments of `skyctl gc`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Keep everything reachable from the newest N build records.
    #[arg(long, default_value_t = 5)]
    pub keep_last: usize,
    #[command(flatten)]
    pub workspace: WorkspaceArgs,
}

/// Run `skyctl gc`.
pub fn run(args: Args) -> anyhow::Result<Outcome> {
    let ws = args.workspace.open()?;
    let s = ws.store()?.gc(args.keep_last)?;
    println!(
        "removed {} action records, {} blobs ({} bytes), {} build records",
        s.actions, s.blobs, s.bytes, s.builds
    );
    Ok(Outcome::Success)
}
