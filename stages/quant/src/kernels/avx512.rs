//! The AVX-512 VNNI path: weights repacked into groups of 16 rows (one int32 lane per row),
//! activations quantized 16 blocks at a time straight from the unmasked input, all tokens of a
//! call at once, and the outlier channels fused into the end of each tile.
//!
//! - Q8: [`Packed16`] weights against activations biased to unsigned bytes (`q ^ 0x80`), 8
//!   `vpdpbusd` a block, started from `-128 * sum(w)` to undo the bias ([`dot_packed`]).
//! - Q8x2: [`Packed16W`] weights (i16) against each value's two passes as one i16
//!   `128 q + r`, one `vpdpwssd` chain of 16 links a block where two `dpbusd` chains would
//!   need 16 instructions plus a shift, an add and the bias correction ([`dot_packed_x2`]).
//!
//! Every output is summed in the scalar path's order with its roundings (no FMA), so the
//! results equal it bit for bit.

use std::arch::x86_64::*;

use super::ActQuant;
use super::{grow, ActBuffers, KernelPath, OutlierTerms, Packed16, Packed16W, Weights, BELOW_HALF};

/// The AVX-512 VNNI path of [`super::matmul`] (the lengths checked there).
///
/// Panics if the CPU lacks AVX-512 F/BW/VNNI (the callers check the path first).
pub(super) fn matmul(
    w: &Weights<'_>,
    x: &[f32],
    n: usize,
    out: &mut [f32],
    mode: ActQuant,
    bufs: &mut ActBuffers,
) {
    let (rows, k) = (w.rows, w.k);
    let nb = k / 32;
    grow(&mut bufs.scales, n * nb, 0.0);
    let xs = &mut bufs.scales[..n * nb];
    let outl = w.outlier_terms(x);
    match mode {
        ActQuant::Q8x2 => {
            let p = w.packed16w();
            // Room to start the values on a 64-byte boundary.
            grow(&mut bufs.a, n * k + 32, 0);
            // Every block of 32 values (64 bytes) on its own cache line: the quantizer's
            // 64-byte stores split across two lines otherwise (a Vec<i16> is only 16-aligned),
            // about 5% of its time (118 x 128 values: 3.1 against 3.0 µs).
            let off = bufs.a.as_ptr().align_offset(64).min(32);
            let a = &mut bufs.a[off..off + n * k];
            // Quantized straight from `x` as for Q8 below, each value's two passes stored as
            // one i16 `128 q + r` for the single `vpdpwssd` chain.
            if n > 0 && nb > 0 {
                quantize_rows_x2_wide_avx512(x, w.zero_masks, nb, a, xs);
            }
            dot_packed_x2(p, rows, nb, a, xs, outl, n, out);
        }
        ActQuant::Q8 => {
            let p = w.packed16();
            grow(&mut bufs.q, n * k, 0);
            grow(&mut bufs.r, n * k, 0);
            let (q, r) = (&mut bufs.q[..n * k], &mut bufs.r[..n * k]);
            // Quantized straight from `x`, outlier channels read as 0, bytes biased to
            // unsigned for `dpbusd` (q + 128 == q ^ 0x80): what copying each row, zeroing the
            // outliers, quantizing and biasing gave, in one pass over all rows.
            if n > 0 && nb > 0 {
                quantize_rows_biased_avx512(x, w.zero_masks, nb, q, r, xs, false);
            }
            // SAFETY: i8 and u8 have the same size and alignment, and every bit pattern is
            // valid for both.
            let uq = unsafe { std::slice::from_raw_parts(q.as_ptr().cast::<u8>(), q.len()) };
            dot_packed(p, rows, nb, (uq, None, xs), outl, n, out);
        }
    }
}

/// `out[i * rows + j] = sum_b (w_scale[j, b] * x_scale[i, b]) * idot(i, j, b)`, plus the
/// outlier terms, for all `n`
/// activation rows at once, on the AVX-512 VNNI path. `uq` (and `ur` for Q8x2) hold the
/// quantized activations biased to unsigned (`q + 128`, i.e. `q ^ 0x80`), `n x 32 * nb`
/// bytes; `x_scales` is `n x nb`.
///
/// Panics if the lengths disagree or the CPU lacks AVX-512 VNNI: internal invariants that
/// [`crate::Q8Matrix::matmul`] establishes before calling.
pub(super) fn dot_packed(
    packed: &Packed16,
    rows: usize,
    nb: usize,
    act: (&[u8], Option<&[u8]>, &[f32]),
    outl: OutlierTerms<'_>,
    n: usize,
    out: &mut [f32],
) {
    let (uq, ur, x_scales) = act;
    let k = nb * 32;
    assert!(outl.x.len() == n * k && outl.cols.len() == outl.channels.len() * rows);
    assert!(outl.channels.iter().all(|&c| (c as usize) < k));
    assert!(uq.len() == n * k && ur.is_none_or(|r| r.len() == n * k));
    assert!(x_scales.len() == n * nb && out.len() == n * rows);
    assert!(packed.fits(rows, nb));
    assert!(
        KernelPath::Avx512Vnni.is_available(),
        "AVX-512 VNNI not available"
    );
    // SAFETY: features checked just above; the asserts pin every length the kernel indexes.
    unsafe { dot_packed_avx512(packed, rows, nb, (uq, ur, x_scales), outl, n, out) }
}

