//! The int8 x int8 -> int32 product kernels over Q8_0 blocks, one file per instruction set:
//!
//! - [`scalar`]: portable Rust, always built (the only path on wasm32 and on targets without a vector file). It
//!   is the definition of the arithmetic: the activation quantizer (`quantize_act_row`), the
//!   per-block integer dots, and the f32 sums every other path reproduces bit for bit.
//! - `avx2` (x86_64): AVX2, `vpmaddwd` on weights widened to i16 ([`Packed8W`]) against
//!   activations as i16 (`q`, or `128 q + r` for Q8x2), 8 rows per vector, several tokens
//!   per weight load; its vectorized activation quantizer serves the AVX-VNNI path too.
//! - `avx_vnni` (x86_64): AVX-VNNI, the same tiles as AVX2 with `vpdpbusd` on bytes
//!   ([`Packed8`], Q8) and `vpdpwssd` on i16 ([`Packed8W`], Q8x2).
//! - `avx512` (x86_64): AVX-512 VNNI, `vpdpbusd` over 16 rows ([`Packed16`], Q8) and
//!   `vpdpwssd` over 16 rows of i16 ([`Packed16W`], Q8x2), with its own quantizer.
//! - `neon` (aarch64): the scalar quantizer and f32 steps with NEON integer dots, `sdot`
//!   where the CPU has the dot-product extension, `smull` + `sadalp` where it has not.
//! - `simd128` (wasm32 built with `+simd128`, the browser engine's SIMD module): the scalar
//!   quantizer and f32 steps with `i32x4.dot_i16x8_s` integer dots (the `vpmaddwd` of
//!   WebAssembly) on values widened to i16.
//!
//! [`crate::Q8Matrix::matmul`] calls [`matmul`] once per product; it picks the instruction
//! set's file from the [`KernelPath`] once, and that file quantizes the activations, runs its
//! integer kernel and adds the outlier channels. Adding an instruction set is one file with a
//! `matmul` of the same signature plus its [`KernelPath`] variant and dispatch entries here.
//!
//! # Why every path gives the same bits
//!
//! The integer block dots are exact on every path (int32 sums of int8 or int16 products that
//! cannot overflow or saturate: `|128 q + r| <= 16383`, `|w| <= 128`, 32 products a block).
//! The f32 work is the scalar path's, lane by lane and in its order: per output, over the
//! blocks in order, `acc = acc + (w_scale * x_scale) * idot` (multiply, multiply, add: no FMA),
//! then each outlier channel in the order of the matrix's list, `acc = acc + x[c] * w_exact`.
//! The vector quantizers perform the scalar quantizer's IEEE operations per value (the
//! rounding through `trunc(|v| + 0.49999997)`, which equals `round_away` for every f32, see
//! `avx512`; and a NaN from `0 * inf`, where a subnormal scale's inverse overflows, rounded to
//! 0 as the scalar `NaN as i32`), so the int8 activations and their scales are the same too.

use std::sync::OnceLock;

/// How activations are quantized for the int8 product.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub enum ActQuant {
    /// One Q8_0 block per 32 values (ggml `q8_0` activations, but with an f32 scale): fastest.
    Q8,
    /// Q8_0 plus a second pass on the rounding residual at 1/128 of the scale
    /// (`x ~ d * (q + r / 128)`), summed in int32 as `128 * dot(q, w) + dot(r, w)`: ~15-bit
    /// activations, still i8 x i8 -> i32 dot products.
    #[default]
    Q8x2,
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2;
#[cfg(target_arch = "x86_64")]
pub(crate) mod avx512;
#[cfg(target_arch = "x86_64")]
pub(crate) mod avx_vnni;
#[cfg(target_arch = "aarch64")]
pub(crate) mod neon;
pub(crate) mod scalar;
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
pub(crate) mod simd128;

