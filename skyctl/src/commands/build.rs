//! `skyctl build`.

use crate::outcome::Outcome;

use crate::kinds::registry;
use crate::pipeline_args::WorkspaceArgs;
use crate::progress::{Console, Mode};
use crate::remote_args::RemoteArgs;
use sky_dag::BuildOptions;

/// Arguments of `skyctl build`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Nodes, models or kinds to build (with their dependencies); default: everything.
    pub targets: Vec<String>,
    /// Parallel jobs, at least 1 (default: number of cores).
    #[arg(short, long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub jobs: Option<u32>,
    /// Keep building independent nodes after a failure.
    #[arg(short = 'k', long)]
    pub keep_going: bool,
    /// List what would run and why; run nothing.
    #[arg(short = 'n', long)]
    pub dry_run: bool,
    /// Re-run this node, model or kind even if cached (repeatable).
    #[arg(long, value_name = "NODE|MODEL|KIND")]
    pub rerun: Vec<String>,
    /// One JSON object per node event, then a summary line.
    #[arg(long)]
    pub json: bool,
    /// Also print cache hits.
    #[arg(short, long)]
    pub verbose: bool,
    /// Where nodes that must run are run: `local` (here) or `slurm` (one Slurm job per node,
    /// data through the remote cache); default: [execute] engine, else local.
    #[arg(long, value_name = "ENGINE", value_parser = clap::builder::PossibleValuesParser::new(crate::pipeline::execute::ENGINES))]
    pub execute: Option<String>,
    #[command(flatten)]
    pub workspace: WorkspaceArgs,
    #[command(flatten)]
    pub remote: RemoteArgs,
}

/// Run `skyctl build`.
pub fn run(args: Args) -> anyhow::Result<Outcome> {
    sky_dag::timings::mark("command line");
    if args.dry_run {
        let ws = args.workspace.open()?;
        let remote = args.remote.open(&ws.manifest)?;
        let remote = remote.as_ref();
        return super::status::report(&ws, &args.targets, &args.rerun, args.json, true, remote);
    }
    let registry = registry();
    let file = args.workspace.find()?;
    // A plain build of everything that changed nothing since the last one is told from the
    // last build's no-op proof, without loading the graph.
    let plain = args.targets.is_empty()
        && args.rerun.is_empty()
        && !args.json
        && !args.verbose
        && args.execute.is_none();
    let looked = if plain {
        match args.workspace.noop_build(&file, &registry, &args.remote) {
            Ok(summary) => {
                Console::new(Mode::pick(false), false).summary(&summary);
                report_timings();
                return Ok(Outcome::Success);
            }
            Err(looked) => looked,
        }
    } else {
        None
    };
    // The workspace state loads on the other core while the graph loads (or the manifest
    // expands).
    let state_paths = sky_dag::state::StatePaths::new(&file.root);
    let (compiled, state) = std::thread::scope(|scope| {
        let state = scope.spawn(|| sky_dag::state::Preloaded::load(&state_paths));
        let compiled = args.workspace.open_compiled(file, &registry, looked);
        sky_dag::timings::mark(match &compiled {
            Ok(c) if c.cached => "graph (cached)",
            _ => "graph (parsed)",
        });
        (compiled, state.join())
    });
    let compiled = compiled?;
    let Ok(state) = state else {
        anyhow::bail!("reading the workspace state panicked");
    };
    sky_dag::timings::mark("state join");
    let remote = args.remote.open_with(compiled.remote.as_deref())?;
    let engine = compiled.execute.engine(args.execute.as_deref()).to_string();
    let mut max_jobs = None;
    let executor: Option<std::sync::Arc<dyn sky_dag::executor::Executor>> = match engine.as_str() {
        "slurm" => {
            let writable = remote.as_ref().filter(|r| !r.read_only());
            let (Some(cache), Some(url)) =
                (writable, args.remote.url_with(compiled.remote.as_deref())?)
            else {
                anyhow::bail!(
                    "the slurm engine needs a remote cache its jobs can write to (data moves \
                     through it, never through a shared file system): give --remote-cache URL, \
                     SKYCTL_REMOTE_CACHE or [cache] remote, not read-only"
                );
            };
            let cfg = &compiled.execute;
            max_jobs = Some(
                cfg.slurm
                    .max_jobs
                    .unwrap_or(crate::pipeline::execute::DEFAULT_MAX_JOBS),
            );
            Some(std::sync::Arc::new(crate::slurm::Slurm::new(
                cache.clone(),
                url,
                cfg.slurm.clone(),
                cfg.resources.clone(),
                compiled.ws.state.dir.join("slurm"),
            )?))
        }
        _ => None,
    };
    let opts = BuildOptions {
        targets: args.targets,
        rerun: args.rerun,
        jobs: args.jobs.map(|j| j as usize).unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1)
        }),
        keep_going: args.keep_going,
        remote,
        executor,
        noop_proof: compiled.key,
        edited: compiled.edited.clone(),
        // The process ends after this build (see the end of this function).
        exiting: true,
    };
    let opts = BuildOptions {
        // A cluster runs more jobs at once than this machine has cores.
        jobs: args
            .jobs
            .map(|j| j as usize)
            .or(max_jobs)
            .unwrap_or(opts.jobs),
        ..opts
    };
    // Ctrl-C or a SIGTERM stops the build cleanly (sky_dag::interrupt).
    sky_dag::interrupt::install()?;
    let mut console = Console::new(Mode::pick(args.json), args.verbose);
    let (ws, graph) = (&compiled.ws, &compiled.graph);
    let summary =
        sky_dag::builder::build_preloaded(ws, graph, &registry, &opts, &mut console, state)?;
    console.summary(&summary);
    push_hint(ws, &opts, &summary, !args.json);
    report_timings();
    // The process ends after this; freeing a graph and a manifest of thousands of nodes
    // piece by piece costs several percent of a no-op build for nothing.
    std::mem::forget(compiled);
    Ok(if let Some(sig) = sky_dag::interrupt::requested() {
        Outcome::Interrupted(sig)
    } else if summary.failed > 0 || summary.skipped > 0 {
        Outcome::Failed
    } else {
        Outcome::Success
    })
}

