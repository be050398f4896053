//! `skyctl graph`.

use crate::outcome::Outcome;

use crate::kinds::registry;
use crate::pipeline_args::WorkspaceArgs;
use sky_dag::query;

/// Output format of `skyctl graph`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default)]
pub enum Format {
    /// Graphviz.
    #[default]
    Dot,
    /// Mermaid flowchart.
    Mermaid,
    /// `{"nodes": [{"id", "kind", "key", "deps", "outputs"}]}`.
    Json,
}

/// Arguments of `skyctl graph`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Output format.
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
    #[command(flatten)]
    pub workspace: WorkspaceArgs,
}

/// Run `skyctl graph`.
pub fn run(args: Args) -> anyhow::Result<Outcome> {
    let ws = args.workspace.open()?;
    let graph = ws.graph()?;
    let views = query::scan(&ws, &graph, &registry(), &[])?;
    match args.format {
        Format::Json => {
            let nodes: Vec<_> = views
                .iter()
                .map(|v| serde_json::json!({"id": v.id, "kind": v.kind, "key": v.key, "deps": v.deps, "outputs": v.outputs}))
                .collect();
            outln!(
                "{}",
                serde_json::to_string_pretty(&serde_json::json!({ "nodes": nodes }))?
            );
        }
        Format::Dot => {
            outln!("digraph pipeline {{\n  rankdir=LR;");
            for v in &views {
                let style = if v.stale.is_some() {
                    ", style=bold, color=red"
                } else {
                    ""
                };
                outln!(
                    "  {:?} [label={:?}{style}];",
                    v.id,
                    format!("{}\n{}", v.id, v.kind)
                );
                for d in &v.deps {
                    outln!("  {d:?} -> {:?};", v.id);
                }
            }
            outln!("}}");
        }
        Format::Mermaid => {
            outln!("flowchart LR");
            let ids: std::collections::BTreeMap<&str, usize> = views
                .iter()
                .enumerate()
                .map(|(i, v)| (v.id.as_str(), i))
                .collect();
            for (i, v) in views.iter().enumerate() {
                outln!("  n{i}[\"{} ({})\"]", v.id.replace('"', "'"), v.kind);
                for d in &v.deps {
                    outln!("  n{} --> n{i}", ids[d.as_str()]);
                }
            }
        }
    }
    Ok(Outcome::Success)
}
