//! `skyctl calibrate`.

use std::process::ExitCode;

/// Arguments of `skyctl calibrate`.
#[derive(clap::Args, Debug)]
pub struct Args {}

/// Run `skyctl calibrate`.
pub fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`skyctl calibrate` is not available in this build yet")
}
