//! aarch64 NEON kernels (4 f32 lanes, fused multiply-add): the portable arithmetic of
//! [`super::scalar`], bit for bit. NEON and FMA are part of the aarch64 base architecture, so
//! this table needs no run-time detection. Products: tiles of up to 6 rows x 16 columns, then
//! 4-column strips, column tails narrower than 4 through the portable kernel; reductions: the
//! 16 partial sums in four registers (eight of 2 f64 for LayerNorm), folded by halves.

use super::{
    add_f64, add_sq_dev_f64, exp_fast, geglu_one, layer_norm_rstd, normalize_from, Gemm, Kernels,
    ERF_P, ERF_POLY, EXP_HI, EXP_LO, EXP_POLY, LANES, LN2_HI, LN2_LO,
};
use core::arch::aarch64::*;
use std::ops::Range;

/// The NEON kernel table.
pub(crate) static KERNELS: Kernels = Kernels {
    gemm,
    layer_norm,
    softmax_scaled,
    geglu,
    transpose: super::scalar::transpose,
};

/// Rows per tile. 6 rows x 4 vectors keep 24 accumulators, the 4 B vectors and a broadcast
/// in 29 of the 32 vector registers.
const ROWS: usize = 6;

/// Tiles of up to [`ROWS`] rows x 16 columns, then one strip of 4-column vectors; a tail
/// narrower than 4 goes through the portable kernel (the same arithmetic per element).
///
/// # Safety
/// `g.check` passed for the C at `c`, and no other thread touches this product's elements of
/// C during the call.
unsafe fn gemm(g: Gemm, a: &[f32], b: &[f32], c: *mut f32, _ahead: &[f32]) {
    let full = g.n / 16 * 16;
    let mut j0 = 0;
    // SAFETY (all calls): the columns `j0..j0 + 4 * V` lie inside the checked bounds.
    while j0 < full {
        unsafe { columns::<4>(g, a, b, c, j0) };
        j0 += 16;
    }
    while g.n - j0 >= 4 {
        unsafe { columns::<1>(g, a, b, c, j0) };
        j0 += 4;
    }
    if j0 < g.n {
        let rest = Gemm { n: g.n - j0, ..g };
        // SAFETY: the remaining columns of the same checked product.
        unsafe { super::scalar::gemm_raw(rest, a, &b[j0..], c.add(j0)) };
    }
}

/// Every row tile of the `4 * V` columns from `j0`.
///
/// # Safety
/// As [`gemm`], with columns `j0..j0 + 4 * V` inside the checked bounds.
#[inline(always)]
unsafe fn columns<const V: usize>(g: Gemm, a: &[f32], b: &[f32], c: *mut f32, j0: usize) {
    let mut i0 = 0;
    while i0 < g.m {
        let rows = ROWS.min(g.m - i0);
        // SAFETY (all arms): rows `i0..i0 + rows` lie inside the checked bounds.
        unsafe {
            match rows {
                6 => tile::<6, V>(g, a, b, c, i0, j0),
                5 => tile::<5, V>(g, a, b, c, i0, j0),
                4 => tile::<4, V>(g, a, b, c, i0, j0),
                3 => tile::<3, V>(g, a, b, c, i0, j0),
                2 => tile::<2, V>(g, a, b, c, i0, j0),
                _ => tile::<1, V>(g, a, b, c, i0, j0),
            }
        }
        i0 += rows;
    }
}

