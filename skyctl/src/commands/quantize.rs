//! `skyctl quantize`.

use std::process::ExitCode;

/// Arguments of `skyctl quantize`.
#[derive(clap::Args, Debug)]
pub struct Args {}

/// Run `skyctl quantize`.
pub fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`skyctl quantize` is not available in this build yet")
}
