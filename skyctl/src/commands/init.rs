//! `skyctl init`.

#![allow(clippy::print_stdout)]

use crate::outcome::Outcome;
use std::path::PathBuf;

use anyhow::{bail, Context};

use crate::pipeline::EXAMPLE;
use crate::pipeline::MANIFEST;

/// Arguments of `skyctl init`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The folder (default: the current one).
    #[arg(default_value = ".")]
    pub dir: PathBuf,
}

/// Run `skyctl init`: write the commented example pipeline.toml; never overwrite one.
pub fn run(args: Args) -> anyhow::Result<Outcome> {
    std::fs::create_dir_all(&args.dir)
        .with_context(|| format!("creating `{}`", args.dir.display()))?;
    let path = args.dir.join(MANIFEST);
    if path.exists() {
        bail!("`{}` already exists; not overwriting it", path.display());
    }
    sky_fs::write(&path, EXAMPLE.as_bytes())
        .with_context(|| format!("writing `{}`", path.display()))?;
    println!(
        "wrote {} (an example pipeline; edit it, then run `skyctl build`)",
        path.display()
    );
    Ok(Outcome::Success)
}
