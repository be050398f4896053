//! `skyctl random`.

use std::process::ExitCode;

/// Arguments of `skyctl random`.
#[derive(clap::Args, Debug)]
pub struct Args {}

/// Run `skyctl random`.
pub fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`skyctl random` is not available in this build yet")
}
