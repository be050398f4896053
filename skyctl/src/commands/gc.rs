//! `skyctl gc`.

use crate::outcome::Outcome;

use crate::pipeline_args::WorkspaceArgs;

/// Arguments of `skyctl gc`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Keep everything reachable from the newest N build records.
    #[arg(long, value_name = "N", default_value_t = 5)]
    pub keep_last: usize,
    #[command(flatten)]
    pub workspace: WorkspaceArgs,
}

/// Run `skyctl gc`.
pub fn run(args: Args) -> anyhow::Result<Outcome> {
    let ws = args.workspace.open()?;
    let s = ws.store()?.gc(args.keep_last)?;
    outln!(
        "removed {} action records, {} blobs ({} bytes), {} build records",
        s.actions,
        s.blobs,
        s.bytes,
        s.builds
    );
    if s.odd_entries > 0 {
        outln!(
            "repaired: {} entries that were not regular files removed from actions/, builds/ and tmp/",
            s.odd_entries
        );
    }
    if s.corrupt_blobs + s.broken_actions > 0 {
        outln!(
            "repaired: {} damaged blobs removed, {} action records that needed them dropped (their nodes re-run)",
            s.corrupt_blobs, s.broken_actions
        );
    }
    Ok(Outcome::Success)
}