/// [`dot_packed`] for Q8x2 activations given as `a = 128 q + r` (i16, `n x 32 * nb`, from
/// [`quantize_rows_x2_wide_avx512`]) against [`Packed16W`] weights, on the AVX-512 VNNI path:
/// the same integers, hence the same outputs bit for bit.
///
/// Panics if the lengths disagree or the CPU lacks AVX-512 VNNI: internal invariants that
/// [`crate::Q8Matrix::matmul`] establishes before calling.
#[allow(clippy::too_many_arguments)]
pub(super) fn dot_packed_x2(
    packed: &Packed16W,
    rows: usize,
    nb: usize,
    a: &[i16],
    x_scales: &[f32],
    outl: OutlierTerms<'_>,
    n: usize,
    out: &mut [f32],
) {
    let k = nb * 32;
    assert!(outl.x.len() == n * k && outl.cols.len() == outl.channels.len() * rows);
    assert!(outl.channels.iter().all(|&c| (c as usize) < k));
    assert!(a.len() == n * k && x_scales.len() == n * nb && out.len() == n * rows);
    assert!(packed.fits(rows, nb));
    assert!(
        KernelPath::Avx512Vnni.is_available(),
        "AVX-512 VNNI not available"
    );
    // SAFETY: features checked just above; the asserts pin every length the kernel indexes.
    unsafe { dot_packed_x2_avx512(packed, rows, nb, a, x_scales, outl, n, out) }
}

/// Vectorized twin of [`super::scalar::quantize_act_row`] (same operations in the same order
/// per value, so bit-identical results for finite input) on one row. `x2` selects the Q8x2
/// residual pass.
///
/// Panics unless `x`, `q`, `r` are `32 * scales.len()` long and the CPU has AVX-512 F/BW.
#[cfg(test)]
pub(crate) fn quantize_row_avx512(
    x: &[f32],
    q: &mut [i8],
    r: &mut [i8],
    scales: &mut [f32],
    x2: bool,
) {
    let k = scales.len() * 32;
    assert!(x.len() == k && q.len() == k && r.len() == k);
    assert!(
        KernelPath::Avx512Vnni.is_available(),
        "AVX-512 not available"
    );
    // SAFETY: features checked just above (Avx512Vnni implies F and BW); lengths asserted.
    unsafe { quantize_rows_avx512::<false, false>(x, &[], scales.len(), q, r, &mut [], scales, x2) }
}

/// The AVX-512 quantizer's rounding of `v` (16 lanes) to -127..=127, half away from zero,
/// as i32: through the float path of the Q8x2 values and the truncating one of the others
/// (both, for the test to compare with `round_away`).
///
/// Panics unless the CPU has AVX-512 F.
#[cfg(test)]
pub(crate) fn round_clamp_avx512(v: &[f32; 16]) -> ([i32; 16], [i32; 16]) {
    assert!(
        KernelPath::Avx512Vnni.is_available(),
        "AVX-512 not available"
    );
    // SAFETY: the feature was checked just above; the arrays hold 16 lanes each.
    unsafe { round_clamp_lanes(v) }
}

/// [`quantize_row_avx512`] on `scales.len() / nb` rows of `nb` blocks at once, straight from
/// the unmasked activations, for the packed kernel: the lanes set in `zero[b]` (block `b` of
/// every row: the outlier channels) are read as 0.0, exactly as if the rows had been copied
/// with those channels zeroed, and the bytes are stored biased to unsigned (`q ^ 0x80`, i.e.
/// `q + 128`). One pass instead of copy, quantize and bias, and the blocks go 16 at a time:
/// their maxima, the two divisions of the scale and its inverse, then the values, so that no
/// block waits on the divisions of the one before (at k = 64, two blocks a row, that wait was
/// most of the quantizer's time).
///
/// Panics unless `x`, `q`, `r` are `32 * scales.len()` long, `nb > 0` divides `scales.len()`,
/// `zero` is empty (no outliers) or `nb` long, and the CPU has AVX-512 F/BW.
pub(crate) fn quantize_rows_biased_avx512(
    x: &[f32],
    zero: &[u32],
    nb: usize,
    q: &mut [i8],
    r: &mut [i8],
    scales: &mut [f32],
    x2: bool,
) {
    let k = scales.len() * 32;
    assert!(x.len() == k && q.len() == k && r.len() == k);
    assert!(nb > 0 && scales.len().is_multiple_of(nb));
    assert!(zero.is_empty() || zero.len() == nb);
    assert!(
        KernelPath::Avx512Vnni.is_available(),
        "AVX-512 not available"
    );
    // SAFETY: features checked just above (Avx512Vnni implies F and BW); lengths asserted.
    unsafe { quantize_rows_avx512::<true, false>(x, zero, nb, q, r, &mut [], scales, x2) }
}

/// [`quantize_rows_biased_avx512`] for Q8x2, storing each value's pair as one i16
/// `a = 128 q + r` (`a`: `32 * scales.len()` values, the layout [`dot_packed_x2`] reads)
/// instead of the two biased bytes; `q`, `r` and the stored scales are the same.
///
/// Panics unless `x` and `a` are `32 * scales.len()` long, `nb > 0` divides `scales.len()`,
/// `zero` is empty (no outliers) or `nb` long, and the CPU has AVX-512 F/BW.
pub(crate) fn quantize_rows_x2_wide_avx512(
    x: &[f32],
    zero: &[u32],
    nb: usize,
    a: &mut [i16],
    scales: &mut [f32],
) {
    let k = scales.len() * 32;
    assert!(x.len() == k && a.len() == k);
    assert!(nb > 0 && scales.len().is_multiple_of(nb));
    assert!(zero.is_empty() || zero.len() == nb);
    assert!(
        KernelPath::Avx512Vnni.is_available(),
        "AVX-512 not available"
    );
    // SAFETY: features checked just above (Avx512Vnni implies F and BW); lengths asserted
    // (the byte outputs are not touched by the wide variant).
    unsafe { quantize_rows_avx512::<true, true>(x, zero, nb, &mut [], &mut [], a, scales, true) }
}