/// Which dot-product implementation runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KernelPath {
    /// Portable Rust, always available (and the only path on wasm32).
    Scalar,
    /// AVX2 + FMA: `_mm256_madd_epi16` on weights and activations as i16, 8 rows per vector.
    Avx2,
    /// AVX-VNNI (256-bit VEX encoding): `_mm256_dpbusd_avx_epi32` (Q8) and
    /// `_mm256_dpwssd_avx_epi32` (Q8x2), 8 rows per vector.
    AvxVnni,
    /// AVX-512 F/BW + VNNI: `_mm512_dpbusd_epi32` (Q8) and `vpdpwssd` (Q8x2) over 16 weight
    /// rows at once (one int32 lane per row), plus a vectorized activation quantizer.
    Avx512Vnni,
    /// aarch64 NEON without the dot-product extension: `smull` + `sadalp` per block.
    Neon,
    /// aarch64 NEON with the dot-product extension (run-time detected): `sdot` per block.
    NeonDot,
    /// WebAssembly SIMD128 (a module compiled with `+simd128`: WebAssembly has no run-time
    /// detection): `i32x4.dot_i16x8_s` per block on values widened to i16.
    Simd128,
}

impl KernelPath {
    /// Every path, fastest first. [`KernelPath::detect`] takes the first this CPU runs at or
    /// below the `SKYCTL_ISA` level ([`crate::cpu`]).
    pub const ALL: [KernelPath; 7] = [
        KernelPath::Avx512Vnni,
        KernelPath::AvxVnni,
        KernelPath::Avx2,
        KernelPath::NeonDot,
        KernelPath::Neon,
        KernelPath::Simd128,
        KernelPath::Scalar,
    ];

    /// Short lowercase name (`scalar`, `avx2`, `avx-vnni`, `avx512-vnni`, `neon`,
    /// `neon-dotprod`, `simd128`).
    pub fn name(self) -> &'static str {
        match self {
            KernelPath::Scalar => "scalar",
            KernelPath::Avx2 => "avx2",
            KernelPath::AvxVnni => "avx-vnni",
            KernelPath::Avx512Vnni => "avx512-vnni",
            KernelPath::Neon => "neon",
            KernelPath::NeonDot => "neon-dotprod",
            KernelPath::Simd128 => "simd128",
        }
    }

    /// Whether this CPU (and build target) can run the path.
    pub fn is_available(self) -> bool {
        match self {
            KernelPath::Scalar => true,
            #[cfg(target_arch = "x86_64")]
            KernelPath::Avx2 => is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma"),
            #[cfg(target_arch = "x86_64")]
            KernelPath::AvxVnni => {
                is_x86_feature_detected!("avx2")
                    && is_x86_feature_detected!("fma")
                    && is_x86_feature_detected!("avxvnni")
            }
            #[cfg(target_arch = "x86_64")]
            KernelPath::Avx512Vnni => {
                is_x86_feature_detected!("avx512f")
                    && is_x86_feature_detected!("avx512bw")
                    && is_x86_feature_detected!("avx512vnni")
            }
            KernelPath::Neon => cfg!(target_arch = "aarch64"),
            KernelPath::Simd128 => cfg!(all(target_arch = "wasm32", target_feature = "simd128")),
            KernelPath::NeonDot => {
                #[cfg(target_arch = "aarch64")]
                let dot = std::arch::is_aarch64_feature_detected!("dotprod");
                #[cfg(not(target_arch = "aarch64"))]
                let dot = false;
                dot
            }
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }

    /// The fastest available path.
    pub fn detect() -> KernelPath {
        KernelPath::best_at(crate::cpu::IsaLevel::current())
    }

    /// The fastest path this CPU runs at `level` or below.
    pub fn best_at(level: crate::cpu::IsaLevel) -> KernelPath {
        Self::ALL
            .into_iter()
            .find(|p| p.level() <= level && p.is_available())
            .unwrap_or(KernelPath::Scalar)
    }

    /// The instruction-set level the path needs (`SKYCTL_ISA` caps it).
    pub fn level(self) -> crate::cpu::IsaLevel {
        use crate::cpu::IsaLevel;
        match self {
            // Chosen when the module is compiled, so no `SKYCTL_ISA` level caps it.
            KernelPath::Scalar | KernelPath::Simd128 => IsaLevel::Scalar,
            KernelPath::Avx2 => IsaLevel::Avx2,
            KernelPath::AvxVnni => IsaLevel::AvxVnni,
            KernelPath::Avx512Vnni => IsaLevel::Avx512,
            KernelPath::Neon | KernelPath::NeonDot => IsaLevel::Neon,
        }
    }

    /// All paths this CPU can run, fastest first (always ends with `Scalar`).
    pub fn available() -> Vec<KernelPath> {
        Self::ALL.into_iter().filter(|p| p.is_available()).collect()
    }
}

