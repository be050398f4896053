//! Laya checkpoint -> one GGUF file, as llama.cpp's converter names and orders things
//! (spec sections 2.2-2.4), with the seed's type policy and extra keys.
//!
//! Memory: the source stays memory-mapped; [`convert`] writes the header first (offsets
//! follow from the sizes), then decodes, checks, encodes and writes each tensor in turn.

use std::path::{Path, PathBuf};

use rayon::prelude::*;
use sky_gguf::{GgmlType, GgufWriter};

use crate::checkpoint::{LayaCheckpoint, TensorEntry};
use crate::config::write_model_keys;
use crate::error::{LayaError, Result};
use crate::policy::{file_type, TypePolicy};
use crate::stream::{self, Planned};
use crate::tokenizer::write_tokenizer_keys;

pub use crate::config::ARCH;
/// Default `tokenizer.ggml.pre` (the English ModernBERT pre-tokenizer).
pub const DEFAULT_PRE: &str = "modern-bert";
/// Tensor data alignment (written as `general.alignment`).
pub const ALIGNMENT: u32 = 32;

/// What a conversion should do besides reading the checkpoint.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ConvertOptions {
    /// Per-tensor type policy.
    pub policy: TypePolicy,
    /// `general.name`; the checkpoint directory's name when `None`.
    pub name: Option<String>,
    /// `tokenizer.ggml.pre`; [`DEFAULT_PRE`] when `None`.
    pub pre: Option<String>,
    /// Write weights that are NaN or infinite, or become so in their type (F16 above 65504,
    /// a Q8_0 block whose f16 scale overflows), instead of refusing them. The engine refuses
    /// to answer from such a file.
    pub allow_nonfinite: bool,
    /// Write the encoder alone, for upstream llama.cpp (embeddings): no decision-head blocks,
    /// no `token_types` or `cls.*` tensors, no `decision.*` keys, and `block_count` and
    /// `feed_forward_length` cut to the encoder's layers. Upstream refuses the full file (its
    /// `block_count` counts the head blocks, which it would build as encoder layers).
    pub encoder_only: bool,
}

/// One written tensor.
#[derive(Debug, Clone, PartialEq)]
pub struct ConvertedTensor {
    /// GGUF name.
    pub name: String,
    /// PyTorch name in the checkpoint.
    pub source: String,
    /// ggml dims (innermost first).
    pub dims: Vec<u64>,
    /// Written type.
    pub ty: GgmlType,
    /// Bytes of data (padding excluded).
    pub bytes: u64,
}

/// What [`convert`] wrote.
#[derive(Debug, Clone, PartialEq)]
pub struct ConvertSummary {
    /// The output file.
    pub path: PathBuf,
    /// Every tensor in file order.
    pub tensors: Vec<ConvertedTensor>,
    /// Total parameters (elements of all tensors).
    pub n_params: u64,
    /// Bytes of tensor data, padding excluded.
    pub tensor_bytes: u64,
    /// Size of the file.
    pub file_bytes: u64,
    /// Number of metadata keys.
    pub n_kv: usize,
}

/// gguf-py's `model_weight_count_rounded_notation` (the `general.size_label` value).
pub fn size_label(n_params: u64) -> String {
    let n = n_params as f64;
    let (scaled, suffix) = if n > 1e12 {
        (n * 1e-12, "T")
    } else if n > 1e9 {
        (n * 1e-9, "B")
    } else if n > 1e6 {
        (n * 1e-6, "M")
    } else {
        (n * 1e-3, "K")
    };
    let digits = format!("{}", scaled.round_ties_even() as u64).len();
    let fix = 2usize.saturating_sub(digits);
    format!("{scaled:.fix$}{suffix}")
}

