//! `skyctl bench`.

use std::process::ExitCode;

/// Arguments of `skyctl bench`.
#[derive(clap::Args, Debug)]
pub struct Args {}

/// Run `skyctl bench`.
pub fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`skyctl bench` is not available in this build yet")
}