impl std::fmt::Display for KernelPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One quantized activation row: `q` (and for Q8x2 the residual `r`), `k` bytes each, and one
/// scale per 32-value block. For Q8x2 the scale is already divided by 128, so every path
/// computes `sum_b (w_scale[b] * x_scale[b]) * idot[b]` with
/// `idot = dot(q, w)` (Q8) or `128 * dot(q, w) + dot(r, w)` (Q8x2).
#[derive(Clone, Copy)]
pub(crate) struct ActRow<'a> {
    pub q: &'a [i8],
    pub r: Option<&'a [i8]>,
    pub scales: &'a [f32],
}

/// A Q8_0 weight matrix as the kernels see it, borrowed from [`crate::Q8Matrix`]: `rows x k`
/// int8 values (row-major, `k` a multiple of 32) with one f32 scale per block, the outlier
/// channels with their exact weight columns, and the repacked layouts of the vector paths.
pub(crate) struct Weights<'a> {
    pub rows: usize,
    pub k: usize,
    pub qs: &'a [i8],
    pub scales: &'a [f32],
    /// Outlier input channels (each `< k`), in the order their terms are added.
    pub outliers: &'a [u32],
    /// One column of `rows` exact weights per outlier (`outliers.len() x rows`).
    pub outlier_cols: &'a [f32],
    /// Per activation block, the lanes of the outlier channels (bit `c % 32` of block
    /// `c / 32`), which the vector quantizers read as 0; empty without outliers.
    pub zero_masks: &'a [u32],
    pub packs: &'a Packs,
}

// The packed layouts are built only by the x86-64 files.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
impl Weights<'_> {
    /// The outlier terms of the product of `x` (`n x k`).
    fn outlier_terms<'x>(&'x self, x: &'x [f32]) -> OutlierTerms<'x> {
        OutlierTerms {
            channels: self.outliers,
            cols: self.outlier_cols,
            x,
        }
    }

    fn packed16(&self) -> &Packed16 {
        (self.packs.p16).get_or_init(|| Packed16::new(self.qs, self.scales, self.rows, self.k))
    }

    fn packed16w(&self) -> &Packed16W {
        (self.packs.p16w).get_or_init(|| Packed16W::new(self.qs, self.scales, self.rows, self.k))
    }

    fn packed8(&self) -> &Packed8 {
        (self.packs.p8).get_or_init(|| Packed8::new(self.qs, self.scales, self.rows, self.k))
    }

    fn packed8w(&self) -> &Packed8W {
        (self.packs.p8w).get_or_init(|| Packed8W::new(self.qs, self.scales, self.rows, self.k))
    }
}

/// The repacked copies of a matrix's int8 weights, each built on the first product of a path
/// that reads it (the AVX-512 Q8 layout at construction, where this CPU runs that path).
#[derive(Debug, Clone, Default)]
pub(crate) struct Packs {
    p16: OnceLock<Packed16>,
    p16w: OnceLock<Packed16W>,
    p8: OnceLock<Packed8>,
    p8w: OnceLock<Packed8W>,
}

impl Packs {
    /// The layouts for `rows x k` Q8_0 values (`qs`, row-major) and their block scales: the
    /// AVX-512 VNNI Q8 one built now where this CPU runs that path, the others later.
    pub(crate) fn new(qs: &[i8], scales: &[f32], rows: usize, k: usize) -> Packs {
        let p = Packs::default();
        if KernelPath::Avx512Vnni.is_available() {
            // Cannot fail: the cell was just made empty.
            let _ = p.p16.set(Packed16::new(qs, scales, rows, k));
        }
        p
    }
}

