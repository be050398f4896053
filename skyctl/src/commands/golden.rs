//! `skyctl golden`.

use std::process::ExitCode;

/// Arguments of `skyctl golden`.
#[derive(clap::Args, Debug)]
pub struct Args {}

/// Run `skyctl golden`.
pub fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`skyctl golden` is not available in this build yet")
}
