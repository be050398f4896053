//! `skyctl explain`.

use std::process::ExitCode;

/// Arguments of `skyctl explain`.
#[derive(clap::Args, Debug)]
pub struct Args {}

/// Run `skyctl explain`.
pub fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`skyctl explain` is not available in this build yet")
}