/// [`super::scalar::round_away`] lane-wise, clamped to -127..=127, short of its final
/// truncation: `min(|v| + 0.49999997, 127)` with the sign of `v`, which truncated toward
/// zero (`cvtt`, [`round_clamp_512`]) is `round_away(v)` clamped for every non-NaN `v`.
/// That `trunc(|v| + 0.49999997)` rounds half away from zero holds for every f32 (checked
/// for all of them up to 2^25; above, both sides exceed 127): the sum is exact except
/// where it carries into the next binade, and there its rounding cannot reach the next
/// integer (with 0.5 itself, 0.49999997 would round to 1). Three operations fewer than
/// truncating, comparing the fraction with 0.5 and adding 1.
#[target_feature(enable = "avx512f")]
fn round_clamp_untruncated_512(v: __m512) -> __m512 {
    let t = _mm512_add_ps(
        _mm512_abs_ps(v),
        _mm512_castsi512_ps(_mm512_set1_epi32(BELOW_HALF as i32)),
    );
    with_sign_512(_mm512_min_ps(t, _mm512_set1_ps(127.0)), v)
}

/// f32 rounding half away from zero, then clamped to -127..=127: `round_away` of
/// the scalar path lane-wise, as a float (see [`round_clamp_untruncated_512`]).
#[target_feature(enable = "avx512f")]
fn round_clamp_512(v: __m512) -> __m512 {
    let t = _mm512_add_ps(
        _mm512_abs_ps(v),
        _mm512_castsi512_ps(_mm512_set1_epi32(BELOW_HALF as i32)),
    );
    // 0x0B: round toward zero, suppress the precision exception.
    let r = _mm512_roundscale_ps::<0x0B>(_mm512_min_ps(t, _mm512_set1_ps(127.0)));
    with_sign_512(r, v)
}

/// `r` (>= 0) with the sign bit of `v`.
#[target_feature(enable = "avx512f")]
fn with_sign_512(r: __m512, v: __m512) -> __m512 {
    let sign = _mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32(i32::MIN));
    _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(r), sign))
}

/// # Safety
/// The CPU must support AVX-512 F.
#[cfg(test)]
#[target_feature(enable = "avx512f")]
unsafe fn round_clamp_lanes(v: &[f32; 16]) -> ([i32; 16], [i32; 16]) {
    let (mut a, mut b) = ([0i32; 16], [0i32; 16]);
    // SAFETY: 16 floats in, 16 i32 out, each array 64 bytes.
    unsafe {
        let x = _mm512_loadu_ps(v.as_ptr());
        let fa = _mm512_cvttps_epi32(round_clamp_512(x));
        let fb = _mm512_cvttps_epi32(round_clamp_untruncated_512(x));
        _mm512_storeu_si512(a.as_mut_ptr().cast(), fa);
        _mm512_storeu_si512(b.as_mut_ptr().cast(), fb);
    }
    (a, b)
}

/// Lane `t` of the result is lane `4 * (t % 4) + t / 4` of the input: the order of
/// [`amax16`]'s reduction tree and of [`pack64`]'s saturating packs, undone.
#[target_feature(enable = "avx512f")]
fn transpose_lanes_idx() -> __m512i {
    _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15)
}

/// Lane `j` of the result: the largest lane of `m[j]` (all lanes >= 0 or NaN). A tree of
/// 15 shuffle-and-max steps instead of 16 horizontal reductions; the maximum of finite
/// values does not depend on the order it is taken in.
#[target_feature(enable = "avx512f")]
fn amax16(m: &[__m512; 16]) -> __m512 {
    let mut c = [_mm512_setzero_ps(); 8];
    for (i, ci) in c.iter_mut().enumerate() {
        let (a, b) = (m[2 * i], m[2 * i + 1]);
        *ci = _mm512_max_ps(
            _mm512_shuffle_f32x4::<0x44>(a, b),
            _mm512_shuffle_f32x4::<0xEE>(a, b),
        );
    }
    let mut f = [_mm512_setzero_ps(); 4];
    for (i, fi) in f.iter_mut().enumerate() {
        let (a, b) = (c[2 * i], c[2 * i + 1]);
        *fi = _mm512_max_ps(
            _mm512_shuffle_f32x4::<0x88>(a, b),
            _mm512_shuffle_f32x4::<0xDD>(a, b),
        );
    }
    let g = [
        _mm512_max_ps(
            _mm512_shuffle_ps::<0x44>(f[0], f[1]),
            _mm512_shuffle_ps::<0xEE>(f[0], f[1]),
        ),
        _mm512_max_ps(
            _mm512_shuffle_ps::<0x44>(f[2], f[3]),
            _mm512_shuffle_ps::<0xEE>(f[2], f[3]),
        ),
    ];
    let h = _mm512_max_ps(
        _mm512_shuffle_ps::<0x88>(g[0], g[1]),
        _mm512_shuffle_ps::<0xDD>(g[0], g[1]),
    );
    _mm512_permutexvar_ps(transpose_lanes_idx(), h)
}

