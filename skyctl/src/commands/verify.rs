//! `skyctl verify`: build the golden suite nodes of pipeline.toml (and what they need).

#![allow(clippy::print_stdout)]

use crate::outcome::Outcome;

use crate::kinds::registry;
use crate::pipeline_args::WorkspaceArgs;
use crate::progress::{Console, Mode};
use crate::remote_args::RemoteArgs;
use sky_dag::BuildOptions;

/// Arguments of `skyctl verify`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Suites to run (names from [[golden]]); default: all.
    pub suites: Vec<String>,
    /// Parallel jobs, at least 1 (default: number of cores).
    #[arg(short, long, value_parser = clap::value_parser!(u32).range(1..))]
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
        ws.manifest
            .golden
            .iter()
            .map(|g| g.name.get_ref().clone())
            .collect()
    } else {
        args.suites
    };
    if targets.is_empty() {
        println!(
            "no [[golden]] suites in {}",
            ws.manifest.source.file.display()
        );
        return Ok(Outcome::Success);
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
    };
    // Ctrl-C or a SIGTERM stops the build cleanly (sky_dag::interrupt).
    sky_dag::interrupt::install()?;
    let mut console = Console::new(Mode::pick(args.json), false);
    let mut rec = crate::ops::golden_table::Recorder::new(&mut console);
    let summary = sky_dag::build(&ws.ws, &ws.graph()?, &registry(), &opts, &mut rec)?;
    print!(
        "{}",
        crate::ops::golden_table::verify_output(&ws, &targets, &rec, args.json)
    );
    console.summary(&summary);
    Ok(if let Some(sig) = sky_dag::interrupt::requested() {
        Outcome::Interrupted(sig)
    } else if summary.failed > 0 || summary.skipped > 0 {
        Outcome::Failed
    } else {
        Outcome::Success
    })
}
