//! `skyctl random`: a preset-size Laya checkpoint with random weights.

use crate::outcome::Outcome;
use std::io::Write as _;
use std::path::PathBuf;

use sky_laya::random::{preset, write_random, WeightDtype};

/// Element type of the written weights.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub enum Dtype {
    /// f32 (as the seed's exporter writes).
    F32,
    /// f16 (as Laya's save_checkpoint writes).
    F16,
    /// bf16.
    Bf16,
}

/// Arguments of `skyctl random`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The preset: s1-pico, s1-nano or s1-micro.
    pub preset: String,
    /// The directory to write (created if needed; its files are replaced).
    pub dir: PathBuf,
    /// Random seed (default: the preset's reference seed, 1001 / 1002 / 1003).
    #[arg(long, value_name = "N")]
    pub seed: Option<u64>,
    /// Element type of model.safetensors.
    #[arg(long, value_enum, default_value = "f32")]
    pub dtype: Dtype,
}

/// Run `skyctl random`.
pub fn run(args: Args) -> anyhow::Result<Outcome> {
    let p = preset(&args.preset)?;
    let seed = args.seed.unwrap_or(p.seed);
    let dtype = match args.dtype {
        Dtype::F32 => WeightDtype::F32,
        Dtype::F16 => WeightDtype::F16,
        Dtype::Bf16 => WeightDtype::BF16,
    };
    crate::ops::out_path::check("random", &args.dir, &[])?;
    refuse_other_files(&args.dir)?;
    let params = write_random(&p, &args.dir, seed, dtype)?;
    writeln!(
        std::io::stdout().lock(),
        "{}: {} with random weights (seed {seed}), {params} parameters",
        args.dir.display(),
        p.name
    )?;
    Ok(Outcome::Success)
}

/// The files `random` writes, relative to its folder (as `sky_laya::random::write_random`
/// lays out a checkpoint).
const WRITES: [&str; 5] = [
    "model.safetensors",
    "rl_agent_config.json",
    "encoder/config.json",
    "tokenizer/tokenizer.json",
    "tokenizer/tokenizer_config.json",
];

/// `random` replaces the files of a checkpoint (one it wrote before, say), never those of a
/// folder that is not one: a file there that it would write over is the user's.
fn refuse_other_files(dir: &std::path::Path) -> anyhow::Result<()> {
    let Some(taken) = WRITES
        .iter()
        .find(|f| std::fs::symlink_metadata(dir.join(f)).is_ok())
    else {
        return Ok(());
    };
    if sky_laya::LayaCheckpoint::open(dir).is_ok() {
        return Ok(());
    }
    anyhow::bail!(
        "random: `{}` is not a Laya checkpoint, and it holds `{}`, which random would write over; give a new folder (or a checkpoint, whose files are replaced)",
        dir.display(),
        dir.join(taken).display()
    )
}
