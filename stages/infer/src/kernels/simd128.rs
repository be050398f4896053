//! WebAssembly SIMD128 kernels (4 f32 lanes). WebAssembly has no fused multiply-add, so every
//! lane does the portable body's multiplications and additions unfused, as the portable body
//! itself does on wasm32 ([`super::fmadd`]): this module equals the scalar wasm module bit for
//! bit, reductions included (the 16 partial sums in four registers, folded by halves), and
//! native within 1e-5.

use super::{Gemm, Kernels, LANES};
use core::arch::wasm32::*;
use std::ops::Range;

/// Rows and 4-lane column vectors per tile. 4 x 8 keeps 8 accumulators, two B vectors and
/// a broadcast in registers: V8's x86-64 code generator has 16 xmm registers and keeps
/// some as scratch, and a 6 x 8 tile (12 accumulators) spilled and ran 1.6x slower.
const ROWS: usize = 4;
const VECS: usize = 2;
const COLS: usize = 4 * VECS;

/// The SIMD128 kernel table (SIMD128 is a compile-time feature of this module).
pub(crate) static KERNELS: Kernels = Kernels {
    gemm: gemm_simd128,
    layer_norm: layer_norm_entry,
    softmax_scaled: softmax_entry,
    geglu: geglu_entry,
    transpose: super::scalar::transpose,
};

/// The table's LayerNorm entry.
unsafe fn layer_norm_entry(
    x: &[f32],
    out: &mut [f32],
    d: usize,
    w: &[f32],
    b: Option<&[f32]>,
    eps: f32,
) {
    layer_norm_simd128(x, out, d, w, b, eps)
}

/// The table's softmax entry.
unsafe fn softmax_entry(row: &mut [f32], scale: f32, valid: Range<usize>) {
    softmax_scaled_simd128(row, scale, valid)
}

/// The table's GeGLU entry.
unsafe fn geglu_entry(z: &[f32], out: &mut [f32]) {
    geglu_simd128(z, out)
}

/// `C (+)= A · B` in tiles of up to [`ROWS`] rows x [`COLS`] columns, then one 4-column
/// strip; a tail narrower than 4 goes through the portable kernel. Every element is summed
/// in the portable kernel's order, so the three give the same bits.
///
/// # Safety
/// `g.check` must have passed for the C at `c`, and no other thread touches this
/// product's elements of C during the call.
unsafe fn gemm_simd128(g: Gemm, a: &[f32], b: &[f32], c: *mut f32, _ahead: &[f32]) {
    let full = g.n / COLS * COLS;
    let mut j0 = 0;
    while j0 < full {
        columns::<VECS>(g, a, b, c, j0);
        j0 += COLS;
    }
    // Attention's Q·Kᵀ has one column per key: up to 7 left over on every row.
    if g.n - j0 >= 4 {
        columns::<1>(g, a, b, c, j0);
        j0 += 4;
    }
    if j0 < g.n {
        let rest = Gemm { n: g.n - j0, ..g };
        super::scalar::gemm_raw(rest, a, &b[j0..], c.add(j0));
    }
}

/// Every row tile of the `4 * V` columns from `j0`.
///
/// # Safety
/// As [`gemm_simd128`], with columns `j0..j0 + 4 * V` inside the checked bounds.
#[inline(always)]
unsafe fn columns<const V: usize>(g: Gemm, a: &[f32], b: &[f32], c: *mut f32, j0: usize) {
    let mut i0 = 0;
    while i0 < g.m {
        let rows = ROWS.min(g.m - i0);
        // SAFETY (all arms): tile indices stay inside the bounds `Gemm::check` verified.
        match rows {
            4 => tile::<4, V>(g, a, b, c, i0, j0),
            3 => tile::<3, V>(g, a, b, c, i0, j0),
            2 => tile::<2, V>(g, a, b, c, i0, j0),
            _ => tile::<1, V>(g, a, b, c, i0, j0),
        }
        i0 += rows;
    }
}