/// Print the phase timers (`SKYCTL_TIMINGS=1`).
fn report_timings() {
    sky_dag::timings::mark("summary");
    for line in sky_dag::timings::report() {
        #[allow(clippy::print_stderr)]
        {
            eprintln!("timing: {line}");
        }
    }
}

/// A build that found everything in the local store and moved nothing through a writable
/// remote cache that no build or push of this workspace ever used: its results were built
/// before the remote was set, and builds upload only what they run, so say that `skyctl store
/// push` uploads them. Known from a local note ([`note_remote`]): a no-op build still sends
/// no request.
fn push_hint(
    ws: &sky_dag::Workspace,
    opts: &BuildOptions,
    s: &sky_dag::report::Summary,
    print: bool,
) {
    let (Some(remote), Some(r)) = (&opts.remote, &s.remote) else {
        return;
    };
    if r.uploaded > 0 || r.restored > 0 {
        note_remote(&ws.state, remote.shown_url());
        return;
    }
    // A server that did not answer is its own warning, not a reason to push.
    if !print
        || remote.read_only()
        || r.warnings > 0
        || s.executed > 0
        || s.failed > 0
        || s.cached == 0
    {
        return;
    }
    if !used_remotes(&ws.state)
        .iter()
        .any(|u| u == remote.shown_url())
    {
        #[allow(clippy::print_stderr)]
        {
            eprintln!(
                "skyctl: nothing was uploaded: these results were built before the remote cache \
                 was set, and a build uploads only what it runs; `skyctl store push` uploads them"
            );
        }
    }
}

/// The remote caches this workspace's results went to or came from.
fn used_remotes(state: &sky_dag::state::StatePaths) -> Vec<String> {
    sky_fs::read_to_string(&state.remotes(), sky_fs::TEXT)
        .map(|t| t.lines().map(str::to_string).collect())
        .unwrap_or_default()
}

/// Note that results of this workspace went to or came from `url` (best effort: the note
/// only decides whether a hint is printed).
pub fn note_remote(state: &sky_dag::state::StatePaths, url: &str) {
    let mut urls = used_remotes(state);
    if urls.iter().any(|u| u == url) || !state.dir.is_dir() {
        return;
    }
    urls.push(url.to_string());
    let _ = sky_fs::write(&state.remotes(), (urls.join("\n") + "\n").as_bytes());
}
