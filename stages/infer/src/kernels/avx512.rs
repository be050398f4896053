//! AVX-512F kernels (16 f32 lanes): the portable arithmetic of [`super::scalar`], bit for
//! bit. Products: tiles of up to 8 rows x 32 columns; reductions: one 16-lane register of
//! partial sums (two of 8 f64 for LayerNorm), folded by halves.

use super::{
    add_f64, add_sq_dev_f64, geglu_one, layer_norm_rstd, normalize_from, Ahead, Gemm, Kernels,
    ERF_P, ERF_POLY, EXP_HI, EXP_LO, EXP_POLY, LANES, LN2_HI, LN2_LO,
};
use std::arch::x86_64::*;
use std::ops::Range;

/// The AVX-512 kernel table (handed out only where the CPU has AVX-512F, AVX2 and FMA).
pub(crate) static KERNELS: Kernels = Kernels {
    gemm,
    layer_norm,
    softmax_scaled,
    geglu,
    transpose,
};

/// Tiles of up to 8 rows x 32 columns (16 zmm accumulators); the first tiles prefetch
/// `ahead` ([`Ahead`]). Only a tile narrower than 32 columns loads B through lane masks: a
/// masked load costs a vector-port operation beside the load, a slot the fused multiply-adds
/// need (about 12% of a full tile's time).
///
/// # Safety
/// avx512f is available; `g.check` passed for the C at `c`, and no other thread touches
/// this product's elements of C during the call.
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn gemm(g: Gemm, a: &[f32], b: &[f32], c: *mut f32, ahead: &[f32]) {
    let mut ahead = Ahead::new(ahead);
    let mut j0 = 0;
    while j0 < g.n {
        let cols = 32.min(g.n - j0);
        let mut i0 = 0;
        while i0 < g.m {
            let rows = super::tile_rows(g.m - i0, 8);
            let pf = ahead.take(g.k);
            macro_rules! rows {
                ($full:literal) => {
                    // SAFETY (all arms): tile indices stay inside the bounds `Gemm::check`
                    // verified; `pf` is lines of `ahead` (`Ahead::take`).
                    match rows {
                        8 => tile::<8, $full>(g, a, b, c, i0, j0, cols, pf),
                        7 => tile::<7, $full>(g, a, b, c, i0, j0, cols, pf),
                        6 => tile::<6, $full>(g, a, b, c, i0, j0, cols, pf),
                        5 => tile::<5, $full>(g, a, b, c, i0, j0, cols, pf),
                        4 => tile::<4, $full>(g, a, b, c, i0, j0, cols, pf),
                        3 => tile::<3, $full>(g, a, b, c, i0, j0, cols, pf),
                        2 => tile::<2, $full>(g, a, b, c, i0, j0, cols, pf),
                        _ => tile::<1, $full>(g, a, b, c, i0, j0, cols, pf),
                    }
                };
            }
            if cols == 32 {
                rows!(true)
            } else {
                rows!(false)
            }
            i0 += rows;
        }
        j0 += cols;
    }
}

/// Lanes `0..len` (len <= 16) of a 16-lane mask.
#[inline]
fn mask(len: usize) -> __mmask16 {
    if len >= 16 {
        0xffff
    } else {
        ((1u32 << len) - 1) as u16
    }
}