/// # Safety
/// Rows `i0..i0 + R` and columns `j0..j0 + 4 * V` are inside the checked bounds.
#[inline(always)]
unsafe fn tile<const R: usize, const V: usize>(
    g: Gemm,
    a: &[f32],
    b: &[f32],
    c: *mut f32,
    i0: usize,
    j0: usize,
) {
    let cp = c;
    let ap = a.as_ptr();
    let bp = b.as_ptr();
    let mut acc = [[f32x4_splat(0.0); V]; R];
    if g.accumulate {
        for (r, acc_r) in acc.iter_mut().enumerate() {
            let base = cp.add((i0 + r) * g.ldc + j0);
            for (v, acc_v) in acc_r.iter_mut().enumerate() {
                *acc_v = v128_load(base.add(4 * v) as *const v128);
            }
        }
    }
    for p in 0..g.k {
        let brow = bp.add(p * g.ldb + j0);
        let mut bv = [f32x4_splat(0.0); V];
        for (v, b_v) in bv.iter_mut().enumerate() {
            *b_v = v128_load(brow.add(4 * v) as *const v128);
        }
        for (r, acc_r) in acc.iter_mut().enumerate() {
            // load32_splat: one broadcast-from-memory instruction (vbroadcastss).
            let av = v128_load32_splat(ap.add((i0 + r) * g.lda + p) as *const u32);
            for (acc_v, &b_v) in acc_r.iter_mut().zip(&bv) {
                *acc_v = f32x4_add(*acc_v, f32x4_mul(av, b_v));
            }
        }
    }
    for (r, acc_r) in acc.iter().enumerate() {
        let base = cp.add((i0 + r) * g.ldc + j0);
        for (v, &acc_v) in acc_r.iter().enumerate() {
            v128_store(base.add(4 * v) as *mut v128, acc_v);
        }
    }
}

/// `exp_fast` on 4 lanes: the same clamp, reduction, polynomial and exponent bits.
#[inline(always)]
fn exp4(x: v128) -> v128 {
    // pmin / pmax (`a < b ? b : a`): one x86 instruction each, where min / max's IEEE
    // NaN and signed-zero rules cost V8 several; for a clamp to finite bounds the two give
    // the same values, NaN included.
    let x = f32x4_pmin(f32x4_pmax(x, f32x4_splat(-87.3)), f32x4_splat(88.3));
    let magic = f32x4_splat(12_582_912.0);
    let shifted = f32x4_add(f32x4_mul(x, f32x4_splat(std::f32::consts::LOG2_E)), magic);
    let n = f32x4_sub(shifted, magic);
    let r = f32x4_sub(
        f32x4_sub(x, f32x4_mul(n, f32x4_splat(0.693_145_75))),
        f32x4_mul(n, f32x4_splat(1.428_606_8e-6)),
    );
    let mut p = f32x4_splat(1.987_569_1e-4);
    for c in [
        1.398_199_9e-3,
        8.333_452e-3,
        4.166_579_6e-2,
        1.666_666_5e-1,
        0.5,
    ] {
        p = f32x4_add(f32x4_mul(p, r), f32x4_splat(c));
    }
    let one = f32x4_splat(1.0);
    let y = f32x4_add(f32x4_add(f32x4_mul(f32x4_mul(p, r), r), r), one);
    // n + 127 from the bits of `shifted` (1.5 * 2^23 + n, so its low mantissa bits are
    // n): an integer subtract where `i32x4.trunc_sat_f32x4_s` costs V8 about eight x86
    // instructions for its NaN and overflow cases, which the clamp above rules out.
    let biased = i32x4_sub(shifted, i32x4_splat(0x4B40_0000 - 127));
    let bits = i32x4_shl(biased, 23);
    f32x4_mul(y, bits)
}

#[inline(always)]
fn lanes(v: v128) -> [f32; 4] {
    [
        f32x4_extract_lane::<0>(v),
        f32x4_extract_lane::<1>(v),
        f32x4_extract_lane::<2>(v),
        f32x4_extract_lane::<3>(v),
    ]
}

