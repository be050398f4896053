//! AVX2 + FMA kernels (8 f32 lanes): the portable arithmetic of [`super::scalar`], bit for
//! bit. Products: tiles of up to 6 rows x 16 columns, column tails through the portable
//! kernel; reductions: the 16 partial sums in two registers (four of 4 f64 for LayerNorm),
//! folded by halves.

use super::{
    add_f64, add_sq_dev_f64, geglu_one, layer_norm_rstd, normalize_from, Ahead, Gemm, Kernels,
    ERF_P, ERF_POLY, EXP_HI, EXP_LO, EXP_POLY, LANES, LN2_HI, LN2_LO,
};
use std::arch::x86_64::*;
use std::ops::Range;

/// The AVX2 kernel table (handed out only where the CPU has AVX2 and FMA).
pub(crate) static KERNELS: Kernels = Kernels {
    gemm,
    layer_norm,
    softmax_scaled,
    geglu,
    transpose,
};

/// Rows per tile. 6 x 16 keeps 12 accumulators, the two B vectors and one broadcast in 15 of
/// the 16 ymm registers: 6 FMAs per pair of B loads instead of 4.
const ROWS: usize = 6;

/// Rows per tile of the column tail: one B vector, so 12 accumulators keep the FMA pipes as
/// busy as the 6 x 16 tiles do.
const TAIL_ROWS: usize = 12;

/// Tiles of up to [`ROWS`] rows x 16 columns, then the columns left (attention's key counts
/// are seldom a multiple of 16) in tiles of up to [`TAIL_ROWS`] rows x 8 masked columns. The
/// first full tiles prefetch `ahead` ([`Ahead`]).
///
/// # Safety
/// avx2 and fma are available; `g.check` passed for the C at `c`, and no other thread touches
/// this product's elements of C during the call.
#[target_feature(enable = "avx2,fma")]
unsafe fn gemm(g: Gemm, a: &[f32], b: &[f32], c: *mut f32, ahead: &[f32]) {
    let mut ahead = Ahead::new(ahead);
    let full = g.n / 16 * 16;
    let mut j0 = 0;
    while j0 < full {
        let mut i0 = 0;
        while i0 < g.m {
            let rows = super::tile_rows(g.m - i0, ROWS);
            let pf = ahead.take(g.k);
            // SAFETY (all arms): tile indices stay inside the bounds `Gemm::check` verified;
            // `pf` is lines of `ahead` (`Ahead::take`).
            match rows {
                6 => tile::<6>(g, a, b, c, i0, j0, pf),
                5 => tile::<5>(g, a, b, c, i0, j0, pf),
                4 => tile::<4>(g, a, b, c, i0, j0, pf),
                3 => tile::<3>(g, a, b, c, i0, j0, pf),
                2 => tile::<2>(g, a, b, c, i0, j0, pf),
                _ => tile::<1>(g, a, b, c, i0, j0, pf),
            }
            i0 += rows;
        }
        j0 += 16;
    }
    while j0 < g.n {
        let cols = 8.min(g.n - j0);
        let lanes = _mm256_cmpgt_epi32(
            _mm256_set1_epi32(cols as i32),
            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
        );
        let mut i0 = 0;
        while i0 < g.m {
            let rows = TAIL_ROWS.min(g.m - i0);
            // SAFETY (all arms): tile indices stay inside the bounds `Gemm::check` verified,
            // the mask keeps every load and store to columns j0..j0 + cols.
            match rows {
                12 => tile_masked::<12>(g, a, b, c, i0, j0, lanes),
                11 => tile_masked::<11>(g, a, b, c, i0, j0, lanes),
                10 => tile_masked::<10>(g, a, b, c, i0, j0, lanes),
                9 => tile_masked::<9>(g, a, b, c, i0, j0, lanes),
                8 => tile_masked::<8>(g, a, b, c, i0, j0, lanes),
                7 => tile_masked::<7>(g, a, b, c, i0, j0, lanes),
                6 => tile_masked::<6>(g, a, b, c, i0, j0, lanes),
                5 => tile_masked::<5>(g, a, b, c, i0, j0, lanes),
                4 => tile_masked::<4>(g, a, b, c, i0, j0, lanes),
                3 => tile_masked::<3>(g, a, b, c, i0, j0, lanes),
                2 => tile_masked::<2>(g, a, b, c, i0, j0, lanes),
                _ => tile_masked::<1>(g, a, b, c, i0, j0, lanes),
            }
            i0 += rows;
        }
        j0 += cols;
    }
}

