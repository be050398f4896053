//! `skyctl verify`.

use std::process::ExitCode;

/// Arguments of `skyctl verify`.
#[derive(clap::Args, Debug)]
pub struct Args {}

/// Run `skyctl verify`.
pub fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`skyctl verify` is not available in this build yet")
}
