//! The AVX-VNNI path (AVX2 + FMA + AVX-VNNI, the 256-bit VEX `vpdpbusd` / `vpdpwssd`): the
//! AVX2 path's quantizer and tiles (`tiles_256!` of `avx2`), one VNNI instruction per chunk
//! where AVX2 needs a multiply and an add.
//!
//! - Q8: [`Packed8`] weights (bytes, 8 rows per vector) against activations biased to
//!   unsigned bytes (`q ^ 0x80`), one `vpdpbusd` per 32 products, each block's chain started
//!   from `-128 * sum(w)` to undo the bias (`dot(q + 128, w) - 128 sum(w) = dot(q, w)`).
//! - Q8x2: [`Packed8W`] weights (i16) against `128 q + r` (i16), one `vpdpwssd` per 16
//!   products: the integer of Q8x2's two passes in one chain.

use std::arch::x86_64::*;

use super::avx2::{prefetch, quantize_biased, quantize_wide, tiles_256};
use super::ActQuant;
use super::{ActBuffers, KernelPath, OutlierTerms, Packed8, Packed8W, Weights};

/// The AVX-VNNI path of [`super::matmul`] (the lengths checked there).
///
/// Panics if the CPU lacks AVX2, FMA and AVX-VNNI (the callers check the path first).
pub(super) fn matmul(
    w: &Weights<'_>,
    x: &[f32],
    n: usize,
    out: &mut [f32],
    mode: ActQuant,
    bufs: &mut ActBuffers,
) {
    assert!(KernelPath::AvxVnni.is_available(), "AVX-VNNI not available");
    let (rows, k) = (w.rows, w.k);
    let nb = k / 32;
    let outl = w.outlier_terms(x);
    match mode {
        ActQuant::Q8 => {
            let p = w.packed8();
            prefetch(&p.qs[..(2 * nb * 256).min(p.qs.len())]);
            let (q, xs) = quantize_biased(w, x, n, bufs);
            assert!(p.fits(rows, nb) && q.len() == n * k && xs.len() == n * nb);
            // SAFETY: the CPU features were checked above; the asserts here and in
            // `super::matmul` pin every length the kernel indexes.
            unsafe { dot_bytes(p, rows, nb, q, xs, &outl, n, out) }
        }
        ActQuant::Q8x2 => {
            let p = w.packed8w();
            prefetch(&p.qs[..(2 * nb * 256).min(p.qs.len())]);
            let (a, xs) = quantize_wide(w, x, n, mode, bufs);
            assert!(p.fits(rows, nb) && a.len() == n * k && xs.len() == n * nb);
            // SAFETY: as above.
            unsafe { dot_wide(p, rows, nb, a, xs, &outl, n, out) }
        }
    }
}

/// `-128 * sum(w)` of each row's block: the correction of the biased activations.
#[inline]
#[target_feature(enable = "avx2")]
fn init_neg_sums(p: &Packed8, base: usize) -> __m256i {
    let s = &p.neg_sums[base * 8..base * 8 + 8];
    // SAFETY: s holds 8 i32 (32 bytes).
    unsafe { _mm256_loadu_si256(s.as_ptr().cast()) }
}

/// Zero: the i16 chains start empty.
#[inline]
#[target_feature(enable = "avx2")]
fn init_zero(_: &Packed8W, _: usize) -> __m256i {
    _mm256_setzero_si256()
}

/// `vpdpbusd`: 4 unsigned activation bytes (broadcast) times each row's 4 weights, added to
/// its int32.
#[inline]
#[target_feature(enable = "avx2,avxvnni")]
fn step_dpbusd(acc: __m256i, x: __m256i, w: __m256i) -> __m256i {
    _mm256_dpbusd_avx_epi32(acc, x, w)
}

/// `vpdpwssd`: 2 i16 activations (broadcast) times each row's 2 weights, added to its int32.
/// (LLVM emits `vpmaddwd` + `vpaddd` for it in some of the tiles, by its cost model for the
/// target; forcing `vpdpwssd` everywhere with inline assembly measured the same.)
#[inline]
#[target_feature(enable = "avx2,avxvnni")]
fn step_dpwssd(acc: __m256i, x: __m256i, w: __m256i) -> __m256i {
    _mm256_dpwssd_avx_epi32(acc, x, w)
}

tiles_256! {
    tile: tile_bytes,
    driver: dot_bytes,
    features: "avx2,fma,avxvnni",
    packed: Packed8,
    act: u8,
    chunks: 8,
    init: init_neg_sums,
    step: step_dpbusd,
    groups: 2,
    group_tails: [1],
    tokens: 4,
    tails: [1, 2, 3],
}

tiles_256! {
    tile: tile_wide,
    driver: dot_wide,
    features: "avx2,fma,avxvnni",
    packed: Packed8W,
    act: i16,
    chunks: 16,
    init: init_zero,
    step: step_dpwssd,
    groups: 2,
    group_tails: [1],
    tokens: 4,
    tails: [1, 2, 3],
}