/// The 64 bytes of four 16-lane i32 vectors (values in -127..=127, so the saturating
/// packs are exact), in order, xor `flip`: what four `vpmovdb` give, in 4 instructions.
#[target_feature(enable = "avx512f,avx512bw")]
fn pack64(v: [__m512i; 4], flip: __m512i) -> __m512i {
    let b = _mm512_packs_epi16(
        _mm512_packs_epi32(v[0], v[1]),
        _mm512_packs_epi32(v[2], v[3]),
    );
    _mm512_xor_si512(_mm512_permutexvar_epi32(transpose_lanes_idx(), b), flip)
}

/// # Safety
/// The CPU must support AVX-512 F/BW; lengths as asserted by
/// `quantize_rows_biased_avx512` (rows of `nb` blocks). `BIASED`: store `q ^ 0x80`
/// (and `r ^ 0x80`) and read the lanes of `zero[b]` as 0.0 (`zero` empty: none). `WIDE`
/// (with `x2`): store `128 q + r` into `a` (as long as `x`) and leave `q`, `r` (then
/// empty) alone.
#[target_feature(enable = "avx512f,avx512bw")]
#[allow(clippy::too_many_arguments)]
unsafe fn quantize_rows_avx512<const BIASED: bool, const WIDE: bool>(
    x: &[f32],
    zero: &[u32],
    nb: usize,
    q: &mut [i8],
    r: &mut [i8],
    a: &mut [i16],
    scales: &mut [f32],
    x2: bool,
) {
    let x2 = x2 || WIDE;
    // The 64-bit units of `packs_epi32(lo, hi)` back in order: lo's 16 values, hi's 16.
    let unpack16 = _mm512_set_epi64(7, 5, 3, 1, 6, 4, 2, 0);
    let flip8 = if BIASED { i8::MIN } else { 0 };
    let (flip, flip64) = (_mm_set1_epi8(flip8), _mm512_set1_epi8(flip8));
    let blocks = scales.len();
    // Where nb divides 16 (k = 32 to 512), every chunk of 16 blocks starts a row: one
    // pattern of lane masks serves them all (4-5% of the quantizer's time at k = 64-256).
    let periodic = nb > 0 && 16 % nb == 0;
    let mut keep16 = [!0u32; 16];
    if periodic {
        for (j, kj) in keep16.iter_mut().enumerate() {
            *kj = !zero.get(j % nb).copied().unwrap_or(0);
        }
    }
    /// A chunk of up to 16 blocks ready for its values: its first block and block count,
    /// each block's lanes to read (outlier lanes clear), `d`, `1 / d` and `128 / d`.
    struct Chunk {
        c0: usize,
        cnt: usize,
        keep: [u32; 16],
        ds: [f32; 16],
        ids: [f32; 16],
        id128s: [f32; 16],
        /// Whether a block's `1 / d` is infinite (a subnormal `d`): then a 0.0 value gives
        /// `0 * inf = NaN`, which must round to 0 as in the scalar code.
        inf_id: bool,
    }
    // Block c0 + j's two halves, the lanes clear in keep[j] (outliers) read as 0.
    let load_at = |keep: &[u32; 16], c0: usize, j: usize| {
        // SAFETY: every caller passes a block c0 + j < blocks of x (32 floats each),
        // which lies inside x (32 * blocks long); the masked-off lanes are not read.
        unsafe {
            let p = x.as_ptr().add((c0 + j) * 32);
            [
                _mm512_maskz_loadu_ps(keep[j] as u16, p),
                _mm512_maskz_loadu_ps((keep[j] >> 16) as u16, p.add(16)),
            ]
        }
    };
    // The chunk from block c0: its maxima and divisions, its scales stored. `b`: block of
    // a row (the outlier lanes' index) of block c0, advanced past the chunk.
    let mut prep = |c0: usize, b: &mut usize| -> Chunk {
        let cnt = (blocks - c0).min(16);
        let mut keep = keep16;
        if !periodic {
            for kj in keep.iter_mut().take(cnt) {
                *kj = !zero.get(*b).copied().unwrap_or(0);
                *b = if *b + 1 == nb { 0 } else { *b + 1 };
            }
        }
        let mut m = [_mm512_setzero_ps(); 16];
        for (j, mj) in m.iter_mut().enumerate().take(cnt) {
            let v = load_at(&keep, c0, j);
            *mj = _mm512_max_ps(_mm512_abs_ps(v[0]), _mm512_abs_ps(v[1]));
        }
        // Per block, as the scalar quantizer: d = amax / 127, id = 1 / d (0 where d is
        // 0), the Q8x2 residual's id * 128, the stored scale d (or d / 128): the same
        // IEEE operations, 16 lanes at once.
        let amax = amax16(&m);
        let d = _mm512_div_ps(amax, _mm512_set1_ps(127.0));
        let nonzero = _mm512_cmp_ps_mask::<_CMP_NEQ_UQ>(d, _mm512_setzero_ps());
        let id = _mm512_maskz_div_ps(nonzero, _mm512_set1_ps(1.0), d);
        let id128 = _mm512_mul_ps(id, _mm512_set1_ps(128.0));
        let sc = if x2 {
            _mm512_div_ps(d, _mm512_set1_ps(128.0))
        } else {
            d
        };
        let lanes: __mmask16 = if cnt == 16 { 0xFFFF } else { (1 << cnt) - 1 };
        let mut ch = Chunk {
            c0,
            cnt,
            keep,
            ds: [0.0; 16],
            ids: [0.0; 16],
            id128s: [0.0; 16],
            inf_id: _mm512_cmp_ps_mask::<_CMP_EQ_OQ>(id, _mm512_set1_ps(f32::INFINITY)) != 0,
        };
        // SAFETY: scales c0..c0 + cnt exist (the mask covers cnt lanes, and c0 + cnt <=
        // blocks); the arrays hold 16 floats.
        unsafe {
            _mm512_mask_storeu_ps(scales.as_mut_ptr().add(c0), lanes, sc);
            _mm512_storeu_ps(ch.ds.as_mut_ptr(), d);
            _mm512_storeu_ps(ch.ids.as_mut_ptr(), id);
            _mm512_storeu_ps(ch.id128s.as_mut_ptr(), id128);
        }
        ch
    };
    let mut b = 0;
    // The chunk whose values come next.
    let mut next = (blocks > 0).then(|| prep(0, &mut b));
    while let Some(ch) = next.take() {
        // The next chunk's maxima and divisions go first, so that they run alongside
        // this chunk's values (which otherwise wait on their own chunk's divisions).
        let c_next = ch.c0 + ch.cnt;
        next = (c_next < blocks).then(|| prep(c_next, &mut b));
        let (c0, cnt) = (ch.c0, ch.cnt);
        let (keep, ds, ids, id128s) = (&ch.keep, &ch.ds, &ch.ids, &ch.id128s);
        let load = |j: usize| load_at(keep, c0, j);
        // Block j's values: (q, r) as i32, 16 lanes per half.
        let inf_id = ch.inf_id;
        let values = |j: usize| {
            let v = load(j);
            let (idv, dv, i128v) = (
                _mm512_set1_ps(ids[j]),
                _mm512_set1_ps(ds[j]),
                _mm512_set1_ps(id128s[j]),
            );
            let mut qi = [_mm512_setzero_si512(); 2];
            let mut ri = [_mm512_setzero_si512(); 2];
            // NaN lanes (`0 * inf`, only in a chunk with an infinite `1 / d`) read as 0.0
            // (the scalar rounding's `NaN as i32`), else `min` would clamp them to 127.
            let not_nan = |u: __m512| {
                if inf_id {
                    _mm512_maskz_mov_ps(_mm512_cmp_ps_mask::<_CMP_ORD_Q>(u, u), u)
                } else {
                    u
                }
            };
            for h in 0..2 {
                let y = not_nan(_mm512_mul_ps(v[h], idv));
                if x2 {
                    // The residual needs q as a float.
                    let qf = round_clamp_512(y);
                    qi[h] = _mm512_cvttps_epi32(qf);
                    let res = _mm512_mul_ps(_mm512_sub_ps(v[h], _mm512_mul_ps(dv, qf)), i128v);
                    ri[h] = _mm512_cvttps_epi32(round_clamp_untruncated_512(not_nan(res)));
                } else {
                    qi[h] = _mm512_cvttps_epi32(round_clamp_untruncated_512(y));
                }
            }
            (qi, ri)
        };
        if WIDE {
            for j in 0..cnt {
                let (qa, ra) = values(j);
                // q and r (in -127..=127: the saturating packs are exact) to i16 in the
                // same lane order, then 128 q + r (|128 q + r| <= 16383: no wrap).
                let (q16, r16) = (
                    _mm512_packs_epi32(qa[0], qa[1]),
                    _mm512_packs_epi32(ra[0], ra[1]),
                );
                let wide = _mm512_add_epi16(_mm512_slli_epi16::<7>(q16), r16);
                let v = _mm512_permutexvar_epi64(unpack16, wide);
                // SAFETY: values (c0 + j) * 32.. + 32 (block c0 + j) lie inside a, which
                // is as long as x.
                unsafe { _mm512_storeu_si512(a.as_mut_ptr().add((c0 + j) * 32).cast(), v) };
            }
            continue;
        }
        let mut j = 0;
        while j + 2 <= cnt {
            let (qa, ra) = values(j);
            let (qb, rb) = values(j + 1);
            let at = (c0 + j) * 32;
            // SAFETY: bytes at..at + 64 (blocks c0 + j, c0 + j + 1) lie inside q and r.
            unsafe {
                let qp = q.as_mut_ptr().add(at).cast();
                _mm512_storeu_si512(qp, pack64([qa[0], qa[1], qb[0], qb[1]], flip64));
                if x2 {
                    let rp = r.as_mut_ptr().add(at).cast();
                    _mm512_storeu_si512(rp, pack64([ra[0], ra[1], rb[0], rb[1]], flip64));
                }
            }
            j += 2;
        }
        if j < cnt {
            let (qa, ra) = values(j);
            for h in 0..2 {
                let at = (c0 + j) * 32 + h * 16;
                let qb = _mm_xor_si128(_mm512_cvtepi32_epi8(qa[h]), flip);
                // SAFETY: bytes at..at + 16 of block c0 + j lie inside q and r.
                unsafe {
                    _mm_storeu_si128(q.as_mut_ptr().add(at).cast(), qb);
                    if x2 {
                        let rb = _mm_xor_si128(_mm512_cvtepi32_epi8(ra[h]), flip);
                        _mm_storeu_si128(r.as_mut_ptr().add(at).cast(), rb);
                    }
                }
            }
        }
    }
}

