//! `skyctl store`.

use std::process::ExitCode;

/// Arguments of `skyctl store`.
#[derive(clap::Args, Debug)]
pub struct Args {}

/// Run `skyctl store`.
pub fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`skyctl store` is not available in this build yet")
}