/// `R` rows x `4 * V` columns: each element one chain of `vfmaq_f32` along `k` from 0 (or C).
///
/// # Safety
/// As [`gemm`], with rows `i0..i0 + R` and columns `j0..j0 + 4 * V` inside the checked bounds.
#[inline(always)]
unsafe fn tile<const R: usize, const V: usize>(
    g: Gemm,
    a: &[f32],
    b: &[f32],
    c: *mut f32,
    i0: usize,
    j0: usize,
) {
    let ap = a.as_ptr();
    let bp = b.as_ptr();
    // SAFETY: every offset is an element of A, B or C inside the bounds `Gemm::check`
    // verified (rows below `m`, columns below `n`, `k` terms); the caller owns C's elements.
    unsafe {
        let mut acc = [[vdupq_n_f32(0.0); V]; R];
        if g.accumulate {
            for (r, acc_r) in acc.iter_mut().enumerate() {
                let base = c.add((i0 + r) * g.ldc + j0);
                for (v, acc_v) in acc_r.iter_mut().enumerate() {
                    *acc_v = vld1q_f32(base.add(4 * v));
                }
            }
        }
        for p in 0..g.k {
            let brow = bp.add(p * g.ldb + j0);
            let mut bv = [vdupq_n_f32(0.0); V];
            for (v, bv_v) in bv.iter_mut().enumerate() {
                *bv_v = vld1q_f32(brow.add(4 * v));
            }
            for (r, acc_r) in acc.iter_mut().enumerate() {
                let av = vdupq_n_f32(*ap.add((i0 + r) * g.lda + p));
                for (acc_v, &bv_v) in acc_r.iter_mut().zip(&bv) {
                    // acc + av * b, one rounding: the portable `fmadd(av, b, acc)`.
                    *acc_v = vfmaq_f32(*acc_v, av, bv_v);
                }
            }
        }
        for (r, acc_r) in acc.iter().enumerate() {
            let base = c.add((i0 + r) * g.ldc + j0);
            for (v, &acc_v) in acc_r.iter().enumerate() {
                vst1q_f32(base.add(4 * v), acc_v);
            }
        }
    }
}

/// [`super::exp_fast`] on 4 lanes: the same clamp, rounding, reduction and polynomial.
#[inline(always)]
fn exp4(x: float32x4_t) -> float32x4_t {
    // SAFETY: NEON is part of the aarch64 base architecture; these are register operations.
    unsafe {
        let x = vminq_f32(vmaxq_f32(x, vdupq_n_f32(EXP_LO)), vdupq_n_f32(EXP_HI));
        // Round to nearest, ties to even: the portable path's 1.5 * 2^23 trick.
        let n = vrndnq_f32(vmulq_f32(x, vdupq_n_f32(std::f32::consts::LOG2_E)));
        // x - n * ln2 fused: the portable `fmadd(-n, LN2_HI, x)`.
        let r = vfmsq_f32(x, n, vdupq_n_f32(LN2_HI));
        let r = vfmsq_f32(r, n, vdupq_n_f32(LN2_LO));
        let mut p = vdupq_n_f32(EXP_POLY[0]);
        for c in &EXP_POLY[1..] {
            p = vfmaq_f32(vdupq_n_f32(*c), p, r);
        }
        let y = vaddq_f32(vfmaq_f32(r, vmulq_f32(p, r), r), vdupq_n_f32(1.0));
        // `n` is an integer, so the truncating conversion is exact (as `n as i32`).
        let e = vshlq_n_s32::<23>(vaddq_s32(vcvtq_s32_f32(n), vdupq_n_s32(127)));
        vmulq_f32(y, vreinterpretq_f32_s32(e))
    }
}

/// [`super::fold16`] of 16 partial sums held 4 per register, in lane order.
#[inline(always)]
fn fold(p: [float32x4_t; 4]) -> f32 {
    // SAFETY: NEON is part of the aarch64 base architecture; these are register operations.
    unsafe {
        // p[l] + p[l + 8], then + 4: lanes 0-3 of each half.
        let s = vaddq_f32(vaddq_f32(p[0], p[2]), vaddq_f32(p[1], p[3]));
        // + 2, then + 1.
        let s = vadd_f32(vget_low_f32(s), vget_high_f32(s));
        vget_lane_f32::<0>(s) + vget_lane_f32::<1>(s)
    }
}

/// [`super::fold16`] of 16 f64 partial sums held 2 per register, in lane order.
#[inline(always)]
fn fold_f64(p: [float64x2_t; 8]) -> f64 {
    // SAFETY: NEON is part of the aarch64 base architecture; these are register operations.
    unsafe {
        let h: [float64x2_t; 4] = std::array::from_fn(|i| vaddq_f64(p[i], p[i + 4]));
        let q = [vaddq_f64(h[0], h[2]), vaddq_f64(h[1], h[3])];
        let s = vaddq_f64(q[0], q[1]);
        vgetq_lane_f64::<0>(s) + vgetq_lane_f64::<1>(s)
    }
}

