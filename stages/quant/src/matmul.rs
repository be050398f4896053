//! The int8 matrix product: Q8_0 weights, Q8_0 (or two-pass Q8x2) activations, and the
//! outlier input channels computed in f32 with exact weights (LLM.int8() style).
//!
//! # How outliers are handled
//!
//! The activation's outlier channels are set to zero before it is quantized, so each
//! activation block's scale is set by the ordinary channels and the weight blocks stay
//! standard Q8_0 (a Q8_0 file can be used as is). Their contribution is then added in f32:
//! `y[i, j] += x[i, o] * w_exact[j, o]` for every outlier `o`.
//! [`Q8Matrix::quantize`] (load-time quantization from F16/F32) additionally zeroes the outlier
//! columns of the weights before quantizing them, so that a large outlier weight does not set
//! the scale of its 31 neighbours; [`Q8Matrix::from_q8_0_bytes`] takes the file's bytes
//! unchanged.

use crate::error::{Error, Result};
use crate::kernels::{ActBuffers, KernelPath, Packs, Weights};
use crate::q8::{
    check_finite, check_shape, f16_bits_to_f32, f32_to_f16_bits, outlier_mask, quantize_q8_0,
    Q8_0_BLOCK_BYTES, QK8_0,
};

/// How activations are quantized: defined beside the kernels that quantize them.
pub use crate::kernels::ActQuant;

/// Reusable buffers for [`Q8Matrix::matmul`] (the quantized activations), plus the kernel path
/// to use. Buffers only grow, so a steady-state call allocates nothing.
#[derive(Debug, Clone)]
pub struct Scratch {
    path: KernelPath,
    bufs: ActBuffers,
}

impl Default for Scratch {
    fn default() -> Self {
        Self::new()
    }
}

impl Scratch {
    /// Scratch using the fastest kernel path of this CPU ([`KernelPath::detect`]).
    pub fn new() -> Self {
        Self::from_path(KernelPath::detect())
    }

    /// Scratch forced onto one kernel path (tests, benchmarks). Errors if this CPU cannot run it.
    pub fn with_path(path: KernelPath) -> Result<Self> {
        if !path.is_available() {
            return Err(Error::KernelUnavailable(path.name()));
        }
        Ok(Self::from_path(path))
    }

    fn from_path(path: KernelPath) -> Self {
        Scratch {
            path,
            bufs: ActBuffers::default(),
        }
    }

    /// Runs `path` from now on: the buffers are kept. Errors if this CPU cannot run it.
    pub fn set_path(&mut self, path: KernelPath) -> Result<()> {
        if !path.is_available() {
            return Err(Error::KernelUnavailable(path.name()));
        }
        self.path = path;
        Ok(())
    }

    /// The kernel path this scratch runs.
    pub fn path(&self) -> KernelPath {
        self.path
    }
}

/// A weight matrix ready for the int8 product: `rows` (output features) x `k` (input
/// features), Q8_0 blocks along `k` held as separate int8 values and f32 scales (widened from
/// the f16 scales, so [`Q8Matrix::to_q8_0_bytes`] gives the bytes back exactly), plus the
/// outlier columns and their exact f32 weights.
#[derive(Debug, Clone, PartialEq)]
pub struct Q8Matrix {
    rows: usize,
    k: usize,
    qs: Vec<i8>,
    scales: Vec<f32>,
    outliers: Vec<u32>,
    /// Exact weights of the outlier columns, one contiguous column of `rows` values per
    /// outlier (outliers.len() x rows), so that adding them is a vectorizable axpy.
    outlier_cols: Vec<f32>,
    /// The same int8 weights repacked for the vector kernels, each layout built on the first
    /// product of a path that reads it (the AVX-512 VNNI Q8 one at construction, where this
    /// CPU runs that path).
    packs: Packs,
    /// Per activation block, the lanes of the outlier channels (bit `c % 32` of block
    /// `c / 32`), which the vector quantizers read as 0; empty without outliers.
    zero_masks: Vec<u32>,
}

