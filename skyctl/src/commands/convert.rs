//! `skyctl convert`: a Laya checkpoint directory to one GGUF file.

use crate::outcome::Outcome;
use std::io::Write as _;
use std::path::PathBuf;

use crate::ops::policy::PolicyFile;
use sky_gguf::GgmlType;
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
    /// A policy file (one `[policy.<name>]` table, as in pipeline.toml or from `skyctl tune`)
    /// instead of --type and --head-type. Its Q8_0 tensors are plain Q8_0: `skyctl quantize
    /// --policy` writes them with the calibrated outlier columns `skyctl tune` measured.
    #[arg(long, value_name = "POLICY.toml", conflicts_with_all = ["ftype", "head_type"])]
    pub policy: Option<PathBuf>,
    /// tokenizer.ggml.pre (default "modern-bert").
    #[arg(long, value_name = "NAME")]
    pub pre: Option<String>,
    /// general.name (default: the directory name).
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    /// Write weights that are NaN or infinite, or become so in their type (F16 above 65504,
    /// a Q8_0 block whose f16 scale overflows), instead of refusing them. The engine refuses
    /// to answer from such a file.
    #[arg(long)]
    pub allow_nonfinite: bool,
    /// Write the encoder alone, for upstream llama.cpp (embeddings; it refuses the full file):
    /// no decision-head blocks, `token_types` or `cls.*` tensors, no `decision.*` keys, and
    /// `block_count` and `feed_forward_length` cut to the encoder. skyctl cannot answer
    /// questions with it.
    #[arg(long)]
    pub encoder_only: bool,
}

/// Run `skyctl convert`.
pub fn run(args: Args) -> anyhow::Result<Outcome> {
    let mut reads = vec![(args.laya_dir.as_path(), "the checkpoint")];
    if let Some(p) = &args.policy {
        reads.push((p.as_path(), "the policy file"));
    }
    crate::ops::out_path::check("convert", &args.out, &reads)?;
    let ckpt = LayaCheckpoint::open(&args.laya_dir)?;
    let policy = match &args.policy {
        Some(p) => {
            let names = ckpt.tensors().iter().map(|t| t.gguf_name.as_str());
            PolicyFile::read(p, names)?.policy
        }
        None => TypePolicy {
            ftype: parse_type(&args.ftype)?,
            head_type: parse_type(&args.head_type)?,
            rules: Vec::new(),
        },
    };
    let opts = ConvertOptions {
        policy,
        name: args.name,
        pre: args.pre,
        allow_nonfinite: args.allow_nonfinite,
        encoder_only: args.encoder_only,
    };
    let s = convert(&ckpt, &opts, &args.out)?;
    let q8 = s.tensors.iter().filter(|t| t.ty == GgmlType::Q8_0).count();
    if args.policy.is_some() && q8 > 0 {
        #[allow(clippy::print_stderr)]
        {
            eprintln!(
                "note: {q8} tensors are plain Q8_0 (no outlier columns); `skyctl quantize MODEL OUT \
                 --policy POLICY.toml` writes the calibrated file `skyctl tune` measured"
            );
        }
    }
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