/// Softmax of `scale * row[valid]`, zeros outside `valid`: 4 lanes, the tail past the last
/// full vector in the portable operations; the sum over the full 16-blocks in four registers
/// of partials, the rest in order.
///
/// # Safety
/// `valid` lies inside `row`.
unsafe fn softmax_scaled(row: &mut [f32], scale: f32, valid: Range<usize>) {
    row[..valid.start].fill(0.0);
    row[valid.end..].fill(0.0);
    let seg = &mut row[valid];
    let len = seg.len();
    if len == 0 {
        return;
    }
    let full4 = len / 4 * 4;
    let full = len / LANES * LANES;
    let p = seg.as_mut_ptr();
    // SAFETY (all loads and stores): offsets `i..i + 4` with `i + 4 <= full4 <= len`.
    let max = unsafe {
        let sv = vdupq_n_f32(scale);
        let mut maxv = vdupq_n_f32(f32::NEG_INFINITY);
        let mut i = 0;
        while i < full4 {
            let v = vmulq_f32(vld1q_f32(p.add(i)), sv);
            vst1q_f32(p.add(i), v);
            maxv = vmaxq_f32(maxv, v);
            i += 4;
        }
        vmaxvq_f32(maxv)
    };
    let mut max = max;
    for v in &mut seg[full4..] {
        *v *= scale;
        max = max.max(*v);
    }
    let p = seg.as_mut_ptr();
    // SAFETY: as above.
    let partials = unsafe {
        let maxs = vdupq_n_f32(max);
        let mut acc = [vdupq_n_f32(0.0); 4];
        let mut i = 0;
        while i < full4 {
            let e = exp4(vsubq_f32(vld1q_f32(p.add(i)), maxs));
            vst1q_f32(p.add(i), e);
            if i < full {
                let l = (i % LANES) / 4;
                acc[l] = vaddq_f32(acc[l], e);
            }
            i += 4;
        }
        acc
    };
    for v in &mut seg[full4..] {
        *v = exp_fast(*v - max);
    }
    let sum = seg[full..].iter().fold(fold(partials), |s, &v| s + v);
    let inv = 1.0 / sum;
    let p = seg.as_mut_ptr();
    // SAFETY: as above.
    unsafe {
        let iv = vdupq_n_f32(inv);
        let mut i = 0;
        while i < full4 {
            vst1q_f32(p.add(i), vmulq_f32(vld1q_f32(p.add(i)), iv));
            i += 4;
        }
    }
    for v in &mut seg[full4..] {
        *v *= inv;
    }
}

/// LayerNorm rows: mean and variance over 16 f64 partial sums in eight registers, folded, the
/// tail in order; the normalisation 4 wide in the scalar order.
///
/// # Safety
/// `w` (and `b`) hold at least `d` values, `out` at least `x.len()`.
unsafe fn layer_norm(x: &[f32], out: &mut [f32], d: usize, w: &[f32], b: Option<&[f32]>, eps: f32) {
    let full = d / LANES * LANES;
    let full4 = d / 4 * 4;
    for (row, orow) in x.chunks_exact(d).zip(out.chunks_exact_mut(d)) {
        let rp = row.as_ptr();
        let op = orow.as_mut_ptr();
        // SAFETY (all loads and stores): offsets below `full <= full4 <= d` in `d`-long rows
        // of `x` and `out`, and in `w` and `b`, which hold at least `d` values.
        unsafe {
            // 16 f32 from `rp + i` widened to eight pairs of f64, in order.
            let widen = |i: usize| -> [float64x2_t; 8] {
                let v: [float32x4_t; 4] = std::array::from_fn(|q| vld1q_f32(rp.add(i + 4 * q)));
                std::array::from_fn(|h| {
                    let q = v[h / 2];
                    if h % 2 == 0 {
                        vcvt_f64_f32(vget_low_f32(q))
                    } else {
                        vcvt_high_f64_f32(q)
                    }
                })
            };
            let mut s = [vdupq_n_f64(0.0); 8];
            let mut i = 0;
            while i < full {
                for (acc, v) in s.iter_mut().zip(widen(i)) {
                    *acc = vaddq_f64(*acc, v);
                }
                i += 16;
            }
            let mean = add_f64(fold_f64(s), &row[full..]) / d as f64;
            let mv = vdupq_n_f64(mean);
            let mut q = [vdupq_n_f64(0.0); 8];
            i = 0;
            while i < full {
                for (acc, v) in q.iter_mut().zip(widen(i)) {
                    let t = vsubq_f64(v, mv);
                    // Multiply, then add (no f64 FMA on any path).
                    *acc = vaddq_f64(*acc, vmulq_f64(t, t));
                }
                i += 16;
            }
            let var = add_sq_dev_f64(fold_f64(q), &row[full..], mean);
            let rstd = layer_norm_rstd(var, d, eps);
            let mean = mean as f32;
            let (mf, rf) = (vdupq_n_f32(mean), vdupq_n_f32(rstd));
            i = 0;
            while i < full4 {
                // The scalar order: ((x - mean) * rstd) * w (+ b).
                let v = vmulq_f32(vsubq_f32(vld1q_f32(rp.add(i)), mf), rf);
                let mut v = vmulq_f32(v, vld1q_f32(w.as_ptr().add(i)));
                if let Some(b) = b {
                    v = vaddq_f32(v, vld1q_f32(b.as_ptr().add(i)));
                }
                vst1q_f32(op.add(i), v);
                i += 4;
            }
            normalize_from(full4, row, orow, mean, rstd, w, b);
        }
    }
}

