//! `skyctl gc`.

use std::process::ExitCode;

/// Arguments of `skyctl gc`.
#[derive(clap::Args, Debug)]
pub struct Args {}

/// Run `skyctl gc`.
pub fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`skyctl gc` is not available in this build yet")
}
