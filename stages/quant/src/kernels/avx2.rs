//! The AVX2 path (AVX2 + FMA, no VNNI), also the base of the AVX-VNNI path.
//!
//! Without VNNI, the cheapest exact int8 product is `vpmaddwd` on i16: `vpmaddubsw` takes one
//! unsigned operand, so signed x signed needs a sign trick per product (`vpsignb`) and a
//! second `vpmaddwd` to widen its i16 pairs: as many multiply-pipe instructions per product
//! as `vpmaddwd` on i16, plus the `vpsignb` (17% slower per product on Zen 5,
//! `bench/avx2_pipes.sh`); `vpmaddwd` of i16 weights with i16 activations does 16 products in
//! one, and its accumulating add can go to another pipe. So both activation modes run one kernel:
//! [`Packed8W`] weights (i16, 8 rows per vector) against the activations as i16, `q` for Q8
//! and `128 q + r` for Q8x2 (|128 q + r| <= 16383: the pair sums of `vpmaddwd` cannot
//! overflow, and the int32 block dot is the integer of Q8x2's two passes). Q8 saves the
//! residual pass of the quantizer only.
//! (With one operand at 7 bits, `vpmaddubsw` could not saturate and would need no sign
//! trick: about 1.3x faster products on an Intel core, at 1.8-2.9x q8-fast's largest golden
//! error and outside ggml's Q8_0; measured, not adopted: "What narrower int8 operands would
//! buy" in bench/results/same-answers-on-every-cpu-every-path-at-one-arithmetic-per-i.md.
//! Exact 8-bit `vpmaddubsw` with each weight chunk stored in its four sign variants, picked
//! per token by the activations' signs, takes 12% off the chunk loop but loads weights per
//! token: no faster in the engine, not adopted: "Exact 8-bit products through `vpmaddubsw`",
//! same file.)
//!
//! - [`quantize_rows`]: the activation quantizer, 8 blocks at a time straight from the input
//!   (outlier lanes read as 0.0), storing i16 values ([`Packed8W`]'s kernels) or biased bytes
//!   (the AVX-VNNI Q8 kernel).
//! - `tiles_256!`: the tile kernels of the 256-bit paths, `G` groups of 8 rows against `T`
//!   tokens, each weight vector loaded once for the `T` tokens and each token's activation
//!   pair broadcast once for the `G` groups; per block one int32 chain per group and token,
//!   then the scalar path's f32 steps (`s = w_scale * x_scale`, `acc = acc + s * idot`: no
//!   FMA), the outlier columns added in order at the end of the tile. 2 groups x 4 tokens
//!   (8 chains, 12 of the 16 vector registers with the weights and the broadcast) measured
//!   fastest of 1-3 groups x 3-12 tokens on the nano and micro shapes, by 2-10%.
//!
//! The ceiling: with `vpmaddwd` + `vpaddd` per 16 products this core runs 1.44x the products
//! of 256-bit FMA (register-only loops: 67 against 47 G multiply-adds a second). Independent
//! adds take another port for free, but each `vpaddd` that waits on its `vpmaddwd`, as in the
//! tile, makes the chunk loop 1.16-1.19x slower than the products alone (no other tile shape
//! measured does better: `bench/avx2_pipes.sh`, its second table); the per-block f32 steps,
//! the quantizer and the outlier terms leave the kernel 1.2-1.3x the f32 path's weight
//! products.

use std::arch::x86_64::*;

use super::ActQuant;
use super::{grow, ActBuffers, KernelPath, OutlierTerms, Packed8W, Weights, BELOW_HALF};

/// The AVX2 path of [`super::matmul`] (the lengths checked there).
///
/// Panics if the CPU lacks AVX2 and FMA (the callers check the path first).
pub(super) fn matmul(
    w: &Weights<'_>,
    x: &[f32],
    n: usize,
    out: &mut [f32],
    mode: ActQuant,
    bufs: &mut ActBuffers,
) {
    assert!(KernelPath::Avx2.is_available(), "AVX2 not available");
    let (rows, k) = (w.rows, w.k);
    let nb = k / 32;
    let p = w.packed8w();
    // The first groups' weights (the tiles fetch the later ones) load while the quantizer runs.
    prefetch(&p.qs[..(2 * nb * 256).min(p.qs.len())]);
    let (a, xs) = quantize_wide(w, x, n, mode, bufs);
    assert!(p.fits(rows, nb) && a.len() == n * k && xs.len() == n * nb);
    // SAFETY: AVX2 and FMA were checked above; the asserts here and in `super::matmul` pin
    // every length the kernel indexes (`x`: n x k, `out`: n x rows, the outlier columns).
    unsafe { dot_wide(p, rows, nb, a, xs, &w.outlier_terms(x), n, out) }
}