/// Rows `i0..i0 + R` x the columns of `j0..j0 + 8` that `lanes` selects: the same chain per
/// element as [`tile`] and the portable kernel (from C or zero, one fused multiply-add per k
/// in order), so the same bits. Masked-off lanes are neither read nor written.
///
/// # Safety
/// As [`gemm`], with rows `i0..i0 + R` and the selected columns inside the checked bounds.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn tile_masked<const R: usize>(
    g: Gemm,
    a: &[f32],
    b: &[f32],
    c: *mut f32,
    i0: usize,
    j0: usize,
    lanes: __m256i,
) {
    let ap = a.as_ptr();
    let bp = b.as_ptr();
    let mut acc = [_mm256_setzero_ps(); R];
    if g.accumulate {
        for (r, acc_r) in acc.iter_mut().enumerate() {
            *acc_r = _mm256_maskload_ps(c.add((i0 + r) * g.ldc + j0), lanes);
        }
    }
    for p in 0..g.k {
        let bv = _mm256_maskload_ps(bp.add(p * g.ldb + j0), lanes);
        for (r, acc_r) in acc.iter_mut().enumerate() {
            let av = _mm256_set1_ps(*ap.add((i0 + r) * g.lda + p));
            *acc_r = _mm256_fmadd_ps(av, bv, *acc_r);
        }
    }
    for (r, acc_r) in acc.iter().enumerate() {
        _mm256_maskstore_ps(c.add((i0 + r) * g.ldc + j0), lanes, *acc_r);
    }
}

/// # Safety
/// As [`gemm`], with rows `i0..i0 + R` and columns `j0..j0 + 16` inside the checked bounds,
/// and `ahead` from [`Ahead::take`] (at most `g.k` lines).
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn tile<const R: usize>(
    g: Gemm,
    a: &[f32],
    b: &[f32],
    c: *mut f32,
    i0: usize,
    j0: usize,
    ahead: (*const f32, usize),
) {
    let ap = a.as_ptr();
    let bp = b.as_ptr();
    let mut acc0 = [_mm256_setzero_ps(); R];
    let mut acc1 = [_mm256_setzero_ps(); R];
    if g.accumulate {
        for r in 0..R {
            let base = c.add((i0 + r) * g.ldc + j0);
            acc0[r] = _mm256_loadu_ps(base);
            acc1[r] = _mm256_loadu_ps(base.add(8));
        }
    }
    for p in 0..g.k {
        Ahead::fetch(ahead, p);
        let brow = bp.add(p * g.ldb + j0);
        let b0 = _mm256_loadu_ps(brow);
        let b1 = _mm256_loadu_ps(brow.add(8));
        for r in 0..R {
            let av = _mm256_set1_ps(*ap.add((i0 + r) * g.lda + p));
            acc0[r] = _mm256_fmadd_ps(av, b0, acc0[r]);
            acc1[r] = _mm256_fmadd_ps(av, b1, acc1[r]);
        }
    }
    for r in 0..R {
        let base = c.add((i0 + r) * g.ldc + j0);
        _mm256_storeu_ps(base, acc0[r]);
        _mm256_storeu_ps(base.add(8), acc1[r]);
    }
}

/// [`super::exp_fast`] on 8 lanes: the same clamp, rounding, reduction and polynomial.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn exp8(x: __m256) -> __m256 {
    let x = _mm256_min_ps(
        _mm256_max_ps(x, _mm256_set1_ps(EXP_LO)),
        _mm256_set1_ps(EXP_HI),
    );
    let n = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(_mm256_mul_ps(
        x,
        _mm256_set1_ps(std::f32::consts::LOG2_E),
    ));
    let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_HI), x);
    let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_LO), r);
    let mut p = _mm256_set1_ps(EXP_POLY[0]);
    for c in &EXP_POLY[1..] {
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(*c));
    }
    let y = _mm256_add_ps(
        _mm256_fmadd_ps(_mm256_mul_ps(p, r), r, r),
        _mm256_set1_ps(1.0),
    );
    let e = _mm256_slli_epi32::<23>(_mm256_add_epi32(
        _mm256_cvtps_epi32(n),
        _mm256_set1_epi32(127),
    ));
    _mm256_mul_ps(y, _mm256_castsi256_ps(e))
}