/// `FULL`: `cols` is 32, and B is loaded without masks.
///
/// # Safety
/// As [`gemm`], with rows `i0..i0 + R` and columns `j0..j0 + cols` inside the checked bounds,
/// and `ahead` from [`Ahead::take`] (at most `g.k` lines).
#[allow(clippy::too_many_arguments)]
#[inline]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn tile<const R: usize, const FULL: bool>(
    g: Gemm,
    a: &[f32],
    b: &[f32],
    c: *mut f32,
    i0: usize,
    j0: usize,
    cols: usize,
    ahead: (*const f32, usize),
) {
    // Lane masks for the two 16-wide halves of the 32-column tile: the tail of a row is
    // loaded and stored with masks, so no element outside [j0, j0 + cols) is touched.
    let m0 = mask(cols);
    let m1 = mask(cols.saturating_sub(16));
    let ap = a.as_ptr();
    let bp = b.as_ptr();
    let mut acc0 = [_mm512_setzero_ps(); R];
    let mut acc1 = [_mm512_setzero_ps(); R];
    if g.accumulate {
        for r in 0..R {
            let base = c.add((i0 + r) * g.ldc + j0);
            acc0[r] = _mm512_maskz_loadu_ps(m0, base);
            acc1[r] = _mm512_maskz_loadu_ps(m1, base.add(16));
        }
    }
    for p in 0..g.k {
        Ahead::fetch(ahead, p);
        let brow = bp.add(p * g.ldb + j0);
        let (b0, b1) = if FULL {
            (_mm512_loadu_ps(brow), _mm512_loadu_ps(brow.add(16)))
        } else {
            (
                _mm512_maskz_loadu_ps(m0, brow),
                _mm512_maskz_loadu_ps(m1, brow.add(16)),
            )
        };
        for r in 0..R {
            let av = _mm512_set1_ps(*ap.add((i0 + r) * g.lda + p));
            acc0[r] = _mm512_fmadd_ps(av, b0, acc0[r]);
            acc1[r] = _mm512_fmadd_ps(av, b1, acc1[r]);
        }
    }
    for r in 0..R {
        let base = c.add((i0 + r) * g.ldc + j0);
        _mm512_mask_storeu_ps(base, m0, acc0[r]);
        _mm512_mask_storeu_ps(base.add(16), m1, acc1[r]);
    }
}

/// [`super::exp_fast`] on 16 lanes: the same clamp, rounding, reduction and polynomial.
#[inline]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn exp16(x: __m512) -> __m512 {
    let x = _mm512_min_ps(
        _mm512_max_ps(x, _mm512_set1_ps(EXP_LO)),
        _mm512_set1_ps(EXP_HI),
    );
    let n = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
        _mm512_mul_ps(x, _mm512_set1_ps(std::f32::consts::LOG2_E)),
    );
    let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(LN2_HI), x);
    let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(LN2_LO), r);
    let mut p = _mm512_set1_ps(EXP_POLY[0]);
    for c in &EXP_POLY[1..] {
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(*c));
    }
    let y = _mm512_add_ps(
        _mm512_fmadd_ps(_mm512_mul_ps(p, r), r, r),
        _mm512_set1_ps(1.0),
    );
    let e = _mm512_slli_epi32::<23>(_mm512_add_epi32(
        _mm512_cvtps_epi32(n),
        _mm512_set1_epi32(127),
    ));
    _mm512_mul_ps(y, _mm512_castsi512_ps(e))
}

/// [`super::fold16`] of the 16 lanes.
#[inline]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn fold(v: __m512) -> f32 {
    let lo = _mm512_castps512_ps256(v);
    let hi = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(v)));
    let s = _mm256_add_ps(lo, hi);
    let s = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps::<1>(s));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps::<1>(s, s)))
}

/// [`super::fold16`] of 16 f64 partial sums held as lanes 0-7 in `a` and 8-15 in `b`.
#[inline]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn fold_pd(a: __m512d, b: __m512d) -> f64 {
    let s = _mm512_add_pd(a, b);
    let s = _mm256_add_pd(_mm512_castpd512_pd256(s), _mm512_extractf64x4_pd::<1>(s));
    let s = _mm_add_pd(_mm256_castpd256_pd128(s), _mm256_extractf128_pd::<1>(s));
    _mm_cvtsd_f64(_mm_add_sd(s, _mm_unpackhi_pd(s, s)))
}