impl Q8Matrix {
    /// Wraps Q8_0 bytes (for example a GGUF tensor; `rows * k / 32 * 34` bytes, blocks along
    /// `k`). `outliers` are the input channels to compute in f32 (from
    /// `skycmd.quant.outliers.<tensor>` metadata, or from a calibration). Their weights come
    /// from `exact_outlier_weights` (`rows x outliers.len()`, row-major) when given, else from
    /// dequantizing the columns: for a file written by [`crate::quantize_for_file`] that gives
    /// the largest outlier weight of each block exactly, or within f16 rounding (see "What is
    /// exact" in [`crate::q8`]); for a plain llama.cpp Q8_0 file, plain Q8_0 precision. In both
    /// cases the outlier *activations* leave the int8 product, which matters most.
    pub fn from_q8_0_bytes(
        bytes: &[u8],
        rows: usize,
        k: usize,
        outliers: &[u32],
        exact_outlier_weights: Option<&[f32]>,
    ) -> Result<Q8Matrix> {
        if !k.is_multiple_of(QK8_0) {
            return Err(Error::NotBlockAligned { k });
        }
        let nb = k / QK8_0;
        let expected = rows
            .checked_mul(nb)
            .and_then(|b| b.checked_mul(Q8_0_BLOCK_BYTES));
        if expected != Some(bytes.len()) {
            return Err(Error::Q8Bytes {
                rows,
                k,
                expected: expected.unwrap_or(usize::MAX),
                got: bytes.len(),
            });
        }
        outlier_mask(outliers, k)?;
        let mut qs = Vec::with_capacity(rows * k);
        let mut scales = Vec::with_capacity(rows * nb);
        for (i, blk) in bytes.chunks_exact(Q8_0_BLOCK_BYTES).enumerate() {
            let bits = u16::from_le_bytes([blk[0], blk[1]]);
            let d = f16_bits_to_f32(bits);
            if !d.is_finite() {
                return Err(Error::Q8Scale {
                    row: i / nb,
                    block: i % nb,
                    bits,
                });
            }
            scales.push(d);
            qs.extend(blk[2..].iter().map(|&b| b as i8));
        }
        let no = outliers.len();
        let outlier_cols: Vec<f32> = match exact_outlier_weights {
            Some(w) => {
                if w.len() != rows * no {
                    return Err(Error::Shape {
                        what: "exact outlier weights".into(),
                        shape: format!("rows {rows} x outliers {no}"),
                        expected: rows * no,
                        got: w.len(),
                    });
                }
                check_finite("exact outlier weights", w)?;
                (0..no)
                    .flat_map(|c| (0..rows).map(move |row| w[row * no + c]))
                    .collect()
            }
            None => outliers
                .iter()
                .flat_map(|&o| {
                    let o = o as usize;
                    let (qs, scales) = (&qs, &scales);
                    (0..rows)
                        .map(move |row| scales[row * nb + o / QK8_0] * f32::from(qs[row * k + o]))
                })
                .collect(),
        };
        let packs = Packs::new(&qs, &scales, rows, k);
        let mut zero_masks = vec![0u32; if outliers.is_empty() { 0 } else { nb }];
        for &o in outliers {
            zero_masks[o as usize / QK8_0] |= 1 << (o as usize % QK8_0);
        }
        Ok(Q8Matrix {
            rows,
            k,
            qs,
            scales,
            outliers: outliers.to_vec(),
            outlier_cols,
            packs,
            zero_masks,
        })
    }

    /// Quantizes an f32 weight matrix at load time (`rows x k`, row-major, PyTorch
    /// `[out, in]`). The outlier columns are kept exactly in f32 and zeroed in the int8 part;
    /// everything else is plain ggml Q8_0.
    pub fn quantize(w: &[f32], rows: usize, k: usize, outliers: &[u32]) -> Result<Q8Matrix> {
        check_shape("weights", w.len(), rows, k)?;
        check_finite("weights", w)?;
        outlier_mask(outliers, k)?;
        let mut zeroed = w.to_vec();
        let mut exact = Vec::with_capacity(rows * outliers.len());
        for row in 0..rows {
            for &o in outliers {
                let at = row * k + o as usize;
                exact.push(w[at]);
                zeroed[at] = 0.0;
            }
        }
        let bytes = quantize_q8_0(&zeroed)?;
        Self::from_q8_0_bytes(&bytes, rows, k, outliers, Some(&exact))
    }

    /// Output features.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Input features.
    pub fn k(&self) -> usize {
        self.k
    }

    /// The outlier input channels, in the order of [`Q8Matrix::outlier_column`].
    pub fn outliers(&self) -> &[u32] {
        &self.outliers
    }

    /// The f32 weights (`rows` values) of the `idx`-th outlier column (input channel
    /// `outliers()[idx]`), as used by [`Q8Matrix::matmul`].
    pub fn outlier_column(&self, idx: usize) -> Option<&[f32]> {
        (idx < self.outliers.len())
            .then(|| &self.outlier_cols[idx * self.rows..(idx + 1) * self.rows])
    }

