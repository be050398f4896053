//! The WebAssembly SIMD128 path (a module compiled with `-C target-feature=+simd128`): the
//! portable quantizer and f32 steps (so the activations, their scales and every rounding are
//! the scalar path's by construction), with the per-block integer dots in SIMD128, 4 weight
//! rows per pass so that each activation block is widened once for 4 rows.
//!
//! A block's 32 activations and 32 weights are widened to i16 (`i16x8.extend_*_i8x16_s`;
//! Q8x2 activations as `128 q + r`, |a| <= 16383, as on AVX2) and multiplied with
//! `i32x4.dot_i16x8_s` (the `vpmaddwd` of WebAssembly: pairs of i16 products summed into int32
//! lanes, exact: |a w| <= 16383 * 128). The lanes are added in int32, so the block's integer is
//! exact and `acc = acc + (w_scale * x_scale) * idot` gets the same operands in the same order
//! as on every other path.

use core::arch::wasm32::*;

use super::scalar;
use super::{ActBuffers, ActQuant, ActRow, Weights};

/// The SIMD128 path of [`super::matmul`] (the lengths checked there).
pub(super) fn matmul(
    w: &Weights<'_>,
    x: &[f32],
    n: usize,
    out: &mut [f32],
    mode: ActQuant,
    bufs: &mut ActBuffers,
) {
    scalar::matmul_with(w, x, n, out, mode, bufs, dot_rows);
}

/// 16 int8 values from `v[at..at + 16]`.
///
/// Panics if `v` is shorter than `at + 16`.
#[inline(always)]
fn load16(v: &[i8], at: usize) -> v128 {
    let b = &v[at..at + 16];
    // SAFETY: `b` is 16 readable bytes (the slice above is bounds-checked); `v128_load` reads
    // 16 bytes with no alignment requirement.
    unsafe { v128_load(b.as_ptr().cast::<v128>()) }
}

/// A block of 32 int8 values widened to four i16x8 vectors, in order.
#[inline(always)]
fn widen(v: &[i8], at: usize) -> [v128; 4] {
    let (a, b) = (load16(v, at), load16(v, at + 16));
    [
        i16x8_extend_low_i8x16(a),
        i16x8_extend_high_i8x16(a),
        i16x8_extend_low_i8x16(b),
        i16x8_extend_high_i8x16(b),
    ]
}

/// The exact int32 dot product of 32 activations and 32 weights, both as i16.
#[inline(always)]
fn dot32(a: &[v128; 4], w: &[v128; 4]) -> i32 {
    let mut s = i32x4_dot_i16x8(a[0], w[0]);
    for i in 1..4 {
        s = i32x4_add(s, i32x4_dot_i16x8(a[i], w[i]));
    }
    i32x4_extract_lane::<0>(s)
        + i32x4_extract_lane::<1>(s)
        + i32x4_extract_lane::<2>(s)
        + i32x4_extract_lane::<3>(s)
}

/// [`scalar::dot_rows`] with SIMD128 integer dots: 4 rows at a time, then one at a time.
///
/// Panics if the slice lengths disagree (internal invariants).
fn dot_rows(act: ActRow<'_>, qs: &[i8], scales: &[f32], out: &mut [f32]) {
    let nb = act.scales.len();
    let k = nb * 32;
    assert!(act.q.len() == k && act.r.is_none_or(|r| r.len() == k));
    assert!(qs.len() == out.len() * k && scales.len() == out.len() * nb);
    let rows = out.len();
    let mut j = 0;
    while j < rows {
        if rows - j >= 4 {
            rows_n::<4>(act, qs, scales, j, nb, &mut out[j..j + 4]);
            j += 4;
        } else {
            rows_n::<1>(act, qs, scales, j, nb, &mut out[j..j + 1]);
            j += 1;
        }
    }
}

/// The outputs of the `R` weight rows from `j0`: per block, one int32 per row (`128 dq + dr`
/// for Q8x2, as one i16 product), then the scalar path's f32 step per row.
#[inline(always)]
fn rows_n<const R: usize>(
    act: ActRow<'_>,
    qs: &[i8],
    scales: &[f32],
    j0: usize,
    nb: usize,
    out: &mut [f32],
) {
    let k = nb * 32;
    let mut acc = [0f32; R];
    for b in 0..nb {
        let mut a = widen(act.q, b * 32);
        if let Some(r) = act.r {
            // 128 q + r: exact in i16 (|q|, |r| <= 127 gives at most 16383).
            let rw = widen(r, b * 32);
            for (av, rv) in a.iter_mut().zip(rw) {
                *av = i16x8_add(i16x8_shl(*av, 7), rv);
            }
        }
        for (i, a_out) in acc.iter_mut().enumerate() {
            let wv = widen(qs, (j0 + i) * k + b * 32);
            let idot = dot32(&a, &wv);
            let w_scale = scales[(j0 + i) * nb + b];
            // The scalar path's step: multiply, multiply, add (no FMA).
            *a_out += (w_scale * act.scales[b]) * idot as f32;
        }
    }
    out.copy_from_slice(&acc);
}
