//! The aarch64 paths: the portable quantizer and f32 steps (so the activations, their scales
//! and every rounding are the scalar path's by construction), with the per-block integer dots
//! in NEON, 4 weight rows per pass so that each activation block is loaded once for 4 rows.
//!
//! - [`KernelPath::NeonDot`]: `sdot` (the dot-product extension, `FEAT_DotProd`, detected at
//!   run time): 16 products a vector, each 4-byte group summed into one int32 lane.
//! - [`KernelPath::Neon`]: base NEON, `smull` (i8 x i8 -> i16, exact: |w q| <= 128 * 127)
//!   and `sadalp` (pairs of i16 added into int32 lanes), for CPUs without `sdot` (Cortex-A53,
//!   A72, the Raspberry Pi 3 and 4).
//!
//! Either way the block's int32 is exact, so `acc = acc + (w_scale * x_scale) * idot` gets the
//! same operands in the same order as on every other path.

use std::arch::aarch64::*;
use std::arch::asm;

use super::scalar;
use super::{ActBuffers, ActQuant, ActRow, KernelPath, Weights};

/// The NEON paths of [`super::matmul`] (the lengths checked there): `dot` chooses `sdot`.
///
/// Panics if `dot` is set and the CPU lacks the dot-product extension (the callers check the
/// path first).
pub(super) fn matmul(
    w: &Weights<'_>,
    x: &[f32],
    n: usize,
    out: &mut [f32],
    mode: ActQuant,
    bufs: &mut ActBuffers,
    dot: bool,
) {
    if dot {
        assert!(KernelPath::NeonDot.is_available(), "sdot not available");
        scalar::matmul_with(w, x, n, out, mode, bufs, dot_rows::<true>);
    } else {
        scalar::matmul_with(w, x, n, out, mode, bufs, dot_rows::<false>);
    }
}

/// [`scalar::dot_rows`] with NEON integer dots (`sdot` where `SDOT`): 4 rows at a time, then
/// one at a time.
///
/// Panics if the slice lengths disagree (internal invariants), or, with `SDOT`, if the CPU
/// lacks the dot-product extension.
fn dot_rows<const SDOT: bool>(act: ActRow<'_>, qs: &[i8], scales: &[f32], out: &mut [f32]) {
    let nb = act.scales.len();
    let k = nb * 32;
    assert!(act.q.len() == k && act.r.is_none_or(|r| r.len() == k));
    assert!(qs.len() == out.len() * k && scales.len() == out.len() * nb);
    assert!(!SDOT || KernelPath::NeonDot.is_available());
    let rows = out.len();
    let mut j = 0;
    while j < rows {
        let take = if rows - j >= 4 { 4 } else { 1 };
        // SAFETY: rows `j..j + take` of `qs` and `scales` exist (`take <= rows - j` and the
        // lengths asserted above); `act` holds `k` values (and residuals) and `nb` scales; with
        // `SDOT` the dot-product extension was checked above.
        unsafe {
            if take == 4 {
                rows_n::<4, SDOT>(act, qs, scales, j, nb, &mut out[j..j + 4]);
            } else {
                rows_n::<1, SDOT>(act, qs, scales, j, nb, &mut out[j..j + 1]);
            }
        }
        j += take;
    }
}

/// The outputs of the `R` weight rows from `j0`: per block, one int32 per row (`128 dq + dr`
/// for Q8x2), then the scalar path's f32 step per row.
///
/// # Safety
/// Rows `j0..j0 + R` of `qs` (`k = 32 nb` bytes each) and of `scales` (`nb` each) exist;
/// `act` holds `k` values (and residuals) and `nb` scales; with `SDOT` the CPU has the
/// dot-product extension.
#[inline(always)]
unsafe fn rows_n<const R: usize, const SDOT: bool>(
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
        // SAFETY: block `b < nb` of the activation row and of rows `j0..j0 + R` (the caller's
        // bounds); the dot-product extension as the caller guarantees.
        let idots: [i32; R] = unsafe {
            let aq = act.q.as_ptr().add(b * 32);
            let q = [vld1q_s8(aq), vld1q_s8(aq.add(16))];
            let r = act.r.map(|r| {
                let ar = r.as_ptr().add(b * 32);
                [vld1q_s8(ar), vld1q_s8(ar.add(16))]
            });
            std::array::from_fn(|i| {
                let wp = qs.as_ptr().add((j0 + i) * k + b * 32);
                let wv = [vld1q_s8(wp), vld1q_s8(wp.add(16))];
                let dq = dot32::<SDOT>(q, wv);
                match r {
                    None => dq,
                    // Exact in int32: |dq| <= 32 * 127 * 128.
                    Some(r) => 128 * dq + dot32::<SDOT>(r, wv),
                }
            })
        };
        for (i, (a, idot)) in acc.iter_mut().zip(idots).enumerate() {
            let w_scale = scales[(j0 + i) * nb + b];
            // The scalar path's step: multiply, multiply, add (no FMA).
            *a += (w_scale * act.scales[b]) * idot as f32;
        }
    }
    out.copy_from_slice(&acc);
}

