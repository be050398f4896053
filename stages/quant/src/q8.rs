//! Q8_0 weight quantization: plain (byte-identical to ggml's `quantize_row_q8_0_ref`) and
//! outlier-aware ([`quantize_q8_exact_cols`]), whose output is still standard Q8_0 bytes.
//!
//! # Layout
//!
//! A weight matrix is `rows x k`, row-major, in PyTorch's `[out_features, in_features]`
//! order (GGUF writes the dims flipped: `ne = [k, rows]`). Q8_0 blocks run along `k`: each row
//! is `k / 32` blocks of 34 bytes, one little-endian f16 scale `d` then 32 signed bytes `q`,
//! and the value is `d * q`.
//!
//! # Recording outliers in GGUF metadata (proposal)
//!
//! A file written with [`quantize_for_file`] is a plain Q8_0 file that llama.cpp and gguf-py
//! read unchanged. So that sky-infer can move the outlier columns back to f32 at load time, the
//! writer adds:
//!
//! - [`META_OUTLIERS_PREFIX`]`<tensor name>` (array of u32): the outlier input channels of that
//!   tensor, ascending, as returned by [`crate::select_outliers`]. Absent key = no outliers.
//! - [`META_OUTLIER_RATIO`] (f32): the `outlier_ratio` used (default 3.0).
//! - [`META_CALIBRATION_DIGEST`] (string): blake3 hex of the calibration JSON the outliers were
//!   chosen from ([`crate::Calibration::digest`]), so a stale file can be told apart.
//! - optionally [`META_OUTLIER_WEIGHTS_PREFIX`]`<tensor name>` (array of f32, `rows x
//!   n_outliers` row-major, in the order of the outliers key): the exact source weights of the
//!   outlier columns, a few KB per tensor. Extra *tensors* would make llama.cpp refuse the file
//!   (it checks the tensor count), unknown *keys* are ignored, so the exact columns travel as
//!   metadata. With them the file path comes within ~1.3x of load-time quantization (see
//!   `bench/results/quant.md`: RMS error 0.006 instead of 0.0146 on s1-pico's Wqkv, 0.0053 at
//!   load); without them the engine falls back to dequantizing the columns.
//!
//! # What is exact after a round trip through the file
//!
//! In a block that holds an outlier column, either an exact scale wins or the plain one stays:
//!
//! - **Exact scale chosen** (in a single-outlier block, always when plain Q8_0 would round the
//!   outlier weight by more than about 6% of its step, e.g. when a larger ordinary weight sets
//!   the plain scale): `d * m == f16(|w_o|)` for an integer `m`, `d` being the stored f16
//!   scale, so dequantizing gives that outlier weight `w_o` (the block's largest outlier unless
//!   a scale anchored on another one scored better) exactly when the source was F16 (the Laya
//!   checkpoints are), and rounded to f16 (relative error <= 2^-11) when it was f32.
//! - **Plain scale kept** when its weighted error is already lower: typically the outlier is
//!   the block maximum and plain Q8_0 stores it as `127 * f16(amax/127)`, within about 127 f16
//!   half-ulps of the scale (relative <= ~2^-11 as well); the other weights then keep plain
//!   Q8_0's finer step.
//!
//! For F16 sources and a single outlier in the block, the dequantized outlier weight is
//! therefore never further from the truth than plain Q8_0's (it is exact or plain). Other outlier
//! columns of the same block are only within `d / 2`. Non-outlier columns keep Q8_0
//! precision, with a coarser step in blocks where an exact scale was chosen. The engine then
//! multiplies these reconstructed weights by the *unquantized* outlier activations
//! ([`crate::Q8Matrix::from_q8_0_bytes`]), which is where most of the gain comes from.

use crate::error::{Error, Result};
use half::f16;

/// Values per Q8_0 block.
pub const QK8_0: usize = 32;
/// Bytes per Q8_0 block: a little-endian f16 scale then 32 signed bytes.
pub const Q8_0_BLOCK_BYTES: usize = 34;

