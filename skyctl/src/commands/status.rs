//! `skyctl status` (and `skyctl build --dry-run`, which prints the same list).

#![allow(clippy::print_stdout)]

use std::process::ExitCode;

use crate::engine::builder::resolve;
use crate::engine::plan::Plan;
use crate::engine::query;
use crate::engine::Workspace;
use crate::pipeline_args::{registry, WorkspaceArgs};

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
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let ws = args.workspace.open()?;
    report(&ws, &args.targets, &[], args.json, false)
}

/// Print the stale nodes of `targets` with their reasons.
pub fn report(
    ws: &Workspace,
    targets: &[String],
    rerun: &[String],
    json: bool,
    dry_run: bool,
) -> anyhow::Result<ExitCode> {
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
        ExitCode::from(crate::cli::EXIT_FAILED)
    } else {
        ExitCode::SUCCESS
    })
}