/// [`super::fold16`] of 16 partial sums held 4 per register, in lane order.
#[inline(always)]
fn fold4(p: [v128; 4]) -> f32 {
    let l = lanes(f32x4_add(f32x4_add(p[0], p[2]), f32x4_add(p[1], p[3])));
    (l[0] + l[2]) + (l[1] + l[3])
}

/// [`super::fold16`] of 16 f64 partial sums held 2 per register, in lane order.
#[inline(always)]
fn fold8(p: [v128; 8]) -> f64 {
    let h: [v128; 4] = std::array::from_fn(|m| f64x2_add(p[m], p[m + 4]));
    let q = [f64x2_add(h[0], h[2]), f64x2_add(h[1], h[3])];
    let s = f64x2_add(q[0], q[1]);
    f64x2_extract_lane::<0>(s) + f64x2_extract_lane::<1>(s)
}

/// The first 4 elements of `s` (panics if there are fewer: callers pass 4-element chunks).
#[inline(always)]
fn load4(s: &[f32]) -> v128 {
    let s = &s[..4];
    // SAFETY: `s` holds 4 f32 = 16 readable bytes; v128_load has no alignment requirement.
    unsafe { v128_load(s.as_ptr() as *const v128) }
}

/// Store `v` into the first 4 elements of `s`.
#[inline(always)]
fn store4(s: &mut [f32], v: v128) {
    let s = &mut s[..4];
    // SAFETY: `s` holds 4 f32 = 16 writable bytes, borrowed mutably here.
    unsafe { v128_store(s.as_mut_ptr() as *mut v128, v) }
}

/// Attention softmax of one row over `valid` (0 elsewhere), 4 lanes.
fn softmax_scaled_simd128(row: &mut [f32], scale: f32, valid: Range<usize>) {
    row[..valid.start].fill(0.0);
    row[valid.end..].fill(0.0);
    let seg = &mut row[valid];
    if seg.is_empty() {
        return;
    }
    let sv = f32x4_splat(scale);
    let mut maxv = f32x4_splat(f32::NEG_INFINITY);
    let mut max_tail = f32::NEG_INFINITY;
    let split = seg.len() / 4 * 4;
    let (body, tail) = seg.split_at_mut(split);
    for ch in body.chunks_exact_mut(4) {
        let v = f32x4_mul(load4(ch), sv);
        store4(ch, v);
        // pmax (one instruction) skips a NaN `v` as the scalar body's `f32::max` does.
        maxv = f32x4_pmax(maxv, v);
    }
    for v in tail.iter_mut() {
        *v *= scale;
        max_tail = max_tail.max(*v);
    }
    let max = lanes(maxv).into_iter().fold(max_tail, f32::max);
    let ms = f32x4_splat(max);
    for ch in body.chunks_exact_mut(4) {
        store4(ch, exp4(f32x4_sub(load4(ch), ms)));
    }
    for v in tail.iter_mut() {
        *v = super::exp_fast(*v - max);
    }
    // The sum: 16 partials (four registers) over the full 16-blocks, folded, then the rest.
    let full = seg.len() / LANES * LANES;
    let mut acc = [f32x4_splat(0.0); 4];
    for block in seg[..full].chunks_exact(LANES) {
        for (m, a) in acc.iter_mut().enumerate() {
            *a = f32x4_add(*a, load4(&block[4 * m..]));
        }
    }
    let sum = seg[full..].iter().fold(fold4(acc), |s, &v| s + v);
    let inv = 1.0 / sum;
    let iv = f32x4_splat(inv);
    let (body, tail) = seg.split_at_mut(split);
    for ch in body.chunks_exact_mut(4) {
        let v = f32x4_mul(load4(ch), iv);
        store4(ch, v);
    }
    for v in tail.iter_mut() {
        *v *= inv;
    }
}