/// GGUF metadata key prefix for a tensor's outlier columns: append the tensor name
/// (for example `skycmd.quant.outliers.blk.0.attn_qkv.weight`); value: array of u32.
pub const META_OUTLIERS_PREFIX: &str = "skycmd.quant.outliers.";
/// GGUF metadata key for the outlier ratio used to pick the outliers (f32).
pub const META_OUTLIER_RATIO: &str = "skycmd.quant.outlier_ratio";
/// GGUF metadata key for the blake3 hex digest of the calibration file (string).
pub const META_CALIBRATION_DIGEST: &str = "skycmd.quant.calibration_digest";

/// GGUF metadata key prefix for the exact f32 weights of a tensor's outlier columns (optional;
/// array of f32, `rows x n_outliers` row-major).
pub const META_OUTLIER_WEIGHTS_PREFIX: &str = "skycmd.quant.outlier_weights.";

/// The GGUF metadata key holding the outlier columns of `tensor_name`
/// (`skycmd.quant.outliers.<tensor name>`).
pub fn outlier_key(tensor_name: &str) -> String {
    format!("{META_OUTLIERS_PREFIX}{tensor_name}")
}

/// The GGUF metadata key holding the exact outlier-column weights of `tensor_name`
/// (`skycmd.quant.outlier_weights.<tensor name>`).
pub fn outlier_weights_key(tensor_name: &str) -> String {
    format!("{META_OUTLIER_WEIGHTS_PREFIX}{tensor_name}")
}

/// Weight given to an outlier column's squared error when choosing a block scale.
pub const OUTLIER_ERROR_WEIGHT: f64 = 1e4;

/// f32 -> f16 bits, round to nearest even (ggml's `GGML_FP32_TO_FP16`).
pub(crate) fn f32_to_f16_bits(x: f32) -> u16 {
    f16::from_f32(x).to_bits()
}

/// f16 bits -> f32 (exact).
pub(crate) fn f16_bits_to_f32(bits: u16) -> f32 {
    f16::from_bits(bits).to_f32()
}

/// Rounds an f32 to the nearest f16 value, returned as f32.
fn round_to_f16(x: f32) -> f32 {
    f16_bits_to_f32(f32_to_f16_bits(x))
}

pub(crate) fn check_shape(what: &str, len: usize, rows: usize, k: usize) -> Result<()> {
    if !k.is_multiple_of(QK8_0) {
        return Err(Error::NotBlockAligned { k });
    }
    let expected = rows.checked_mul(k);
    if expected != Some(len) {
        return Err(Error::Shape {
            what: what.to_string(),
            shape: format!("rows {rows} x k {k}"),
            expected: expected.unwrap_or(usize::MAX),
            got: len,
        });
    }
    Ok(())
}

pub(crate) fn check_finite(what: &str, x: &[f32]) -> Result<()> {
    match x.iter().position(|v| !v.is_finite()) {
        Some(index) => Err(Error::NonFinite {
            what: what.to_string(),
            index,
            value: x[index],
        }),
        None => Ok(()),
    }
}

/// Validates outlier columns against `k` and returns a per-column membership mask.
pub(crate) fn outlier_mask(outlier_cols: &[u32], k: usize) -> Result<Vec<bool>> {
    let mut mask = vec![false; k];
    for &col in outlier_cols {
        let slot = mask.get_mut(col as usize).ok_or(Error::BadOutlier {
            col,
            k,
            reason: "out of range",
        })?;
        if *slot {
            return Err(Error::BadOutlier {
                col,
                k,
                reason: "listed twice",
            });
        }
        *slot = true;
    }
    Ok(mask)
}