/// Asks for every cache line of `s` (a hint: no fault, no effect on results).
pub(super) fn prefetch<T>(s: &[T]) {
    let mut ahead = Prefetch::new(s, 1);
    ahead.step();
}

/// The cache lines of a row group's weights asked for a few at a time, one [`Prefetch::step`]
/// before each of the previous group's token tiles. A layer's weights are cold when its
/// product starts (the rest of the model went through the cache since); fetched this way
/// they arrive while the group before them runs, instead of stalling its first tile. Hints
/// only: a prefetch never faults and changes no result.
pub(super) struct Prefetch {
    base: *const i8,
    lines: usize,
    per_step: usize,
    done: usize,
}

impl Prefetch {
    /// The lines of `next`, spread over `steps` steps.
    pub(super) fn new<T>(next: &[T], steps: usize) -> Prefetch {
        let lines = std::mem::size_of_val(next).div_ceil(64);
        Prefetch {
            base: next.as_ptr().cast(),
            lines,
            per_step: lines.div_ceil(steps.max(1)),
            done: 0,
        }
    }

    /// Asks for the next few lines.
    #[inline]
    pub(super) fn step(&mut self) {
        let end = (self.done + self.per_step).min(self.lines);
        for line in self.done..end {
            // SAFETY: SSE is part of every x86-64 CPU, and a prefetch never faults whatever
            // the address (these lie inside the slice given to `new`).
            unsafe { _mm_prefetch::<_MM_HINT_T0>(self.base.wrapping_add(line * 64)) };
        }
        self.done = end;
    }
}

/// Quantizes `x` (`n x k`) into `bufs` for the i16 kernels: `q` (Q8) or `128 q + r` (Q8x2)
/// per value, and one scale per block; returns `(values, scales)`. Also the AVX-VNNI Q8x2
/// path's quantizer.
///
/// Panics if the CPU lacks AVX2 or the lengths disagree (internal invariants).
pub(super) fn quantize_wide<'b>(
    w: &Weights<'_>,
    x: &[f32],
    n: usize,
    mode: ActQuant,
    bufs: &'b mut ActBuffers,
) -> (&'b [i16], &'b [f32]) {
    let k = w.k;
    let nb = k / 32;
    grow(&mut bufs.a, n * k, 0);
    grow(&mut bufs.scales, n * nb, 0.0);
    let (a, xs) = (&mut bufs.a[..n * k], &mut bufs.scales[..n * nb]);
    assert!(x.len() == n * k && (w.zero_masks.is_empty() || w.zero_masks.len() == nb));
    assert!(KernelPath::Avx2.is_available(), "AVX2 not available");
    if nb > 0 {
        let x2 = mode == ActQuant::Q8x2;
        // SAFETY: AVX2 was checked just above; x and a hold n x k values, xs n x nb scales,
        // the zero masks one per block of a row (or none).
        unsafe { quantize_rows::<true>(x, w.zero_masks, nb, x2, a, &mut [], xs) };
    }
    (a, xs)
}

/// Quantizes `x` (`n x k`) into `bufs` as Q8 bytes biased to unsigned (`q ^ 0x80`, i.e.
/// `q + 128`) for the AVX-VNNI `dpbusd` kernel; returns `(bytes, scales)`.
///
/// Panics if the CPU lacks AVX2 or the lengths disagree (internal invariants).
pub(super) fn quantize_biased<'b>(
    w: &Weights<'_>,
    x: &[f32],
    n: usize,
    bufs: &'b mut ActBuffers,
) -> (&'b [u8], &'b [f32]) {
    let k = w.k;
    let nb = k / 32;
    grow(&mut bufs.q, n * k, 0);
    grow(&mut bufs.scales, n * nb, 0.0);
    let (q, xs) = (&mut bufs.q[..n * k], &mut bufs.scales[..n * nb]);
    // SAFETY: i8 and u8 have the same size and alignment, and every bit pattern is valid for
    // both; the new slice takes over the exclusive borrow of `q` (same pointer and length).
    let q = unsafe { std::slice::from_raw_parts_mut(q.as_mut_ptr().cast::<u8>(), q.len()) };
    assert!(x.len() == n * k && (w.zero_masks.is_empty() || w.zero_masks.len() == nb));
    assert!(KernelPath::Avx2.is_available(), "AVX2 not available");
    if nb > 0 {
        // SAFETY: AVX2 was checked just above; x and q hold n x k values, xs n x nb scales,
        // the zero masks one per block of a row (or none).
        unsafe { quantize_rows::<false>(x, w.zero_masks, nb, false, &mut [], q, xs) };
    }
    (q, xs)
}

/// Lane `l` of entry `m`: all ones where bit `l` of `m` is set. The lanes of 8 activations
/// to read as 0.0 from one byte of an outlier mask.
static ZERO_LANES: [[u32; 8]; 256] = {
    let mut t = [[0u32; 8]; 256];
    let mut m = 0;
    while m < 256 {
        let mut l = 0;
        while l < 8 {
            if m >> l & 1 == 1 {
                t[m][l] = u32::MAX;
            }
            l += 1;
        }
        m += 1;
    }
    t
};