/// LayerNorm rows: mean and variance over the 16 partial sums (eight f64x2 registers) of
/// the full 16-blocks, folded, the tail in order; normalisation as the scalar body.
fn layer_norm_simd128(
    x: &[f32],
    out: &mut [f32],
    d: usize,
    w: &[f32],
    b: Option<&[f32]>,
    eps: f32,
) {
    let full = d / LANES * LANES;
    let full4 = d / 4 * 4;
    for (row, orow) in x.chunks_exact(d).zip(out.chunks_exact_mut(d)) {
        let widen = |v: v128| {
            let hi = i32x4_shuffle::<2, 3, 0, 1>(v, v);
            (f64x2_promote_low_f32x4(v), f64x2_promote_low_f32x4(hi))
        };
        let mut s = [f64x2_splat(0.0); 8];
        for block in row[..full].chunks_exact(LANES) {
            for m in 0..4 {
                let (lo, hi) = widen(load4(&block[4 * m..]));
                s[2 * m] = f64x2_add(s[2 * m], lo);
                s[2 * m + 1] = f64x2_add(s[2 * m + 1], hi);
            }
        }
        let mean = super::add_f64(fold8(s), &row[full..]) / d as f64;
        let mv = f64x2_splat(mean);
        let mut q = [f64x2_splat(0.0); 8];
        for block in row[..full].chunks_exact(LANES) {
            for m in 0..4 {
                let (lo, hi) = widen(load4(&block[4 * m..]));
                let (t0, t1) = (f64x2_sub(lo, mv), f64x2_sub(hi, mv));
                q[2 * m] = f64x2_add(q[2 * m], f64x2_mul(t0, t0));
                q[2 * m + 1] = f64x2_add(q[2 * m + 1], f64x2_mul(t1, t1));
            }
        }
        let var = super::add_sq_dev_f64(fold8(q), &row[full..], mean);
        let rstd = super::layer_norm_rstd(var, d, eps);
        let mean = mean as f32;
        let (mf, rf) = (f32x4_splat(mean), f32x4_splat(rstd));
        for (j, (och, ch)) in orow[..full4]
            .chunks_exact_mut(4)
            .zip(row[..full4].chunks_exact(4))
            .enumerate()
        {
            // Same operation order as the scalar body: ((x - mean) * rstd) * w (+ b).
            let v = f32x4_mul(f32x4_sub(load4(ch), mf), rf);
            let mut v = f32x4_mul(v, load4(&w[j * 4..]));
            if let Some(b) = b {
                v = f32x4_add(v, load4(&b[j * 4..]));
            }
            store4(och, v);
        }
        super::normalize_from(full4, row, orow, mean, rstd, w, b);
    }
}

/// GeGLU on 4 lanes: `erf_as` (A&S 7.1.26 with `exp4`) with the scalar body's operations.
fn geglu_simd128(z: &[f32], out: &mut [f32]) {
    let f = out.len();
    let (a, g) = z.split_at(f);
    let full = f / 4 * 4;
    let one = f32x4_splat(1.0);
    let half = f32x4_splat(0.5);
    for (j, och) in out[..full].chunks_exact_mut(4).enumerate() {
        let x = load4(&a[j * 4..]);
        let gate = load4(&g[j * 4..]);
        let u = f32x4_mul(x, f32x4_splat(std::f32::consts::FRAC_1_SQRT_2));
        let au = f32x4_abs(u);
        let t = f32x4_div(
            one,
            f32x4_add(f32x4_mul(f32x4_splat(super::ERF_P), au), one),
        );
        let mut r = f32x4_splat(super::ERF_POLY[0]);
        for c in &super::ERF_POLY[1..] {
            r = f32x4_add(f32x4_mul(r, t), f32x4_splat(*c));
        }
        r = f32x4_mul(r, t);
        let e = exp4(f32x4_neg(f32x4_mul(au, au)));
        let y = f32x4_sub(one, f32x4_mul(r, e));
        // erf is odd: copysign(y, u), as the scalar body.
        let erf = v128_bitselect(u, y, f32x4_splat(-0.0));
        let gelu = f32x4_mul(f32x4_mul(half, x), f32x4_add(one, erf));
        store4(och, f32x4_mul(gelu, gate));
    }
    for j in full..f {
        out[j] = super::geglu_one(a[j], g[j]);
    }
}
