//! `skyctl status`.

use std::process::ExitCode;

/// Arguments of `skyctl status`.
#[derive(clap::Args, Debug)]
pub struct Args {}

/// Run `skyctl status`.
pub fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`skyctl status` is not available in this build yet")
}