/// One block, exactly as ggml's `quantize_row_q8_0_ref`: `d = amax / 127`, `q = round(x / d)`
/// computed as `x * (1 / d)` with the unrounded `d`, then `d` stored as f16.
fn quantize_block_plain(x: &[f32], dst: &mut [u8]) {
    let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    dst[..2].copy_from_slice(&f32_to_f16_bits(d).to_le_bytes());
    for (q, &v) in dst[2..].iter_mut().zip(x) {
        let r = (v * id).round();
        // Non-finite only when 1/d overflows (amax below ~3.7e-37): ggml's C cast and
        // numpy's astype(int8) give 0 there on x86, and so does sky-gguf.
        *q = if r.is_finite() {
            (r as i32).clamp(-128, 127) as i8 as u8
        } else {
            0
        };
    }
}

/// Plain Q8_0 of a `rows x k` matrix (or any vector whose length is a multiple of 32):
/// byte-identical to ggml's `quantize_row_q8_0_ref` and gguf-py's `quants.quantize(.., Q8_0)`.
pub fn quantize_q8_0(x: &[f32]) -> Result<Vec<u8>> {
    check_shape("Q8_0 input", x.len(), 1, x.len())?;
    let mut out = vec![0u8; x.len() / QK8_0 * Q8_0_BLOCK_BYTES];
    for (blk, dst) in x
        .chunks_exact(QK8_0)
        .zip(out.chunks_exact_mut(Q8_0_BLOCK_BYTES))
    {
        quantize_block_plain(blk, dst);
    }
    Ok(out)
}

/// Dequantizes Q8_0 bytes (`d * q`, `d` read as f16) into `n` f32 values.
pub fn dequantize_q8_0(bytes: &[u8], n: usize) -> Result<Vec<f32>> {
    check_shape("dequantized values", n, 1, n)?;
    let expected = n / QK8_0 * Q8_0_BLOCK_BYTES;
    if bytes.len() != expected {
        return Err(Error::Q8Bytes {
            rows: 1,
            k: n,
            expected,
            got: bytes.len(),
        });
    }
    let mut out = Vec::with_capacity(n);
    for blk in bytes.chunks_exact(Q8_0_BLOCK_BYTES) {
        let d = f16_bits_to_f32(u16::from_le_bytes([blk[0], blk[1]]));
        out.extend(blk[2..].iter().map(|&q| d * f32::from(q as i8)));
    }
    Ok(out)
}

/// Weighted squared error of quantizing `x` with scale `d` (q = round(x / d)): outlier columns
/// weigh [`OUTLIER_ERROR_WEIGHT`], the others 1. Computed in f64 so that ties are rare and the
/// choice does not depend on summation order.
fn weighted_error(x: &[f32], is_outlier: &[bool], d: f32) -> f64 {
    x.iter()
        .zip(is_outlier)
        .map(|(&v, &o)| {
            let q = (v / d).round();
            let e = f64::from(v) - f64::from(d) * f64::from(q);
            let w = if o { OUTLIER_ERROR_WEIGHT } else { 1.0 };
            w * e * e
        })
        .sum()
}

/// Weighted error of the plain ggml block (f16-rounded scale, ggml's rounding of q).
fn weighted_error_plain(x: &[f32], is_outlier: &[bool]) -> f64 {
    let mut dst = [0u8; Q8_0_BLOCK_BYTES];
    quantize_block_plain(x, &mut dst);
    let d = f64::from(f16_bits_to_f32(u16::from_le_bytes([dst[0], dst[1]])));
    x.iter()
        .zip(is_outlier)
        .zip(&dst[2..])
        .map(|((&v, &o), &q)| {
            let e = f64::from(v) - d * f64::from(q as i8);
            let w = if o { OUTLIER_ERROR_WEIGHT } else { 1.0 };
            w * e * e
        })
        .sum()
}

