//! `skyctl explain NODE`.

#![allow(clippy::print_stdout)]

use crate::outcome::Outcome;

use crate::kinds::registry;
use crate::pipeline_args::WorkspaceArgs;
use sky_dag::query;

/// Arguments of `skyctl explain`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The node id.
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
    let e = query::explain(&ws, &graph, &registry(), &args.node)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&e)?);
        return Ok(Outcome::Success);
    }
    let v = &e.view;
    println!("node     {}", v.id);
    println!("kind     {}", v.kind);
    match &e.material {
        Some(m) => {
            println!("version  {}", m.version);
            println!("key      {}", v.key.map(|k| k.hex()).unwrap_or_default());
            println!("params   {}", serde_json::to_string(&m.params)?);
            println!("inputs");
            for i in &m.inputs {
                println!("  {}  {}", i.digest.short(), i.path);
            }
        }
        None => println!("key      unknown until upstream nodes run"),
    }
    println!("outputs  {}", v.outputs.join(", "));
    match &e.last_key {
        Some(k) => println!("last key {}", k.hex()),
        None => println!("last key none (never built here)"),
    }
    match &v.stale {
        None => println!("status   up to date"),
        Some(why) => println!("status   stale: {why}"),
    }
    for d in &e.differences {
        println!("  differs: {d}");
    }
    Ok(Outcome::Success)
}
