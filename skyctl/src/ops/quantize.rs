//! Outlier-aware Q8_0 quantization of a float model; what `skyctl quantize` and the
//! `quantize` node share.

use std::path::Path;

use anyhow::Context;
use sky_gguf::GgufFile;
use sky_infer::int8::{f32_reference_from_dir, q8_policy, quantize_gguf, QuantizedFile};
use sky_quant::Calibration;

/// The float reference GGUF bytes of a model: the file itself, or a Laya directory converted
/// to F32 in memory.
pub fn reference_bytes(model: &Path) -> anyhow::Result<Vec<u8>> {
    if model.is_dir() {
        Ok(f32_reference_from_dir(model)?)
    } else {
        std::fs::read(model).with_context(|| format!("reading {}", model.display()))
    }
}

/// Quantize `reference` (GGUF bytes) with `calib` and write `out` atomically; the one
/// quantizer the command and the node use.
pub fn quantize_to(
    reference: &[u8],
    what: &Path,
    calib: &Calibration,
    ratio: f32,
    exact_cols: bool,
    out: &Path,
) -> anyhow::Result<QuantizedFile> {
    let f = GgufFile::parse(reference).with_context(|| format!("reading {}", what.display()))?;
    let q = quantize_gguf(&f, calib, ratio, &q8_policy(), exact_cols)
        .with_context(|| format!("quantizing {}", what.display()))?;
    sky_fs::write(out, &q.bytes).with_context(|| format!("writing {}", out.display()))?;
    Ok(q)
}
