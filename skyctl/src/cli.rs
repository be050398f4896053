//! Command-line surface. Each subcommand's arguments live beside its handler in
//! [`crate::commands`]; this file only lists them and maps results to exit codes.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::commands;

use crate::outcome::Outcome;

/// Exit code for "the command ran, and the answer is no" (a failed node, a golden mismatch).
pub const EXIT_FAILED: u8 = 1;
/// Exit code for bad usage or bad input (a malformed file, a bad pipeline.toml).
pub const EXIT_USAGE: u8 = 2;

#[derive(Parser, Debug)]
#[command(
    name = "skyctl",
    version,
    about = "Build, verify and release small on-device decision models"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Print the metadata and tensor table of a GGUF file.
    Inspect(commands::inspect::Args),
    /// Convert a Laya checkpoint directory to one GGUF file.
    Convert(commands::convert::Args),
    /// Write a Laya checkpoint of a preset size with random weights.
    Random(commands::random::Args),
    /// Answer decision questions with a model (GGUF file or Laya directory).
    Ask(commands::ask::Args),
    /// Print the encoder's output for texts or requests (pooled or per token; JSON lines, .npy).
    Embed(commands::embed::Args),
    /// Record per-channel activation magnitudes of a model over a prompt set.
    Calibrate(commands::calibrate::Args),
    /// Write an outlier-aware Q8_0 GGUF of a model.
    Quantize(commands::quantize::Args),
    /// Find the smallest type policy whose answers stay within a tolerance of f32.
    Tune(commands::tune::Args),
    /// Measure per-question latency of a model.
    Bench(commands::bench::Args),
    /// Record a model golden suite's expected file, or generate and check PNGOLDEN1 kernel
    /// golden vectors.
    Golden(commands::golden::Args),
    /// Run kernel implementations over golden inputs.
    Kernels(commands::kernels::Args),
    /// Compile the CUDA reference kernels for the Tesla K80 (compute_37 PTX, sm_37 cubins).
    Cuda(commands::cuda::Args),
    /// Start a project that builds, verifies and publishes as it is: a checkpoint
    /// (models/<name>/: the s1-pico preset with random weights, or a copy of --model), eight
    /// golden cases and their expected outputs recorded from it (golden/<name>/), a commented
    /// pipeline.toml (two variants, a bench, two golden suites, the site) and a .gitignore (the
    /// store .skyctl/, build/ and the release tree site/public/).
    Init(commands::init::Args),
    /// Build everything, or the named models/nodes and their dependencies.
    Build(commands::build::Args),
    /// List stale nodes and why each is stale.
    Status(commands::status::Args),
    /// Print a node's key inputs and what differs from the last build.
    Explain(commands::explain::Args),
    /// Print the pipeline graph (dot, mermaid or JSON).
    Graph(commands::graph::Args),
    /// Run the golden suites of pipeline.toml.
    Verify(commands::verify::Args),
    /// Remove store entries not reachable from the last N builds.
    Gc(commands::gc::Args),
    /// Remove materialized outputs.
    Clean(commands::clean::Args),
    /// Inspect and check the content store.
    Store(commands::store::Args),
    /// Run one node of a build elsewhere (what a Slurm job of `build --execute slurm` runs).
    Worker(commands::worker::Args),
}

/// Parse the command line, run it, and turn the result into an exit code.
pub fn main() -> ExitCode {
    sky_dag::timings::mark("start");
    // `.skyctl` and the store get sane modes whatever the umask (sky_dag::process).
    sky_dag::process::clamp_umask();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { EXIT_USAGE } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    // The variables read deep inside (every kernel reads the ISA cap once, every phase mark
    // the timings switch) are checked here: a bad one is refused before anything runs.
    let checks = [
        sky_quant::IsaLevel::from_env()
            .map(|_| ())
            .map_err(|e| e.to_string()),
        sky_dag::timings::init().map_err(|e| e.to_string()),
    ];
    if let Some(Err(e)) = checks.into_iter().find(Result::is_err) {
        #[allow(clippy::print_stderr)]
        {
            eprintln!("skyctl: {e}");
        }
        return ExitCode::from(EXIT_USAGE);
    }
    match run(cli.command) {
        Ok(Outcome::Success) => ExitCode::SUCCESS,
        Ok(Outcome::Failed) => ExitCode::from(EXIT_FAILED),
        Ok(Outcome::BadInput) => ExitCode::from(EXIT_USAGE),
        Ok(Outcome::Interrupted(sig)) => ExitCode::from(128u8.saturating_add(sig as u8)),
        // Output to a closed pipe (`skyctl graph | head -1`) is not an error of ours. The
        // pipeline commands never end here (`outln!` drops what a closed pipe refuses and
        // they return their real outcome); this is for the direct tools that stream their
        // whole answer and stop at the first refused write.
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            #[allow(clippy::print_stderr)]
            {
                eprintln!("skyctl: {}", sky_dag::report::error_chain(&e));
            }
            ExitCode::from(EXIT_USAGE)
        }
    }
}

fn run(command: Command) -> anyhow::Result<Outcome> {
    // Builds stop cleanly on a signal (they install their own handling); every other command
    // exits at once as before, but first removes the temp file of what it was writing.
    if !matches!(
        command,
        Command::Build(_) | Command::Verify(_) | Command::Worker(_)
    ) {
        sky_dag::interrupt::install_for_tool()?;
    }
    match command {
        Command::Inspect(a) => commands::inspect::run(a),
        Command::Convert(a) => commands::convert::run(a),
        Command::Random(a) => commands::random::run(a),
        Command::Ask(a) => commands::ask::run(a),
        Command::Embed(a) => commands::embed::run(a),
        Command::Calibrate(a) => commands::calibrate::run(a),
        Command::Quantize(a) => commands::quantize::run(a),
        Command::Tune(a) => commands::tune::run(a),
        Command::Bench(a) => commands::bench::run(a),
        Command::Golden(a) => commands::golden::run(a),
        Command::Kernels(a) => commands::kernels::run(a),
        Command::Cuda(a) => commands::cuda::run(a),
        Command::Init(a) => commands::init::run(a),
        Command::Build(a) => commands::build::run(a),
        Command::Status(a) => commands::status::run(a),
        Command::Explain(a) => commands::explain::run(a),
        Command::Graph(a) => commands::graph::run(a),
        Command::Verify(a) => commands::verify::run(a),
        Command::Gc(a) => commands::gc::run(a),
        Command::Clean(a) => commands::clean::run(a),
        Command::Store(a) => commands::store::run(a),
        Command::Worker(a) => commands::worker::run(a),
    }
}

/// Whether the error is a write to a closed pipe: output goes through `outln!`/`writeln!`
/// with `?`, so it arrives here as an [`std::io::Error`] of kind `BrokenPipe` (ripgrep's
/// check), anywhere in the chain of contexts.
fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

#[cfg(test)]
mod tests {
    use super::is_broken_pipe;
    use std::io::{Error, ErrorKind};

    #[test]
    fn a_broken_pipe_is_recognised_by_its_kind_under_any_context() {
        let e =
            anyhow::Error::new(Error::from(ErrorKind::BrokenPipe)).context("printing the graph");
        assert!(is_broken_pipe(&e));
        // The same words in a message are not a broken pipe.
        let e = anyhow::anyhow!("failed printing to stdout: Broken pipe (os error 32)");
        assert!(!is_broken_pipe(&e));
        let e = anyhow::Error::new(Error::from(ErrorKind::PermissionDenied));
        assert!(!is_broken_pipe(&e));
    }
}
