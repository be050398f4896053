//! `skyctl status` (and `skyctl build --dry-run`, which prints the same list).

#![allow(clippy::print_stdout)]

use crate::outcome::Outcome;

use crate::kinds::registry;
use crate::pipeline::Pipeline;
use crate::pipeline_args::WorkspaceArgs;
use sky_dag::builder::resolve;
use sky_dag::query;
use sky_dag::Plan;

/// Arguments of `skyctl status`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Limit to these nodes, models or kinds (and their dependencies).
    pub targets: Vec<String>,
    /// JSON: one object per stale node.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub workspace: WorkspaceArgs,
}

/// Run `skyctl status`: exit 0 when everything is up to date, 1 when something is stale.
pub fn run(args: Args) -> anyhow::Result<Outcome> {
    let ws = args.workspace.open()?;
    report(&ws, &args.targets, &[], args.json, false)
}

/// Print the stale nodes of `targets` with their reasons.
pub fn report(
    ws: &Pipeline,
    targets: &[String],
    rerun: &[String],
    json: bool,
    dry_run: bool,
) -> anyhow::Result<Outcome> {
    let graph = ws.graph()?;
    let plan = Plan::new(&graph, &resolve(&graph, targets)?, &resolve(&graph, rerun)?);
    let views = query::scan(ws, &graph, &registry(), &plan.forced)?;
    let mut stale = 0;
    for v in views.iter().filter(|v| plan.selected[graph.by_id[&v.id]]) {
        let Some(why) = &v.stale else { continue };
        stale += 1;
        let verb = match (dry_run, v.restore_only, v.key.is_none()) {
            (_, true, _) => "restore",
            (true, _, true) => "may run",
            (true, _, false) => "run",
            (false, _, _) => "stale",
        };
        if json {
            println!(
                "{}",
                serde_json::json!({"node": v.id, "kind": v.kind, "action": verb, "why": why, "key": v.key})
            );
        } else {
            println!("{verb:<8} {:<32} {why}", v.id);
        }
    }
    if !json && stale == 0 {
        println!("up to date ({} nodes)", plan.len());
    }
    Ok(if stale > 0 && !dry_run {
        Outcome::Failed
    } else {
        Outcome::Success
    })
}
