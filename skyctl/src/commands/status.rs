//! `skyctl status` (and `skyctl build --dry-run`, which prints the same list).

#![allow(clippy::print_stderr)]

use crate::outcome::Outcome;

use crate::kinds::registry;
use crate::pipeline::Pipeline;
use crate::pipeline_args::WorkspaceArgs;
use crate::remote_args::RemoteArgs;
use sky_dag::builder::resolve;
use sky_dag::query;
use sky_dag::remote::RemoteCache;
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
    #[command(flatten)]
    pub remote: RemoteArgs,
}

/// Run `skyctl status`: exit 0 when everything is up to date, 1 when something is stale.
pub fn run(args: Args) -> anyhow::Result<Outcome> {
    let ws = args.workspace.open()?;
    let remote = args.remote.open(&ws.manifest)?;
    report(&ws, &args.targets, &[], args.json, false, remote.as_ref())
}

/// Print the stale nodes of `targets` with their reasons. With a remote cache, a stale node
/// whose key is known and that the remote has is listed as `fetch` (one `HEAD` each).
pub fn report(
    ws: &Pipeline,
    targets: &[String],
    rerun: &[String],
    json: bool,
    dry_run: bool,
    remote: Option<&RemoteCache>,
) -> anyhow::Result<Outcome> {
    let graph = ws.graph()?;
    let plan = Plan::new(&graph, &resolve(&graph, targets)?, &resolve(&graph, rerun)?);
    let views = query::scan(ws, &graph, &registry(), &plan.forced)?;
    let mut stale = 0;
    for v in views.iter().filter(|v| plan.selected[graph.by_id[&v.id]]) {
        let Some(why) = &v.stale else { continue };
        stale += 1;
        let in_remote = || match (remote, &v.key) {
            (Some(r), Some(k)) if !plan.forced[graph.by_id[&v.id]] => r.has_action(k),
            _ => false,
        };
        let verb = match (dry_run, v.restore_only, v.key.is_none()) {
            (_, true, _) => "restore",
            _ if in_remote() => "fetch",
            (true, _, true) => "may run",
            (true, _, false) => "run",
            (false, _, _) => "stale",
        };
        if json {
            let mut line = serde_json::json!({"node": v.id, "kind": v.kind, "action": verb, "why": why, "key": v.key});
            if !v.more_params.is_empty() {
                line["also"] = serde_json::json!(v.more_params);
            }
            outln!("{line}");
        } else {
            // Every changed parameter, not only the first.
            let mut text = why.to_string();
            for more in &v.more_params {
                text.push_str(&format!("; {more}"));
            }
            outln!("{verb:<8} {:<32} {text}", v.id);
        }
    }
    if let Some(r) = remote {
        for w in r.take_warnings() {
            eprintln!("skyctl: {w}");
        }
    }
    if !json && stale == 0 {
        outln!("up to date ({} nodes)", plan.len());
    }
    Ok(if stale > 0 && !dry_run {
        Outcome::Failed
    } else {
        Outcome::Success
    })
}