/// GeGLU 4 wide: [`super::erf_as`] (A&S 7.1.26 with [`exp4`]) in the scalar order.
///
/// # Safety
/// `z` holds at least `2 * out.len()` values.
unsafe fn geglu(z: &[f32], out: &mut [f32]) {
    let f = out.len();
    let (a, g) = z.split_at(f);
    let full = f / 4 * 4;
    let mut i = 0;
    while i < full {
        // SAFETY: `i + 4 <= full <= f` and `a`, `g`, `out` hold at least `f` elements.
        unsafe {
            let one = vdupq_n_f32(1.0);
            let x = vld1q_f32(a.as_ptr().add(i));
            let gate = vld1q_f32(g.as_ptr().add(i));
            let u = vmulq_f32(x, vdupq_n_f32(std::f32::consts::FRAC_1_SQRT_2));
            let au = vabsq_f32(u);
            let t = vdivq_f32(one, vfmaq_f32(one, vdupq_n_f32(ERF_P), au));
            let mut r = vdupq_n_f32(ERF_POLY[0]);
            for c in &ERF_POLY[1..] {
                r = vfmaq_f32(vdupq_n_f32(*c), r, t);
            }
            r = vmulq_f32(r, t);
            let neg_sq = vnegq_f32(vmulq_f32(au, au));
            // 1 - r * exp(-u^2) fused: the portable `fmadd(-r, exp, 1)`.
            let y = vfmsq_f32(one, r, exp4(neg_sq));
            // copysign(y, u): u's sign bit, y's other bits.
            let sign = vdupq_n_u32(0x8000_0000);
            let erf = vbslq_f32(sign, u, y);
            let gelu = vmulq_f32(vmulq_f32(vdupq_n_f32(0.5), x), vaddq_f32(one, erf));
            vst1q_f32(out.as_mut_ptr().add(i), vmulq_f32(gelu, gate));
        }
        i += 4;
    }
    for j in full..f {
        out[j] = geglu_one(a[j], g[j]);
    }
}

#[cfg(test)]
mod tests {
    use super::super::fold16;
    use super::*;

    /// The register folds are [`fold16`]'s halving tree: on partials of mixed signs and
    /// magnitudes 2^-30..2^30 (where any other pairing rounds differently), the same bits.
    #[test]
    fn the_register_folds_are_the_halving_tree() {
        let mut seed = 5u64;
        let mut next = || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let m = 1.0 + (seed >> 40) as f64 / (1u64 << 24) as f64;
            let e = ((seed >> 20) % 61) as i32 - 30;
            let s = if seed & (1 << 10) == 0 { 1.0 } else { -1.0 };
            s * m * 2f64.powi(e)
        };
        for _ in 0..1000 {
            let p64: [f64; LANES] = std::array::from_fn(|_| next());
            let p32: [f32; LANES] = std::array::from_fn(|l| p64[l] as f32);
            // SAFETY: NEON is part of the aarch64 base architecture; the loads read 16 values
            // of the 16-element arrays.
            let (r32, r64) = unsafe {
                let r32: [float32x4_t; 4] =
                    std::array::from_fn(|q| vld1q_f32(p32[4 * q..].as_ptr()));
                let r64: [float64x2_t; 8] =
                    std::array::from_fn(|h| vld1q_f64(p64[2 * h..].as_ptr()));
                (r32, r64)
            };
            assert_eq!(fold(r32).to_bits(), fold16(p32).to_bits(), "{p32:?}");
            assert_eq!(fold_f64(r64).to_bits(), fold16(p64).to_bits(), "{p64:?}");
        }
    }
}
