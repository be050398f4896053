//! `skyctl clean`.

use std::process::ExitCode;

/// Arguments of `skyctl clean`.
#[derive(clap::Args, Debug)]
pub struct Args {}

/// Run `skyctl clean`.
pub fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`skyctl clean` is not available in this build yet")
}