/// Chooses the scale of one block that contains at least one outlier column.
///
/// The candidates are the scales that make an outlier weight `w_o` an exact multiple
/// without clipping the block:
///
/// - `t = f16(|w_o|)` (rounded to f16 because only f16 scales can be stored);
/// - for every integer `m` in `1..=127`: `d = f16(t / m)`, kept only if it is a normal or
///   subnormal non-zero f16, if `m * d == t` exactly (the check uses the f16-rounded `d`,
///   since that is the scale the file stores; `m * d` is exact in f32 because `d` has 11
///   significant bits and `m` 7), and if no value of the block clips (`|round(x / d)| <= 127`;
///   this is what bounds `m` from above by about `127 * |w_o| / amax`).
///
/// `w_o` is the largest-magnitude outlier of the block first; when the block holds several
/// outlier columns, the scales anchored on each of the others are candidates too (a superset,
/// so the weighted error can only drop: on s1-pico, where channels 45 and 49 share a block,
/// this is what lets the second outlier come back exactly as well).
///
/// The candidate with the lowest weighted squared error
/// `sum_i c_i * (x_i - d * round(x_i / d))^2` (`c_i` = 1e4 for outlier columns, 1 otherwise)
/// wins if it beats the plain ggml scale `amax / 127` under the same measure; otherwise the
/// block stays plain. Ties prefer the larger anchor, then the larger `m` (finer scale).
fn quantize_block_exact(x: &[f32], is_outlier: &[bool], dst: &mut [u8]) {
    let mut anchors: Vec<f32> = x
        .iter()
        .zip(is_outlier)
        .filter(|(_, &o)| o)
        .map(|(v, _)| round_to_f16(v.abs()))
        .filter(|t| *t != 0.0 && t.is_finite())
        .collect();
    anchors.sort_by(|a, b| b.total_cmp(a));
    anchors.dedup();
    let mut best: Option<(f64, f32)> = None;
    for t in anchors {
        for m in (1..=127u8).rev() {
            let m = f32::from(m);
            let d = round_to_f16(t / m);
            if d == 0.0 || !d.is_finite() || m * d != t {
                continue;
            }
            if x.iter().any(|&v| (v / d).round().abs() > 127.0) {
                continue;
            }
            let err = weighted_error(x, is_outlier, d);
            if best.is_none_or(|(e, _)| err < e) {
                best = Some((err, d));
            }
        }
    }
    match best {
        Some((err, d)) if err < weighted_error_plain(x, is_outlier) => {
            dst[..2].copy_from_slice(&f32_to_f16_bits(d).to_le_bytes());
            for (q, &v) in dst[2..].iter_mut().zip(x) {
                // In range by the clipping check above.
                *q = ((v / d).round() as i32) as i8 as u8;
            }
        }
        _ => quantize_block_plain(x, dst),
    }
}

/// Outlier-aware Q8_0 of a `rows x k` row-major weight matrix (PyTorch `[out, in]`), blocks
/// along `k`. Blocks that contain none of `outlier_cols` are byte-identical to plain Q8_0;
/// blocks that contain one get the scale chosen as described on the (private) block function:
/// among the f16 scales `d = f16(|w_o|) / m` that represent an outlier weight of the block
/// (the largest first, then the others) exactly and clip nothing, the one with the lowest
/// weighted error (outlier columns weigh 1e4), or the plain scale if none is better. The result
/// is standard Q8_0 bytes.
///
/// Errors: `k` not a multiple of 32, `w.len() != rows * k`, a non-finite weight, an outlier
/// column `>= k` or listed twice.
pub fn quantize_q8_exact_cols(
    w: &[f32],
    rows: usize,
    k: usize,
    outlier_cols: &[u32],
) -> Result<Vec<u8>> {
    check_shape("weights", w.len(), rows, k)?;
    check_finite("weights", w)?;
    let mask = outlier_mask(outlier_cols, k)?;
    let mut out = vec![0u8; w.len() / QK8_0 * Q8_0_BLOCK_BYTES];
    for row in 0..rows {
        let wr = &w[row * k..(row + 1) * k];
        let dr = &mut out[row * (k / QK8_0) * Q8_0_BLOCK_BYTES..][..(k / QK8_0) * Q8_0_BLOCK_BYTES];
        for ((blk, m), dst) in wr
            .chunks_exact(QK8_0)
            .zip(mask.chunks_exact(QK8_0))
            .zip(dr.chunks_exact_mut(Q8_0_BLOCK_BYTES))
        {
            if m.contains(&true) {
                quantize_block_exact(blk, m, dst);
            } else {
                quantize_block_plain(blk, dst);
            }
        }
    }
    Ok(out)
}