/// Lane `j` of the result: the largest lane of `m[j]` (all lanes >= 0 or NaN). A tree of
/// shuffle-and-max steps instead of 8 horizontal reductions; the maximum of finite values
/// does not depend on the order it is taken in.
#[target_feature(enable = "avx2")]
fn amax8(m: &[__m256; 8]) -> __m256 {
    // c[i]: lanes 0..4 hold 4 partial maxima of block 2i, lanes 4..8 those of block 2i + 1.
    let mut c = [_mm256_setzero_ps(); 4];
    for (i, ci) in c.iter_mut().enumerate() {
        let (a, b) = (m[2 * i], m[2 * i + 1]);
        *ci = _mm256_max_ps(
            _mm256_permute2f128_ps::<0x20>(a, b),
            _mm256_permute2f128_ps::<0x31>(a, b),
        );
    }
    // f[i], 2 partials a block: blocks 4i, 4i + 2 in the low half, 4i + 1, 4i + 3 in the high.
    let mut f = [_mm256_setzero_ps(); 2];
    for (i, fi) in f.iter_mut().enumerate() {
        let (a, b) = (c[2 * i], c[2 * i + 1]);
        *fi = _mm256_max_ps(
            _mm256_shuffle_ps::<0x44>(a, b),
            _mm256_shuffle_ps::<0xEE>(a, b),
        );
    }
    // Blocks 0, 2, 4, 6 in the low half, 1, 3, 5, 7 in the high; then in order.
    let h = _mm256_max_ps(
        _mm256_shuffle_ps::<0x88>(f[0], f[1]),
        _mm256_shuffle_ps::<0xDD>(f[0], f[1]),
    );
    _mm256_permutevar8x32_ps(h, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7))
}

/// The scalar `round_away(v).clamp(-127.0, 127.0)` lane-wise, short of its final truncation
/// toward zero (`cvtt`): `min(|v| + 0.49999997, 127)` with the sign of `v` (see
/// [`BELOW_HALF`]), and 0 for NaN as the scalar code gives (its `NaN as i32` is 0; `minps`
/// would give 127). A NaN comes from finite input where `1 / d` overflows to infinity (a
/// subnormal `d`) and a value is 0: `0 * inf`.
#[target_feature(enable = "avx2")]
fn round_clamp_untruncated(v: __m256) -> __m256 {
    let sign = _mm256_set1_ps(-0.0);
    let t = _mm256_add_ps(
        _mm256_andnot_ps(sign, v),
        _mm256_castsi256_ps(_mm256_set1_epi32(BELOW_HALF as i32)),
    );
    let r = _mm256_or_ps(
        _mm256_min_ps(t, _mm256_set1_ps(127.0)),
        _mm256_and_ps(sign, v),
    );
    _mm256_and_ps(r, _mm256_cmp_ps::<_CMP_ORD_Q>(v, v))
}

/// `round_away(v)` lane-wise short of its truncation toward zero, without the clamp:
/// `v + 0.49999997` with the sign of `v`, which is `(|v| + 0.49999997)` with the sign of `v`
/// exactly (IEEE addition rounds symmetrically), so truncated it is [`round_clamp_untruncated`]
/// truncated wherever `|v| < 127.5`.
#[target_feature(enable = "avx2")]
fn round_unclamped(v: __m256) -> __m256 {
    let half = _mm256_castsi256_ps(_mm256_set1_epi32(BELOW_HALF as i32));
    _mm256_add_ps(
        v,
        _mm256_or_ps(half, _mm256_and_ps(_mm256_set1_ps(-0.0), v)),
    )
}

/// One block's values (`v`: 4 x 8 lanes) as i32: `q`, or `128 q + r` with `X2`, given the
/// block's `d`, `1 / d` and `128 / d` broadcast. `CLAMP`: round with the scalar code's clamp
/// to -127..=127 (needed only where `d` is subnormal, see `quantize_rows`).
#[inline]
#[target_feature(enable = "avx2")]
fn block_values<const CLAMP: bool, const X2: bool>(
    v: [__m256; 4],
    dv: __m256,
    idv: __m256,
    i128v: __m256,
) -> [__m256i; 4] {
    let round = |y: __m256| {
        if CLAMP {
            round_clamp_untruncated(y)
        } else {
            round_unclamped(y)
        }
    };
    let mut vals = [_mm256_setzero_si256(); 4];
    for (out, &vh) in vals.iter_mut().zip(&v) {
        let qi = _mm256_cvttps_epi32(round(_mm256_mul_ps(vh, idv)));
        *out = if X2 {
            // The residual of the rounded value, `(v - d * q) * (128 / d)`, multiply then
            // subtract (no FMA) as the scalar code; q is exact as a float.
            let qf = _mm256_cvtepi32_ps(qi);
            let res = _mm256_mul_ps(_mm256_sub_ps(vh, _mm256_mul_ps(dv, qf)), i128v);
            let ri = _mm256_cvttps_epi32(round(res));
            // |128 q + r| <= 16383: exact in i32 and in the i16 packs of the caller.
            _mm256_add_epi32(_mm256_slli_epi32::<7>(qi), ri)
        } else {
            qi
        };
    }
    vals
}

