//! Compute kernels: the f32 matrix product and the element-wise functions of the forward pass.
//!
//! # One arithmetic, many widths
//!
//! Every native path computes the same bits as the portable scalar path ([`scalar`]), which
//! is the definition; the vector paths only run it across more lanes at once. The rules each
//! path follows (the aarch64 NEON one included: 4 lanes, FMA):
//!
//! - **Products** accumulate each output element along `k` in order, from 0 (or C's value
//!   when accumulating), one fused multiply-add per term ([`fmadd`]). Vectors run across output
//!   columns, so their width never changes an element's sum.
//! - **Reductions** (the softmax denominator, LayerNorm's mean and variance) keep
//!   [`LANES`] = 16 partial sums, element `j` of every full block of 16 going to partial
//!   `j % 16` in order; the partials are folded by halves (`p[l] + p[l + 8]`, then `+ 4`, `+ 2`,
//!   `+ 1`: [`fold16`]), the order in which one 16-lane register folds and in which two 8-lane
//!   or four 4-lane registers fold the same partials. The elements past the last full block are
//!   then added in order. LayerNorm sums in f64, squares multiplied then added.
//! - **Element-wise functions** ([`exp_fast`], GELU's [`erf_as`]) are written with explicit
//!   fused multiply-adds where their polynomials have them, and plain operations elsewhere;
//!   Rust never contracts `a * b + c` on its own, so every path rounds the same operations.
//!
//! WebAssembly has no fused multiply-add: there [`fmadd`] is a multiply and an add, and the
//! modules agree with native within 1e-5 rather than bit for bit.
//!
//! # Layout
//!
//! One file per instruction set: [`scalar`] (always built), `avx2` and `avx512` (x86-64),
//! `neon` (aarch64), `simd128` (wasm32 with SIMD128). Each fills a [`Kernels`] table of function pointers;
//! [`Isa::kernels`] picks the table once per call site from the instruction set an engine was
//! loaded with. Adding an instruction set is one file and one arm there.
//!
//! The product is `C = A · B` with `B` row-major `[k][n]`: weights are stored transposed
//! (`Wᵀ`, one row per input channel) so the micro-kernel broadcasts one activation and
//! multiplies a whole row segment of the weight. The same kernel does both attention
//! products (`Q · Kᵀ` with `Kᵀ` materialised per head, and `P · V`).

use sky_quant::{IsaLevel, KernelPath};
use std::ops::Range;

pub mod scalar;

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
#[cfg(target_arch = "aarch64")]
mod neon;
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
mod simd128;

#[cfg(test)]
mod tests;

/// Which instruction set the kernels use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Isa {
    /// Portable Rust (also wasm32 without SIMD128).
    Scalar,
    /// x86-64 AVX2 + FMA, 8 lanes.
    Avx2,
    /// x86-64 AVX2 + FMA + AVX-VNNI: the AVX2 f32 kernels, the 256-bit `vpdpbusd` int8 ones.
    AvxVnni,
    /// x86-64 AVX-512F, 16 lanes (the int8 kernels also want AVX-512BW + VNNI).
    Avx512,
    /// WebAssembly SIMD128, 4 lanes (a module built with `-C target-feature=+simd128`).
    Simd128,
    /// aarch64 NEON + FMA, 4 lanes (the int8 kernels use `sdot` where the CPU has it).
    Neon,
}

impl Isa {
    /// The native instruction sets, lowest first (what the tests walk).
    pub const NATIVE: [Isa; 5] = [Isa::Scalar, Isa::Avx2, Isa::AvxVnni, Isa::Avx512, Isa::Neon];

    /// The best instruction set this CPU supports at or below the `SKYCTL_ISA` cap
    /// ([`sky_quant::cpu`]).
    pub fn detect() -> Isa {
        if Isa::Simd128.available() {
            return Isa::Simd128;
        }
        Isa::at(IsaLevel::current())
    }

    /// The native instruction set of a level.
    pub fn at(level: IsaLevel) -> Isa {
        match level {
            IsaLevel::Scalar => Isa::Scalar,
            IsaLevel::Avx2 => Isa::Avx2,
            IsaLevel::AvxVnni => Isa::AvxVnni,
            IsaLevel::Avx512 => Isa::Avx512,
            IsaLevel::Neon => Isa::Neon,
        }
    }