/// Decode, check and encode one tensor.
fn encode_tensor(
    ckpt: &LayaCheckpoint,
    t: &TensorEntry,
    ty: GgmlType,
    allow_nonfinite: bool,
) -> Result<Vec<u8>> {
    let values = ckpt.read_f32(t);
    if !allow_nonfinite {
        // The one check every writer runs: finite in the type it is written as.
        match sky_gguf::check_finite_in(ty, &t.pytorch_name, &values) {
            Ok(()) => {}
            Err(sky_gguf::Error::NotFinite {
                index,
                value,
                reason,
                ..
            }) => {
                return Err(LayaError::NonFinite {
                    name: t.pytorch_name.clone(),
                    index,
                    value,
                    reason,
                })
            }
            Err(e) => return Err(LayaError::gguf(format!("tensor {:?}", t.gguf_name), e)),
        }
    }
    let row = t.shape.last().copied().unwrap_or(1);
    sky_gguf::encode(ty, &values, row)
        .map_err(|e| LayaError::gguf(format!("tensor {:?} as {ty}", t.gguf_name), e))
}

/// Each kept tensor with its output type, in file order.
fn plan<'a>(
    ckpt: &'a LayaCheckpoint,
    opts: &ConvertOptions,
) -> Result<Vec<(&'a TensorEntry, GgmlType)>> {
    opts.policy.validate()?;
    let n_enc = ckpt.encoder.num_hidden_layers;
    Ok(written_tensors(ckpt, opts)
        .map(|t| (t, opts.policy.type_for(&t.gguf_name, &t.shape, n_enc)))
        .collect())
}

/// The checkpoint's tensors that go into the file (all, or the encoder's alone).
fn written_tensors<'a>(
    ckpt: &'a LayaCheckpoint,
    opts: &ConvertOptions,
) -> impl Iterator<Item = &'a TensorEntry> {
    let n_enc = ckpt.encoder.num_hidden_layers;
    let encoder_only = opts.encoder_only;
    ckpt.tensors()
        .iter()
        .filter(move |t| !(encoder_only && crate::is_head_tensor(&t.gguf_name, n_enc)))
}

/// The metadata keys only, in order, in a writer.
fn metadata_writer(ckpt: &LayaCheckpoint, opts: &ConvertOptions) -> Result<GgufWriter> {
    let mut w = GgufWriter::new();
    let n_params: u64 = written_tensors(ckpt, opts)
        .map(|t| t.n_elements() as u64)
        .sum();
    write_metadata(&mut w, ckpt, opts, n_params)?;
    Ok(w)
}

/// Build the complete GGUF (metadata and encoded tensors) in memory, as a
/// [`sky_gguf::GgufWriter`]. [`convert`] writes the same bytes without holding them all.
pub fn build_writer(
    ckpt: &LayaCheckpoint,
    opts: &ConvertOptions,
) -> Result<(GgufWriter, Vec<ConvertedTensor>)> {
    let plan = plan(ckpt, opts)?;
    let encoded: Vec<Vec<u8>> = plan
        .par_iter()
        .map(|(t, ty)| encode_tensor(ckpt, t, *ty, opts.allow_nonfinite))
        .collect::<Result<_>>()?;
    let mut w = metadata_writer(ckpt, opts)?;
    let mut written = Vec::with_capacity(plan.len());
    for ((t, ty), data) in plan.into_iter().zip(encoded) {
        written.push(converted(t, ty, data.len() as u64));
        // ggml dims are the PyTorch shape reversed: the same bytes, innermost first.
        w.add_tensor(t.gguf_name.clone(), t.ggml_dims(), ty, data)
            .map_err(|e| LayaError::gguf(format!("tensor {:?}", t.gguf_name), e))?;
    }
    Ok((w, written))
}

fn converted(t: &TensorEntry, ty: GgmlType, bytes: u64) -> ConvertedTensor {
    ConvertedTensor {
        name: t.gguf_name.clone(),
        source: t.pytorch_name.clone(),
        dims: t.ggml_dims(),
        ty,
        bytes,
    }
}

