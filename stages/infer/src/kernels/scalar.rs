//! The portable kernels: the definition of the arithmetic every other path reproduces (see
//! the module docs of [`super`]). Always built; what wasm32 without SIMD128 runs.
//!
//! On an x86-64 CPU with FMA the table runs a copy of these loops compiled with FMA enabled:
//! `f32::mul_add` is exact either way, so the bits are the same, but without the feature each
//! term is a libm call (30-40x slower than the vector paths, which made the scalar path too
//! slow to check every golden case against).

use super::{
    add_f64, add_sq_dev_f64, exp_fast, fmadd, fold16, geglu_one, layer_norm_rstd, normalize_from,
    Gemm, Kernels, LANES,
};
use std::ops::Range;

/// The portable kernel table.
pub(crate) static KERNELS: Kernels = Kernels {
    gemm: gemm_table,
    layer_norm: layer_norm_entry,
    softmax_scaled: softmax_entry,
    geglu: geglu_entry,
    transpose,
};

/// Whether the FMA-compiled copy can run.
#[cfg(target_arch = "x86_64")]
#[inline]
fn has_fma() -> bool {
    std::arch::is_x86_feature_detected!("fma")
}

/// Each table entry: the FMA-compiled copy where the CPU has FMA, else the plain one.
macro_rules! entry {
    ($entry:ident, $fma:ident, $plain:ident, ($($arg:ident: $ty:ty),*)) => {
        /// # Safety
        /// As the plain body's (see the table's field).
        unsafe fn $entry($($arg: $ty),*) {
            #[cfg(target_arch = "x86_64")]
            if has_fma() {
                // SAFETY: FMA was detected on this CPU; the rest is the caller's contract.
                return unsafe { $fma($($arg),*) };
            }
            // SAFETY: the caller's contract.
            #[allow(unused_unsafe)]
            unsafe { $plain($($arg),*) }
        }

        /// The plain body compiled with FMA.
        ///
        /// # Safety
        /// FMA is available; the rest as the plain body's.
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "fma")]
        pub(crate) unsafe fn $fma($($arg: $ty),*) {
            // SAFETY: the caller's contract.
            #[allow(unused_unsafe)]
            unsafe { $plain($($arg),*) }
        }
    };
}

entry!(gemm_entry, gemm_fma, gemm_raw, (g: Gemm, a: &[f32], b: &[f32], c: *mut f32));

/// The table's product: the portable loops leave prefetching to the CPU.
///
/// # Safety
/// As [`gemm_raw`].
unsafe fn gemm_table(g: Gemm, a: &[f32], b: &[f32], c: *mut f32, _ahead: &[f32]) {
    // SAFETY: the caller's contract.
    unsafe { gemm_entry(g, a, b, c) }
}
entry!(
    layer_norm_entry,
    layer_norm_fma,
    layer_norm,
    (x: &[f32], out: &mut [f32], d: usize, w: &[f32], b: Option<&[f32]>, eps: f32)
);
entry!(softmax_entry, softmax_fma, softmax_scaled, (row: &mut [f32], scale: f32, valid: Range<usize>));
entry!(geglu_entry, geglu_fma, geglu, (z: &[f32], out: &mut [f32]));

/// `C (+)= A · B`: 4 rows x 16 columns per tile (a `k`-panel of B stays in cache across all
/// row tiles), each element one chain of fused multiply-adds along `k`.
///
/// # Safety
/// `g.check(a, b, len)` passed for a C of `len` elements at `c`, and no other thread reads or
/// writes the elements this product touches during the call.
#[inline(always)]
pub(crate) unsafe fn gemm_raw(g: Gemm, a: &[f32], b: &[f32], c: *mut f32) {
    const MR: usize = 4;
    const NR: usize = 16;
    let mut j0 = 0;
    while j0 < g.n {
        let cols = NR.min(g.n - j0);
        let mut i0 = 0;
        while i0 < g.m {
            let rows = MR.min(g.m - i0);
            let mut acc = [[0f32; NR]; MR];
            if g.accumulate {
                for (r, acc_r) in acc.iter_mut().enumerate().take(rows) {
                    let base = (i0 + r) * g.ldc + j0;
                    for (q, v) in acc_r.iter_mut().enumerate().take(cols) {
                        // SAFETY: `base + q` is an element of this product (checked bounds).
                        *v = unsafe { *c.add(base + q) };
                    }
                }
            }
            for p in 0..g.k {
                let brow = &b[p * g.ldb + j0..p * g.ldb + j0 + cols];
                for (r, acc_r) in acc.iter_mut().enumerate().take(rows) {
                    let av = a[(i0 + r) * g.lda + p];
                    for (acc_v, &bv) in acc_r.iter_mut().zip(brow) {
                        *acc_v = fmadd(av, bv, *acc_v);
                    }
                }
            }
            for (r, acc_r) in acc.iter().enumerate().take(rows) {
                let base = (i0 + r) * g.ldc + j0;
                for (q, &v) in acc_r.iter().enumerate().take(cols) {
                    // SAFETY: as above.
                    unsafe { *c.add(base + q) = v };
                }
            }
            i0 += rows;
        }
        j0 += cols;
    }
}

