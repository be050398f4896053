//! Outlier-aware Q8_0 quantization of a float model; what `skyctl quantize` and the
//! `quantize` node share.

use std::path::Path;

use anyhow::Context;
use sky_gguf::GgufFile;
use sky_infer::int8::{f32_reference_from_dir, q8_policy, quantize_gguf, QuantizedFile};
use sky_quant::Calibration;

use super::policy::PolicyFile;

/// The float reference GGUF bytes of a model: the file itself, or a Laya directory converted
/// to F32 in memory.
pub fn reference_bytes(model: &Path) -> anyhow::Result<Vec<u8>> {
    if model.is_dir() {
        Ok(f32_reference_from_dir(model)?)
    } else {
        Ok(sky_fs::read(model, sky_fs::MODEL)?)
    }
}

/// Quantize `reference` (GGUF bytes) with `calib` and write `out` atomically; the one
/// quantizer the command and the nodes use. `policy` is a policy file (`skyctl tune`'s, or
/// any `[policy.<name>]` table) read against the reference's tensors; without it, the Q8_0
/// variant's policy.
pub fn quantize_to(
    reference: &[u8],
    what: &Path,
    calib: &Calibration,
    ratio: f32,
    exact_cols: bool,
    policy: Option<&Path>,
    out: &Path,
) -> anyhow::Result<QuantizedFile> {
    let f = GgufFile::parse(reference).with_context(|| format!("reading {}", what.display()))?;
    let policy = match policy {
        Some(p) => PolicyFile::read(p, f.tensors.iter().map(|t| t.name.as_str()))?.policy,
        None => q8_policy(),
    };
    let q = quantize_gguf(&f, calib, ratio, &policy, exact_cols)
        .with_context(|| format!("quantizing {}", what.display()))?;
    sky_fs::write(out, &q.bytes).with_context(|| format!("writing {}", out.display()))?;
    Ok(q)
}