/// All-ones in the first `len` (< 8) 32-bit lanes: the mask of `_mm256_maskload_ps`.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn tail_mask(len: usize) -> __m256i {
    _mm256_cmpgt_epi32(
        _mm256_set1_epi32(len as i32),
        _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
    )
}

#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn reduce_max(v: __m256) -> f32 {
    let m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    _mm_cvtss_f32(_mm_max_ss(m, _mm_shuffle_ps::<1>(m, m)))
}

/// [`super::fold16`] of 16 partial sums held as lanes 0-7 in `a` and 8-15 in `b`.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn fold(a: __m256, b: __m256) -> f32 {
    let s = _mm256_add_ps(a, b);
    let s = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps::<1>(s));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps::<1>(s, s)))
}

/// [`super::fold16`] of 16 f64 partial sums held 4 per register, in lane order.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn fold_pd(p: [__m256d; 4]) -> f64 {
    let s = _mm256_add_pd(_mm256_add_pd(p[0], p[2]), _mm256_add_pd(p[1], p[3]));
    let s = _mm_add_pd(_mm256_castpd256_pd128(s), _mm256_extractf128_pd::<1>(s));
    _mm_cvtsd_f64(_mm_add_sd(s, _mm_unpackhi_pd(s, s)))
}

/// Softmax of `scale * row[valid]`, zeros outside `valid`: 8 lanes, tails through
/// `maskload` / `maskstore`; the sum over the full 16-blocks in two registers of partials, the
/// tail in order.
///
/// # Safety
/// avx2 and fma are available; `valid` lies inside `row`.
#[target_feature(enable = "avx2,fma")]
unsafe fn softmax_scaled(row: &mut [f32], scale: f32, valid: Range<usize>) {
    row[..valid.start].fill(0.0);
    row[valid.end..].fill(0.0);
    let seg = &mut row[valid];
    let len = seg.len();
    if len == 0 {
        return;
    }
    let p = seg.as_mut_ptr();
    let full8 = len / 8 * 8;
    let rest = len - full8;
    let tail = tail_mask(rest);
    let tail_ps = _mm256_castsi256_ps(tail);
    let sv = _mm256_set1_ps(scale);
    let neg_inf = _mm256_set1_ps(f32::NEG_INFINITY);
    let mut maxv = neg_inf;
    let mut i = 0;
    // SAFETY (all loops): `i + 8 <= full8 <= len` for full vectors; the tail loads and stores
    // only the `rest` lanes that exist (masked lanes are not accessed).
    while i < full8 {
        let v = _mm256_mul_ps(_mm256_loadu_ps(p.add(i)), sv);
        _mm256_storeu_ps(p.add(i), v);
        maxv = _mm256_max_ps(maxv, v);
        i += 8;
    }
    if rest != 0 {
        let v = _mm256_mul_ps(_mm256_maskload_ps(p.add(full8), tail), sv);
        _mm256_maskstore_ps(p.add(full8), tail, v);
        maxv = _mm256_max_ps(maxv, _mm256_blendv_ps(neg_inf, v, tail_ps));
    }
    let maxs = _mm256_set1_ps(reduce_max(maxv));
    let full = len / LANES * LANES;
    let (mut lo, mut hi) = (_mm256_setzero_ps(), _mm256_setzero_ps());
    i = 0;
    while i < full {
        let e0 = exp8(_mm256_sub_ps(_mm256_loadu_ps(p.add(i)), maxs));
        let e1 = exp8(_mm256_sub_ps(_mm256_loadu_ps(p.add(i + 8)), maxs));
        _mm256_storeu_ps(p.add(i), e0);
        _mm256_storeu_ps(p.add(i + 8), e1);
        lo = _mm256_add_ps(lo, e0);
        hi = _mm256_add_ps(hi, e1);
        i += 16;
    }
    while i < full8 {
        let e = exp8(_mm256_sub_ps(_mm256_loadu_ps(p.add(i)), maxs));
        _mm256_storeu_ps(p.add(i), e);
        i += 8;
    }
    if rest != 0 {
        let e = exp8(_mm256_sub_ps(_mm256_maskload_ps(p.add(full8), tail), maxs));
        _mm256_maskstore_ps(p.add(full8), tail, e);
    }
    let sum = seg[full..].iter().fold(fold(lo, hi), |s, &v| s + v);
    let inv = _mm256_set1_ps(1.0 / sum);
    let p = seg.as_mut_ptr();
    i = 0;
    while i < full8 {
        _mm256_storeu_ps(p.add(i), _mm256_mul_ps(_mm256_loadu_ps(p.add(i)), inv));
        i += 8;
    }
    if rest != 0 {
        let v = _mm256_mul_ps(_mm256_maskload_ps(p.add(full8), tail), inv);
        _mm256_maskstore_ps(p.add(full8), tail, v);
    }
}