/// `T` activation rows from `i0` against the 16-row weight group `g` (see `Packed16`):
/// per block, 8 `dpbusd` with 4 activation bytes broadcast, one convert, one FMA.
///
/// # Safety
/// The CPU must support AVX-512 F/BW/VNNI; rows `i0..i0 + T` exist; lengths as asserted
/// by `dot_packed`; `mask` covers only rows `< rows` of the group.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
#[allow(clippy::too_many_arguments)]
unsafe fn packed_tile<const T: usize, const X2: bool>(
    p: &Packed16,
    g: usize,
    nb: usize,
    act: (&[u8], Option<&[u8]>, &[f32]),
    outl: OutlierTerms<'_>,
    i0: usize,
    rows: usize,
    mask: __mmask16,
    out: &mut [f32],
) {
    let (uq, ur, xs) = act;
    let k = nb * 32;
    let ur = ur.unwrap_or(uq);
    let mut acc = [_mm512_setzero_ps(); T];
    for b in 0..nb {
        let base = g * nb + b;
        let mut w = [_mm512_setzero_si512(); 8];
        // SAFETY: group g, block b: 512 bytes, 16 scales, 16 sums inside the packed
        // arrays (g < groups, b < nb).
        let (corr, ws) = unsafe {
            let wp = p.qs.as_ptr().add(base * 512);
            for (c, wv) in w.iter_mut().enumerate() {
                *wv = _mm512_loadu_si512(wp.add(c * 64).cast());
            }
            (
                _mm512_loadu_si512(p.neg_sums.as_ptr().add(base * 16).cast()),
                _mm512_loadu_ps(p.scales.as_ptr().add(base * 16)),
            )
        };
        // One chain of 8 `dpbusd` per token and pass (integer sums: the order changes
        // nothing). With X2 the T tokens' two chains go side by side, the links of a chain
        // 2T instructions apart, so that their latency hides behind each other (token
        // after token left the VNNI pipes waiting at small k); a single pass measured
        // faster token after token, each chain's 8 links in a row.
        let mut dq = [corr; T];
        let mut dr = [corr; T];
        if X2 {
            for (c, wc) in w.iter().enumerate() {
                for t in 0..T {
                    let at = (i0 + t) * k + b * 32 + c * 4;
                    // SAFETY: bytes at..at + 4 of row i0 + t lie inside the activations
                    // and the residuals (block b of a row of k bytes).
                    let (xq, xr) = unsafe {
                        (
                            uq.as_ptr().add(at).cast::<i32>().read_unaligned(),
                            ur.as_ptr().add(at).cast::<i32>().read_unaligned(),
                        )
                    };
                    dq[t] = _mm512_dpbusd_epi32(dq[t], _mm512_set1_epi32(xq), *wc);
                    dr[t] = _mm512_dpbusd_epi32(dr[t], _mm512_set1_epi32(xr), *wc);
                }
            }
        } else {
            for (t, d) in dq.iter_mut().enumerate() {
                let at = (i0 + t) * k + b * 32;
                for (c, wc) in w.iter().enumerate() {
                    // SAFETY: bytes at + 4c..at + 4c + 4 of row i0 + t lie inside the
                    // activations (block b of a row of k bytes).
                    let xq = unsafe { uq.as_ptr().add(at + c * 4).cast::<i32>().read_unaligned() };
                    *d = _mm512_dpbusd_epi32(*d, _mm512_set1_epi32(xq), *wc);
                }
            }
        }
        for (t, a) in acc.iter_mut().enumerate() {
            let idot = if X2 {
                _mm512_add_epi32(_mm512_slli_epi32::<7>(dq[t]), dr[t])
            } else {
                dq[t]
            };
            let s = _mm512_mul_ps(ws, _mm512_set1_ps(xs[(i0 + t) * nb + b]));
            // Multiply, then add (no FMA): the scalar path's rounding and order, so the
            // result is bit-identical to it.
            *a = _mm512_add_ps(*a, _mm512_mul_ps(s, _mm512_cvtepi32_ps(idot)));
        }
    }
    // SAFETY: the caller's guarantees, passed on.
    unsafe { finish_tile(&mut acc, &outl, mask, rows, g, i0, k, out) };
}