/// The scalar quantizer ([`super::scalar::quantize_act_row`]) on `scales.len() / nb` rows of
/// `nb` blocks at once, with the same IEEE operations per value and block (so the same bits
/// for finite input), straight from the unmasked activations: the lanes set in `zero[b]`
/// (block `b` of every row: the outlier channels) are read as 0.0, exactly as if the rows had
/// been copied with those channels zeroed. Blocks go 8 at a time: their maxima in one
/// shuffle tree, the divisions of the scale and its inverse for all 8 at once, then the
/// values.
///
/// `WIDE`: store `q` (or `128 q + r` with `x2`) as i16 into `a`; else `q ^ 0x80` as bytes
/// into `bytes` (`x2` must then be false). The stored scale is `d` (or `d / 128` with `x2`).
///
/// # Safety
/// The CPU must support AVX2. `x` and the output used (`a` or `bytes`) hold
/// `32 * scales.len()` values, `nb > 0` divides `scales.len()`, `zero` is empty or `nb` long.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn quantize_rows<const WIDE: bool>(
    x: &[f32],
    zero: &[u32],
    nb: usize,
    x2: bool,
    a: &mut [i16],
    bytes: &mut [u8],
    scales: &mut [f32],
) {
    let blocks = scales.len();
    let (x2, out_len) = if WIDE {
        (x2, a.len())
    } else {
        (false, bytes.len())
    };
    debug_assert!(x.len() == blocks * 32 && out_len == x.len());
    debug_assert!(nb > 0 && blocks.is_multiple_of(nb) && (zero.is_empty() || zero.len() == nb));
    // Block c of the activations, the lanes of its outlier mask read as 0.0.
    // Block c of the activations with its outlier mask `zm`.
    let load = |c: usize, zm: u32| -> [__m256; 4] {
        let mut v = [_mm256_setzero_ps(); 4];
        for (h, vh) in v.iter_mut().enumerate() {
            // SAFETY: block c < blocks: its 32 floats lie inside x (32 * blocks long); the
            // table entry is 8 u32 (32 bytes).
            unsafe {
                *vh = _mm256_loadu_ps(x.as_ptr().add(c * 32 + h * 8));
                if zm != 0 {
                    let z = ZERO_LANES[(zm >> (8 * h)) as usize & 0xFF].as_ptr();
                    *vh = _mm256_andnot_ps(_mm256_loadu_ps(z.cast()), *vh);
                }
            }
        }
        v
    };
    /// A chunk of up to 8 blocks ready for its values: its first block and block count,
    /// each block's outlier mask, `d`, `1 / d` and `128 / d`.
    struct Chunk {
        c0: usize,
        cnt: usize,
        zm: [u32; 8],
        ds: [f32; 8],
        ids: [f32; 8],
        id128s: [f32; 8],
        /// Whether a block's `d` is subnormal: only then can `|v / d|` pass 127.5 for finite
        /// input (`1 / d` inexact, or infinite), and the values need the clamp.
        clamp: bool,
    }
    let sign = _mm256_set1_ps(-0.0);
    // The chunk from block c0: its maxima and divisions, its scales stored. `b`: the block of
    // a row (the index of its outlier mask) that block c0 is, advanced past the chunk.
    let mut prep = |c0: usize, b: &mut usize| -> Chunk {
        let cnt = (blocks - c0).min(8);
        // The masks counted along instead of `c % nb` per block (a division each).
        let mut zm = [0u32; 8];
        if !zero.is_empty() {
            for z in zm.iter_mut().take(cnt) {
                *z = zero[*b];
                *b = if *b + 1 == nb { 0 } else { *b + 1 };
            }
        }
        let mut m = [_mm256_setzero_ps(); 8];
        for (j, mj) in m.iter_mut().enumerate().take(cnt) {
            let v = load(c0 + j, zm[j]);
            let abs = |u: __m256| _mm256_andnot_ps(sign, u);
            *mj = _mm256_max_ps(
                _mm256_max_ps(abs(v[0]), abs(v[1])),
                _mm256_max_ps(abs(v[2]), abs(v[3])),
            );
        }
        // Per block, as the scalar quantizer: d = amax / 127, id = 1 / d (0 where d is 0),
        // id * 128 for the residual, the stored scale d (or d / 128): the same IEEE
        // operations, 8 blocks at once.
        let amax = amax8(&m);
        let d = _mm256_div_ps(amax, _mm256_set1_ps(127.0));
        let nonzero = _mm256_cmp_ps::<_CMP_NEQ_UQ>(d, _mm256_setzero_ps());
        let id = _mm256_and_ps(_mm256_div_ps(_mm256_set1_ps(1.0), d), nonzero);
        let id128 = _mm256_mul_ps(id, _mm256_set1_ps(128.0));
        let sc = if x2 {
            _mm256_div_ps(d, _mm256_set1_ps(128.0))
        } else {
            d
        };
        let mut ch = Chunk {
            c0,
            cnt,
            zm,
            ds: [0.0; 8],
            ids: [0.0; 8],
            id128s: [0.0; 8],
            clamp: false,
        };
        // d < 2^-126: subnormal (or 0, harmless: then id is 0). With a normal d, |v| <= amax
        // gives |v * id| <= 127 (1 + 2^-23)^3 < 127.5, and the residual |(v - d q) * id128|
        // stays near 64: no clamp can apply.
        let tiny = _mm256_cmp_ps::<_CMP_LT_OQ>(d, _mm256_set1_ps(f32::MIN_POSITIVE));
        ch.clamp = _mm256_movemask_ps(_mm256_and_ps(tiny, nonzero)) != 0;
        // SAFETY: each array holds 8 floats; with a full chunk, scales c0..c0 + 8 exist
        // (c0 + cnt <= blocks).
        unsafe {
            _mm256_storeu_ps(ch.ds.as_mut_ptr(), d);
            _mm256_storeu_ps(ch.ids.as_mut_ptr(), id);
            _mm256_storeu_ps(ch.id128s.as_mut_ptr(), id128);
            if cnt == 8 {
                _mm256_storeu_ps(scales.as_mut_ptr().add(c0), sc);
            } else {
                let mut scs = [0f32; 8];
                _mm256_storeu_ps(scs.as_mut_ptr(), sc);
                for (j, &v) in scs.iter().enumerate().take(cnt) {
                    scales[c0 + j] = v;
                }
            }
        }
        ch
    };
    let mut b = 0;
    // The chunk whose values come next.
    let mut next = (blocks > 0).then(|| prep(0, &mut b));
    while let Some(ch) = next.take() {
        // The next chunk's maxima and divisions go first, so that they run alongside this
        // chunk's values (which otherwise wait on their own chunk's divisions).
        let c_next = ch.c0 + ch.cnt;
        next = (c_next < blocks).then(|| prep(c_next, &mut b));
        for j in 0..ch.cnt {
            let c = ch.c0 + j;
            let v = load(c, ch.zm[j]);
            let (dv, idv, i128v) = (
                _mm256_set1_ps(ch.ds[j]),
                _mm256_set1_ps(ch.ids[j]),
                _mm256_set1_ps(ch.id128s[j]),
            );
            // Rounded as the scalar code, its clamp only where it can apply.
            let vals = match (ch.clamp, x2) {
                (false, false) => block_values::<false, false>(v, dv, idv, i128v),
                (false, true) => block_values::<false, true>(v, dv, idv, i128v),
                (true, false) => block_values::<true, false>(v, dv, idv, i128v),
                (true, true) => block_values::<true, true>(v, dv, idv, i128v),
            };
            if WIDE {
                // packs works per 128-bit lane: 64-bit units 0, 2, 1, 3 put the 16 values
                // back in order. The values fit i16, so the saturating packs are exact.
                let lo = _mm256_permute4x64_epi64::<0xD8>(_mm256_packs_epi32(vals[0], vals[1]));
                let hi = _mm256_permute4x64_epi64::<0xD8>(_mm256_packs_epi32(vals[2], vals[3]));
                // SAFETY: values c * 32..c * 32 + 32 lie inside a (as long as x).
                unsafe {
                    let p = a.as_mut_ptr().add(c * 32);
                    _mm256_storeu_si256(p.cast(), lo);
                    _mm256_storeu_si256(p.add(16).cast(), hi);
                }
            } else {
                // Two packs leave, per 128-bit lane, 4 values of each vector in turn; dwords
                // 0, 4, 1, 5, 2, 6, 3, 7 put them in order. |q| <= 127: the packs are exact.
                let b = _mm256_packs_epi16(
                    _mm256_packs_epi32(vals[0], vals[1]),
                    _mm256_packs_epi32(vals[2], vals[3]),
                );
                let b = _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
                let b = _mm256_xor_si256(b, _mm256_set1_epi8(i8::MIN));
                // SAFETY: bytes c * 32..c * 32 + 32 lie inside `bytes` (as long as x).
                unsafe { _mm256_storeu_si256(bytes.as_mut_ptr().add(c * 32).cast(), b) };
            }
        }
    }
}