/// Derived data: equal whenever the weights they were built from are, whichever layouts a
/// matrix happens to have built so far.
impl PartialEq for Packs {
    fn eq(&self, _: &Packs) -> bool {
        true
    }
}

/// Reusable activation buffers of [`crate::Scratch`]; each path grows the ones it uses (they
/// never shrink, so a steady-state call allocates nothing).
#[derive(Debug, Clone, Default)]
pub(crate) struct ActBuffers {
    /// One activation row with the outlier channels zeroed (scalar path).
    pub row: Vec<f32>,
    /// Quantized activations, one byte per value (`q`, or `q ^ 0x80` where biased).
    pub q: Vec<i8>,
    /// Q8x2 residuals, one byte per value.
    pub r: Vec<i8>,
    /// Activations as i16 (`q`, or `128 q + r` for Q8x2) for the `vpmaddwd` / `vpdpwssd`
    /// kernels (x86-64 only).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    pub a: Vec<i16>,
    /// One scale per activation block.
    pub scales: Vec<f32>,
}

/// The largest f32 below 0.5 (0.49999997). The vector quantizers round `v` half away from
/// zero as `trunc(|v| + BELOW_HALF)` with the sign of `v`, which equals the scalar path's
/// `round_away` for every f32 (see `avx512`'s `round_clamp_untruncated_512`).
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
const BELOW_HALF: u32 = 0x3EFF_FFFF;

/// Grows `v` to at least `len` elements (never shrinks, so steady state allocates nothing).
fn grow<T: Clone>(v: &mut Vec<T>, len: usize, zero: T) {
    if v.len() < len {
        v.resize(len, zero);
    }
}

/// `out = x · Wᵀ` for `n` activation rows (`x`: `n x k`, `out`: `n x rows`) on `path`: the
/// activations quantized by `mode` into `bufs`, the int8 products, the outlier channels in
/// f32. Every path gives the scalar path's bits.
///
/// Panics if the lengths disagree or this CPU cannot run `path`: internal invariants that
/// [`crate::Q8Matrix::matmul`] and [`crate::Scratch`] establish before calling.
pub(crate) fn matmul(
    path: KernelPath,
    w: &Weights<'_>,
    x: &[f32],
    n: usize,
    out: &mut [f32],
    mode: ActQuant,
    bufs: &mut ActBuffers,
) {
    let (rows, k) = (w.rows, w.k);
    assert!(k.is_multiple_of(32) && x.len() == n * k && out.len() == n * rows);
    assert!(w.qs.len() == rows * k && w.scales.len() == rows * (k / 32));
    assert!(w.outlier_cols.len() == w.outliers.len() * rows);
    assert!(w.outliers.iter().all(|&c| (c as usize) < k));
    assert!(w.zero_masks.is_empty() || w.zero_masks.len() == k / 32);
    assert!(path.is_available(), "kernel path {path} not available");
    match path {
        #[cfg(target_arch = "x86_64")]
        KernelPath::Avx512Vnni => avx512::matmul(w, x, n, out, mode, bufs),
        #[cfg(target_arch = "x86_64")]
        KernelPath::AvxVnni => avx_vnni::matmul(w, x, n, out, mode, bufs),
        #[cfg(target_arch = "x86_64")]
        KernelPath::Avx2 => avx2::matmul(w, x, n, out, mode, bufs),
        #[cfg(target_arch = "aarch64")]
        KernelPath::NeonDot => neon::matmul(w, x, n, out, mode, bufs, true),
        #[cfg(target_arch = "aarch64")]
        KernelPath::Neon => neon::matmul(w, x, n, out, mode, bufs, false),
        #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
        KernelPath::Simd128 => simd128::matmul(w, x, n, out, mode, bufs),
        // Scalar, and (unreachable: never available there) the other targets' paths.
        _ => scalar::matmul(w, x, n, out, mode, bufs),
    }
}