    /// The int8 part as standard Q8_0 bytes (exactly the bytes it was built from).
    pub fn to_q8_0_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.scales.len() * Q8_0_BLOCK_BYTES);
        for (d, q) in self.scales.iter().zip(self.qs.chunks_exact(QK8_0)) {
            out.extend_from_slice(&f32_to_f16_bits(*d).to_le_bytes());
            out.extend(q.iter().map(|&v| v as u8));
        }
        out
    }

    /// `out = x · Wᵀ`: `x` is `n x k` (row-major), `out` is `n x rows`. Activations are
    /// quantized per row into `scratch` (`mode`), the int8 products run on `scratch`'s kernel
    /// path, and the outlier channels are added in f32. Non-finite activations give
    /// unspecified (but panic-free) output.
    ///
    /// Errors: `x` or `out` not of the stated shape.
    pub fn matmul(
        &self,
        x: &[f32],
        n: usize,
        out: &mut [f32],
        mode: ActQuant,
        scratch: &mut Scratch,
    ) -> Result<()> {
        let (k, rows) = (self.k, self.rows);
        if n.checked_mul(k) != Some(x.len()) {
            return Err(Error::Shape {
                what: "matmul input".into(),
                shape: format!("n {n} x k {k}"),
                expected: n.saturating_mul(k),
                got: x.len(),
            });
        }
        if n.checked_mul(rows) != Some(out.len()) {
            return Err(Error::Shape {
                what: "matmul output".into(),
                shape: format!("n {n} x rows {rows}"),
                expected: n.saturating_mul(rows),
                got: out.len(),
            });
        }
        let w = Weights {
            rows,
            k,
            qs: &self.qs,
            scales: &self.scales,
            outliers: &self.outliers,
            outlier_cols: &self.outlier_cols,
            zero_masks: &self.zero_masks,
            packs: &self.packs,
        };
        crate::kernels::matmul(scratch.path, &w, x, n, out, mode, &mut scratch.bufs);
        Ok(())
    }
}