/// The tile kernels of the 256-bit paths, from one source: `$tile::<G, T>` runs the 8-row
/// groups `g0..g0 + G` of a packed matrix (`$packed`: per group and block, `$chunks` chunks of
/// 32 bytes, the 8 row scales) against tokens `i0..i0 + T` of the activations (`$act`, `n x k`
/// values, 4 bytes a chunk broadcast to every lane); `$init(p, base)` starts each block's
/// int32 chain, `$step(acc, x, w)` adds one chunk. `$driver` runs every group and token.
macro_rules! tiles_256 {
    (
        tile: $tile:ident,
        driver: $driver:ident,
        features: $features:literal,
        packed: $packed:ty,
        act: $act:ty,
        chunks: $chunks:literal,
        init: $init:path,
        step: $step:path,
        groups: $groups:literal,
        group_tails: [$($gtail:literal),*],
        tokens: $tokens:literal,
        tails: [$($tail:literal),*] $(,)?
    ) => {
        /// # Safety
        /// The CPU must support the enabled features; groups `g0..g0 + G` and tokens
        /// `i0..i0 + T` exist; lengths as asserted by the caller of the driver (`p` holds
        /// `rows x 32 nb` weights, `a` `n x 32 nb` values, `xs` `n x nb` scales, `out`
        /// `n x rows`, `outl.x` `n x 32 nb`, `outl.cols` one column of `rows` per channel).
        #[target_feature(enable = $features)]
        #[allow(clippy::too_many_arguments)]
        unsafe fn $tile<const G: usize, const T: usize>(
            p: &$packed,
            g0: usize,
            nb: usize,
            a: &[$act],
            xs: &[f32],
            outl: &OutlierTerms<'_>,
            i0: usize,
            rows: usize,
            out: &mut [f32],
        ) {
            /// Values of a chunk: 4 bytes.
            const PER: usize = 4 / std::mem::size_of::<$act>();
            let k = nb * 32;
            let mut acc = [[_mm256_setzero_ps(); T]; G];
            for b in 0..nb {
                let mut d = [[_mm256_setzero_si256(); T]; G];
                let mut ws = [_mm256_setzero_ps(); G];
                let mut wp = [p.qs.as_ptr(); G];
                for gi in 0..G {
                    let base = (g0 + gi) * nb + b;
                    // SAFETY: group g0 + gi < groups and block b < nb: its 256 values and 8
                    // scales lie inside the packed arrays.
                    unsafe {
                        wp[gi] = p.qs.as_ptr().add(base * 256);
                        ws[gi] = _mm256_loadu_ps(p.scales.as_ptr().add(base * 8));
                    }
                    d[gi] = [$init(p, base); T];
                }
                // Block b of each token.
                let mut ap = [a.as_ptr(); T];
                for (t, apt) in ap.iter_mut().enumerate() {
                    // SAFETY: block b of token i0 + t < n lies inside the activations.
                    *apt = unsafe { a.as_ptr().add((i0 + t) * k + b * 32) };
                }
                for c in 0..$chunks {
                    let mut w = [_mm256_setzero_si256(); G];
                    for gi in 0..G {
                        // SAFETY: chunk c < $chunks of the block: 32 bytes inside its 256
                        // values (256 / $chunks values a chunk).
                        w[gi] = unsafe { _mm256_loadu_si256(wp[gi].add(c * 256 / $chunks).cast()) };
                    }
                    for (t, apt) in ap.iter().enumerate() {
                        // SAFETY: values c * PER..c * PER + PER of block b of the token lie
                        // inside its block (32 values).
                        let xv = unsafe { apt.add(c * PER).cast::<i32>().read_unaligned() };
                        let xb = _mm256_set1_epi32(xv);
                        for gi in 0..G {
                            d[gi][t] = $step(d[gi][t], xb, w[gi]);
                        }
                    }
                }
                for gi in 0..G {
                    for t in 0..T {
                        let s = _mm256_mul_ps(ws[gi], _mm256_set1_ps(xs[(i0 + t) * nb + b]));
                        // Multiply, then add (no FMA): the scalar path's rounding and order.
                        let v = _mm256_mul_ps(s, _mm256_cvtepi32_ps(d[gi][t]));
                        acc[gi][t] = _mm256_add_ps(acc[gi][t], v);
                    }
                }
            }
            // The lanes of each group's rows that exist (all 8 but in a last partial group).
            let mut masks = [_mm256_setzero_si256(); G];
            let mut lanes = [0usize; G];
            for gi in 0..G {
                lanes[gi] = (rows - (g0 + gi) * 8).min(8);
                masks[gi] = _mm256_cmpgt_epi32(
                    _mm256_set1_epi32(lanes[gi] as i32),
                    _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                );
            }
            // The outlier channels in order, each element's `acc + x * w` as the scalar path;
            // a channel's column slice and each token's activation loaded once for the tile.
            for (o, &ch) in outl.channels.iter().enumerate() {
                let mut col = [_mm256_setzero_ps(); G];
                for gi in 0..G {
                    // SAFETY: the mask limits the load to rows < rows of column o, which lies
                    // inside cols (channels.len() x rows).
                    col[gi] = unsafe {
                        _mm256_maskload_ps(outl.cols.as_ptr().add(o * rows + (g0 + gi) * 8), masks[gi])
                    };
                }
                for t in 0..T {
                    let xo = _mm256_set1_ps(outl.x[(i0 + t) * k + ch as usize]);
                    for gi in 0..G {
                        acc[gi][t] = _mm256_add_ps(acc[gi][t], _mm256_mul_ps(xo, col[gi]));
                    }
                }
            }
            for (gi, acc_g) in acc.iter().enumerate() {
                let g = g0 + gi;
                for (t, a_t) in acc_g.iter().enumerate() {
                    let at = (i0 + t) * rows + g * 8;
                    // SAFETY: token i0 + t < n and rows g * 8..g * 8 + lanes exist, inside out
                    // (n x rows); the mask limits a partial group's store to those rows.
                    unsafe {
                        if lanes[gi] == 8 {
                            _mm256_storeu_ps(out.as_mut_ptr().add(at), *a_t);
                        } else {
                            _mm256_maskstore_ps(out.as_mut_ptr().add(at), masks[gi], *a_t);
                        }
                    }
                }
            }
        }

        /// Every group (`$groups` at a time, then the 1 to `$groups - 1` left, each count one
        /// of `$gtail`) against every token (`$tokens` at a time, then one tile of the 1 to
        /// `$tokens - 1` left, each count one of `$tail`).
        ///
        /// # Safety
        /// The CPU must support the enabled features; `p` holds `rows x 32 nb` weights, `a`
        /// `n x 32 nb` values, `xs` `n x nb` scales, `out` `n x rows`, `outl.x` `n x 32 nb`,
        /// `outl.cols` one column of `rows` per channel, every channel `< 32 nb`.
        #[target_feature(enable = $features)]
        #[allow(clippy::too_many_arguments)]
        unsafe fn $driver(
            p: &$packed,
            rows: usize,
            nb: usize,
            a: &[$act],
            xs: &[f32],
            outl: &OutlierTerms<'_>,
            n: usize,
            out: &mut [f32],
        ) {
            /// Tokens `i..n` against groups `g0..g0 + G`.
            ///
            /// # Safety
            /// As the driver's, and groups `g0..g0 + G` exist.
            #[target_feature(enable = $features)]
            #[allow(clippy::too_many_arguments)]
            unsafe fn groups<const G: usize>(
                p: &$packed,
                g0: usize,
                nb: usize,
                a: &[$act],
                xs: &[f32],
                outl: &OutlierTerms<'_>,
                n: usize,
                rows: usize,
                out: &mut [f32],
            ) {
                const T: usize = $tokens;
                // The next groups' weights (contiguous after these groups').
                let next = &p.qs[((g0 + G) * nb * 256).min(p.qs.len())
                    ..((g0 + 2 * G) * nb * 256).min(p.qs.len())];
                let mut ahead = $crate::kernels::avx2::Prefetch::new(next, n / T);
                let mut i = 0;
                // SAFETY (all calls): tokens i..i + T (or i..n) exist; the rest as the
                // caller guarantees.
                while i + T <= n {
                    ahead.step();
                    unsafe { $tile::<G, T>(p, g0, nb, a, xs, outl, i, rows, out) };
                    i += T;
                }
                match n - i {
                    $($tail => unsafe { $tile::<G, $tail>(p, g0, nb, a, xs, outl, i, rows, out) },)*
                    _ => {}
                }
            }
            let groups_n = rows.div_ceil(8);
            let mut g = 0;
            // SAFETY (all calls): groups g..g + $groups (or g..groups_n) exist; the rest as
            // the caller guarantees.
            while g + $groups <= groups_n {
                unsafe { groups::<$groups>(p, g, nb, a, xs, outl, n, rows, out) };
                g += $groups;
            }
            match groups_n - g {
                $($gtail => unsafe { groups::<$gtail>(p, g, nb, a, xs, outl, n, rows, out) },)*
                _ => {}
            }
        }
    };
}
pub(super) use tiles_256;