/// Weights repacked for the AVX-512 VNNI Q8 kernel: rows in groups of 16 (one int32 lane per
/// row), so that one `dpbusd` advances 16 rows by 4 values and a whole Q8_0 block of 16 rows
/// takes 8 of them, with no horizontal sums. Per group and block: 8 chunks of 16 rows x 4
/// bytes, the 16 f32 row scales, and `-128 * sum(w)` of each row's block, which undoes the
/// `+128` that makes the activations unsigned for `dpbusd`
/// (`dot(x + 128, w) - 128 * sum(w) = dot(x, w)`, exact in int32). Rows past `rows` are zero.
pub(crate) type Packed16 = PackedBytes<16>;

/// Weights repacked for the AVX-VNNI Q8 kernel: [`Packed16`]'s layout with groups of 8 rows
/// (one 256-bit vector per chunk of 8 rows x 4 bytes).
pub(crate) type Packed8 = PackedBytes<8>;

/// Weights repacked for the AVX-512 VNNI Q8x2 kernel: the int8 values sign-extended to i16,
/// rows in groups of 16 (one int32 lane per row), per group and block 16 chunks of 16 rows x 2
/// values (one 512-bit vector each), and the 16 f32 row scales. One `vpdpwssd` of a chunk with
/// the pair `a = 128 q + r` of two activations (i16, |a| <= 16383) adds `128 (q w) + r w` of
/// both to each row's int32, so a block's 16 chunks give Q8x2's `128 dot(q, w) + dot(r, w)`
/// in one chain: exactly the integer of two `dpbusd` passes, without their shift, add and
/// unsigned-offset correction. Rows past `rows` are zero.
pub(crate) type Packed16W = PackedWide<16>;

/// Weights repacked for the 256-bit i16 kernels (AVX2 in both modes, AVX-VNNI for Q8x2):
/// [`Packed16W`]'s layout with groups of 8 rows (one 256-bit vector per chunk of 8 rows x 2
/// values). A `vpmaddwd` (or `vpdpwssd`) of a chunk with a pair of activations (`q`, or
/// `128 q + r`) adds both products to each row's int32: 16 multiply-adds a block.
pub(crate) type Packed8W = PackedWide<8>;

/// Int8 weights in groups of `L` rows (see [`Packed16`] and [`Packed8`]).
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct PackedBytes<const L: usize> {
    qs: Vec<i8>,
    scales: Vec<f32>,
    neg_sums: Vec<i32>,
}

// Only the x86-64 kernels build one; other targets (wasm32) never do.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
impl<const L: usize> PackedBytes<L> {
    /// Repacks `rows x k` Q8_0 values (`qs`, row-major) and their block scales.
    pub(crate) fn new(qs: &[i8], scales: &[f32], rows: usize, k: usize) -> Self {
        let nb = k / 32;
        let groups = rows.div_ceil(L);
        let mut p = PackedBytes {
            qs: vec![0; groups * nb * 32 * L],
            scales: vec![0.0; groups * nb * L],
            neg_sums: vec![0; groups * nb * L],
        };
        for row in 0..rows {
            let (g, lane) = (row / L, row % L);
            for b in 0..nb {
                let base = g * nb + b;
                let w = &qs[row * k + b * 32..row * k + (b + 1) * 32];
                for (i, &v) in w.iter().enumerate() {
                    p.qs[base * 32 * L + (i / 4) * 4 * L + lane * 4 + i % 4] = v;
                }
                p.scales[base * L + lane] = scales[row * nb + b];
                p.neg_sums[base * L + lane] = -128 * w.iter().map(|&v| i32::from(v)).sum::<i32>();
            }
        }
        p
    }

    /// Whether this holds `rows x (32 * nb)` weights.
    fn fits(&self, rows: usize, nb: usize) -> bool {
        let blocks = rows.div_ceil(L) * nb;
        self.qs.len() == blocks * 32 * L
            && self.scales.len() == blocks * L
            && self.neg_sums.len() == blocks * L
    }
}

/// Int8 weights widened to i16, in groups of `L` rows (see [`Packed16W`] and [`Packed8W`]).
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct PackedWide<const L: usize> {
    qs: Vec<i16>,
    scales: Vec<f32>,
}