/// The end of a packed tile, shared by both kernels: add the outlier columns' terms to the
/// T tokens' accumulators (each column loaded once for the T tokens; per token one after
/// the other, in order: the scalar path's sums), then store the group's rows of each token.
///
/// # Safety
/// The CPU must support AVX-512 F; rows `i0..i0 + T` exist (`out` is n x rows, `outl.x` is
/// n x k); `mask` covers only rows `< rows` of the group `g`.
#[target_feature(enable = "avx512f")]
#[inline]
#[allow(clippy::too_many_arguments)]
unsafe fn finish_tile<const T: usize>(
    acc: &mut [__m512; T],
    outl: &OutlierTerms<'_>,
    mask: __mmask16,
    rows: usize,
    g: usize,
    i0: usize,
    k: usize,
    out: &mut [f32],
) {
    for (o, &c) in outl.channels.iter().enumerate() {
        // SAFETY: the mask limits the load to rows < rows of column o, which lies inside
        // cols (channels.len() x rows).
        let col = unsafe { _mm512_maskz_loadu_ps(mask, outl.cols.as_ptr().add(o * rows + g * 16)) };
        for (t, a) in acc.iter_mut().enumerate() {
            let xo = _mm512_set1_ps(outl.x[(i0 + t) * k + c as usize]);
            *a = _mm512_add_ps(*a, _mm512_mul_ps(xo, col));
        }
    }
    for (t, a) in acc.iter().enumerate() {
        let at = (i0 + t) * rows + g * 16;
        // SAFETY: the mask limits the store to the rows of the group that exist, which lie
        // inside out (row i0 + t < n, out is n x rows).
        unsafe { _mm512_mask_storeu_ps(out.as_mut_ptr().add(at), mask, *a) };
    }
}

