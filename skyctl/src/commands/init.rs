//! `skyctl init`.

use std::process::ExitCode;

/// Arguments of `skyctl init`.
#[derive(clap::Args, Debug)]
pub struct Args {}

/// Run `skyctl init`.
pub fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`skyctl init` is not available in this build yet")
}