// Only the x86-64 kernels build one; other targets (wasm32) never do.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
impl<const L: usize> PackedWide<L> {
    /// Repacks `rows x k` Q8_0 values (`qs`, row-major) and their block scales.
    pub(crate) fn new(qs: &[i8], scales: &[f32], rows: usize, k: usize) -> Self {
        let nb = k / 32;
        let groups = rows.div_ceil(L);
        let mut p = PackedWide {
            qs: vec![0; groups * nb * 32 * L],
            scales: vec![0.0; groups * nb * L],
        };
        for row in 0..rows {
            let (g, lane) = (row / L, row % L);
            for b in 0..nb {
                let base = g * nb + b;
                let w = &qs[row * k + b * 32..row * k + (b + 1) * 32];
                for (i, &v) in w.iter().enumerate() {
                    p.qs[base * 32 * L + (i / 2) * 2 * L + lane * 2 + i % 2] = i16::from(v);
                }
                p.scales[base * L + lane] = scales[row * nb + b];
            }
        }
        p
    }

    /// Whether this holds `rows x (32 * nb)` weights.
    fn fits(&self, rows: usize, nb: usize) -> bool {
        let blocks = rows.div_ceil(L) * nb;
        self.qs.len() == blocks * 32 * L && self.scales.len() == blocks * L
    }
}

/// The outlier channels the vector kernels add in f32 after the blocks:
/// `out[i, j] += x[i, c] * cols[o][j]` for the `o`-th channel `c`, in channel order.
#[derive(Clone, Copy)]
// Only the x86-64 kernels take it; other targets (wasm32) never build one.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) struct OutlierTerms<'a> {
    /// Input channels (each `< k`).
    pub channels: &'a [u32],
    /// One column of `rows` exact weights per channel.
    pub cols: &'a [f32],
    /// The unquantized activations, `n x k`.
    pub x: &'a [f32],
}

/// `n` pseudo-random bytes in `lo..=hi` (test data).
#[cfg(test)]
pub(crate) fn test_bytes(n: usize, seed: u64, lo: i32, hi: i32) -> Vec<i8> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (lo + (s % (hi - lo + 1) as u64) as i32) as i8
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scalar_is_always_available_and_detect_returns_an_available_path() {
        assert!(KernelPath::Scalar.is_available());
        assert!(KernelPath::detect().is_available());
        assert_eq!(KernelPath::available().last(), Some(&KernelPath::Scalar));
    }

    #[test]
    fn packed_layouts_put_each_weight_in_its_lane() {
        let (rows, k) = (11usize, 64usize);
        let qs: Vec<i8> = (0..rows * k).map(|i| (i % 251) as u8 as i8).collect();
        let scales: Vec<f32> = (0..rows * 2).map(|i| i as f32).collect();
        let (b8, w8) = (
            Packed8::new(&qs, &scales, rows, k),
            Packed8W::new(&qs, &scales, rows, k),
        );
        let (b16, w16) = (
            Packed16::new(&qs, &scales, rows, k),
            Packed16W::new(&qs, &scales, rows, k),
        );
        assert!(b8.fits(rows, 2) && w8.fits(rows, 2) && b16.fits(rows, 2) && w16.fits(rows, 2));
        // Row 9 (group 1, lane 1 of 8; group 0, lane 9 of 16), block 1, value 7.
        let v = qs[9 * k + 32 + 7];
        assert_eq!(b8.qs[(2 + 1) * 256 + 32 + 4 + 3], v);
        assert_eq!(w8.qs[(2 + 1) * 256 + 3 * 16 + 2 + 1], i16::from(v));
        assert_eq!(b16.qs[512 + 64 + 36 + 3], v);
        assert_eq!(w16.qs[512 + 3 * 32 + 18 + 1], i16::from(v));
        assert_eq!(b8.scales[(2 + 1) * 8 + 1], scales[9 * 2 + 1]);
        assert_eq!(w16.scales[16 + 9], scales[9 * 2 + 1]);
        // The lanes of rows past 11 are zero.
        let pairs = w16.qs[..512].chunks(2).enumerate();
        assert!(pairs
            .filter(|(p, _)| p % 16 >= 11)
            .all(|(_, c)| c == [0, 0]));
    }
}