/// Zero: the i16 kernels' chains start empty.
#[inline]
#[target_feature(enable = "avx2")]
fn init_zero(_: &Packed8W, _: usize) -> __m256i {
    _mm256_setzero_si256()
}

/// `acc + vpmaddwd(x, w)`: each row's two products of a chunk added to its int32.
#[inline]
#[target_feature(enable = "avx2")]
fn step_madd(acc: __m256i, x: __m256i, w: __m256i) -> __m256i {
    _mm256_add_epi32(acc, _mm256_madd_epi16(x, w))
}

tiles_256! {
    tile: tile_wide,
    driver: dot_wide,
    features: "avx2,fma",
    packed: Packed8W,
    act: i16,
    chunks: 16,
    init: init_zero,
    step: step_madd,
    groups: 2,
    group_tails: [1],
    tokens: 4,
    tails: [1, 2, 3],
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::scalar::quantize_act_row;

    /// Blocks of 32 activations that reach every branch of the quantizers, cycled: ordinary
    /// values of several magnitudes, exact halves of the step, all zeros, a huge value with a
    /// -0.0, and two blocks whose scale `d` is subnormal (amax 1e-37, whose `1 / d` is
    /// infinite, next to a 0.0; amax 3e-38 with a finite `1 / d`): there the clamp applies.
    fn hard_blocks() -> Vec<f32> {
        let mut s = 0x2545_F491_4F6C_DD1Du64;
        let mut uniform = move || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        };
        let mut x: Vec<f32> = (0..32 * 10)
            .map(|i| uniform() * (0.01 + (i / 32) as f32))
            .collect();
        for (i, v) in x[96..128].iter_mut().enumerate() {
            *v = (i as f32 - 16.0) + 0.5;
        }
        x[96] = 127.0;
        x[128..160].fill(0.0);
        x[160] = 3.0e38;
        x[161] = -0.0;
        for v in &mut x[192..224] {
            *v *= 1e-38;
        }
        x[192] = -1e-37;
        x[193] = 0.0;
        for v in &mut x[224..256] {
            *v *= 1e-39;
        }
        x[224] = 3e-38;
        x
    }

    #[test]
    fn quantizer_is_bit_identical_to_scalar() {
        if !KernelPath::Avx2.is_available() {
            return; // the scalar quantizer is the only one this CPU runs
        }
        let blocks = hard_blocks();
        // Chunks of 8 blocks that end inside a row and across rows, a last chunk of fewer,
        // odd block counts.
        for (n, nb) in [
            (1usize, 10usize),
            (10, 1),
            (5, 2),
            (7, 3),
            (9, 4),
            (3, 16),
            (2, 8),
        ] {
            let k = nb * 32;
            let x: Vec<f32> = (0..n * k)
                .map(|i| blocks[(i + 64 * (i / k)) % blocks.len()])
                .collect();
            let outliers: Vec<usize> = [3usize, 40, 45, 161, 300]
                .into_iter()
                .filter(|&o| o < k)
                .collect();
            let mut zeroed = x.clone();
            let mut zero = vec![0u32; nb];
            for &o in &outliers {
                zero[o / 32] |= 1 << (o % 32);
                for row in zeroed.chunks_exact_mut(k) {
                    row[o] = 0.0;
                }
            }
            for zero in [&zero[..], &[]] {
                let src = if zero.is_empty() { &x } else { &zeroed };
                for mode in [ActQuant::Q8, ActQuant::Q8x2] {
                    let (mut q, mut r, mut s) =
                        (vec![0i8; n * k], vec![0i8; n * k], vec![0f32; n * nb]);
                    for i in 0..n {
                        quantize_act_row(
                            &src[i * k..(i + 1) * k],
                            &mut q[i * k..(i + 1) * k],
                            &mut r[i * k..(i + 1) * k],
                            &mut s[i * nb..(i + 1) * nb],
                            mode,
                        );
                    }
                    let x2 = mode == ActQuant::Q8x2;
                    let what = format!("{mode:?}, {n} x {nb} blocks, {} masks", zero.len());
                    let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                    let (mut a, mut sa) = (vec![1i16; n * k], vec![1f32; n * nb]);
                    // SAFETY: AVX2 checked above; x and a hold n x k values, sa n x nb.
                    unsafe { quantize_rows::<true>(&x, zero, nb, x2, &mut a, &mut [], &mut sa) };
                    let want: Vec<i16> = q
                        .iter()
                        .zip(&r)
                        .map(|(&q, &r)| {
                            if x2 {
                                128 * i16::from(q) + i16::from(r)
                            } else {
                                q.into()
                            }
                        })
                        .collect();
                    assert_eq!(a, want, "{what}: i16 values");
                    assert_eq!(bits(&sa), bits(&s), "{what}: scales");
                    if !x2 {
                        let (mut b, mut sb) = (vec![1u8; n * k], vec![1f32; n * nb]);
                        // SAFETY: as above, with b n x k bytes.
                        unsafe {
                            quantize_rows::<false>(&x, zero, nb, false, &mut [], &mut b, &mut sb)
                        };
                        let want: Vec<u8> = q.iter().map(|&v| (v as u8) ^ 0x80).collect();
                        assert_eq!(b, want, "{what}: biased bytes");
                        assert_eq!(bits(&sb), bits(&s), "{what}: byte scales");
                    }
                }
            }
        }
    }
}
