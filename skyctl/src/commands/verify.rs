//! `skyctl verify`: build the golden suite nodes of pipeline.toml (and what they need).

use crate::outcome::Outcome;

use std::collections::BTreeMap;

use serde_json::Value;
use sky_dag::report::NodeStatus;

use crate::kinds::registry;
use crate::ops::golden_table::{render, Recorder, Row};
use crate::pipeline::Pipeline;
use crate::pipeline_args::WorkspaceArgs;
use crate::progress::{Console, Mode};
use crate::remote_args::RemoteArgs;
use sky_dag::BuildOptions;

/// Arguments of `skyctl verify`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Suites to run (names from [[golden]]), or models (every suite of that model);
    /// default: all.
    pub suites: Vec<String>,
    /// Parallel jobs, at least 1 (default: number of cores).
    #[arg(short, long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub jobs: Option<u32>,
    /// JSON lines, as `skyctl build --json`.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub workspace: WorkspaceArgs,
    #[command(flatten)]
    pub remote: RemoteArgs,
}

/// Run `skyctl verify`: exit 0 when every suite passes, 1 when one fails.
pub fn run(args: Args) -> anyhow::Result<Outcome> {
    let ws = args.workspace.open()?;
    let remote = args.remote.open(&ws.manifest)?;
    let mut targets: Vec<String> = if args.suites.is_empty() {
        // On-request suites (`on_request = true`) run only when named.
        ws.manifest
            .golden
            .iter()
            .filter(|g| !g.on_request)
            .map(|g| g.name.get_ref().clone())
            .collect()
    } else {
        // A model name stands for every suite of that model (on-request ones included).
        let mut named = Vec::new();
        for t in args.suites {
            let of_model: Vec<String> = ws
                .manifest
                .golden
                .iter()
                .filter(|g| g.name.get_ref() != &t)
                .filter(|g| g.model.as_ref().is_some_and(|m| m.get_ref() == &t))
                .map(|g| g.name.get_ref().clone())
                .collect();
            let is_suite = ws.manifest.golden.iter().any(|g| g.name.get_ref() == &t);
            if of_model.is_empty() || is_suite {
                named.push(t);
            } else {
                named.extend(of_model);
            }
        }
        named.dedup();
        named
    };
    if targets.is_empty() {
        outln!(
            "no [[golden]] suites in {}",
            ws.manifest.source.file.display()
        );
        return Ok(Outcome::Success);
    }
    // A name that is no suite is refused here, among the suites (did-you-mean over them),
    // rather than among every node of the graph.
    let suites: Vec<&str> = ws
        .manifest
        .golden
        .iter()
        .map(|g| g.name.get_ref().as_str())
        .collect();
    if let Some(bad) = targets.iter().find(|t| !suites.contains(&t.as_str())) {
        let model = ws.manifest.model.iter().any(|m| m.name.get_ref() == bad);
        anyhow::bail!(
            "no golden suite named `{bad}`{}{}; the suites: {}",
            if model {
                " (model `".to_string() + bad + "` has no suites)"
            } else {
                String::new()
            },
            sky_dag::source::did_you_mean(bad, suites.iter().copied()),
            if suites.is_empty() {
                "none".to_string()
            } else {
                suites.join(", ")
            }
        );
    }
    for t in &mut targets {
        *t = format!("golden/{t}");
    }
    let opts = BuildOptions {
        targets: targets.clone(),
        rerun: Vec::new(),
        jobs: args.jobs.map(|j| j as usize).unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1)
        }),
        keep_going: true,
        remote,
        executor: None,
        // Targets: never a full build's proof.
        noop_proof: None,
        edited: None,
        exiting: false,
    };
    // Ctrl-C or a SIGTERM stops the build cleanly (sky_dag::interrupt).
    sky_dag::interrupt::install()?;
    let mut console = Console::new(Mode::pick(args.json), false);
    let mut rec = Recorder::new(&mut console);
    let summary = sky_dag::build(&ws.ws, &ws.graph()?, &registry(), &opts, &mut rec)?;
    out!("{}", verify_output(&ws, &targets, &rec, args.json));
    console.summary(&summary);
    Ok(if let Some(sig) = sky_dag::interrupt::requested() {
        Outcome::Interrupted(sig)
    } else if summary.failed > 0 || summary.skipped > 0 {
        Outcome::Failed
    } else {
        Outcome::Success
    })
}

/// The rows of the suites `targets` (node ids `golden/<name>`) after a build.
fn rows(
    ws: &Pipeline,
    targets: &[String],
    finished: &BTreeMap<String, (NodeStatus, Option<String>)>,
) -> Vec<Row> {
    let graph = ws.graph().ok();
    targets
        .iter()
        .map(|id| {
            let suite = id.strip_prefix("golden/").unwrap_or(id);
            let report = graph
                .as_ref()
                .and_then(|g| g.by_id.get(id).map(|&n| &g.nodes[n]))
                .and_then(|n| n.outputs.first())
                .and_then(|o| sky_fs::read(&ws.root.join(&o.path), sky_fs::REPORT).ok())
                .and_then(|b| serde_json::from_slice::<Value>(&b).ok());
            match (finished.get(id), report) {
                (Some((NodeStatus::Skipped, _)), _) | (None, _) => Row::missing(suite, "not run"),
                // A report saying "pass" next to a failed node predates this build.
                (Some((NodeStatus::Failed, err)), r)
                    if r.as_ref().is_none_or(|r| r["passed"] == true) =>
                {
                    Row::missing(
                        suite,
                        &format!("error: {}", err.as_deref().unwrap_or("failed")),
                    )
                }
                (_, Some(r)) => Row::from_report(&r),
                (_, None) => Row::missing(suite, "error: no report"),
            }
        })
        .collect()
}

/// What `skyctl verify` prints on stdout after its build: the table, or JSON lines.
fn verify_output(ws: &Pipeline, targets: &[String], rec: &Recorder<'_>, json: bool) -> String {
    let rows = rows(ws, targets, &rec.finished);
    if json {
        rows.iter().map(|r| r.json_line() + "\n").collect()
    } else {
        render(&rows)
    }
}