/// # Safety
/// The CPU must support AVX-512 F/BW/VNNI; lengths as asserted by `dot_packed`.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn dot_packed_avx512(
    p: &Packed16,
    rows: usize,
    nb: usize,
    act: (&[u8], Option<&[u8]>, &[f32]),
    outl: OutlierTerms<'_>,
    n: usize,
    out: &mut [f32],
) {
    const T: usize = 8;
    for g in 0..rows.div_ceil(16) {
        let lanes = (rows - g * 16).min(16);
        let mask: __mmask16 = if lanes == 16 {
            0xFFFF
        } else {
            (1u16 << lanes) - 1
        };
        let x2 = act.1.is_some();
        let mut i = 0;
        // SAFETY (all calls): tokens i..i + T (or i) < n; as the caller guarantees.
        while i + T <= n {
            unsafe {
                if x2 {
                    packed_tile::<T, true>(p, g, nb, act, outl, i, rows, mask, out);
                } else {
                    packed_tile::<T, false>(p, g, nb, act, outl, i, rows, mask, out);
                }
            }
            i += T;
        }
        while i + 4 <= n {
            unsafe {
                if x2 {
                    packed_tile::<4, true>(p, g, nb, act, outl, i, rows, mask, out);
                } else {
                    packed_tile::<4, false>(p, g, nb, act, outl, i, rows, mask, out);
                }
            }
            i += 4;
        }
        while i < n {
            unsafe {
                if x2 {
                    packed_tile::<1, true>(p, g, nb, act, outl, i, rows, mask, out);
                } else {
                    packed_tile::<1, false>(p, g, nb, act, outl, i, rows, mask, out);
                }
            }
            i += 1;
        }
    }
}

/// `acc + vpdpwssd(w, the two i16 at p broadcast)`, the broadcast folded into the
/// instruction. Inline assembly because LLVM splits `_mm512_dpwssd_epi32` into
/// `vpmaddwd` + `vpaddd` (two operations where one does) for this target, and keeps the
/// broadcast as a separate instruction.
///
/// # Safety
/// The CPU must support AVX-512 F/VNNI; `p` must be valid for reading 4 bytes.
#[target_feature(enable = "avx512f,avx512vnni")]
#[inline]
unsafe fn dpwssd_bcast(acc: __m512i, w: __m512i, p: *const i16) -> __m512i {
    let mut acc = acc;
    // SAFETY: the caller guarantees the CPU features and 4 readable bytes at p (no
    // alignment needed); the instruction writes only `acc` and touches no flags or stack.
    unsafe {
        std::arch::asm!(
            "vpdpwssd {acc}, {w}, dword ptr [{p}]{{1to16}}",
            acc = inout(zmm_reg) acc,
            w = in(zmm_reg) w,
            p = in(reg) p,
            options(pure, readonly, nostack, preserves_flags),
        );
    }
    acc
}

/// `T` activation rows from `i0` against the 16-row group `g` of [`Packed16W`]: per
/// block, 16 `vpdpwssd` (the activation pair broadcast from memory inside the
/// instruction) in `CH` chains per token, one convert, two multiplies and an add.
///
/// # Safety
/// The CPU must support AVX-512 F/BW/VNNI; rows `i0..i0 + T` exist; lengths as asserted
/// by `dot_packed_x2`; `mask` covers only rows `< rows` of the group.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
#[allow(clippy::too_many_arguments)]
unsafe fn packed_tile_x2w<const T: usize, const CH: usize>(
    p: &Packed16W,
    g: usize,
    nb: usize,
    a: &[i16],
    xs: &[f32],
    outl: OutlierTerms<'_>,
    i0: usize,
    rows: usize,
    mask: __mmask16,
    out: &mut [f32],
) {
    let k = nb * 32;
    let mut acc = [_mm512_setzero_ps(); T];
    for b in 0..nb {
        let base = g * nb + b;
        // SAFETY: group g, block b: 512 values and 16 scales inside the packed arrays
        // (g < groups, b < nb).
        let (wp, ws) = unsafe {
            (
                p.qs.as_ptr().add(base * 512),
                _mm512_loadu_ps(p.scales.as_ptr().add(base * 16)),
            )
        };
        // SAFETY: block b of row i0 (32 values) lies inside the activations.
        let ap = unsafe { a.as_ptr().add(i0 * k + b * 32) };
        // Integer sums: the order of the chains and links changes nothing.
        let mut d = [[_mm512_setzero_si512(); T]; CH];
        let mut c = 0;
        while c < 16 {
            for (h, dh) in d.iter_mut().enumerate() {
                // SAFETY: chunk c + h < 16 of the block: 32 values inside it.
                let wc = unsafe { _mm512_loadu_si512(wp.add((c + h) * 32).cast()) };
                for (t, dt) in dh.iter_mut().enumerate() {
                    // SAFETY: values 2 (c + h)..+ 2 of block b of row i0 + t lie inside
                    // the activations (rows of k values).
                    *dt = unsafe { dpwssd_bcast(*dt, wc, ap.add(t * k + (c + h) * 2)) };
                }
            }
            c += CH;
        }
        for (t, acc_t) in acc.iter_mut().enumerate() {
            let mut idot = d[0][t];
            for dc in d.iter().skip(1) {
                idot = _mm512_add_epi32(idot, dc[t]);
            }
            let s = _mm512_mul_ps(ws, _mm512_set1_ps(xs[(i0 + t) * nb + b]));
            // Multiply, then add (no FMA): the scalar path's rounding and order.
            *acc_t = _mm512_add_ps(*acc_t, _mm512_mul_ps(s, _mm512_cvtepi32_ps(idot)));
        }
    }
    // SAFETY: the caller's guarantees, passed on.
    unsafe { finish_tile(&mut acc, &outl, mask, rows, g, i0, k, out) };
}