/// LayerNorm rows: the mean and the sum of squared deviations in f64 over [`LANES`] partial
/// sums of the full 16-blocks, folded, then the tail in order.
#[inline(always)]
pub(crate) fn layer_norm(
    x: &[f32],
    out: &mut [f32],
    d: usize,
    w: &[f32],
    b: Option<&[f32]>,
    eps: f32,
) {
    let full = d / LANES * LANES;
    for (row, orow) in x.chunks_exact(d).zip(out.chunks_exact_mut(d)) {
        let mut p = [0f64; LANES];
        for block in row[..full].chunks_exact(LANES) {
            for (acc, &v) in p.iter_mut().zip(block) {
                *acc += v as f64;
            }
        }
        let mean = add_f64(fold16(p), &row[full..]) / d as f64;
        let mut q = [0f64; LANES];
        for block in row[..full].chunks_exact(LANES) {
            for (acc, &v) in q.iter_mut().zip(block) {
                let t = v as f64 - mean;
                *acc += t * t;
            }
        }
        let var = add_sq_dev_f64(fold16(q), &row[full..], mean);
        let rstd = layer_norm_rstd(var, d, eps);
        normalize_from(0, row, orow, mean as f32, rstd, w, b);
    }
}

/// `softmax(scale * row[valid])`, zeros outside `valid`: the max, the exponentials, their sum
/// over [`LANES`] partial sums of the full 16-blocks from `valid.start`, folded, then the tail
/// in order; each exponential times `1 / sum`.
#[inline(always)]
pub(crate) fn softmax_scaled(row: &mut [f32], scale: f32, valid: Range<usize>) {
    row[..valid.start].fill(0.0);
    row[valid.end..].fill(0.0);
    let seg = &mut row[valid];
    if seg.is_empty() {
        return;
    }
    let mut max = f32::NEG_INFINITY;
    for v in seg.iter_mut() {
        *v *= scale;
        max = max.max(*v);
    }
    for v in seg.iter_mut() {
        *v = exp_fast(*v - max);
    }
    let full = seg.len() / LANES * LANES;
    let mut p = [0f32; LANES];
    for block in seg[..full].chunks_exact(LANES) {
        for (acc, &v) in p.iter_mut().zip(block) {
            *acc += v;
        }
    }
    let sum = seg[full..].iter().fold(fold16(p), |s, &v| s + v);
    let inv = 1.0 / sum;
    for v in seg.iter_mut() {
        *v *= inv;
    }
}

/// `out[j] = GELU(z[j]) * z[f + j]` with `f = out.len()`.
#[inline(always)]
pub(crate) fn geglu(z: &[f32], out: &mut [f32]) {
    let f = out.len();
    let (a, g) = z.split_at(f);
    for ((o, &x), &gate) in out.iter_mut().zip(a).zip(&g[..f]) {
        *o = geglu_one(x, gate);
    }
}

/// What a vector path's register tiles left of a `rows x cols` transpose whose full tiles
/// cover `full.0` rows and `full.1` columns: the columns past the last full tile on every row,
/// then the rows past the last full tile on the full-tile columns.
#[cfg(target_arch = "x86_64")]
pub(crate) fn transpose_edges(
    src: &[f32],
    lds: usize,
    rows: usize,
    cols: usize,
    dst: &mut [f32],
    ldd: usize,
    (full_r, full_c): (usize, usize),
) {
    if full_c < cols {
        transpose(
            &src[full_c..],
            lds,
            rows,
            cols - full_c,
            &mut dst[full_c * ldd..],
            ldd,
        );
    }
    if full_r < rows && full_c > 0 {
        transpose(
            &src[full_r * lds..],
            lds,
            rows - full_r,
            full_c,
            &mut dst[full_r..],
            ldd,
        );
    }
}

/// The transpose of a `rows x cols` block (see [`super::transpose`]), in tiles of 16 x 16 so
/// that the 16 source rows of a tile stay in cache while each destination row gets 16
/// contiguous values. Also the column and row edges of the vector paths' tiles. Panics if
/// the block leaves the slices.
pub(crate) fn transpose(
    src: &[f32],
    lds: usize,
    rows: usize,
    cols: usize,
    dst: &mut [f32],
    ldd: usize,
) {
    const TILE: usize = 16;
    for r0 in (0..rows).step_by(TILE) {
        let r1 = (r0 + TILE).min(rows);
        for c0 in (0..cols).step_by(TILE) {
            let c1 = (c0 + TILE).min(cols);
            for c in c0..c1 {
                let out = &mut dst[c * ldd + r0..c * ldd + r1];
                for (r, v) in (r0..r1).zip(out) {
                    *v = src[r * lds + c];
                }
            }
        }
    }
}
