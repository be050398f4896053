//! `skyctl graph`.

use std::process::ExitCode;

/// Arguments of `skyctl graph`.
#[derive(clap::Args, Debug)]
pub struct Args {}

/// Run `skyctl graph`.
pub fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`skyctl graph` is not available in this build yet")
}