/// The exact int32 dot product of 32 int8 activations with 32 int8 weights.
///
/// # Safety
/// With `SDOT`, the CPU has the dot-product extension.
#[inline(always)]
unsafe fn dot32<const SDOT: bool>(a: [int8x16_t; 2], w: [int8x16_t; 2]) -> i32 {
    // SAFETY: NEON is part of the aarch64 base architecture; `sdot` as the caller guarantees.
    unsafe {
        let s = if SDOT {
            sdot(sdot(vdupq_n_s32(0), a[0], w[0]), a[1], w[1])
        } else {
            let mut s = vdupq_n_s32(0);
            for (av, wv) in a.into_iter().zip(w) {
                s = vpadalq_s16(s, vmull_s8(vget_low_s8(av), vget_low_s8(wv)));
                s = vpadalq_s16(s, vmull_high_s8(av, wv));
            }
            s
        };
        vaddvq_s32(s)
    }
}

/// `sdot`: each int32 lane of `acc` plus the dot product of the 4 bytes of `a` and `b` in that
/// lane. Inline assembly because the `vdotq_s32` intrinsic is not stable Rust yet.
///
/// # Safety
/// The CPU has the dot-product extension.
#[inline]
#[target_feature(enable = "dotprod")]
unsafe fn sdot(mut acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
    // SAFETY: `sdot` exists on this CPU (the caller's contract) and only reads and writes the
    // three vector registers named here.
    unsafe {
        asm!(
            "sdot {acc:v}.4s, {a:v}.16b, {b:v}.16b",
            acc = inout(vreg) acc,
            a = in(vreg) a,
            b = in(vreg) b,
            options(pure, nomem, nostack, preserves_flags),
        );
    }
    acc
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both NEON dots against the scalar block dots on every extreme (w = -128 against
    /// q = r = +-127) and random blocks, in both modes, and the row sums bit for bit.
    #[test]
    fn neon_block_dots_equal_the_scalar_ones() {
        for nb in [1usize, 2, 5] {
            let k = nb * 32;
            let rows = 9;
            let mut w = super::super::test_bytes(rows * k, nb as u64, -128, 127);
            w[..32].fill(-128);
            let mut q = super::super::test_bytes(k, 3 + nb as u64, -127, 127);
            let mut r = super::super::test_bytes(k, 5 + nb as u64, -127, 127);
            q[..32].fill(-127);
            r[..32].fill(-127);
            let xs: Vec<f32> = (0..nb).map(|b| 0.013 * (b as f32 + 1.0)).collect();
            let ws: Vec<f32> = (0..rows * nb).map(|i| 0.007 * (i as f32 - 20.0)).collect();
            for resid in [None, Some(r.as_slice())] {
                let act = ActRow {
                    q: &q,
                    r: resid,
                    scales: &xs,
                };
                let mut want = vec![0f32; rows];
                scalar::dot_rows(act, &w, &ws, &mut want);
                let mut plain = vec![1f32; rows];
                dot_rows::<false>(act, &w, &ws, &mut plain);
                let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                assert_eq!(
                    bits(&plain),
                    bits(&want),
                    "smull nb {nb} {:?}",
                    resid.is_some()
                );
                if KernelPath::NeonDot.is_available() {
                    let mut dot = vec![1f32; rows];
                    dot_rows::<true>(act, &w, &ws, &mut dot);
                    assert_eq!(
                        bits(&dot),
                        bits(&want),
                        "sdot nb {nb} {:?}",
                        resid.is_some()
                    );
                }
                // The first block's integer reaches the extreme the scalar dots compute.
                let mut d = vec![0i32; nb];
                scalar::block_dots(act, &w[..k], &mut d);
                let want0 = match resid {
                    None => 32 * 127 * 128,
                    Some(_) => 32 * (128 * 127 * 128 + 127 * 128),
                };
                assert_eq!(d[0], want0);
            }
        }
    }
}
