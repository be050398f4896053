//! `skyctl embed`: the encoder's output (Hugging Face's `last_hidden_state`, after the final
//! encoder norm) for texts or decision requests, pooled (`cls`: the first token's row,
//! `mean`: the mean over the tokens) or per token, as JSON lines and as `.npy`.

use crate::outcome::Outcome;
use std::io::Write as _;
use std::path::PathBuf;

use anyhow::Context;
use serde_json::json;
use sky_infer::engine::parse_json_line;
use sky_infer::forward::{hidden_states, Workspace};

/// How token rows become one vector.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pooling {
    /// The first token's row (`[CLS]`).
    Cls,
    /// The mean of every token's row.
    Mean,
    /// No pooling: every token's row.
    None,
}

/// Arguments of `skyctl embed`.
#[derive(clap::Args, Debug)]
#[command(group(clap::ArgGroup::new("input").required(true).args(["text", "requests"])))]
pub struct Args {
    /// The model: a whole .gguf file (not an `--encoder-only` one) or a Laya checkpoint directory.
    pub model: PathBuf,
    /// A text (repeatable): encoded as `[CLS] text [SEP]`, the way Hugging Face's tokenizer
    /// does, with the model's own tokenizer (NFC first).
    #[arg(long, value_name = "TEXT")]
    pub text: Vec<String>,
    /// Decision requests, one case per line (`{"id", "type", "instructions", "criteria",
    /// "state"}`), each embedded as the sequence `skyctl ask --requests` runs; `-`: standard
    /// input.
    #[arg(long, value_name = "FILE.jsonl")]
    pub requests: Option<PathBuf>,
    /// Pooling: `cls`, `mean` or `none` (one row per token).
    #[arg(long, value_enum, default_value_t = Pooling::Mean)]
    pub pooling: Pooling,
    /// Also write the vectors as a float32 `.npy`: pooled, one row per input (`N x hidden`);
    /// with `--pooling none`, one input's `tokens x hidden`.
    #[arg(long, value_name = "OUT.npy")]
    pub npy: Option<PathBuf>,
    /// Compute path: --q8, --q8-fast, --no-calib.
    #[command(flatten)]
    pub path: super::ComputeFlags,
}

/// One input: its id and token ids.
struct Input {
    id: String,
    ids: Vec<u32>,
}