    /// The level `SKYCTL_ISA` names this instruction set by (SIMD128 is none of them: it is
    /// chosen when a module is compiled, and counts as scalar).
    pub fn level(self) -> IsaLevel {
        match self {
            Isa::Scalar | Isa::Simd128 => IsaLevel::Scalar,
            Isa::Avx2 => IsaLevel::Avx2,
            Isa::AvxVnni => IsaLevel::AvxVnni,
            Isa::Avx512 => IsaLevel::Avx512,
            Isa::Neon => IsaLevel::Neon,
        }
    }

    /// Short name for reports: `scalar`, `avx2`, `avx-vnni`, `avx512`, `neon`, `simd128`.
    pub fn name(self) -> &'static str {
        match self {
            Isa::Simd128 => "simd128",
            _ => self.level().name(),
        }
    }

    /// Whether this CPU can run `self` (a test asks before forcing a path).
    pub fn available(self) -> bool {
        match self {
            // WebAssembly has no run-time feature detection: a module either was compiled with
            // SIMD128 (and only validates where the engine has it) or was not.
            Isa::Simd128 => cfg!(all(target_arch = "wasm32", target_feature = "simd128")),
            _ => self.level().is_available(),
        }
    }

    /// The int8 kernel path of this instruction set: the fastest at its level or below.
    pub fn int8_path(self) -> KernelPath {
        KernelPath::best_at(self.level())
    }

    /// The kernel table of this instruction set (the scalar one where this CPU lacks it).
    pub fn kernels(self) -> &'static Kernels {
        match self {
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 if self.available() => &avx512::KERNELS,
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 | Isa::AvxVnni if self.available() => &avx2::KERNELS,
            #[cfg(target_arch = "aarch64")]
            Isa::Neon => &neon::KERNELS,
            #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
            Isa::Simd128 => &simd128::KERNELS,
            _ => &scalar::KERNELS,
        }
    }
}

impl std::fmt::Display for Isa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A table's LayerNorm: rows of `x`, output, width `d`, weight, optional bias, epsilon.
pub(crate) type LayerNormFn = unsafe fn(&[f32], &mut [f32], usize, &[f32], Option<&[f32]>, f32);

/// One instruction set's kernels. Every entry is `unsafe` to call only because the vector
/// tables need their CPU features: a table is handed out by [`Isa::kernels`] only where the CPU
/// has them, and the safe wrappers below check the slice bounds each entry relies on.
pub struct Kernels {
    /// `C (+)= A · B` into C at the pointer, while pulling the last slice (what the caller
    /// multiplies next; see [`Ahead`]) towards the cache. Safety: the CPU runs this table;
    /// `g.check` passed for the C at the pointer, and no other thread touches this product's
    /// elements of C during the call.
    pub(crate) gemm: unsafe fn(Gemm, &[f32], &[f32], *mut f32, &[f32]),
    /// LayerNorm rows (see [`layer_norm`]). Safety: the CPU runs this table; `w` (and `b`)
    /// hold at least `d` values and `out` at least `x.len()`.
    pub(crate) layer_norm: LayerNormFn,
    /// Scaled softmax of one row over a range inside it (see [`softmax_scaled`]). Safety: the
    /// CPU runs this table; the range lies inside the row.
    pub(crate) softmax_scaled: unsafe fn(&mut [f32], f32, Range<usize>),
    /// GeGLU of one row (see [`geglu_row`]). Safety: the CPU runs this table; `z` holds at
    /// least twice `out.len()` values.
    pub(crate) geglu: unsafe fn(&[f32], &mut [f32]),
    /// The transpose of a block (see [`transpose`]). Safety: the CPU runs this table; the
    /// block's elements lie inside both slices.
    pub(crate) transpose: TransposeFn,
}

/// A table's transpose: source, its row stride, rows, columns, destination, its row stride.
pub(crate) type TransposeFn = unsafe fn(&[f32], usize, usize, usize, &mut [f32], usize);

/// Partial sums of a reduction (see the module docs).
pub const LANES: usize = 16;

/// `a * b + c` with one rounding on every native target (`f32::mul_add`: the FMA instruction
/// in code compiled with FMA, which every vector path and the portable one on an FMA CPU are; a
/// libm call elsewhere), two on wasm32, which has no fused multiply-add.
#[inline(always)]
pub fn fmadd(a: f32, b: f32, c: f32) -> f32 {
    #[cfg(target_arch = "wasm32")]
    {
        a * b + c
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        a.mul_add(b, c)
    }
}