/// Reference f32 product `out = x · Wᵀ` (`x`: n x k, `w`: rows x k, `out`: n x rows), naive
/// loop with f32 accumulation; the yardstick of tests and benchmarks.
pub fn matmul_f32_ref(x: &[f32], w: &[f32], n: usize, k: usize, rows: usize, out: &mut [f32]) {
    for i in 0..n {
        let xi = &x[i * k..(i + 1) * k];
        for j in 0..rows {
            let wj = &w[j * k..(j + 1) * k];
            out[i * rows + j] = xi.iter().zip(wj).map(|(a, b)| a * b).sum();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::scalar::{quantize_act_row, round_away};
    use crate::q8::quantize_q8_exact_cols;

    struct Rng(u64);
    impl Rng {
        fn uniform(&mut self) -> f32 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            ((self.0 >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        }
        /// Roughly normal (sum of 4 uniforms), unit-ish variance.
        fn normal(&mut self) -> f32 {
            (self.uniform() + self.uniform() + self.uniform() + self.uniform()) * 0.866
        }
    }

    fn f64_ref(x: &[f32], w: &[f32], n: usize, k: usize, rows: usize) -> Vec<f64> {
        let mut out = vec![0f64; n * rows];
        for i in 0..n {
            for j in 0..rows {
                out[i * rows + j] = (0..k)
                    .map(|c| f64::from(x[i * k + c]) * f64::from(w[j * k + c]))
                    .sum();
            }
        }
        out
    }

    /// Max abs error relative to the RMS of the reference outputs.
    fn rel_err(got: &[f32], want: &[f64]) -> f64 {
        let rms = (want.iter().map(|v| v * v).sum::<f64>() / want.len() as f64).sqrt();
        got.iter()
            .zip(want)
            .map(|(&g, &w)| (f64::from(g) - w).abs())
            .fold(0.0, f64::max)
            / rms
    }

    /// A layer like the Laya encoder's Wqkv: activations with two planted 20x channels.
    fn planted(n: usize, k: usize, rows: usize, seed: u64) -> (Vec<f32>, Vec<f32>, Vec<u32>) {
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let outliers = vec![9u32, 45];
        let mut x: Vec<f32> = (0..n * k).map(|_| rng.normal()).collect();
        for i in 0..n {
            for &o in &outliers {
                x[i * k + o as usize] =
                    20.0 * (1.0 + 0.2 * rng.uniform()) * if i % 3 == 0 { -1.0 } else { 1.0 };
            }
        }
        let w: Vec<f32> = (0..rows * k).map(|_| rng.normal() * 0.05).collect();
        (x, w, outliers)
    }

    #[test]
    fn matmul_error_bounds_against_f64_reference() {
        let (n, k, rows) = (16, 256, 96);
        let (x, w, _) = planted(n, k, rows, 1);
        // Without planted outliers first: plain Gaussian activations.
        let x_plain: Vec<f32> = x
            .iter()
            .enumerate()
            .map(|(i, &v)| {
                if v.abs() > 10.0 {
                    (i % 7) as f32 * 0.3 - 1.0
                } else {
                    v
                }
            })
            .collect();
        let want = f64_ref(&x_plain, &w, n, k, rows);
        let m = Q8Matrix::quantize(&w, rows, k, &[]).unwrap();
        let mut s = Scratch::new();
        let mut out_q8 = vec![0f32; n * rows];
        let mut out_q8x2 = vec![0f32; n * rows];
        m.matmul(&x_plain, n, &mut out_q8, ActQuant::Q8, &mut s)
            .unwrap();
        m.matmul(&x_plain, n, &mut out_q8x2, ActQuant::Q8x2, &mut s)
            .unwrap();
        // Weight rounding dominates: Q8_0 steps of amax/127 per 32 weights give ~0.5% RMS
        // output error, so the max over 1,536 outputs stays below 4% of the output RMS.
        let (e_q8, e_q8x2) = (rel_err(&out_q8, &want), rel_err(&out_q8x2, &want));
        assert!(e_q8 < 0.04 && e_q8x2 < 0.04, "Q8 {e_q8}, Q8x2 {e_q8x2}");
        // Against the dequantized weights only the activation rounding is left: ~8 bits for
        // Q8, ~15 bits for Q8x2.
        let deq = crate::q8::dequantize_q8_0(&m.to_q8_0_bytes(), rows * k).unwrap();
        let want_deq = f64_ref(&x_plain, &deq, n, k, rows);
        let (a_q8, a_q8x2) = (rel_err(&out_q8, &want_deq), rel_err(&out_q8x2, &want_deq));
        assert!(a_q8 < 2e-2, "Q8 activation error {a_q8}");
        assert!(a_q8x2 < 3e-4, "Q8x2 activation error {a_q8x2}");
        assert!(
            a_q8x2 * 30.0 < a_q8,
            "second pass must gain >5 bits: {a_q8x2} vs {a_q8}"
        );
    }

    #[test]
    fn outliers_in_f32_beat_plain_int8_on_planted_20x_channels() {
        let (n, k, rows) = (16, 128, 64);
        let (x, w, outliers) = planted(n, k, rows, 2);
        let want = f64_ref(&x, &w, n, k, rows);
        let mut out = vec![0f32; n * rows];
        let mut s = Scratch::new();
        let mut errs = Vec::new();
        for mode in [ActQuant::Q8, ActQuant::Q8x2] {
            let plain = Q8Matrix::quantize(&w, rows, k, &[]).unwrap();
            plain.matmul(&x, n, &mut out, mode, &mut s).unwrap();
            let e_plain = rel_err(&out, &want);
            let aware = Q8Matrix::quantize(&w, rows, k, &outliers).unwrap();
            aware.matmul(&x, n, &mut out, mode, &mut s).unwrap();
            let e_aware = rel_err(&out, &want);
            // From a file written with exact columns, weights reconstructed by dequantizing.
            let bytes = quantize_q8_exact_cols(&w, rows, k, &outliers).unwrap();
            let file = Q8Matrix::from_q8_0_bytes(&bytes, rows, k, &outliers, None).unwrap();
            file.matmul(&x, n, &mut out, mode, &mut s).unwrap();
            let e_file = rel_err(&out, &want);
            assert!(
                e_aware * 2.0 < e_plain,
                "{mode:?}: aware {e_aware} vs plain {e_plain}"
            );
            assert!(
                e_file * 1.5 < e_plain,
                "{mode:?}: file {e_file} vs plain {e_plain}"
            );
            errs.push((e_plain, e_aware, e_file));
        }
        assert!(
            errs[1].1 < errs[0].1,
            "Q8x2 must beat Q8 with outliers: {errs:?}"
        );
    }

    #[test]
    fn every_path_gives_the_same_matmul_within_1e_6() {
        // Odd block count; then several 16-row groups with a partial one and 4-token tiles
        // with a tail (the AVX-512 packed kernel), with and without outliers.
        for (n, k, rows, seed) in [
            (5, 96, 11, 3),
            (9, 64, 37, 4),
            (4, 160, 48, 5),
            (37, 512, 272, 6),
            (70, 768, 40, 7),
        ] {
            every_path_case(n, k, rows, seed, true);
            every_path_case(n, k, rows, seed, false);
        }
    }

    fn every_path_case(n: usize, k: usize, rows: usize, seed: u64, with_outliers: bool) {
        let (x, w, outliers) = planted(n, k, rows, seed);
        let outliers = if with_outliers { outliers } else { Vec::new() };
        let m = Q8Matrix::quantize(&w, rows, k, &outliers).unwrap();
        for mode in [ActQuant::Q8, ActQuant::Q8x2] {
            let mut want = vec![0f32; n * rows];
            m.matmul(
                &x,
                n,
                &mut want,
                mode,
                &mut Scratch::with_path(KernelPath::Scalar).unwrap(),
            )
            .unwrap();
            // Yardstick: sum of |x| |w| per output.
            let mag = f64_ref(
                &x.iter().map(|v| v.abs()).collect::<Vec<_>>(),
                &w.iter().map(|v| v.abs()).collect::<Vec<_>>(),
                n,
                k,
                rows,
            );
            for path in KernelPath::available() {
                let mut got = vec![0f32; n * rows];
                m.matmul(
                    &x,
                    n,
                    &mut got,
                    mode,
                    &mut Scratch::with_path(path).unwrap(),
                )
                .unwrap();
                if path != KernelPath::Scalar {
                    // The packed kernels sum in the scalar path's order with its roundings.
                    let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                    assert_eq!(bits(&got), bits(&want), "{path} {mode:?} not bit-identical");
                }
                for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                    assert!(
                        f64::from((g - w).abs()) <= 1e-6 * mag[i],
                        "{path} {mode:?} [{i}]: {g} vs {w}"
                    );
                }
            }
        }
    }

    #[test]
    fn bytes_round_trip_and_shape_errors() {
        let (rows, k) = (3, 64);
        let w: Vec<f32> = (0..rows * k)
            .map(|i| ((i * 37) % 101) as f32 * 0.01 - 0.5)
            .collect();
        let bytes = quantize_q8_0(&w).unwrap();
        let m = Q8Matrix::from_q8_0_bytes(&bytes, rows, k, &[5], None).unwrap();
        assert_eq!(m.to_q8_0_bytes(), bytes);
        assert_eq!(m.outlier_column(0).unwrap().len(), rows);
        assert!(m.outlier_column(1).is_none());
        let deq = crate::q8::dequantize_q8_0(&bytes, rows * k).unwrap();
        assert_eq!(m.outlier_column(0).unwrap()[1], deq[k + 5]);
        // Exact weights given row-major (rows x outliers) land in the right columns.
        let exact: Vec<f32> = (0..rows * 2).map(|i| i as f32).collect();
        let m2 = Q8Matrix::from_q8_0_bytes(&bytes, rows, k, &[5, 9], Some(&exact)).unwrap();
        assert_eq!(m2.outlier_column(1).unwrap(), &[1.0, 3.0, 5.0]);
        assert!(matches!(
            Q8Matrix::from_q8_0_bytes(&bytes[1..], rows, k, &[], None),
            Err(Error::Q8Bytes { .. })
        ));
        assert!(Q8Matrix::from_q8_0_bytes(&bytes, rows, k, &[64], None).is_err());
        assert!(Q8Matrix::from_q8_0_bytes(&bytes, rows, k, &[1], Some(&[1.0])).is_err());
        let mut bad = bytes.clone();
        bad[34 * 2] = 0x00;
        bad[34 * 2 + 1] = 0x7C; // +inf scale in row 1, block 0
        let e = Q8Matrix::from_q8_0_bytes(&bad, rows, k, &[], None).unwrap_err();
        assert!(e.to_string().contains("block 0 of row 1"), "{e}");
        let mut s = Scratch::new();
        let mut out = vec![0f32; 2 * rows];
        assert!(m
            .matmul(&[0.0; 64], 2, &mut out, ActQuant::Q8, &mut s)
            .is_err());
        assert!(m
            .matmul(&[0.0; 128], 2, &mut out[1..], ActQuant::Q8, &mut s)
            .is_err());
        m.matmul(&[0.0; 128], 2, &mut out, ActQuant::Q8x2, &mut s)
            .unwrap();
        assert!(out.iter().all(|&v| v == 0.0));
        // Zero rows / zero tokens are fine.
        m.matmul(&[], 0, &mut [], ActQuant::Q8x2, &mut s).unwrap();
    }

    #[test]
    fn activation_passes_reconstruct_within_their_step() {
        let mut rng = Rng(77);
        let x: Vec<f32> = (0..32 * 8)
            .map(|i| rng.normal() * (1.0 + (i / 32) as f32))
            .collect();
        let (mut q, mut r, mut s) = (vec![0i8; x.len()], vec![0i8; x.len()], vec![0f32; 8]);
        quantize_act_row(&x, &mut q, &mut r, &mut s, ActQuant::Q8);
        for (i, &v) in x.iter().enumerate() {
            let d = s[i / 32];
            assert!(
                (v - d * f32::from(q[i])).abs() <= d * 0.5 * (1.0 + 1e-5),
                "Q8 [{i}]"
            );
        }
        quantize_act_row(&x, &mut q, &mut r, &mut s, ActQuant::Q8x2);
        for (i, &v) in x.iter().enumerate() {
            // The stored scale is d / 128: x ~ (d / 128) * (128 q + r), error <= d / 256.
            let d128 = s[i / 32];
            let back = d128 * (128.0 * f32::from(q[i]) + f32::from(r[i]));
            assert!(
                (v - back).abs() <= d128 * 0.5 + 1e-6 * v.abs(),
                "Q8x2 [{i}]: {v} vs {back}"
            );
            assert!(
                r[i].unsigned_abs() <= 65,
                "residual out of its range: {}",
                r[i]
            );
        }
    }

    /// The AVX-512 activation quantizer must give the scalar one's bytes and scales exactly,
    /// including values that land exactly on a rounding half.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn avx512_activation_quantization_is_bit_identical() {
        if !KernelPath::Avx512Vnni.is_available() {
            return; // the scalar quantizer is the only one this CPU runs
        }
        let mut rng = Rng(91);
        let mut x: Vec<f32> = (0..32 * 12)
            .map(|i| rng.normal() * (0.01 + (i / 32) as f32))
            .collect();
        // Block 3: exact halves of the step (amax 127 gives d = 1); block 4 all zero;
        // block 5: a huge value and a -0.0.
        for (i, v) in x[96..128].iter_mut().enumerate() {
            *v = (i as f32 - 16.0) + 0.5;
        }
        x[96] = 127.0;
        x[128..160].fill(0.0);
        x[160] = 3.0e38;
        x[161] = -0.0;
        // Block 6: a subnormal scale d whose 1 / d overflows to infinity, next to a 0.0
        // (0 * inf: NaN, which the scalar rounding turns into 0); block 7: a subnormal d
        // with a finite 1 / d (the values reach the clamp).
        for v in &mut x[192..224] {
            *v *= 1e-38;
        }
        x[192] = -1e-37;
        x[193] = 0.0;
        for v in &mut x[224..256] {
            *v *= 1e-39;
        }
        x[224] = 3e-38;
        for mode in [ActQuant::Q8, ActQuant::Q8x2] {
            let nb = x.len() / 32;
            let (mut q1, mut r1, mut s1) = (vec![0i8; x.len()], vec![0i8; x.len()], vec![0f32; nb]);
            let (mut q2, mut r2, mut s2) = (vec![1i8; x.len()], vec![1i8; x.len()], vec![1f32; nb]);
            quantize_act_row(&x, &mut q1, &mut r1, &mut s1, mode);
            crate::kernels::avx512::quantize_row_avx512(
                &x,
                &mut q2,
                &mut r2,
                &mut s2,
                mode == ActQuant::Q8x2,
            );
            assert_eq!(q1, q2, "{mode:?} q");
            assert_eq!(
                s1.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                s2.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                "{mode:?} scales"
            );
            if mode == ActQuant::Q8x2 {
                assert_eq!(r1, r2, "residuals");
            }
        }
        // The packed path's quantizer, on whole matrices of `n` rows of `nb` blocks (chunks of
        // 16 blocks that end inside a row, a last chunk of fewer, an odd block count): outlier
        // lanes read as 0, bytes biased by 0x80.
        for (n, nb) in [
            (1usize, 12usize),
            (12, 1),
            (5, 2),
            (7, 3),
            (9, 4),
            (3, 16),
            (2, 8),
        ] {
            let k = nb * 32;
            // The blocks above in turn (exact halves, zeros, the huge value), every other
            // row rescaled (the huge value kept finite).
            let x: Vec<f32> = (0..n * k)
                .map(|i| {
                    let v = x[i % x.len()];
                    if (i / k) % 2 == 1 && v.abs() < 1e30 {
                        v * (1.0 + i as f32 / 97.0)
                    } else {
                        v
                    }
                })
                .collect();
            let outliers: Vec<usize> = [3usize, 40, 45, 161, 300]
                .into_iter()
                .filter(|&o| o < k)
                .collect();
            let mut zeroed = x.clone();
            let mut zero = vec![0u32; nb];
            for &o in &outliers {
                zero[o / 32] |= 1 << (o % 32);
                for row in zeroed.chunks_exact_mut(k) {
                    row[o] = 0.0;
                }
            }
            for zero in [&zero[..], &[]] {
                let src = if zero.is_empty() { &x } else { &zeroed };
                for mode in [ActQuant::Q8, ActQuant::Q8x2] {
                    let (mut q1, mut r1, mut s1) =
                        (vec![0i8; n * k], vec![0i8; n * k], vec![0f32; n * nb]);
                    let (mut q2, mut r2, mut s2) =
                        (vec![1i8; n * k], vec![1i8; n * k], vec![1f32; n * nb]);
                    for i in 0..n {
                        quantize_act_row(
                            &src[i * k..(i + 1) * k],
                            &mut q1[i * k..(i + 1) * k],
                            &mut r1[i * k..(i + 1) * k],
                            &mut s1[i * nb..(i + 1) * nb],
                            mode,
                        );
                    }
                    crate::kernels::avx512::quantize_rows_biased_avx512(
                        &x,
                        zero,
                        nb,
                        &mut q2,
                        &mut r2,
                        &mut s2,
                        mode == ActQuant::Q8x2,
                    );
                    let what = format!("{mode:?}, {n} x {nb} blocks, {} outlier masks", zero.len());
                    let flip = |v: &[i8]| v.iter().map(|&b| b ^ i8::MIN).collect::<Vec<_>>();
                    assert_eq!(flip(&q1), q2, "{what}: biased q");
                    assert_eq!(
                        s1.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                        s2.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                        "{what}: scales"
                    );
                    if mode == ActQuant::Q8x2 {
                        assert_eq!(flip(&r1), r2, "{what}: biased residuals");
                        // The wide variant: 128 q + r as one i16, the same scales.
                        let (mut a3, mut s3) = (vec![1i16; n * k], vec![1f32; n * nb]);
                        crate::kernels::avx512::quantize_rows_x2_wide_avx512(
                            &x, zero, nb, &mut a3, &mut s3,
                        );
                        let want: Vec<i16> = q1
                            .iter()
                            .zip(&r1)
                            .map(|(&q, &r)| 128 * i16::from(q) + i16::from(r))
                            .collect();
                        assert_eq!(a3, want, "{what}: 128 q + r");
                        assert_eq!(
                            s1.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                            s3.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                            "{what}: wide scales"
                        );
                    }
                }
            }
        }
    }

    /// Every path against the portable one, bit for bit, on the packed kernels' edges: one
    /// token, one block, row counts around the 16- and 8-row groups, token counts around the
    /// 8- and 4-token tiles, weights at -128 and 127 (possible in a Q8_0 file), activation
    /// blocks at full scale (q and r at +-127), and outliers in the first and last lanes.
    #[test]
    fn every_path_is_bit_identical_on_kernel_edges() {
        let mut rng = Rng(123);
        for (n, k, rows) in [
            (1usize, 32usize, 1usize),
            (1, 64, 17),
            (2, 32, 16),
            (3, 96, 15),
            (7, 64, 33),
            (8, 32, 8),
            (9, 128, 31),
            (12, 160, 48),
            (13, 64, 9),
            // Every tail of the token tiles (12 tokens at k <= 64: n % 12 = 1..11 with
            // the n above; 8 tokens above: n % 8 = 1..7) on k = 64 and 128.
            (14, 64, 16),
            (15, 64, 17),
            (16, 64, 32),
            (17, 64, 16),
            (18, 64, 20),
            (20, 64, 16),
            (21, 64, 16),
            (22, 64, 20),
            (23, 64, 33),
            (10, 128, 16),
            (11, 128, 17),
            (13, 128, 16),
            (14, 128, 20),
            (15, 128, 16),
            (20, 128, 16),
        ] {
            let nb = k / QK8_0;
            // Raw Q8_0 bytes: scale 1/64 (exact in f16), values covering -128..=127.
            let mut bytes = Vec::with_capacity(rows * nb * Q8_0_BLOCK_BYTES);
            for blk in 0..rows * nb {
                bytes.extend_from_slice(&f32_to_f16_bits(1.0 / 64.0).to_le_bytes());
                for i in 0..QK8_0 {
                    let v = match (blk + i) % 5 {
                        0 => -128i32,
                        1 => 127,
                        _ => (rng.uniform() * 255.0) as i32 - 128,
                    };
                    bytes.push(v.clamp(-128, 127) as i8 as u8);
                }
            }
            let mut x: Vec<f32> = (0..n * k).map(|_| rng.normal()).collect();
            for (i, row) in x.chunks_exact_mut(k).enumerate() {
                // Block 0 of every row: one value at the block's amax, its neighbours just
                // below a rounding step, so that q and r reach +-127 and the halves.
                row[1] = if i % 2 == 0 { 50.0 } else { -50.0 };
                row[2] = -49.8;
                row[3] = 50.0 * (126.5 / 127.0);
            }
            for outliers in [vec![], vec![0u32, (k - 1) as u32], vec![5, 31, 32]] {
                let outliers: Vec<u32> =
                    outliers.into_iter().filter(|&o| (o as usize) < k).collect();
                let m = Q8Matrix::from_q8_0_bytes(&bytes, rows, k, &outliers, None).unwrap();
                for mode in [ActQuant::Q8, ActQuant::Q8x2] {
                    let mut want = vec![0f32; n * rows];
                    let mut scalar = Scratch::with_path(KernelPath::Scalar).unwrap();
                    m.matmul(&x, n, &mut want, mode, &mut scalar).unwrap();
                    for path in KernelPath::available() {
                        let mut got = vec![1f32; n * rows];
                        let mut s = Scratch::with_path(path).unwrap();
                        m.matmul(&x, n, &mut got, mode, &mut s).unwrap();
                        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                        assert_eq!(
                            bits(&got),
                            bits(&want),
                            "{path} {mode:?} n {n} k {k} rows {rows} outliers {outliers:?}"
                        );
                    }
                }
            }
        }
    }

    /// The AVX-512 quantizer rounds with `trunc(|v| + 0.49999997)`: the same integers as
    /// `round_away` (clamped) on the values around every half up to 131 and on a sweep of
    /// all magnitudes (an exhaustive run over every f32 up to 2^25 found no difference).
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn avx512_rounding_equals_round_away() {
        if !KernelPath::Avx512Vnni.is_available() {
            return;
        }
        let mut vals: Vec<f32> = Vec::new();
        for k in 0..131u32 {
            for c in [k as f32, k as f32 + 0.5] {
                let b = c.to_bits() as i64;
                for d in -40i64..=40 {
                    if let Ok(bits) = u32::try_from(b + d) {
                        vals.push(f32::from_bits(bits));
                    }
                }
            }
        }
        let mut bits = 0u32;
        while bits < 0x4C00_0000 {
            vals.push(f32::from_bits(bits));
            bits += 99_991;
        }
        vals.extend([
            0.499_999_97,
            0.5,
            1.0e30,
            3.0e38,
            f32::MAX,
            f32::INFINITY,
            -0.0,
        ]);
        let neg: Vec<f32> = vals.iter().map(|v| -v).collect();
        vals.extend(neg);
        for chunk in vals.chunks(16) {
            let mut lanes = [0f32; 16];
            lanes[..chunk.len()].copy_from_slice(chunk);
            let (a, b) = crate::kernels::avx512::round_clamp_avx512(&lanes);
            for (i, &v) in lanes.iter().enumerate() {
                let want = round_away(v).clamp(-127.0, 127.0) as i32;
                assert_eq!((a[i], b[i]), (want, want), "{v:e}");
            }
        }
    }

    #[test]
    fn round_away_matches_f32_round() {
        let mut v = -200.0f32;
        while v < 200.0 {
            for x in [v, v + 0.5, v - 0.5, v + 0.499_999_97, v + 0.500_000_06] {
                assert_eq!(round_away(x), x.round(), "{x}");
            }
            v += 0.37;
        }
        assert_eq!(round_away(0.499_999_97), 0.0);
        assert_eq!(round_away(-0.5), -1.0);
        assert_eq!(round_away(-0.0).to_bits(), (-0.0f32).to_bits());
    }

    #[test]
    fn unavailable_forced_path_is_an_error() {
        for p in KernelPath::ALL {
            assert_eq!(Scratch::with_path(p).is_ok(), p.is_available());
        }
    }
}
