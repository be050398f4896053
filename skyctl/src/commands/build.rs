//! `skyctl build`.

use std::process::ExitCode;

/// Arguments of `skyctl build`.
#[derive(clap::Args, Debug)]
pub struct Args {}

/// Run `skyctl build`.
pub fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`skyctl build` is not available in this build yet")
}