/// 16 f32 at `p` widened to four vectors of 4 f64, in order.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn widen16(p: *const f32) -> [__m256d; 4] {
    let v0 = _mm256_loadu_ps(p);
    let v1 = _mm256_loadu_ps(p.add(8));
    [
        _mm256_cvtps_pd(_mm256_castps256_ps128(v0)),
        _mm256_cvtps_pd(_mm256_extractf128_ps::<1>(v0)),
        _mm256_cvtps_pd(_mm256_castps256_ps128(v1)),
        _mm256_cvtps_pd(_mm256_extractf128_ps::<1>(v1)),
    ]
}

/// LayerNorm rows: mean and variance over 16 f64 partial sums in four registers, folded, the
/// tail in order; the normalisation 8 wide in the scalar order.
///
/// # Safety
/// avx2 and fma are available; `w` (and `b`) hold at least `d` values, `out` at least
/// `x.len()`.
#[target_feature(enable = "avx2,fma")]
unsafe fn layer_norm(x: &[f32], out: &mut [f32], d: usize, w: &[f32], b: Option<&[f32]>, eps: f32) {
    let full = d / LANES * LANES;
    let full8 = d / 8 * 8;
    for (row, orow) in x.chunks_exact(d).zip(out.chunks_exact_mut(d)) {
        let rp = row.as_ptr();
        // SAFETY (all loads and stores): offsets below `full <= full8 <= d` in `d`-long rows
        // of `x`, `out`, `w` and `b`.
        let mut s = [_mm256_setzero_pd(); 4];
        let mut i = 0;
        while i < full {
            for (acc, v) in s.iter_mut().zip(widen16(rp.add(i))) {
                *acc = _mm256_add_pd(*acc, v);
            }
            i += 16;
        }
        let mean = add_f64(fold_pd(s), &row[full..]) / d as f64;
        let mv = _mm256_set1_pd(mean);
        let mut q = [_mm256_setzero_pd(); 4];
        i = 0;
        while i < full {
            for (acc, v) in q.iter_mut().zip(widen16(rp.add(i))) {
                let t = _mm256_sub_pd(v, mv);
                *acc = _mm256_add_pd(*acc, _mm256_mul_pd(t, t));
            }
            i += 16;
        }
        let var = add_sq_dev_f64(fold_pd(q), &row[full..], mean);
        let rstd = layer_norm_rstd(var, d, eps);
        let mean = mean as f32;
        let (mf, rf) = (_mm256_set1_ps(mean), _mm256_set1_ps(rstd));
        let op = orow.as_mut_ptr();
        i = 0;
        while i < full8 {
            // The scalar order: ((x - mean) * rstd) * w (+ b).
            let v = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(rp.add(i)), mf), rf);
            let mut v = _mm256_mul_ps(v, _mm256_loadu_ps(w.as_ptr().add(i)));
            if let Some(b) = b {
                v = _mm256_add_ps(v, _mm256_loadu_ps(b.as_ptr().add(i)));
            }
            _mm256_storeu_ps(op.add(i), v);
            i += 8;
        }
        normalize_from(full8, row, orow, mean, rstd, w, b);
    }
}