/// The bytes to store in a Q8_0 GGUF tensor for a weight matrix with the given outlier
/// columns: [`quantize_q8_exact_cols`] (plain Q8_0 when `outlier_cols` is empty). Record the
/// columns under [`META_OUTLIERS_PREFIX`]`<tensor name>` so that the engine can move them back
/// to f32 at load ([`crate::Q8Matrix::from_q8_0_bytes`]); see the module docs for what is exact.
pub fn quantize_for_file(
    w: &[f32],
    rows: usize,
    k: usize,
    outlier_cols: &[u32],
) -> Result<Vec<u8>> {
    quantize_q8_exact_cols(w, rows, k, outlier_cols)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic pseudo-random numbers (xorshift), no dependency needed.
    pub(crate) struct Rng(u64);
    impl Rng {
        pub(crate) fn new(seed: u64) -> Self {
            Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
        }
        pub(crate) fn next_u64(&mut self) -> u64 {
            let mut x = self.0;
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            self.0 = x;
            x
        }
        /// Uniform in [-1, 1).
        pub(crate) fn uniform(&mut self) -> f32 {
            ((self.next_u64() >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        }
    }

    fn f16_matrix(rows: usize, k: usize, seed: u64) -> Vec<f32> {
        let mut rng = Rng::new(seed);
        (0..rows * k)
            .map(|_| round_to_f16(rng.uniform() * 0.1))
            .collect()
    }

    #[test]
    fn plain_block_matches_hand_computation() {
        let mut x = [0.0f32; 32];
        x[0] = 1.27;
        x[1] = -0.635;
        x[2] = 0.004;
        let bytes = quantize_q8_0(&x).unwrap();
        let d = f16_bits_to_f32(u16::from_le_bytes([bytes[0], bytes[1]]));
        assert_eq!(d, round_to_f16(0.01));
        assert_eq!(bytes[2] as i8, 127);
        assert_eq!(bytes[3] as i8, -64); // -63.5 rounds away from zero
        assert_eq!(bytes[4] as i8, 0);
        let zeros = quantize_q8_0(&[0.0; 32]).unwrap();
        assert!(zeros.iter().all(|&b| b == 0));
    }

    #[test]
    fn no_outliers_is_plain_q8_0() {
        let w = f16_matrix(8, 96, 1);
        assert_eq!(
            quantize_q8_exact_cols(&w, 8, 96, &[]).unwrap(),
            quantize_q8_0(&w).unwrap()
        );
    }

    #[test]
    fn blocks_without_outliers_stay_plain_and_outlier_is_exact() {
        let (rows, k) = (16, 128);
        let mut w = f16_matrix(rows, k, 2);
        // Column 37 (block 1) is the outlier. In even rows a larger ordinary weight (column 40)
        // sets the plain scale, so plain Q8_0 rounds the outlier by up to d/2: those blocks
        // must switch to an exact scale. In odd rows the outlier is the block max, where plain
        // Q8_0 is already within f16 rounding of the scale and may well win.
        for r in 0..rows {
            w[r * k + 37] = round_to_f16(0.53 + 0.0123 * r as f32);
            if r % 2 == 0 {
                w[r * k + 40] = round_to_f16(-0.91 - 0.01 * r as f32);
            }
        }
        let plain = quantize_q8_0(&w).unwrap();
        let exact = quantize_q8_exact_cols(&w, rows, k, &[37]).unwrap();
        let deq = dequantize_q8_0(&exact, rows * k).unwrap();
        let plain_deq = dequantize_q8_0(&plain, rows * k).unwrap();
        let nb = k / QK8_0;
        for r in 0..rows {
            for b in 0..nb {
                let at = (r * nb + b) * Q8_0_BLOCK_BYTES;
                if b != 1 {
                    assert_eq!(plain[at..at + 34], exact[at..at + 34], "row {r} block {b}");
                }
            }
            let at = r * k + 37;
            assert!(
                (deq[at] - w[at]).abs() <= (plain_deq[at] - w[at]).abs(),
                "row {r}"
            );
            if r % 2 == 0 {
                assert_eq!(deq[at], w[at], "row {r}: outlier weight not exact");
                assert_ne!(plain_deq[at], w[at], "row {r}: test exercises nothing");
            }
        }
    }

    #[test]
    fn chosen_scale_never_clips_and_beats_plain_in_weighted_error() {
        let mut rng = Rng::new(3);
        for trial in 0..300 {
            let mut x: Vec<f32> = (0..32).map(|_| round_to_f16(rng.uniform())).collect();
            let o = (rng.next_u64() % 32) as usize;
            // Outlier not always the block max: exercises the clipping bound.
            x[o] = round_to_f16(rng.uniform() * 3.0);
            let mut mask = [false; 32];
            mask[o] = true;
            let mut dst = [0u8; 34];
            quantize_block_exact(&x, &mask, &mut dst);
            let d = f16_bits_to_f32(u16::from_le_bytes([dst[0], dst[1]]));
            let err: f64 = x
                .iter()
                .zip(&dst[2..])
                .zip(&mask)
                .map(|((&v, &q), &m)| {
                    let e = f64::from(v) - f64::from(d) * f64::from(q as i8);
                    (if m { 1e4 } else { 1.0 }) * e * e
                })
                .sum();
            assert!(err <= weighted_error_plain(&x, &mask), "trial {trial}");
            for (&v, &q) in x.iter().zip(&dst[2..]) {
                let e = (v - d * f32::from(q as i8)).abs();
                assert!(e <= d * 0.6, "trial {trial}: clipped {v} q={}", q as i8);
            }
        }
    }

    #[test]
    fn f32_outlier_keeps_f16_precision() {
        // Outlier as the block max and as a smaller value under a larger neighbour.
        for (o_val, max_val) in [(1.234_567_9f32, 0.05f32), (0.456_789_1, 0.987_654_3)] {
            let mut x: Vec<f32> = (0..32).map(|i| (i as f32 * 0.37).sin() * 0.05).collect();
            x[5] = o_val;
            x[20] = max_val;
            let mut mask = [false; 32];
            mask[5] = true;
            let mut dst = [0u8; 34];
            quantize_block_exact(&x, &mask, &mut dst);
            let d = f16_bits_to_f32(u16::from_le_bytes([dst[0], dst[1]]));
            let got = d * f32::from(dst[2 + 5] as i8);
            assert!(
                (got - o_val).abs() <= o_val * 2f32.powi(-11),
                "{o_val}: {got}"
            );
        }
    }

    /// Values that stress ggml's Q8_0: halves (rounding away from zero), zero blocks,
    /// subnormal and overflowing f16 scales, tiny blocks where 1/d overflows, -0.0.
    fn awkward_values() -> Vec<f32> {
        let mut rng = Rng::new(11);
        let mut x: Vec<f32> = (0..32 * 64).map(|_| rng.uniform() * 2.0).collect();
        for (b, scale) in [
            (1usize, 0.0f32),
            (2, 1e-6),
            (3, 1e-38),
            (4, 1e5),
            (5, 1e7),
            (6, 1e-30),
        ] {
            for v in &mut x[b * 32..(b + 1) * 32] {
                *v *= scale;
            }
        }
        // Exact halves of the step: x = (j + 0.5) * amax / 127.
        for j in 0..31 {
            x[7 * 32 + j] = j as f32 - 15.0 + 0.5; // d = 127 / 127 = 1
        }
        x[7 * 32 + 31] = 127.0;
        x[8 * 32] = -0.0;
        x
    }

    #[test]
    fn plain_q8_0_is_byte_identical_to_sky_gguf() {
        let x = awkward_values();
        assert_eq!(
            quantize_q8_0(&x).unwrap(),
            sky_gguf::quantize_q8_0(&x).unwrap()
        );
        assert_eq!(
            dequantize_q8_0(&quantize_q8_0(&x).unwrap(), x.len()).unwrap(),
            sky_gguf::dequantize_q8_0(&quantize_q8_0(&x).unwrap(), x.len()).unwrap()
        );
    }

    #[test]
    fn plain_and_exact_cols_are_standard_q8_0_for_gguf_py() {
        let python = sky_env::Var::get("SKYCTL_TEST_PYTHON")
            .os()
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| {
                std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.venv/bin/python")
            });
        let dir = tempfile::tempdir().unwrap();
        let x = awkward_values();
        let raw: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
        std::fs::write(dir.path().join("x.f32"), raw).unwrap();
        let exact = quantize_q8_exact_cols(&x, 4, 512, &[5, 37, 300]).unwrap();
        std::fs::write(dir.path().join("exact.q8"), &exact).unwrap();
        let script = r#"
import sys, numpy as np
from gguf import quants, GGMLQuantizationType as T
d = sys.argv[1]
x = np.fromfile(d + "/x.f32", dtype="<f4")
with np.errstate(all="ignore"):
    quants.quantize(x.reshape(-1, 32), T.Q8_0).tofile(d + "/plain.q8")
e = np.fromfile(d + "/exact.q8", dtype=np.uint8).reshape(-1, 34)
quants.dequantize(e, T.Q8_0).astype("<f4").tofile(d + "/exact.f32")
"#;
        let out = std::process::Command::new(&python)
            .arg("-c")
            .arg(script)
            .arg(dir.path())
            .output()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot run the Python reference {} ({e}); set SKYCTL_TEST_PYTHON to a \
                     Python with gguf and numpy",
                    python.display()
                )
            });
        assert!(
            out.status.success(),
            "gguf-py failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let py_plain = std::fs::read(dir.path().join("plain.q8")).unwrap();
        assert_eq!(
            quantize_q8_0(&x).unwrap(),
            py_plain,
            "plain Q8_0 differs from gguf-py"
        );
        let py_exact: Vec<f32> = std::fs::read(dir.path().join("exact.f32"))
            .unwrap()
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        let ours = dequantize_q8_0(&exact, x.len()).unwrap();
        assert_eq!(py_exact.len(), ours.len());
        for (i, (a, b)) in ours.iter().zip(&py_exact).enumerate() {
            assert!(
                a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()),
                "value {i}: {a} vs {b}"
            );
        }
    }

    #[test]
    fn bad_inputs_are_errors() {
        let w = vec![0.0f32; 64];
        assert!(matches!(
            quantize_q8_exact_cols(&w, 2, 32, &[32]),
            Err(Error::BadOutlier { col: 32, .. })
        ));
        assert!(matches!(
            quantize_q8_exact_cols(&w, 2, 32, &[3, 3]),
            Err(Error::BadOutlier { col: 3, .. })
        ));
        assert!(quantize_q8_exact_cols(&w, 1, 64, &[]).is_ok());
        assert!(matches!(
            quantize_q8_exact_cols(&w, 3, 32, &[]),
            Err(Error::Shape { .. })
        ));
        assert!(matches!(
            quantize_q8_exact_cols(&w, 4, 16, &[]),
            Err(Error::NotBlockAligned { k: 16 })
        ));
        let mut nan = w.clone();
        nan[7] = f32::NAN;
        let e = quantize_q8_exact_cols(&nan, 2, 32, &[]).unwrap_err();
        assert!(e.to_string().contains("index 7"), "{e}");
    }
}