/// The fixed reduction tree of [`LANES`] partial sums: halves added lane by lane
/// (`p[l] + p[l + 8]`, then `+ 4`, `+ 2`, `+ 1`).
#[inline(always)]
pub fn fold16<T: Copy + std::ops::Add<Output = T>>(mut p: [T; LANES]) -> T {
    let mut half = LANES / 2;
    while half > 0 {
        for l in 0..half {
            p[l] = p[l] + p[l + half];
        }
        half /= 2;
    }
    p[0]
}

/// Shapes and strides of one `C (+)= A · B` call.
#[derive(Debug, Clone, Copy)]
pub struct Gemm {
    /// Rows of A and C.
    pub m: usize,
    /// Columns of B and C.
    pub n: usize,
    /// Columns of A, rows of B.
    pub k: usize,
    /// Row stride of A.
    pub lda: usize,
    /// Row stride of B.
    pub ldb: usize,
    /// Row stride of C.
    pub ldc: usize,
    /// Add to C instead of overwriting it.
    pub accumulate: bool,
}

impl Gemm {
    /// Asserts that A, B and a C of `c_len` elements hold every element the product reads
    /// or writes.
    fn check(&self, a: &[f32], b: &[f32], c_len: usize) {
        // Internal invariant (callers are this crate's forward pass): out-of-bounds strides
        // would be a bug here, not bad user input.
        if self.m == 0 || self.n == 0 {
            return;
        }
        assert!(
            self.k == 0 || a.len() >= (self.m - 1) * self.lda + self.k,
            "gemm: A too short"
        );
        assert!(
            self.k == 0 || b.len() >= (self.k - 1) * self.ldb + self.n,
            "gemm: B too short"
        );
        assert!(
            c_len >= (self.m - 1) * self.ldc + self.n,
            "gemm: C too short"
        );
        assert!(self.lda >= self.k && self.ldb >= self.n && self.ldc >= self.n);
    }
}

/// `C (+)= A · B` on the given instruction set (scalar where the CPU lacks it).
pub fn gemm(isa: Isa, g: Gemm, a: &[f32], b: &[f32], c: &mut [f32]) {
    // SAFETY: `c` is exclusively borrowed for the call and holds `c.len()` elements.
    unsafe { gemm_raw(isa, g, a, b, c.as_mut_ptr(), c.len(), &[]) }
}

/// [`gemm`] into a C given as a pointer, so that threads can write disjoint column ranges of
/// one row-major output (the column split of the forward pass's weight products). Same
/// operations in the same order per element as [`gemm`].
///
/// `ahead`: the B the caller multiplies next (the next panel of a packed weight), or empty;
/// see [`Ahead`]. It changes no result.
///
/// # Safety
/// `c` is valid for reads and writes of `c_len` elements, and no other thread reads or writes
/// the elements this product touches (`c[i * ldc + j]`, `i < m`, `j < n`) during the call.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn gemm_raw(
    isa: Isa,
    g: Gemm,
    a: &[f32],
    b: &[f32],
    c: *mut f32,
    c_len: usize,
    ahead: &[f32],
) {
    g.check(a, b, c_len);
    if g.m == 0 || g.n == 0 {
        return;
    }
    // SAFETY: `kernels` hands out a table only where the CPU runs it; bounds were checked by
    // `g.check`, and the caller guarantees exclusive access to the touched elements of C.
    unsafe { (isa.kernels().gemm)(g, a, b, c, ahead) }
}

/// Rows of the next tile of a product with `left` rows to go, tiles of at most `full` rows
/// (two accumulators per row). A tile of fewer than 4 rows has fewer than the 8 independent
/// chains that keep two fused multiply-add pipes of latency 4 busy, and runs at its latency:
/// so when a full tile would leave 1 to 3 rows, the last `full + 1` to `full + 3` rows go as
/// two tiles of about half (9 rows in AVX-512 tiles of 8: 5 and 4, not 8 and 1). Which tile
/// computes a row changes none of its bits.
#[cfg(target_arch = "x86_64")]
pub(crate) fn tile_rows(left: usize, full: usize) -> usize {
    if left > full && left < full + 4 {
        left - left / 2
    } else {
        left.min(full)
    }
}

/// f32 values per 64-byte cache line.
#[cfg(target_arch = "x86_64")]
pub(crate) const LINE: usize = 16;