/// GeGLU 8 wide: [`super::erf_as`] (A&S 7.1.26 with [`exp8`]) in the scalar order.
///
/// # Safety
/// avx2 and fma are available; `z` holds at least `2 * out.len()` values.
#[target_feature(enable = "avx2,fma")]
unsafe fn geglu(z: &[f32], out: &mut [f32]) {
    let f = out.len();
    let (a, g) = z.split_at(f);
    let full = f / 8 * 8;
    let one = _mm256_set1_ps(1.0);
    let half = _mm256_set1_ps(0.5);
    let sign = _mm256_set1_ps(-0.0);
    let mut i = 0;
    while i < full {
        // SAFETY: `i + 8 <= full <= f` and `a`, `g`, `out` hold at least `f` elements.
        let x = _mm256_loadu_ps(a.as_ptr().add(i));
        let gate = _mm256_loadu_ps(g.as_ptr().add(i));
        let u = _mm256_mul_ps(x, _mm256_set1_ps(std::f32::consts::FRAC_1_SQRT_2));
        let au = _mm256_andnot_ps(sign, u);
        let t = _mm256_div_ps(one, _mm256_fmadd_ps(_mm256_set1_ps(ERF_P), au, one));
        let mut r = _mm256_set1_ps(ERF_POLY[0]);
        for c in &ERF_POLY[1..] {
            r = _mm256_fmadd_ps(r, t, _mm256_set1_ps(*c));
        }
        r = _mm256_mul_ps(r, t);
        let neg_sq = _mm256_xor_ps(_mm256_mul_ps(au, au), sign);
        let y = _mm256_fnmadd_ps(r, exp8(neg_sq), one);
        // copysign(y, u): y's magnitude bits, u's sign bit.
        let erf = _mm256_or_ps(_mm256_andnot_ps(sign, y), _mm256_and_ps(u, sign));
        let gelu = _mm256_mul_ps(_mm256_mul_ps(half, x), _mm256_add_ps(one, erf));
        _mm256_storeu_ps(out.as_mut_ptr().add(i), _mm256_mul_ps(gelu, gate));
        i += 8;
    }
    for j in full..f {
        out[j] = geglu_one(a[j], g[j]);
    }
}

/// The transpose of a block (see [`super::transpose`]): 8 x 8 tiles through registers, the
/// row and column edges through the portable loop.
///
/// # Safety
/// avx2 is available; the block's elements lie inside `src` and `dst`.
#[target_feature(enable = "avx2,fma")]
unsafe fn transpose(
    src: &[f32],
    lds: usize,
    rows: usize,
    cols: usize,
    dst: &mut [f32],
    ldd: usize,
) {
    let (full_r, full_c) = (rows / 8 * 8, cols / 8 * 8);
    let (sp, dp) = (src.as_ptr(), dst.as_mut_ptr());
    for r0 in (0..full_r).step_by(8) {
        for c0 in (0..full_c).step_by(8) {
            // SAFETY: rows r0..r0 + 8 and columns c0..c0 + 8 lie inside the block.
            let mut v = [_mm256_setzero_ps(); 8];
            for (i, vi) in v.iter_mut().enumerate() {
                *vi = _mm256_loadu_ps(sp.add((r0 + i) * lds + c0));
            }
            let t = transpose8(v);
            for (j, tj) in t.iter().enumerate() {
                _mm256_storeu_ps(dp.add((c0 + j) * ldd + r0), *tj);
            }
        }
    }
    super::scalar::transpose_edges(src, lds, rows, cols, dst, ldd, (full_r, full_c));
}

/// 8 rows of 8 lanes transposed: lane `j` of row `i` becomes lane `i` of row `j`.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn transpose8(r: [__m256; 8]) -> [__m256; 8] {
    // Per 128-bit half (columns 0..3, 4..7): pairs of rows interleaved, then quads, so that
    // u[4g + c] holds column c (low half) and 4 + c (high half) of rows 4g..4g + 3.
    let mut u = [_mm256_setzero_ps(); 8];
    for g in 0..2 {
        let t0 = _mm256_unpacklo_ps(r[4 * g], r[4 * g + 1]);
        let t1 = _mm256_unpackhi_ps(r[4 * g], r[4 * g + 1]);
        let t2 = _mm256_unpacklo_ps(r[4 * g + 2], r[4 * g + 3]);
        let t3 = _mm256_unpackhi_ps(r[4 * g + 2], r[4 * g + 3]);
        u[4 * g] = _mm256_shuffle_ps::<0x44>(t0, t2);
        u[4 * g + 1] = _mm256_shuffle_ps::<0xEE>(t0, t2);
        u[4 * g + 2] = _mm256_shuffle_ps::<0x44>(t1, t3);
        u[4 * g + 3] = _mm256_shuffle_ps::<0xEE>(t1, t3);
    }
    // Output row c: the low halves of u[c] (rows 0..3) and u[4 + c] (rows 4..7); row 4 + c
    // their high halves.
    let mut out = [_mm256_setzero_ps(); 8];
    for c in 0..4 {
        out[c] = _mm256_permute2f128_ps::<0x20>(u[c], u[4 + c]);
        out[4 + c] = _mm256_permute2f128_ps::<0x31>(u[c], u[4 + c]);
    }
    out
}
