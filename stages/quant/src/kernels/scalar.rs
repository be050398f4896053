//! The portable path, always built: the activation quantizer, the per-block integer dots and
//! the f32 sums that define every other path's bits (see the parent module). LLVM vectorizes
//! the fixed-size block loops for whatever the target has (the wasm32 build runs this path).

use super::ActQuant;
use super::{grow, ActBuffers, ActRow, Weights};
use crate::q8::QK8_0;

/// Rounds half away from zero like `f32::round`, without the libm call that `round` becomes
/// on baseline x86_64 (no SSE4.1), which made activation quantization the bottleneck.
/// Exact for |v| < 2^31; larger values and NaN give something huge or 0, which the callers
/// clamp.
#[inline]
pub(crate) fn round_away(v: f32) -> f32 {
    let t = v.abs();
    let i = t as i32 as f32; // truncation, saturating
    let r = if t - i >= 0.5 { i + 1.0 } else { i };
    r.copysign(v)
}

/// Quantizes one activation row (outlier channels already zeroed) into Q8_0 blocks with an
/// f32 scale, plus the residual pass for Q8x2. For Q8x2 the stored scale is `d / 128`.
pub(crate) fn quantize_act_row(
    x: &[f32],
    q: &mut [i8],
    r: &mut [i8],
    scales: &mut [f32],
    mode: ActQuant,
) {
    for (((xb, qb), rb), s) in x
        .chunks_exact(QK8_0)
        .zip(q.chunks_exact_mut(QK8_0))
        .zip(r.chunks_exact_mut(QK8_0))
        .zip(scales.iter_mut())
    {
        let amax = xb.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let d = amax / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        match mode {
            ActQuant::Q8 => {
                for (qv, &v) in qb.iter_mut().zip(xb) {
                    *qv = round_away(v * id).clamp(-127.0, 127.0) as i8;
                }
                *s = d;
            }
            ActQuant::Q8x2 => {
                let id128 = id * 128.0;
                for ((qv, rv), &v) in qb.iter_mut().zip(rb.iter_mut()).zip(xb) {
                    let qf = round_away(v * id).clamp(-127.0, 127.0);
                    *qv = qf as i8;
                    *rv = round_away((v - d * qf) * id128).clamp(-127.0, 127.0) as i8;
                }
                *s = d / 128.0;
            }
        }
    }
}

#[inline]
fn dot_i8(x: &[i8], w: &[i8]) -> i32 {
    x.iter()
        .zip(w)
        .map(|(&a, &b)| i32::from(a) * i32::from(b))
        .sum()
}

/// `128 * dot(q, w) + dot(r, w)` in one pass: `128 * q + r` fits an i16 (|q| <= 127,
/// |r| <= 127 gives at most 16383), which lets LLVM use 16-bit multiply-adds.
#[inline]
fn dot_x2(q: &[i8; 32], r: &[i8; 32], w: &[i8; 32]) -> i32 {
    q.iter()
        .zip(r)
        .zip(w)
        .map(|((&a, &b), &c)| i32::from(i16::from(a) * 128 + i16::from(b)) * i32::from(c))
        .sum()
}

/// The int32 dot product of every block of `act` with the weight row `w`: the integers every
/// path computes (a test yardstick).
#[cfg(test)]
pub(crate) fn block_dots(act: ActRow<'_>, w: &[i8], out: &mut [i32]) {
    let nb = act.scales.len();
    assert!(act.q.len() == nb * 32 && w.len() == nb * 32 && out.len() == nb);
    assert!(act.r.is_none_or(|r| r.len() == nb * 32));
    for (b, o) in out.iter_mut().enumerate() {
        let s = b * 32..(b + 1) * 32;
        let dq = dot_i8(&act.q[s.clone()], &w[s.clone()]);
        *o = match act.r {
            None => dq,
            Some(r) => 128 * dq + dot_i8(&r[s.clone()], &w[s]),
        };
    }
}

/// `out[j] = sum_b (scales[j * nb + b] * act.scales[b]) * idot(act, row j, block b)` for every
/// weight row `j` of `qs` (`out.len()` rows of `k = 32 * nb` bytes), the blocks in order.
///
/// Panics if the slice lengths disagree (internal invariants).
pub(crate) fn dot_rows(act: ActRow<'_>, qs: &[i8], scales: &[f32], out: &mut [f32]) {
    let nb = act.scales.len();
    let k = nb * 32;
    assert!(act.q.len() == k && act.r.is_none_or(|r| r.len() == k));
    assert!(qs.len() == out.len() * k && scales.len() == out.len() * nb);
    // Fixed-size blocks and one loop per mode, so that LLVM unrolls and vectorizes the
    // 32-element dot products.
    let block = |v: &[i8], b: usize| -> [i8; 32] {
        let mut a = [0i8; 32];
        a.copy_from_slice(&v[b * 32..(b + 1) * 32]);
        a
    };
    for (j, o) in out.iter_mut().enumerate() {
        let w = &qs[j * k..(j + 1) * k];
        let ws = &scales[j * nb..(j + 1) * nb];
        let mut acc = 0.0f32;
        match act.r {
            None => {
                for (b, (&w_scale, &x_scale)) in ws.iter().zip(act.scales).enumerate() {
                    let idot = dot_i8(&block(act.q, b), &block(w, b));
                    acc += (w_scale * x_scale) * idot as f32;
                }
            }
            Some(r) => {
                for (b, (&w_scale, &x_scale)) in ws.iter().zip(act.scales).enumerate() {
                    let idot = dot_x2(&block(act.q, b), &block(r, b), &block(w, b));
                    acc += (w_scale * x_scale) * idot as f32;
                }
            }
        }
        *o = acc;
    }
}