/// Softmax of `scale * row[valid]`, zeros outside `valid`: scale and max, exponentials and
/// their sum (full 16-blocks in one register of partials, the tail in order), normalise.
///
/// # Safety
/// avx512f is available; `valid` lies inside `row`.
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn softmax_scaled(row: &mut [f32], scale: f32, valid: Range<usize>) {
    row[..valid.start].fill(0.0);
    row[valid.end..].fill(0.0);
    let seg = &mut row[valid];
    let len = seg.len();
    if len == 0 {
        return;
    }
    let p = seg.as_mut_ptr();
    let full = len / LANES * LANES;
    let tail = mask(len - full);
    let sv = _mm512_set1_ps(scale);
    let mut maxv = _mm512_set1_ps(f32::NEG_INFINITY);
    let mut i = 0;
    // SAFETY (all loops): `i + 16 <= full <= len` for full vectors; the tail is masked to
    // the `len - full` lanes that exist.
    while i < full {
        let v = _mm512_mul_ps(_mm512_loadu_ps(p.add(i)), sv);
        _mm512_storeu_ps(p.add(i), v);
        maxv = _mm512_max_ps(maxv, v);
        i += 16;
    }
    if tail != 0 {
        let v = _mm512_mul_ps(_mm512_maskz_loadu_ps(tail, p.add(full)), sv);
        _mm512_mask_storeu_ps(p.add(full), tail, v);
        maxv = _mm512_mask_max_ps(maxv, tail, maxv, v);
    }
    let maxs = _mm512_set1_ps(_mm512_reduce_max_ps(maxv));
    let mut sumv = _mm512_setzero_ps();
    i = 0;
    while i < full {
        let e = exp16(_mm512_sub_ps(_mm512_loadu_ps(p.add(i)), maxs));
        _mm512_storeu_ps(p.add(i), e);
        sumv = _mm512_add_ps(sumv, e);
        i += 16;
    }
    if tail != 0 {
        let e = exp16(_mm512_sub_ps(
            _mm512_maskz_loadu_ps(tail, p.add(full)),
            maxs,
        ));
        _mm512_mask_storeu_ps(p.add(full), tail, e);
    }
    let sum = seg[full..].iter().fold(fold(sumv), |s, &v| s + v);
    let inv = _mm512_set1_ps(1.0 / sum);
    let p = seg.as_mut_ptr();
    i = 0;
    while i < full {
        _mm512_storeu_ps(p.add(i), _mm512_mul_ps(_mm512_loadu_ps(p.add(i)), inv));
        i += 16;
    }
    if tail != 0 {
        let v = _mm512_mul_ps(_mm512_maskz_loadu_ps(tail, p.add(full)), inv);
        _mm512_mask_storeu_ps(p.add(full), tail, v);
    }
}

