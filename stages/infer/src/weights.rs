//! Matrix weights as the forward pass consumes them.
//!
//! A [`Weight`] is either an f32 matrix stored transposed for the kernel in
//! [`crate::kernels`] (`Wᵀ`, `[in][out]`) or an external kernel (a [`MatmulKernel`], e.g. the
//! int8 matrices of sky-quant). Each weight carries its site name (`blk.0.attn_qkv`, the GGUF
//! tensor name without `.weight`), under which calibration observers see its input.

use crate::kernels::{gemm, Gemm, Isa};
use std::fmt;

/// A matrix product implemented outside this crate (quantized weights).
pub trait MatmulKernel: Send + Sync {
    /// `out[rows][n] = x[rows][k] · Wᵀ` with `k`, `n` the weight's input and output widths.
    fn matmul(&self, x: &[f32], rows: usize, out: &mut [f32]);
    /// A short description for logs (`"q8_0"`, `"q8_0+outliers"`).
    fn describe(&self) -> String;
}

/// Storage of one weight matrix.
pub enum WeightData {
    /// f32, transposed: `data[i * out + o] = W[o][i]`.
    F32(Vec<f32>),
    /// A kernel supplied by another crate.
    External(Box<dyn MatmulKernel>),
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
            WeightData::External(e) => e.describe(),
        };
        write!(f, "Weight({} [{}x{}] {kind})", self.site, self.n, self.k)
    }
}

impl Weight {
    /// From PyTorch-order rows (`rows[o * k + i] = W[o][i]`).
    pub fn from_rows(site: impl Into<String>, n: usize, k: usize, rows: &[f32]) -> Weight {
        let mut t = vec![0f32; n * k];
        for o in 0..n {
            for i in 0..k {
                t[i * n + o] = rows[o * k + i];
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
                for i in 0..self.k {
                    for o in 0..self.n {
                        rows[o * self.k + i] = t[i * self.n + o];
                    }
                }
                Some(rows)
            }
            WeightData::External(_) => None,
        }
    }

    /// `out[rows][n] = x[rows][k] · Wᵀ`.
    pub fn matmul(&self, isa: Isa, x: &[f32], rows: usize, out: &mut [f32]) {
        match &self.data {
            WeightData::F32(t) => gemm(
                isa,
                Gemm {
                    m: rows,
                    n: self.n,
                    k: self.k,
                    lda: self.k,
                    ldb: self.n,
                    ldc: self.n,
                    accumulate: false,
                },
                x,
                t,
                out,
            ),
            WeightData::External(kern) => {
                kern.matmul(&x[..rows * self.k], rows, &mut out[..rows * self.n])
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn from_rows_round_trips_and_multiplies() {
        // W = [[1, 2, 3], [4, 5, 6]] (out 2, in 3); x = [1, 0, -1]
        let w = Weight::from_rows("t", 2, 3, &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        assert_eq!(
            w.to_rows().as_deref(),
            Some(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0][..])
        );
        let mut out = [0f32; 2];
        w.matmul(Isa::Scalar, &[1.0, 0.0, -1.0], 1, &mut out);
        assert_eq!(out, [-2.0, -2.0]);
    }
}