/// # Safety
/// The CPU must support AVX-512 F/BW/VNNI; lengths as asserted by `dot_packed_x2`.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
#[allow(clippy::too_many_arguments)]
unsafe fn dot_packed_x2_avx512(
    p: &Packed16W,
    rows: usize,
    nb: usize,
    a: &[i16],
    xs: &[f32],
    outl: OutlierTerms<'_>,
    n: usize,
    out: &mut [f32],
) {
    for g in 0..rows.div_ceil(16) {
        let lanes = (rows - g * 16).min(16);
        let mask: __mmask16 = if lanes == 16 {
            0xFFFF
        } else {
            (1u16 << lanes) - 1
        };
        let mut i = 0;
        // SAFETY (all calls): tokens i..i + 12 (or 8) exist; as the caller guarantees.
        if nb <= 2 {
            // k <= 64: tiles of 12 tokens, one chain each (12 chains of 16 links per
            // block, the 24 int32 and f32 accumulators still in registers), 2-4% faster
            // than 8 tokens with two chains each on pico's k = 64 shapes; at k = 128 the
            // same within 1%, so larger k keep the 8-token tiles.
            while i + 12 <= n {
                unsafe { packed_tile_x2w::<12, 1>(p, g, nb, a, xs, outl, i, rows, mask, out) };
                i += 12;
            }
        } else {
            while i + 8 <= n {
                unsafe { packed_tile_x2w::<8, 2>(p, g, nb, a, xs, outl, i, rows, mask, out) };
                i += 8;
            }
        }
        // The last 1-11 tokens in one tile, with enough chains to keep the multiply
        // pipes busy (a 4-token tile and single tokens each left them waiting on a few
        // chains of dependent `vpdpwssd`).
        // SAFETY (all arms): tokens i..n exist; as the caller guarantees.
        unsafe {
            match n - i {
                1 => packed_tile_x2w::<1, 8>(p, g, nb, a, xs, outl, i, rows, mask, out),
                2 => packed_tile_x2w::<2, 8>(p, g, nb, a, xs, outl, i, rows, mask, out),
                3 => packed_tile_x2w::<3, 4>(p, g, nb, a, xs, outl, i, rows, mask, out),
                4 => packed_tile_x2w::<4, 2>(p, g, nb, a, xs, outl, i, rows, mask, out),
                5 => packed_tile_x2w::<5, 2>(p, g, nb, a, xs, outl, i, rows, mask, out),
                6 => packed_tile_x2w::<6, 2>(p, g, nb, a, xs, outl, i, rows, mask, out),
                7 => packed_tile_x2w::<7, 2>(p, g, nb, a, xs, outl, i, rows, mask, out),
                8 => packed_tile_x2w::<8, 2>(p, g, nb, a, xs, outl, i, rows, mask, out),
                9 => packed_tile_x2w::<9, 1>(p, g, nb, a, xs, outl, i, rows, mask, out),
                10 => packed_tile_x2w::<10, 1>(p, g, nb, a, xs, outl, i, rows, mask, out),
                11 => packed_tile_x2w::<11, 1>(p, g, nb, a, xs, outl, i, rows, mask, out),
                _ => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::scalar::block_dots;

    #[test]
    fn packed_block_dots_equal_scalar_bit_for_bit() {
        if !KernelPath::Avx512Vnni.is_available() {
            return; // nothing to compare on this CPU; the scalar path is tested elsewhere
        }
        let (n, nb, rows) = (6usize, 3usize, 21usize); // a tile of 4 + 2 single tokens, 2 groups
        let k = nb * 32;
        let mut w = crate::kernels::test_bytes(rows * k, 11, -128, 127);
        w[0] = -128;
        w[5 * k + 7] = -128;
        let mut q = crate::kernels::test_bytes(n * k, 12, -127, 127);
        q[0] = -127;
        q[1] = 127;
        let r = crate::kernels::test_bytes(n * k, 13, -127, 127);
        let packed = Packed16::new(&w, &vec![1.0; rows * nb], rows, k);
        let biased = |v: &[i8]| -> Vec<u8> { v.iter().map(|&b| (b as u8) ^ 0x80).collect() };
        let (uq, ur) = (biased(&q), biased(&r));
        for resid in [false, true] {
            for b in 0..nb {
                let xs: Vec<f32> = (0..n * nb)
                    .map(|i| if i % nb == b { 1.0 } else { 0.0 })
                    .collect();
                let mut got = vec![0f32; n * rows];
                let act = (&uq[..], resid.then_some(&ur[..]), &xs[..]);
                let no_outliers = OutlierTerms {
                    channels: &[],
                    cols: &[],
                    x: &vec![0.0; n * k],
                };
                dot_packed(&packed, rows, nb, act, no_outliers, n, &mut got);
                let one = vec![1.0f32; nb];
                for i in 0..n {
                    let act_row = crate::kernels::ActRow {
                        q: &q[i * k..(i + 1) * k],
                        r: resid.then(|| &r[i * k..(i + 1) * k]),
                        scales: &one,
                    };
                    for j in 0..rows {
                        let mut want = vec![0i32; nb];
                        block_dots(act_row, &w[j * k..(j + 1) * k], &mut want);
                        assert_eq!(
                            got[i * rows + j],
                            want[b] as f32,
                            "token {i} row {j} block {b}"
                        );
                    }
                }
            }
        }
    }
}