/// The B a product's caller multiplies next, pulled into L2 while this product runs.
///
/// A packed weight streams each panel from memory once per pass, and the first row tile of a
/// panel waits on that stream: its products need a panel row every few cycles, faster than
/// one core reads memory. So the tiles of each panel's product prefetch the next panel, one
/// cache line per step along `k`, in their order from the first tile until every line is
/// asked for (two tiles for a 32-column panel). Prefetches read nothing and change no result.
///
/// The x86-64 paths use it (`prefetcht1`); the NEON, SIMD128 and portable ones leave the
/// stream to the CPU.
#[cfg(target_arch = "x86_64")]
pub(crate) struct Ahead {
    ptr: *const f32,
    /// Lines not yet handed to a tile.
    lines: usize,
}

#[cfg(target_arch = "x86_64")]
impl Ahead {
    pub(crate) fn new(ahead: &[f32]) -> Ahead {
        Ahead {
            ptr: ahead.as_ptr(),
            lines: ahead.len().div_ceil(LINE),
        }
    }

    /// The lines the next tile prefetches, one per step along `k`: their first value and how
    /// many (at most `k`; every line starts inside the slice).
    #[inline(always)]
    pub(crate) fn take(&mut self, k: usize) -> (*const f32, usize) {
        let n = self.lines.min(k);
        let first = self.ptr;
        self.lines -= n;
        self.ptr = self.ptr.wrapping_add(n * LINE);
        (first, n)
    }

    /// Step `p` of a tile's loop along `k`: the `p`-th of the lines [`Ahead::take`] handed
    /// it, into L2; nothing once they are all asked for.
    #[inline(always)]
    pub(crate) fn fetch((first, lines): (*const f32, usize), p: usize) {
        if p < lines {
            // SAFETY: a prefetch reads nothing and never faults, and SSE is part of x86-64;
            // the line starts inside the slice besides (`take`).
            unsafe {
                std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T1 }>(
                    first.wrapping_add(p * LINE).cast(),
                )
            };
        }
    }
}

/// The portable matrix product (the definition every path reproduces).
pub fn gemm_scalar(g: Gemm, a: &[f32], b: &[f32], c: &mut [f32]) {
    gemm(Isa::Scalar, g, a, b, c)
}

/// LayerNorm of each `d`-wide row of `x` into `out`: population variance, optional bias.
/// Mean and variance are accumulated in f64 (cheap next to the matmuls, and keeps the massive
/// ~20x channels of these models from costing precision), in the reduction order of the
/// module docs.
pub fn layer_norm(
    isa: Isa,
    x: &[f32],
    out: &mut [f32],
    d: usize,
    w: &[f32],
    b: Option<&[f32]>,
    eps: f32,
) {
    assert!(w.len() >= d && b.is_none_or(|b| b.len() >= d) && out.len() >= x.len());
    if d == 0 {
        return;
    }
    // SAFETY: the table runs on this CPU (`kernels`); the lengths were checked above.
    unsafe { (isa.kernels().layer_norm)(x, out, d, w, b, eps) }
}

/// In-place softmax of one row (f32, max-subtracted).
pub fn softmax_row(isa: Isa, row: &mut [f32]) {
    let len = row.len();
    softmax_scaled(isa, row, 1.0, 0..len);
}

/// In-place attention softmax of one score row: `softmax(scale * row)` over the columns in
/// `valid`, 0 elsewhere (the keys a sliding window masks out).
pub fn softmax_scaled(isa: Isa, row: &mut [f32], scale: f32, valid: Range<usize>) {
    let end = valid.end.min(row.len());
    let valid = valid.start.min(end)..end;
    // SAFETY: the table runs on this CPU (`kernels`); `valid` was clamped into the row.
    unsafe { (isa.kernels().softmax_scaled)(row, scale, valid) }
}

/// `dst[c * ldd + r] = src[r * lds + c]` for `r < rows`, `c < cols`: a block copied
/// transposed (attention's Kᵀ), in register tiles where the instruction set has them. A copy,
/// so every path gives the same bits.
pub fn transpose(
    isa: Isa,
    src: &[f32],
    lds: usize,
    rows: usize,
    cols: usize,
    dst: &mut [f32],
    ldd: usize,
) {
    if rows == 0 || cols == 0 {
        return;
    }
    assert!(
        lds >= cols && ldd >= rows,
        "transpose: strides below the block"
    );
    assert!(
        src.len() >= (rows - 1) * lds + cols && dst.len() >= (cols - 1) * ldd + rows,
        "transpose: block outside the buffers"
    );
    // SAFETY: the table runs on this CPU (`kernels`); the bounds were checked above.
    unsafe { (isa.kernels().transpose)(src, lds, rows, cols, dst, ldd) }
}