/// LayerNorm rows: mean and variance over 16 f64 partial sums in two registers, folded, the
/// tail in order; the normalisation 16 wide in the scalar order.
///
/// # Safety
/// avx512f is available; `w` (and `b`) hold at least `d` values, `out` at least `x.len()`.
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn layer_norm(x: &[f32], out: &mut [f32], d: usize, w: &[f32], b: Option<&[f32]>, eps: f32) {
    let full = d / LANES * LANES;
    for (row, orow) in x.chunks_exact(d).zip(out.chunks_exact_mut(d)) {
        let rp = row.as_ptr();
        // SAFETY (all loads and stores): offsets below `full <= d` in `d`-long rows of `x`,
        // `out`, `w` and `b`.
        let widen = |i: usize| {
            let v = _mm512_loadu_ps(rp.add(i));
            let lo = _mm512_cvtps_pd(_mm512_castps512_ps256(v));
            let hi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(
                _mm512_castps_pd(v),
            )));
            (lo, hi)
        };
        let (mut s0, mut s1) = (_mm512_setzero_pd(), _mm512_setzero_pd());
        let mut i = 0;
        while i < full {
            let (lo, hi) = widen(i);
            s0 = _mm512_add_pd(s0, lo);
            s1 = _mm512_add_pd(s1, hi);
            i += 16;
        }
        let mean = add_f64(fold_pd(s0, s1), &row[full..]) / d as f64;
        let mv = _mm512_set1_pd(mean);
        let (mut q0, mut q1) = (_mm512_setzero_pd(), _mm512_setzero_pd());
        i = 0;
        while i < full {
            let (lo, hi) = widen(i);
            let (t0, t1) = (_mm512_sub_pd(lo, mv), _mm512_sub_pd(hi, mv));
            q0 = _mm512_add_pd(q0, _mm512_mul_pd(t0, t0));
            q1 = _mm512_add_pd(q1, _mm512_mul_pd(t1, t1));
            i += 16;
        }
        let var = add_sq_dev_f64(fold_pd(q0, q1), &row[full..], mean);
        let rstd = layer_norm_rstd(var, d, eps);
        let mean = mean as f32;
        let (mf, rf) = (_mm512_set1_ps(mean), _mm512_set1_ps(rstd));
        let op = orow.as_mut_ptr();
        i = 0;
        while i < full {
            // The scalar order: ((x - mean) * rstd) * w (+ b).
            let v = _mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(rp.add(i)), mf), rf);
            let mut v = _mm512_mul_ps(v, _mm512_loadu_ps(w.as_ptr().add(i)));
            if let Some(b) = b {
                v = _mm512_add_ps(v, _mm512_loadu_ps(b.as_ptr().add(i)));
            }
            _mm512_storeu_ps(op.add(i), v);
            i += 16;
        }
        normalize_from(full, row, orow, mean, rstd, w, b);
    }
}

/// GeGLU 16 wide: [`super::erf_as`] (A&S 7.1.26 with [`exp16`]) in the scalar order.
///
/// # Safety
/// avx512f is available; `z` holds at least `2 * out.len()` values.
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn geglu(z: &[f32], out: &mut [f32]) {
    let f = out.len();
    let (a, g) = z.split_at(f);
    let full = f / 16 * 16;
    let one = _mm512_set1_ps(1.0);
    let half = _mm512_set1_ps(0.5);
    let sign = _mm512_set1_epi32(i32::MIN);
    let mut i = 0;
    while i < full {
        // SAFETY: `i + 16 <= full <= f` and `a`, `g`, `out` hold at least `f` elements.
        let x = _mm512_loadu_ps(a.as_ptr().add(i));
        let gate = _mm512_loadu_ps(g.as_ptr().add(i));
        let u = _mm512_mul_ps(x, _mm512_set1_ps(std::f32::consts::FRAC_1_SQRT_2));
        let au = _mm512_abs_ps(u);
        let t = _mm512_div_ps(one, _mm512_fmadd_ps(_mm512_set1_ps(ERF_P), au, one));
        let mut r = _mm512_set1_ps(ERF_POLY[0]);
        for c in &ERF_POLY[1..] {
            r = _mm512_fmadd_ps(r, t, _mm512_set1_ps(*c));
        }
        r = _mm512_mul_ps(r, t);
        let neg_sq = _mm512_castsi512_ps(_mm512_xor_si512(
            _mm512_castps_si512(_mm512_mul_ps(au, au)),
            sign,
        ));
        let y = _mm512_fnmadd_ps(r, exp16(neg_sq), one);
        // copysign(y, u): y's magnitude bits, u's sign bit.
        let erf = _mm512_castsi512_ps(_mm512_or_si512(
            _mm512_andnot_si512(sign, _mm512_castps_si512(y)),
            _mm512_and_si512(sign, _mm512_castps_si512(u)),
        ));
        let gelu = _mm512_mul_ps(_mm512_mul_ps(half, x), _mm512_add_ps(one, erf));
        _mm512_storeu_ps(out.as_mut_ptr().add(i), _mm512_mul_ps(gelu, gate));
        i += 16;
    }
    for j in full..f {
        out[j] = geglu_one(a[j], g[j]);
    }
}