/// `y += x[o] * w_exact[:, o]` for every outlier `o`, one after the other (`x`: one
/// activation row, `y`: its output row).
fn add_outliers(w: &Weights<'_>, x: &[f32], y: &mut [f32]) {
    if w.rows == 0 {
        return;
    }
    for (&c, col) in w.outliers.iter().zip(w.outlier_cols.chunks_exact(w.rows)) {
        let xo = x[c as usize];
        for (yv, &wv) in y.iter_mut().zip(col) {
            *yv += xo * wv;
        }
    }
}

/// The scalar path of [`super::matmul`]: per activation row, the outlier channels zeroed in a
/// copy, [`quantize_act_row`], [`dot_rows`], then the outlier terms.
pub(super) fn matmul(
    w: &Weights<'_>,
    x: &[f32],
    n: usize,
    out: &mut [f32],
    mode: ActQuant,
    bufs: &mut ActBuffers,
) {
    matmul_with(w, x, n, out, mode, bufs, dot_rows)
}

/// [`matmul`] with another implementation of [`dot_rows`] (the NEON paths: the same integers
/// and f32 steps, vector instructions for the integer dots).
pub(super) fn matmul_with(
    w: &Weights<'_>,
    x: &[f32],
    n: usize,
    out: &mut [f32],
    mode: ActQuant,
    bufs: &mut ActBuffers,
    dot_rows: impl Fn(ActRow<'_>, &[i8], &[f32], &mut [f32]),
) {
    let (rows, k) = (w.rows, w.k);
    let nb = k / QK8_0;
    grow(&mut bufs.row, k, 0.0);
    grow(&mut bufs.q, k, 0);
    grow(&mut bufs.r, k, 0);
    grow(&mut bufs.scales, nb, 0.0);
    let (row, q, r, scales) = (
        &mut bufs.row[..k],
        &mut bufs.q[..k],
        &mut bufs.r[..k],
        &mut bufs.scales[..nb],
    );
    for i in 0..n {
        let xi = &x[i * k..(i + 1) * k];
        // Without outliers the row is quantized in place, no copy needed.
        let src = if w.outliers.is_empty() {
            xi
        } else {
            row.copy_from_slice(xi);
            for &o in w.outliers {
                row[o as usize] = 0.0;
            }
            &*row
        };
        quantize_act_row(src, q, r, scales, mode);
        let act = ActRow {
            q,
            r: (mode == ActQuant::Q8x2).then_some(&*r),
            scales,
        };
        let out_row = &mut out[i * rows..(i + 1) * rows];
        dot_rows(act, w.qs, w.scales, out_row);
        add_outliers(w, xi, out_row);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_dots_reach_the_extremes_exactly() {
        // w = -128 (possible in a foreign Q8_0 file) against q = +-127 and r = +-127: the
        // largest block dots there are, computed by hand, and the f32 row sums of them.
        for nb in [1usize, 3, 8] {
            let k = nb * 32;
            let mut w = super::super::test_bytes(k, nb as u64, -128, 127);
            w[..32].fill(-128);
            let q: Vec<i8> = (0..k).map(|i| if i < 32 { -127 } else { 5 }).collect();
            let r: Vec<i8> = (0..k).map(|i| if i < 32 { -127 } else { -3 }).collect();
            let scales = vec![1.0f32; nb];
            for resid in [None, Some(r.as_slice())] {
                let act = ActRow {
                    q: &q,
                    r: resid,
                    scales: &scales,
                };
                let mut got = vec![0i32; nb];
                block_dots(act, &w, &mut got);
                let want0 = match resid {
                    None => 32 * 127 * 128,
                    Some(_) => 32 * (128 * 127 * 128 + 127 * 128),
                };
                assert_eq!(got[0], want0);
                let mut row = [0f32];
                dot_rows(act, &w, &scales, &mut row);
                let sum = got.iter().fold(0f32, |a, &d| a + d as f32);
                assert_eq!(row[0].to_bits(), sum.to_bits(), "nb {nb}");
            }
        }
    }
}
