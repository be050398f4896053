//! `skyctl inspect`.

use std::process::ExitCode;

/// Arguments of `skyctl inspect`.
#[derive(clap::Args, Debug)]
pub struct Args {}

/// Run `skyctl inspect`.
pub fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`skyctl inspect` is not available in this build yet")
}
