//! `skyctl convert`: a Laya checkpoint directory to one GGUF file.

use crate::outcome::Outcome;
use std::io::Write as _;
use std::path::PathBuf;

use sky_laya::{convert, parse_type, ConvertOptions, LayaCheckpoint, TypePolicy};

/// Arguments of `skyctl convert`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The Laya checkpoint directory (model.safetensors, encoder/, rl_agent_config.json, tokenizer/).
    pub laya_dir: PathBuf,
    /// The GGUF file to write (atomically: nothing is left behind on error).
    pub out: PathBuf,
    /// Type of the encoder matrices: f32, f16, bf16 or q8_0.
    #[arg(long = "type", value_name = "TYPE", default_value = "f16")]
    pub ftype: String,
    /// Type of the decision-head matrices: f32, f16, bf16 or q8_0.
    #[arg(long, value_name = "TYPE", default_value = "f32")]
    pub head_type: String,
    /// tokenizer.ggml.pre (default "modern-bert").
    #[arg(long, value_name = "NAME")]
    pub pre: Option<String>,
    /// general.name (default: the directory name).
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    /// Convert NaN/Inf weights instead of refusing them.
    #[arg(long)]
    pub allow_nonfinite: bool,
}

/// Run `skyctl convert`.
pub fn run(args: Args) -> anyhow::Result<Outcome> {
    let opts = ConvertOptions {
        policy: TypePolicy {
            ftype: parse_type(&args.ftype)?,
            head_type: parse_type(&args.head_type)?,
            rules: Vec::new(),
        },
        name: args.name,
        pre: args.pre,
        allow_nonfinite: args.allow_nonfinite,
    };
    let ckpt = LayaCheckpoint::open(&args.laya_dir)?;
    let s = convert(&ckpt, &opts, &args.out)?;
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "{}: {} tensors, {} parameters, {} bytes of tensor data, {} metadata keys, {} bytes",
        s.path.display(),
        s.tensors.len(),
        s.n_params,
        s.tensor_bytes,
        s.n_kv,
        s.file_bytes
    )?;
    Ok(Outcome::Success)
}