/// Convert a checkpoint to a GGUF file at `out`, atomically (a temporary file in the same
/// folder, renamed at the end: on error nothing is left at `out`).
///
/// Streams: the header first, then the tensors a few at a time (one per rayon thread), so
/// memory stays near the mapped source plus one tensor per thread.
pub fn convert(ckpt: &LayaCheckpoint, opts: &ConvertOptions, out: &Path) -> Result<ConvertSummary> {
    convert_until(ckpt, opts, out, None)
}

/// [`convert`], asking `stop` before each tensor: `true` ends the conversion with
/// [`LayaError::Cancelled`] and leaves nothing at `out` (a build told to stop ends a long
/// conversion within one tensor's time).
pub fn convert_until(
    ckpt: &LayaCheckpoint,
    opts: &ConvertOptions,
    out: &Path,
    stop: Option<fn() -> bool>,
) -> Result<ConvertSummary> {
    let plan = plan(ckpt, opts)?;
    let meta = metadata_writer(ckpt, opts)?;
    let mut planned = Vec::with_capacity(plan.len());
    let mut tensors = Vec::with_capacity(plan.len());
    for (t, ty) in &plan {
        let row = t.shape.last().copied().unwrap_or(1) as u64;
        let rows = t.n_elements() as u64 / row.max(1);
        let bytes = ty
            .row_bytes(row)
            .map(|b| b * rows)
            .map_err(|e| LayaError::gguf(format!("tensor {:?} as {ty}", t.gguf_name), e))?;
        planned.push(Planned {
            name: t.gguf_name.clone(),
            dims: t.ggml_dims(),
            ty: *ty,
            bytes,
        });
        tensors.push(converted(t, *ty, bytes));
    }
    let batch = rayon::current_num_threads();
    let file_bytes = stream::write_file(
        out,
        meta.metadata(),
        &planned,
        u64::from(ALIGNMENT),
        batch,
        |i| {
            if stop.is_some_and(|stop| stop()) {
                return Err(LayaError::Cancelled);
            }
            let (t, ty) = plan[i];
            encode_tensor(ckpt, t, ty, opts.allow_nonfinite)
        },
    )?;
    Ok(ConvertSummary {
        path: out.to_path_buf(),
        n_params: plan.iter().map(|(t, _)| t.n_elements() as u64).sum(),
        tensor_bytes: tensors.iter().map(|t| t.bytes).sum(),
        file_bytes,
        n_kv: meta.metadata().len(),
        tensors,
    })
}

/// Every metadata key, in llama.cpp's converter order (spec 2.2), plus the seed's
/// additions (`general.alignment`, `decision.max_tokens`, `skycmd.tokenizer.*`).
fn write_metadata(
    w: &mut GgufWriter,
    ckpt: &LayaCheckpoint,
    opts: &ConvertOptions,
    n_params: u64,
) -> Result<()> {
    let enc = &ckpt.encoder;
    let agent = &ckpt.agent;
    w.add_kv("general.architecture", ARCH);
    w.add_kv("general.alignment", ALIGNMENT);
    w.add_kv("general.type", "model");
    let name = opts.name.clone().unwrap_or_else(|| ckpt.dir_name());
    w.add_kv("general.name", name);
    w.add_kv("general.size_label", size_label(n_params));

    write_model_keys(
        w,
        enc,
        agent,
        file_type(opts.policy.ftype),
        opts.encoder_only,
    )?;
    w.add_kv("general.quantization_version", 2u32);
    let pre = opts.pre.as_deref().unwrap_or(DEFAULT_PRE);
    write_tokenizer_keys(w, &ckpt.tokenizer, enc.vocab_size, pre, agent.is_julia())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_labels_as_gguf_py() {
        // values printed by gguf.utility.model_weight_count_rounded_notation (gguf 0.19)
        assert_eq!(size_label(202_305), "202K");
        assert_eq!(size_label(1_134_209), "1.1M");
        assert_eq!(size_label(6_630_913), "6.6M");
        assert_eq!(size_label(421_000_000), "421M");
        assert_eq!(size_label(17_000), "17K");
    }
}