/// Run `skyctl embed`.
pub fn run(args: Args) -> anyhow::Result<Outcome> {
    if let Some(out) = &args.npy {
        let mut reads = vec![(args.model.as_path(), "the model")];
        if let Some(r) = &args.requests {
            reads.push((r.as_path(), "the requests file"));
        }
        crate::ops::out_path::check("embed", out, &reads)?;
    }
    let (engine, report) = args.path.path().open(&args.model)?;
    for note in &report.notes {
        #[allow(clippy::print_stderr)]
        {
            eprintln!("skyctl: note: {note}");
        }
    }
    let mut inputs = Vec::new();
    for (i, text) in args.text.iter().enumerate() {
        let mut ids = vec![engine.special.cls];
        ids.extend(engine.tokenizer.encode(text));
        ids.push(engine.special.sep);
        inputs.push(Input {
            id: format!("text{}", i + 1),
            ids,
        });
    }
    if let Some(path) = &args.requests {
        let bytes = super::ask::read(path)?;
        let file = path.display().to_string();
        for (i, line) in bytes.split(|&b| b == b'\n').enumerate() {
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let (id, _, seq) = parse_json_line(line, &file, i + 1)
                .and_then(|case| engine.case_sequence(&case))
                .with_context(|| format!("{file}:{}", i + 1))?;
            inputs.push(Input { id, ids: seq.ids });
        }
    }
    let max = engine.model.config.max_len;
    if let Some(long) = inputs.iter().find(|x| x.ids.len() > max) {
        anyhow::bail!(
            "`{}`: {} tokens, more than the model's {max}",
            long.id,
            long.ids.len()
        );
    }
    if args.pooling == Pooling::None && args.npy.is_some() && inputs.len() != 1 {
        anyhow::bail!(
            "--npy with --pooling none writes one input's tokens x hidden; {} inputs were given",
            inputs.len()
        );
    }
    let d = engine.model.config.hidden;
    let mut ws = Workspace::new();
    let mut rows: Vec<f32> = Vec::new();
    let mut shape = (0usize, d);
    let mut out = std::io::stdout().lock();
    for x in &inputs {
        engine.check_stop()?;
        let h = hidden_states(&engine.model, engine.isa, &mut ws, &x.ids)
            .with_context(|| format!("`{}`", x.id))?;
        let n = x.ids.len();
        let line = match args.pooling {
            Pooling::None => {
                let per_token: Vec<&[f32]> = h.chunks_exact(d).collect();
                rows.extend_from_slice(&h);
                shape = (n, d);
                json!({"id": x.id, "tokens": n, "input_ids": x.ids, "pooling": "none", "hidden": per_token})
            }
            Pooling::Cls | Pooling::Mean => {
                let v = pool(&h, d, args.pooling);
                rows.extend_from_slice(&v);
                shape.0 += 1;
                let name = if args.pooling == Pooling::Cls {
                    "cls"
                } else {
                    "mean"
                };
                json!({"id": x.id, "tokens": n, "input_ids": x.ids, "pooling": name, "embedding": v})
            }
        };
        writeln!(out, "{line}")?;
    }
    if let Some(path) = &args.npy {
        sky_fs::write(path, &npy_f32(&[shape.0, shape.1], &rows))
            .with_context(|| format!("writing `{}`", path.display()))?;
    }
    Ok(Outcome::Success)
}

/// One vector from `n x d` rows: the first row, or the mean (summed in f64).
fn pool(h: &[f32], d: usize, how: Pooling) -> Vec<f32> {
    if how == Pooling::Cls {
        return h[..d.min(h.len())].to_vec();
    }
    let n = h.len() / d.max(1);
    let mut sum = vec![0f64; d];
    for row in h.chunks_exact(d) {
        for (s, &v) in sum.iter_mut().zip(row) {
            *s += v as f64;
        }
    }
    sum.iter().map(|s| (s / n.max(1) as f64) as f32).collect()
}

/// A float32, little-endian, C-order `.npy` (format 1.0) of `shape`.
fn npy_f32(shape: &[usize], data: &[f32]) -> Vec<u8> {
    let dims: Vec<String> = shape.iter().map(usize::to_string).collect();
    let tuple = match dims.as_slice() {
        [one] => format!("({one},)"),
        _ => format!("({})", dims.join(", ")),
    };
    let mut header = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': {tuple}, }}");
    // Magic (6) + version (2) + length (2) + header, padded with spaces to 64, ending in \n.
    let total = 10 + header.len() + 1;
    header.push_str(&" ".repeat((64 - total % 64) % 64));
    header.push('\n');
    let mut out = Vec::with_capacity(10 + header.len() + 4 * data.len());
    out.extend_from_slice(b"\x93NUMPY\x01\x00");
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    for v in data {
        out.extend_from_slice(&v.to_le_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn npy_header_is_aligned_and_pooling_averages() {
        let b = npy_f32(&[2, 3], &[1.0; 6]);
        let hlen = u16::from_le_bytes([b[8], b[9]]) as usize;
        assert_eq!((10 + hlen) % 64, 0);
        assert_eq!(b.len(), 10 + hlen + 24);
        let header = std::str::from_utf8(&b[10..10 + hlen]).unwrap();
        assert!(
            header.contains("'shape': (2, 3)") && header.ends_with('\n'),
            "{header}"
        );
        let h = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(pool(&h, 2, Pooling::Mean), vec![2.0, 3.0]);
        assert_eq!(pool(&h, 2, Pooling::Cls), vec![1.0, 2.0]);
    }
}