/// GeGLU of one row: `out[j] = GELU(z[j]) * z[f + j]` with `f = out.len()`, `z.len() >= 2f`.
pub fn geglu_row(isa: Isa, z: &[f32], out: &mut [f32]) {
    assert!(z.len() >= 2 * out.len(), "geglu: z too short");
    // SAFETY: the table runs on this CPU (`kernels`); the length was checked above.
    unsafe { (isa.kernels().geglu)(z, out) }
}

// The scalar definitions of the element-wise functions, shared by every path's tails.

/// 1 / sqrt(variance + eps) from the sum of squared deviations over `d` columns.
#[inline(always)]
pub(crate) fn layer_norm_rstd(sq_dev_sum: f64, d: usize, eps: f32) -> f32 {
    (1.0 / (sq_dev_sum / d as f64 + eps as f64).sqrt()) as f32
}

/// `acc` plus the elements of `xs` in f64, in order.
#[inline(always)]
pub(crate) fn add_f64(acc: f64, xs: &[f32]) -> f64 {
    xs.iter().fold(acc, |sum, &v| sum + v as f64)
}

/// `acc` plus the squared deviations of `xs` from `mean` in f64, in order (multiply, then
/// add: in f64 the second rounding costs nothing that matters, and no path needs an f64 FMA).
#[inline(always)]
pub(crate) fn add_sq_dev_f64(acc: f64, xs: &[f32], mean: f64) -> f64 {
    xs.iter().fold(acc, |sum, &v| {
        let t = v as f64 - mean;
        sum + t * t
    })
}

/// `((x - mean) * rstd) * w (+ b)` for the columns `from..` of one row.
#[inline(always)]
pub(crate) fn normalize_from(
    from: usize,
    row: &[f32],
    orow: &mut [f32],
    mean: f32,
    rstd: f32,
    w: &[f32],
    b: Option<&[f32]>,
) {
    for j in from..row.len() {
        let v = (row[j] - mean) * rstd * w[j];
        orow[j] = match b {
            Some(b) => v + b[j],
            None => v,
        };
    }
}

/// erf(x) in f64, accurate to ~5e-14 absolute: Maclaurin series for |x| < 3, a continued
/// fraction for erfc beyond. Rust's std has no stable erf.
pub fn erf64(x: f64) -> f64 {
    let ax = x.abs();
    let r = if ax < 3.0 {
        // erf(x) = 2/sqrt(pi) * sum_n (-1)^n x^(2n+1) / (n! (2n+1))
        let x2 = ax * ax;
        let mut term = ax; // (-1)^n x^(2n+1) / n!
        let mut sum = ax;
        let mut n = 0.0f64;
        while n < 80.0 {
            n += 1.0;
            term *= -x2 / n;
            let add = term / (2.0 * n + 1.0);
            sum += add;
            if add.abs() <= 1e-17 * sum.abs() {
                break;
            }
        }
        sum * std::f64::consts::FRAC_2_SQRT_PI
    } else {
        // erfc(x) = exp(-x^2)/sqrt(pi) / (x + (1/2)/(x + 1/(x + (3/2)/(x + 2/(x + ...)))))
        let mut f = ax;
        let mut k = 60.0f64;
        while k >= 1.0 {
            f = ax + (k / 2.0) / f;
            k -= 1.0;
        }
        1.0 - (-ax * ax).exp() / std::f64::consts::PI.sqrt() / f
    };
    if x < 0.0 {
        -r
    } else {
        r
    }
}

/// Steps per unit of the erf table.
const ERF_STEPS: usize = 64;
/// The table covers [0, ERF_MAX]; beyond, erf = ±1 (erfc(4) = 1.5e-8).
const ERF_MAX: usize = 4;

/// erf and its derivative at k / ERF_STEPS, for cubic Hermite interpolation (error < 1e-9).
fn erf_table() -> &'static [(f64, f64)] {
    static TABLE: std::sync::OnceLock<Vec<(f64, f64)>> = std::sync::OnceLock::new();
    TABLE.get_or_init(|| {
        (0..=ERF_STEPS * ERF_MAX + 1)
            .map(|k| {
                let x = k as f64 / ERF_STEPS as f64;
                (erf64(x), std::f64::consts::FRAC_2_SQRT_PI * (-x * x).exp())
            })
            .collect()
    })
}