/// The transpose of a block (see [`super::transpose`]): 16 x 16 tiles through registers
/// (four rounds of shuffles), the row and column edges through the portable loop.
///
/// # Safety
/// avx512f is available; the block's elements lie inside `src` and `dst`.
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn transpose(
    src: &[f32],
    lds: usize,
    rows: usize,
    cols: usize,
    dst: &mut [f32],
    ldd: usize,
) {
    let (full_r, full_c) = (rows / 16 * 16, cols / 16 * 16);
    let (sp, dp) = (src.as_ptr(), dst.as_mut_ptr());
    for r0 in (0..full_r).step_by(16) {
        for c0 in (0..full_c).step_by(16) {
            // SAFETY: rows r0..r0 + 16 and columns c0..c0 + 16 lie inside the block.
            let mut v = [_mm512_setzero_ps(); 16];
            for (i, vi) in v.iter_mut().enumerate() {
                *vi = _mm512_loadu_ps(sp.add((r0 + i) * lds + c0));
            }
            let t = transpose16(v);
            for (j, tj) in t.iter().enumerate() {
                _mm512_storeu_ps(dp.add((c0 + j) * ldd + r0), *tj);
            }
        }
    }
    super::scalar::transpose_edges(src, lds, rows, cols, dst, ldd, (full_r, full_c));
}

/// 16 rows of 16 lanes transposed: lane `j` of row `i` becomes lane `i` of row `j`.
#[inline]
#[target_feature(enable = "avx512f,avx2,fma")]
fn transpose16(r: [__m512; 16]) -> [__m512; 16] {
    // Within each 128-bit lane L (columns 4L..4L + 3): pairs of rows interleaved, then
    // quads, so that u[4g + c] lane L holds column 4L + c of rows 4g..4g + 3.
    let mut t = [_mm512_setzero_ps(); 16];
    for i in 0..8 {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    let mut u = [_mm512_setzero_ps(); 16];
    for g in 0..4 {
        let pd = |v: __m512| _mm512_castps_pd(v);
        let ps = |v: __m512d| _mm512_castpd_ps(v);
        let (a, b, c, d) = (t[4 * g], t[4 * g + 1], t[4 * g + 2], t[4 * g + 3]);
        u[4 * g] = ps(_mm512_unpacklo_pd(pd(a), pd(c)));
        u[4 * g + 1] = ps(_mm512_unpackhi_pd(pd(a), pd(c)));
        u[4 * g + 2] = ps(_mm512_unpacklo_pd(pd(b), pd(d)));
        u[4 * g + 3] = ps(_mm512_unpackhi_pd(pd(b), pd(d)));
    }
    // Then the 128-bit lanes: output row 4L + c gathers lane L of u[c], u[4 + c], u[8 + c],
    // u[12 + c] (rows 0..3, 4..7, 8..11, 12..15).
    let mut out = [_mm512_setzero_ps(); 16];
    for c in 0..4 {
        let (a, b, cc, d) = (u[c], u[4 + c], u[8 + c], u[12 + c]);
        let p0 = _mm512_shuffle_f32x4::<0x44>(a, b);
        let p1 = _mm512_shuffle_f32x4::<0xEE>(a, b);
        let p2 = _mm512_shuffle_f32x4::<0x44>(cc, d);
        let p3 = _mm512_shuffle_f32x4::<0xEE>(cc, d);
        out[c] = _mm512_shuffle_f32x4::<0x88>(p0, p2);
        out[4 + c] = _mm512_shuffle_f32x4::<0xDD>(p0, p2);
        out[8 + c] = _mm512_shuffle_f32x4::<0x88>(p1, p3);
        out[12 + c] = _mm512_shuffle_f32x4::<0xDD>(p1, p3);
    }
    out
}
