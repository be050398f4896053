//! `skyctl kernels`.

use std::process::ExitCode;

/// Arguments of `skyctl kernels`.
#[derive(clap::Args, Debug)]
pub struct Args {}

/// Run `skyctl kernels`.
pub fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`skyctl kernels` is not available in this build yet")
}
