//! `skyctl convert`.

use std::process::ExitCode;

/// Arguments of `skyctl convert`.
#[derive(clap::Args, Debug)]
pub struct Args {}

/// Run `skyctl convert`.
pub fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`skyctl convert` is not available in this build yet")
}
