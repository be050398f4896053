//! Matrix weights as the forward pass consumes them.
//!
//! A [`Weight`] is either an f32 matrix stored transposed for the kernel in
//! [`crate::kernels`] (`Wᵀ`, `[in][out]`) or an external kernel (a [`MatmulKernel`], e.g. the
//! int8 matrices of sky-quant). Each weight carries its site name (`blk.0.attn_qkv`, the GGUF
//! tensor name without `.weight`), under which calibration observers see its input.

use crate::kernels::{gemm_raw, Gemm, Isa};
use crate::threads::SharedOut;
use std::fmt;
use std::ops::Range;

/// A matrix product implemented outside this crate (quantized weights).
pub trait MatmulKernel: Send + Sync {
    /// `out[rows][n] = x[rows][k] · Wᵀ` with `k`, `n` the weight's input and output widths, on
    /// the kernels of `isa` or below. `Err` when it cannot (shapes it does not accept): the
    /// pass then fails with it, instead of answering with garbage.
    fn matmul(&self, isa: Isa, x: &[f32], rows: usize, out: &mut [f32]) -> crate::Result<()>;
    /// A short description for logs (`"q8_0"`, `"q8_0+outliers"`).
    fn describe(&self) -> String;
}

/// Columns per packed panel of an f32 weight (the AVX-512 tile width).
pub const PANEL: usize = 32;

/// Storage of one weight matrix.
pub enum WeightData {
    /// f32, transposed and cut into panels of [`PANEL`] output columns, each panel stored
    /// contiguously (`k` rows of 32): `data[(p * k + i) * 32 + c] = W[p * 32 + c][i]`, the last
    /// panel zero-padded. A panel row is one cache line pair, so the kernel streams the weight
    /// without the 4 KiB-stride cache-set conflicts of a plain `[in][out]` layout.
    F32(Vec<f32>),
    /// An int8 product (Q8_0 weights and quantized activations, [`crate::int8`] over
    /// sky-quant's kernels), behind the [`MatmulKernel`] seam so that this module needs no
    /// quantization code. The profile counts it as [`crate::forward::Op::MatmulInt8`].
    Int8(Box<dyn MatmulKernel>),
}

/// One weight matrix of PyTorch shape `[out, in]`, ready for `y = x · Wᵀ`.
pub struct Weight {
    /// Site name (GGUF tensor name without `.weight`).
    pub site: String,
    /// Input width (PyTorch `in`).
    pub k: usize,
    /// Output width (PyTorch `out`).
    pub n: usize,
    /// The values.
    pub data: WeightData,
}

impl fmt::Debug for Weight {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match &self.data {
            WeightData::F32(_) => "f32".to_string(),
            WeightData::Int8(e) => e.describe(),
        };
        write!(f, "Weight({} [{}x{}] {kind})", self.site, self.n, self.k)
    }
}

impl Weight {
    /// From PyTorch-order rows (`rows[o * k + i] = W[o][i]`).
    pub fn from_rows(site: impl Into<String>, n: usize, k: usize, rows: &[f32]) -> Weight {
        let panels = n.div_ceil(PANEL);
        let mut t = vec![0f32; panels * k * PANEL];
        for o in 0..n {
            let (p, c) = (o / PANEL, o % PANEL);
            for i in 0..k {
                t[(p * k + i) * PANEL + c] = rows[o * k + i];
            }
        }
        Weight {
            site: site.into(),
            k,
            n,
            data: WeightData::F32(t),
        }
    }

    /// The matrix in PyTorch order `[out][in]`, if it is stored as f32 (what a quantizer reads).
    pub fn to_rows(&self) -> Option<Vec<f32>> {
        match &self.data {
            WeightData::F32(t) => {
                let mut rows = vec![0f32; self.n * self.k];
                for o in 0..self.n {
                    let (p, c) = (o / PANEL, o % PANEL);
                    for i in 0..self.k {
                        rows[o * self.k + i] = t[(p * self.k + i) * PANEL + c];
                    }
                }
                Some(rows)
            }
            WeightData::Int8(_) => None,
        }
    }

    /// `out[rows][n] = x[rows][k] · Wᵀ`. `Err` only from an external kernel.
    pub fn matmul(&self, isa: Isa, x: &[f32], rows: usize, out: &mut [f32]) -> crate::Result<()> {
        self.matmul_cols(isa, x, rows, out, 0..self.panels())
    }

