//! `skyctl explain NODE`.

use crate::outcome::Outcome;

use crate::kinds::registry;
use crate::pipeline_args::WorkspaceArgs;
use sky_dag::query;

/// Arguments of `skyctl explain`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// A node id, or a model name (lists the model's nodes and their status).
    pub node: String,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub workspace: WorkspaceArgs,
}

/// Run `skyctl explain`.
pub fn run(args: Args) -> anyhow::Result<Outcome> {
    let ws = args.workspace.open()?;
    let graph = ws.graph()?;
    if !graph.by_id.contains_key(&args.node) {
        if let Some(out) = group(&ws, &graph, &args.node, args.json)? {
            return Ok(out);
        }
        // Neither a node nor a model: the error suggests either.
        graph.resolve_target(&args.node)?;
    }
    let e = query::explain(&ws, &graph, &registry(), &args.node)?;
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&e)?);
        return Ok(Outcome::Success);
    }
    let v = &e.view;
    outln!("node     {}", v.id);
    outln!("kind     {}", v.kind);
    match &e.material {
        Some(m) => {
            outln!("version  {}", m.version);
            outln!("key      {}", v.key.map(|k| k.hex()).unwrap_or_default());
            outln!("params   {}", serde_json::to_string(&m.params)?);
            outln!("inputs");
            for i in &m.inputs {
                outln!("  {}  {}", i.digest.short(), i.path);
            }
        }
        None => outln!("key      unknown until upstream nodes run"),
    }
    outln!("outputs  {}", v.outputs.join(", "));
    match (&e.last_key, &v.last_failure) {
        (Some(k), _) => outln!("last key {}", k.hex()),
        (None, Some(_)) => outln!("last key none (failed in the last build)"),
        (None, None) => outln!("last key none (never built here)"),
    }
    if let Some(f) = &v.last_failure {
        outln!("last run FAILED ({}): {f}", f.kind());
    }
    match &v.stale {
        None => outln!("status   up to date"),
        Some(why) => outln!("status   stale: {why}"),
    }
    for d in &e.differences {
        outln!("  differs: {d}");
    }
    Ok(Outcome::Success)
}

/// `skyctl explain MODEL`: every node of the model with its status; None when `name` is no
/// model (the caller then reports an unknown node).
fn group(
    ws: &crate::pipeline::Pipeline,
    graph: &sky_dag::Graph,
    name: &str,
    json: bool,
) -> anyhow::Result<Option<Outcome>> {
    let members: Vec<usize> = (0..graph.nodes.len())
        .filter(|&n| graph.nodes[n].group.as_deref() == Some(name))
        .collect();
    if members.is_empty() {
        return Ok(None);
    }
    let views = query::scan(ws, graph, &registry(), &[])?;
    let rows: Vec<_> = members
        .iter()
        .filter_map(|&n| views.iter().find(|v| v.id == graph.nodes[n].id))
        .collect();
    if json {
        let list: Vec<_> = rows
            .iter()
            .map(|v| serde_json::json!({"node": v.id, "kind": v.kind, "key": v.key, "stale": v.stale}))
            .collect();
        outln!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({"model": name, "nodes": list}))?
        );
        return Ok(Some(Outcome::Success));
    }
    outln!(
        "model `{name}`: {} nodes (skyctl explain NODE for one)",
        rows.len()
    );
    for v in rows {
        match &v.stale {
            None => outln!("  {:<32} {:<14} up to date", v.id, v.kind),
            Some(why) => outln!("  {:<32} {:<14} stale: {why}", v.id, v.kind),
        }
    }
    Ok(Some(Outcome::Success))
}