/// erf(x) from the table: |error| < 1e-9 inside [-4, 4], erfc(4) = 1.5e-8 beyond.
#[inline]
pub fn erf_fast(x: f64) -> f64 {
    let ax = x.abs();
    let pos = ax * ERF_STEPS as f64;
    if pos >= (ERF_STEPS * ERF_MAX) as f64 {
        return if x < 0.0 { -1.0 } else { 1.0 };
    }
    let table = erf_table();
    let k = pos as usize;
    let t = pos - k as f64;
    let h = 1.0 / ERF_STEPS as f64;
    let (y0, d0) = table[k];
    let (y1, d1) = table[k + 1];
    // Cubic Hermite basis.
    let t2 = t * t;
    let t3 = t2 * t;
    let r = (2.0 * t3 - 3.0 * t2 + 1.0) * y0
        + (t3 - 2.0 * t2 + t) * h * d0
        + (-2.0 * t3 + 3.0 * t2) * y1
        + (t3 - t2) * h * d1;
    if x < 0.0 {
        -r
    } else {
        r
    }
}

/// Exact (erf) GELU, 0.5 x (1 + erf(x / sqrt 2)), evaluated in f64 and rounded to f32.
#[inline]
pub fn gelu_erf(x: f32) -> f32 {
    let xd = x as f64;
    (0.5 * xd * (1.0 + erf_fast(xd * std::f64::consts::FRAC_1_SQRT_2))) as f32
}

/// The lower clamp of [`exp_fast`] (below it the result is the smallest normal-ish value).
pub(crate) const EXP_LO: f32 = -87.3;
/// The upper clamp of [`exp_fast`].
pub(crate) const EXP_HI: f32 = 88.3;
/// ln 2 in two parts for the Cody-Waite reduction.
pub(crate) const LN2_HI: f32 = 0.693_145_75;
pub(crate) const LN2_LO: f32 = 1.428_606_8e-6;
/// The degree-6 polynomial of [`exp_fast`], highest coefficient first.
pub(crate) const EXP_POLY: [f32; 6] = [
    1.987_569_1e-4,
    1.398_199_9e-3,
    8.333_452e-3,
    4.166_579_6e-2,
    1.666_666_5e-1,
    0.5,
];

/// Fast f32 exp (Cephes-style range reduction + degree-6 polynomial, ~2 ulp): the definition
/// every path's vector exp reproduces. Inputs below -87.3 give about 1e-38.
#[inline(always)]
pub fn exp_fast(x: f32) -> f32 {
    let x = x.clamp(EXP_LO, EXP_HI);
    // Round to nearest even by the 1.5 * 2^23 trick (no libm call; |x log2 e| < 2^22, so
    // this is exactly the vector paths' round-to-nearest instruction).
    let n = (x * std::f32::consts::LOG2_E + 12_582_912.0) - 12_582_912.0;
    // Two-step Cody-Waite reduction: r = x - n ln2.
    let r = fmadd(-n, LN2_HI, x);
    let r = fmadd(-n, LN2_LO, r);
    let mut p = EXP_POLY[0];
    for c in &EXP_POLY[1..] {
        p = fmadd(p, r, *c);
    }
    let y = fmadd(p * r, r, r) + 1.0;
    let bits = ((n as i32 + 127) << 23) as u32;
    y * f32::from_bits(bits)
}

/// A&S 7.1.26's `t` polynomial, highest coefficient first.
pub(crate) const ERF_POLY: [f32; 5] = [
    1.061_405_4,
    -1.453_152,
    1.421_413_8,
    -0.284_496_74,
    0.254_829_6,
];
/// A&S 7.1.26's `p`.
pub(crate) const ERF_P: f32 = 0.327_591_1;

/// erf in f32 as PyTorch's vectorised CPU kernel computes it (Abramowitz & Stegun 7.1.26,
/// |error| < 1.5e-7): this is what the f32 reference's GELU uses on AVX2/AVX-512 machines.
#[inline(always)]
pub fn erf_as(x: f32) -> f32 {
    let a = x.abs();
    let t = 1.0 / fmadd(ERF_P, a, 1.0);
    let mut r = ERF_POLY[0];
    for c in &ERF_POLY[1..] {
        r = fmadd(r, t, *c);
    }
    let r = r * t;
    let y = fmadd(-r, exp_fast(-(a * a)), 1.0);
    // erf is odd: y with the sign of x (the vector paths copy the sign bit).
    y.copysign(x)
}

/// GELU(x) * gate with the A&S erf: `((0.5 x) (1 + erf(x / sqrt 2))) gate`.
#[inline(always)]
pub(crate) fn geglu_one(x: f32, gate: f32) -> f32 {
    0.5 * x * (1.0 + erf_as(x * std::f32::consts::FRAC_1_SQRT_2)) * gate
}