    /// The output columns of panels `panels` of `out[rows][n] = x[rows][k] · Wᵀ` (row stride
    /// `n`), each element by exactly the operations [`Weight::matmul`] computes it with; the
    /// other columns of `out` are left as they are. An external kernel has no panels: it
    /// computes every column. `Err` only from an external kernel.
    pub fn matmul_cols(
        &self,
        isa: Isa,
        x: &[f32],
        rows: usize,
        out: &mut [f32],
        panels: Range<usize>,
    ) -> crate::Result<()> {
        match &self.data {
            WeightData::F32(t) => {
                let (ptr, len) = (out.as_mut_ptr(), out.len());
                // SAFETY: `out` is exclusively borrowed for the call and holds `len` elements.
                unsafe { self.f32_panels(t, isa, x, rows, panels, ptr, len) };
                Ok(())
            }
            WeightData::Int8(kern) => {
                kern.matmul(isa, &x[..rows * self.k], rows, &mut out[..rows * self.n])
            }
        }
    }

    /// Panels of [`PANEL`] output columns (of an f32 weight; the last may be partial).
    pub fn panels(&self) -> usize {
        self.n.div_ceil(PANEL)
    }

    /// Whether the values are f32 (what [`Weight::matmul_panels`] multiplies).
    pub fn is_f32(&self) -> bool {
        matches!(self.data, WeightData::F32(_))
    }

    /// The output columns of panels `panels` of `out[rows][n] = x[rows][k] · Wᵀ`, into the
    /// shared row-major output `out`: each output element is computed by exactly the
    /// operations [`Weight::matmul`] computes it with. Nothing for an external kernel.
    ///
    /// # Safety
    /// No other thread reads or writes those columns of the first `rows` rows of `out` during
    /// the call.
    pub(crate) unsafe fn matmul_panels(
        &self,
        isa: Isa,
        x: &[f32],
        rows: usize,
        out: &SharedOut<'_>,
        panels: Range<usize>,
    ) {
        if let WeightData::F32(t) = &self.data {
            // SAFETY: `out` holds `out.len()` elements; the columns are the caller's alone.
            unsafe { self.f32_panels(t, isa, x, rows, panels, out.ptr(), out.len()) }
        }
    }

    /// Panels `panels` of the f32 product, one [`gemm`] call per panel (the same calls
    /// whichever panels a thread takes), each prefetching the next panel of the range.
    ///
    /// # Safety
    /// `out` is valid for `len` elements, and no other thread reads or writes the columns of
    /// these panels in the first `rows` rows during the call.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    unsafe fn f32_panels(
        &self,
        t: &[f32],
        isa: Isa,
        x: &[f32],
        rows: usize,
        panels: Range<usize>,
        out: *mut f32,
        len: usize,
    ) {
        let k = self.k;
        let mut range = t
            .chunks_exact(k * PANEL)
            .enumerate()
            .take(panels.end)
            .skip(panels.start)
            .peekable();
        while let Some((p, panel)) = range.next() {
            let ahead = range.peek().map_or(&[][..], |&(_, next)| next);
            let j0 = p * PANEL;
            let cols = PANEL.min(self.n - j0);
            let g = Gemm {
                m: rows,
                n: cols,
                k,
                lda: k,
                ldb: PANEL,
                ldc: self.n,
                accumulate: false,
            };
            // The product's C starts at column j0 (checked against `len - j0` elements).
            assert!(j0 <= len, "weight product: output too short");
            // SAFETY: `out + j0` is valid for `len - j0` elements (the caller's guarantee and
            // the check above), and this panel's columns are the caller's alone.
            unsafe { gemm_raw(isa, g, x, panel, out.add(j0), len - j0, ahead) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Shapes with several panels and a partial last panel, against a direct product.
    #[test]
    fn panels_multiply_like_the_plain_matrix() {
        let (n, k, m) = (70, 9, 5);
        let rows: Vec<f32> = (0..n * k)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 25.0)
            .collect();
        let x: Vec<f32> = (0..m * k)
            .map(|i| ((i * 13 % 17) as f32 - 8.0) / 4.0)
            .collect();
        let w = Weight::from_rows("t", n, k, &rows);
        assert_eq!(w.to_rows().unwrap(), rows);
        for isa in Isa::NATIVE {
            let mut out = vec![0f32; m * n];
            w.matmul(isa, &x, m, &mut out).unwrap();
            for r in 0..m {
                for o in 0..n {
                    let want: f32 = (0..k).map(|i| x[r * k + i] * rows[o * k + i]).sum();
                    assert!((out[r * n + o] - want).abs() < 1e-4, "{isa:?} ({r},{o})");
                }
            }
        }
    }

    #[test]
    fn from_rows_round_trips_and_multiplies() {
        // W = [[1, 2, 3], [4, 5, 6]] (out 2, in 3); x = [1, 0, -1]
        let w = Weight::from_rows("t", 2, 3, &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        assert_eq!(
            w.to_rows().as_deref(),
            Some(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0][..])
        );
        let mut out = [0f32; 2];
        w.matmul(Isa::Scalar, &[1.0, 0.0, -1.0], 1, &mut out)
            .unwrap();
        assert_eq!(out, [-2.0, -2.0]);
    }
}
