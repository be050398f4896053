//! `skyctl ask`.

use std::process::ExitCode;

/// Arguments of `skyctl ask`.
#[derive(clap::Args, Debug)]
pub struct Args {}

/// Run `skyctl ask`.
pub fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`skyctl ask` is not available in this build yet")
}
