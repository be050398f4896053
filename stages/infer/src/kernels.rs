//! Compute kernels: the f32 matrix product and the element-wise functions of the forward pass.
//!
//! Every kernel has a portable scalar body that is always built (it is what wasm32 runs and
//! what the tests compare against). On x86-64 the matrix product has explicit AVX-512F and
//! AVX2+FMA micro-kernels from `std::arch`, chosen once at run time ([`Isa::detect`]).
//!
//! The product is `C = A · B` with `B` row-major `[k][n]`: weights are stored transposed
//! (`Wᵀ`, one row per input channel) so the micro-kernel broadcasts one activation and
//! multiplies a whole row segment of the weight. The same kernel does both attention
//! products (`Q · Kᵀ` with `Kᵀ` materialised per head, and `P · V`).

/// Which instruction set the matrix product uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isa {
    /// Portable Rust (also wasm32).
    Scalar,
    /// x86-64 AVX2 + FMA, 8 lanes.
    Avx2,
    /// x86-64 AVX-512F, 16 lanes.
    Avx512,
    /// WebAssembly SIMD128, 4 lanes (a module built with `-C target-feature=+simd128`).
    Simd128,
}

impl Isa {
    /// The best instruction set this CPU supports.
    pub fn detect() -> Isa {
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx512f") {
                return Isa::Avx512;
            }
            if std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("fma")
            {
                return Isa::Avx2;
            }
        }
        if Isa::Simd128.available() {
            return Isa::Simd128;
        }
        Isa::Scalar
    }

    /// Whether this CPU can run `self` (a test asks before forcing a path).
    pub fn available(self) -> bool {
        match self {
            Isa::Scalar => true,
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => {
                std::arch::is_x86_feature_detected!("avx2")
                    && std::arch::is_x86_feature_detected!("fma")
            }
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => std::arch::is_x86_feature_detected!("avx512f"),
            // WebAssembly has no run-time feature detection: a module either was compiled with
            // SIMD128 (and only validates where the engine has it) or was not.
            Isa::Simd128 => cfg!(all(target_arch = "wasm32", target_feature = "simd128")),
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }
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

/// `C (+)= A · B` on the given instruction set (falls back to scalar when unavailable).
pub fn gemm(isa: Isa, g: Gemm, a: &[f32], b: &[f32], c: &mut [f32]) {
    // SAFETY: `c` is exclusively borrowed for the call and holds `c.len()` elements.
    unsafe { gemm_raw(isa, g, a, b, c.as_mut_ptr(), c.len()) }
}

/// [`gemm`] into a C given as a pointer, so that threads can write disjoint column ranges of
/// one row-major output (the column split of the forward pass's weight products). Same
/// operations in the same order per element as [`gemm`].
///
/// # Safety
/// `c` is valid for reads and writes of `c_len` elements, and no other thread reads or writes
/// the elements this product touches (`c[i * ldc + j]`, `i < m`, `j < n`) during the call.
pub(crate) unsafe fn gemm_raw(isa: Isa, g: Gemm, a: &[f32], b: &[f32], c: *mut f32, c_len: usize) {
    g.check(a, b, c_len);
    if g.m == 0 || g.n == 0 {
        return;
    }
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 if Isa::Avx512.available() => {
            // SAFETY: avx512f was detected on this CPU; bounds were checked by `g.check`, and
            // the caller guarantees exclusive access to the touched elements of C.
            unsafe { x86::gemm_avx512(g, a, b, c) }
        }
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 if Isa::Avx2.available() => {
            // SAFETY: avx2+fma were detected on this CPU; bounds and C as above.
            unsafe { x86::gemm_avx2(g, a, b, c) }
        }
        #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
        Isa::Simd128 => {
            // SAFETY: bounds were checked by `g.check` (SIMD128 is a compile-time feature
            // here); C as above.
            unsafe { wasm::gemm_simd128(g, a, b, c) }
        }
        // SAFETY: bounds were checked by `g.check`; C as above.
        _ => unsafe { gemm_scalar_raw(g, a, b, c) },
    }
}

/// Portable matrix product: 4 rows x 16 columns per tile, the same loop order as the SIMD
/// kernels (a `k`-panel of B stays in cache across all row tiles).
pub fn gemm_scalar(g: Gemm, a: &[f32], b: &[f32], c: &mut [f32]) {
    g.check(a, b, c.len());
    // SAFETY: bounds were just checked; `c` is exclusively borrowed for the call.
    unsafe { gemm_scalar_raw(g, a, b, c.as_mut_ptr()) }
}

/// [`gemm_scalar`] into a C given as a pointer (see [`gemm_raw`]).
///
/// # Safety
/// `g.check(a, b, len)` passed for a C of `len` elements at `c`, and no other thread reads or
/// writes the elements this product touches during the call.
unsafe fn gemm_scalar_raw(g: Gemm, a: &[f32], b: &[f32], c: *mut f32) {
    const MR: usize = 4;
    const NR: usize = 16;
    let mut j0 = 0;
    while j0 < g.n {
        let cols = NR.min(g.n - j0);
        let mut i0 = 0;
        while i0 < g.m {
            let rows = MR.min(g.m - i0);
            let mut acc = [[0f32; NR]; MR];
            if g.accumulate {
                for (r, acc_r) in acc.iter_mut().enumerate().take(rows) {
                    let base = (i0 + r) * g.ldc + j0;
                    for (q, v) in acc_r.iter_mut().enumerate().take(cols) {
                        // SAFETY: `base + q` is an element of this product (checked bounds).
                        *v = unsafe { *c.add(base + q) };
                    }
                }
            }
            for p in 0..g.k {
                let brow = &b[p * g.ldb + j0..p * g.ldb + j0 + cols];
                for (r, acc_r) in acc.iter_mut().enumerate().take(rows) {
                    let av = a[(i0 + r) * g.lda + p];
                    for (acc_v, &bv) in acc_r.iter_mut().zip(brow) {
                        *acc_v += av * bv;
                    }
                }
            }
            for (r, acc_r) in acc.iter().enumerate().take(rows) {
                let base = (i0 + r) * g.ldc + j0;
                for (q, &v) in acc_r.iter().enumerate().take(cols) {
                    // SAFETY: as above.
                    unsafe { *c.add(base + q) = v };
                }
            }
            i0 += rows;
        }
        j0 += cols;
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::Gemm;
    use std::arch::x86_64::*;

    /// AVX-512 driver: tiles of up to 8 rows x 32 columns (16 zmm accumulators).
    ///
    /// # Safety
    /// avx512f is available; `g.check` passed for the C at `c`, and no other thread touches
    /// this product's elements of C during the call.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn gemm_avx512(g: Gemm, a: &[f32], b: &[f32], c: *mut f32) {
        let mut j0 = 0;
        while j0 < g.n {
            let cols = 32.min(g.n - j0);
            let mut i0 = 0;
            while i0 < g.m {
                let rows = 8.min(g.m - i0);
                // SAFETY (all arms): tile indices stay inside the bounds `Gemm::check` verified.
                match rows {
                    8 => tile512::<8>(g, a, b, c, i0, j0, cols),
                    7 => tile512::<7>(g, a, b, c, i0, j0, cols),
                    6 => tile512::<6>(g, a, b, c, i0, j0, cols),
                    5 => tile512::<5>(g, a, b, c, i0, j0, cols),
                    4 => tile512::<4>(g, a, b, c, i0, j0, cols),
                    3 => tile512::<3>(g, a, b, c, i0, j0, cols),
                    2 => tile512::<2>(g, a, b, c, i0, j0, cols),
                    _ => tile512::<1>(g, a, b, c, i0, j0, cols),
                }
                i0 += rows;
            }
            j0 += cols;
        }
    }

    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn tile512<const R: usize>(
        g: Gemm,
        a: &[f32],
        b: &[f32],
        c: *mut f32,
        i0: usize,
        j0: usize,
        cols: usize,
    ) {
        // Lane masks for the two 16-wide halves of the 32-column tile: the tail of a row is
        // loaded and stored with masks, so no element outside [j0, j0 + cols) is touched.
        let m0: __mmask16 = if cols >= 16 {
            0xffff
        } else {
            ((1u32 << cols) - 1) as u16
        };
        let m1: __mmask16 = if cols >= 32 {
            0xffff
        } else if cols > 16 {
            ((1u32 << (cols - 16)) - 1) as u16
        } else {
            0
        };
        let cp = c;
        let ap = a.as_ptr();
        let bp = b.as_ptr();
        let mut acc0 = [_mm512_setzero_ps(); R];
        let mut acc1 = [_mm512_setzero_ps(); R];
        if g.accumulate {
            for r in 0..R {
                let base = cp.add((i0 + r) * g.ldc + j0);
                acc0[r] = _mm512_maskz_loadu_ps(m0, base);
                acc1[r] = _mm512_maskz_loadu_ps(m1, base.add(16));
            }
        }
        for p in 0..g.k {
            let brow = bp.add(p * g.ldb + j0);
            let b0 = _mm512_maskz_loadu_ps(m0, brow);
            let b1 = _mm512_maskz_loadu_ps(m1, brow.add(16));
            for r in 0..R {
                let av = _mm512_set1_ps(*ap.add((i0 + r) * g.lda + p));
                acc0[r] = _mm512_fmadd_ps(av, b0, acc0[r]);
                acc1[r] = _mm512_fmadd_ps(av, b1, acc1[r]);
            }
        }
        for r in 0..R {
            let base = cp.add((i0 + r) * g.ldc + j0);
            _mm512_mask_storeu_ps(base, m0, acc0[r]);
            _mm512_mask_storeu_ps(base.add(16), m1, acc1[r]);
        }
    }

    /// Rows per AVX2 tile. 6 x 16 keeps 12 accumulators, the two B vectors and one broadcast
    /// in 15 of the 16 ymm registers: 6 FMAs per pair of B loads instead of 4.
    const AVX2_ROWS: usize = 6;

    /// AVX2 driver: tiles of up to [`AVX2_ROWS`] rows x 16 columns; column tails narrower
    /// than 16 go through the portable kernel.
    ///
    /// # Safety
    /// avx2 and fma are available; C as for [`gemm_avx512`].
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn gemm_avx2(g: Gemm, a: &[f32], b: &[f32], c: *mut f32) {
        let full = g.n / 16 * 16;
        let mut j0 = 0;
        while j0 < full {
            let mut i0 = 0;
            while i0 < g.m {
                let rows = AVX2_ROWS.min(g.m - i0);
                // SAFETY (all arms): tile indices stay inside the bounds `Gemm::check` verified.
                match rows {
                    6 => tile256::<6>(g, a, b, c, i0, j0),
                    5 => tile256::<5>(g, a, b, c, i0, j0),
                    4 => tile256::<4>(g, a, b, c, i0, j0),
                    3 => tile256::<3>(g, a, b, c, i0, j0),
                    2 => tile256::<2>(g, a, b, c, i0, j0),
                    _ => tile256::<1>(g, a, b, c, i0, j0),
                }
                i0 += rows;
            }
            j0 += 16;
        }
        if full < g.n {
            // Column tail: the portable kernel on the remaining columns.
            let rest = Gemm { n: g.n - full, ..g };
            super::gemm_scalar_raw(rest, a, &b[full..], c.add(full));
        }
    }

    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn tile256<const R: usize>(
        g: Gemm,
        a: &[f32],
        b: &[f32],
        c: *mut f32,
        i0: usize,
        j0: usize,
    ) {
        let cp = c;
        let ap = a.as_ptr();
        let bp = b.as_ptr();
        let mut acc0 = [_mm256_setzero_ps(); R];
        let mut acc1 = [_mm256_setzero_ps(); R];
        if g.accumulate {
            for r in 0..R {
                let base = cp.add((i0 + r) * g.ldc + j0);
                acc0[r] = _mm256_loadu_ps(base);
                acc1[r] = _mm256_loadu_ps(base.add(8));
            }
        }
        for p in 0..g.k {
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
            let base = cp.add((i0 + r) * g.ldc + j0);
            _mm256_storeu_ps(base, acc0[r]);
            _mm256_storeu_ps(base.add(8), acc1[r]);
        }
    }
}

/// LayerNorm of each `d`-wide row of `x` into `out`: population variance, optional bias.
/// Mean and variance are accumulated in f64 (cheap next to the matmuls, and keeps the massive
/// ~20x channels of these models from costing precision). The AVX-512 body sums in eight f64
/// lanes, the AVX2 body in four; the scalar body (what calibration runs, for machine-independent
/// statistics) sums in order.
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
    match isa {
        // SAFETY: avx512f was detected on this CPU; the lengths were checked above.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 if isa.available() => unsafe {
            x86_elementwise::layer_norm_avx512(x, out, d, w, b, eps)
        },
        // SAFETY: avx2+fma were detected on this CPU; the lengths were checked above.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 if isa.available() => unsafe {
            x86_elementwise::layer_norm_avx2(x, out, d, w, b, eps)
        },
        #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
        Isa::Simd128 => wasm::layer_norm_simd128(x, out, d, w, b, eps),
        _ => layer_norm_scalar(x, out, d, w, b, eps),
    }
}

fn layer_norm_scalar(x: &[f32], out: &mut [f32], d: usize, w: &[f32], b: Option<&[f32]>, eps: f32) {
    for (row, orow) in x.chunks_exact(d).zip(out.chunks_exact_mut(d)) {
        let mean = add_f64(0.0, row) / d as f64;
        let rstd = layer_norm_rstd(add_sq_dev_f64(0.0, row, mean), d, eps);
        normalize_from(0, row, orow, mean as f32, rstd, w, b);
    }
}

// The scalar pieces of LayerNorm, in the scalar body's order; the SIMD bodies use them for
// the columns past their last full vector.

/// `acc` plus the elements of `xs` in f64, in order.
#[inline(always)]
fn add_f64(acc: f64, xs: &[f32]) -> f64 {
    xs.iter().fold(acc, |sum, &v| sum + v as f64)
}

/// `acc` plus the squared deviations of `xs` from `mean` in f64, in order.
#[inline(always)]
fn add_sq_dev_f64(acc: f64, xs: &[f32], mean: f64) -> f64 {
    xs.iter().fold(acc, |sum, &v| {
        let t = v as f64 - mean;
        sum + t * t
    })
}

/// 1 / sqrt(variance + eps) from the sum of squared deviations over `d` columns.
#[inline(always)]
fn layer_norm_rstd(sq_dev_sum: f64, d: usize, eps: f32) -> f32 {
    (1.0 / (sq_dev_sum / d as f64 + eps as f64).sqrt()) as f32
}

/// `((x - mean) * rstd) * w (+ b)` for the columns `from..` of one row.
#[inline(always)]
fn normalize_from(
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

/// Fast f32 exp (Cephes-style range reduction + degree-6 polynomial, ~2 ulp), written so that
/// the compiler vectorises loops over it. Inputs below -87 flush to 0.
#[inline(always)]
pub fn exp_fast(x: f32) -> f32 {
    let x = x.clamp(-87.3, 88.3);
    // Round to nearest by the 1.5 * 2^23 trick (no libm call, so loops vectorise on SSE2 too).
    let n = (x * std::f32::consts::LOG2_E + 12_582_912.0) - 12_582_912.0;
    // Two-step Cody-Waite reduction: r = x - n ln2.
    let r = x - n * 0.693_145_75 - n * 1.428_606_8e-6;
    let p = 1.987_569_1e-4f32;
    let p = p * r + 1.398_199_9e-3;
    let p = p * r + 8.333_452e-3;
    let p = p * r + 4.166_579_6e-2;
    let p = p * r + 1.666_666_5e-1;
    let p = p * r + 0.5;
    let y = p * r * r + r + 1.0;
    let bits = ((n as i32 + 127) << 23) as u32;
    y * f32::from_bits(bits)
}

#[inline(always)]
fn softmax_body(row: &mut [f32]) {
    let mut max = f32::NEG_INFINITY;
    for &v in row.iter() {
        max = max.max(v);
    }
    // Exponentials first (independent, vectorised), then the sum.
    for v in row.iter_mut() {
        *v = exp_fast(*v - max);
    }
    let mut sum = 0f32;
    for &v in row.iter() {
        sum += v;
    }
    let inv = 1.0 / sum;
    for v in row.iter_mut() {
        *v *= inv;
    }
}

/// erf in f32 as PyTorch's vectorised CPU kernel computes it (Abramowitz & Stegun 7.1.26,
/// |error| < 1.5e-7): this is what the f32 reference's GELU uses on AVX2/AVX-512 machines.
#[inline(always)]
pub fn erf_as(x: f32) -> f32 {
    let a = x.abs();
    let t = 1.0 / (0.327_591_1 * a + 1.0);
    let r = ((((1.061_405_4 * t - 1.453_152) * t + 1.421_413_8) * t - 0.284_496_74) * t
        + 0.254_829_6)
        * t;
    let y = 1.0 - r * exp_fast(-a * a);
    if x < 0.0 {
        -y
    } else {
        y
    }
}

#[inline(always)]
fn geglu_body(z: &[f32], out: &mut [f32]) {
    let f = out.len();
    let (a, g) = z.split_at(f);
    for ((o, &x), &gate) in out.iter_mut().zip(a).zip(&g[..f]) {
        *o = 0.5 * x * (1.0 + erf_as(x * std::f32::consts::FRAC_1_SQRT_2)) * gate;
    }
}

#[cfg(target_arch = "x86_64")]
mod x86_elementwise {
    use std::arch::x86_64::*;
    use std::ops::Range;

    /// `exp_fast` on 16 lanes: the same clamp, reduction and polynomial (with fused
    /// multiply-adds, so within an ulp of the scalar result rather than equal to it).
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn exp512(x: __m512) -> __m512 {
        let x = _mm512_min_ps(
            _mm512_max_ps(x, _mm512_set1_ps(-87.3)),
            _mm512_set1_ps(88.3),
        );
        let n = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
            _mm512_mul_ps(x, _mm512_set1_ps(std::f32::consts::LOG2_E)),
        );
        let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693_145_75), x);
        let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428_606_8e-6), r);
        let mut p = _mm512_set1_ps(1.987_569_1e-4);
        for c in [
            1.398_199_9e-3,
            8.333_452e-3,
            4.166_579_6e-2,
            1.666_666_5e-1,
            0.5,
        ] {
            p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c));
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

    fn tail_mask(len: usize) -> __mmask16 {
        ((1u32 << len) - 1) as u16
    }

    /// Softmax of `scale * row[valid]`, zeros outside `valid`: three passes of 16 lanes
    /// (scale and max, exp and sum, normalise), tails through masks.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn softmax_scaled_avx512(row: &mut [f32], scale: f32, valid: Range<usize>) {
        row[..valid.start].fill(0.0);
        row[valid.end..].fill(0.0);
        let seg = &mut row[valid];
        let len = seg.len();
        if len == 0 {
            return;
        }
        let p = seg.as_mut_ptr();
        let full = len / 16 * 16;
        let tail = tail_mask(len - full);
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
            let e = exp512(_mm512_sub_ps(_mm512_loadu_ps(p.add(i)), maxs));
            _mm512_storeu_ps(p.add(i), e);
            sumv = _mm512_add_ps(sumv, e);
            i += 16;
        }
        if tail != 0 {
            let e = exp512(_mm512_sub_ps(
                _mm512_maskz_loadu_ps(tail, p.add(full)),
                maxs,
            ));
            _mm512_mask_storeu_ps(p.add(full), tail, e);
            sumv = _mm512_mask_add_ps(sumv, tail, sumv, e);
        }
        let inv = _mm512_set1_ps(1.0 / _mm512_reduce_add_ps(sumv));
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

    /// LayerNorm rows with the mean and variance summed in eight f64 lanes (16 inputs per
    /// step, two accumulators); the columns past the last multiple of 16 are added in order.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn layer_norm_avx512(
        x: &[f32],
        out: &mut [f32],
        d: usize,
        w: &[f32],
        b: Option<&[f32]>,
        eps: f32,
    ) {
        let full = d / 16 * 16;
        for (row, orow) in x.chunks_exact(d).zip(out.chunks_exact_mut(d)) {
            let rp = row.as_ptr();
            // SAFETY (all loads and stores): offsets below `full <= d` in a `d`-long row.
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
            let sum = _mm512_reduce_add_pd(_mm512_add_pd(s0, s1));
            let mean = super::add_f64(sum, &row[full..]) / d as f64;
            let mv = _mm512_set1_pd(mean);
            let (mut q0, mut q1) = (_mm512_setzero_pd(), _mm512_setzero_pd());
            i = 0;
            while i < full {
                let (lo, hi) = widen(i);
                let (t0, t1) = (_mm512_sub_pd(lo, mv), _mm512_sub_pd(hi, mv));
                q0 = _mm512_fmadd_pd(t0, t0, q0);
                q1 = _mm512_fmadd_pd(t1, t1, q1);
                i += 16;
            }
            let var = _mm512_reduce_add_pd(_mm512_add_pd(q0, q1));
            let rstd =
                super::layer_norm_rstd(super::add_sq_dev_f64(var, &row[full..], mean), d, eps);
            let mean = mean as f32;
            let (mf, rf) = (_mm512_set1_ps(mean), _mm512_set1_ps(rstd));
            let op = orow.as_mut_ptr();
            i = 0;
            while i < full {
                // Same operation order as the scalar body: ((x - mean) * rstd) * w (+ b).
                let v = _mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(rp.add(i)), mf), rf);
                let mut v = _mm512_mul_ps(v, _mm512_loadu_ps(w.as_ptr().add(i)));
                if let Some(b) = b {
                    v = _mm512_add_ps(v, _mm512_loadu_ps(b.as_ptr().add(i)));
                }
                _mm512_storeu_ps(op.add(i), v);
                i += 16;
            }
            super::normalize_from(full, row, orow, mean, rstd, w, b);
        }
    }

    /// GeGLU on 16 lanes: `erf_as` (A&S 7.1.26 with `exp512`) written out in intrinsics, as
    /// the compiler does not vectorise the scalar body's sign branch and division well.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn geglu_avx512(z: &[f32], out: &mut [f32]) {
        let f = out.len();
        let (a, g) = z.split_at(f);
        let full = f / 16 * 16;
        let one = _mm512_set1_ps(1.0);
        let half = _mm512_set1_ps(0.5);
        let mut i = 0;
        while i < full {
            // SAFETY: `i + 16 <= full <= f` and `a`, `g`, `out` hold at least `f` elements.
            let x = _mm512_loadu_ps(a.as_ptr().add(i));
            let gate = _mm512_loadu_ps(g.as_ptr().add(i));
            let u = _mm512_mul_ps(x, _mm512_set1_ps(std::f32::consts::FRAC_1_SQRT_2));
            let au = _mm512_abs_ps(u);
            let t = _mm512_div_ps(one, _mm512_fmadd_ps(_mm512_set1_ps(0.327_591_1), au, one));
            let mut r = _mm512_set1_ps(1.061_405_4);
            for c in [-1.453_152, 1.421_413_8, -0.284_496_74, 0.254_829_6] {
                r = _mm512_fmadd_ps(r, t, _mm512_set1_ps(c));
            }
            r = _mm512_mul_ps(r, t);
            let e = exp512(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_mul_ps(au, au)));
            let y = _mm512_fnmadd_ps(r, e, one);
            // erf is odd: give y the sign of u.
            let sign = _mm512_and_si512(_mm512_castps_si512(u), _mm512_set1_epi32(i32::MIN));
            let erf = _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(y), sign));
            let gelu = _mm512_mul_ps(_mm512_mul_ps(half, x), _mm512_add_ps(one, erf));
            _mm512_storeu_ps(out.as_mut_ptr().add(i), _mm512_mul_ps(gelu, gate));
            i += 16;
        }
        for j in full..f {
            out[j] =
                0.5 * a[j] * (1.0 + super::erf_as(a[j] * std::f32::consts::FRAC_1_SQRT_2)) * g[j];
        }
    }

    /// `exp_fast` on 8 lanes: `exp512` with AVX2+FMA instructions (same clamp, reduction and
    /// polynomial, fused multiply-adds).
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn exp256(x: __m256) -> __m256 {
        let x = _mm256_min_ps(
            _mm256_max_ps(x, _mm256_set1_ps(-87.3)),
            _mm256_set1_ps(88.3),
        );
        let n = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
            _mm256_mul_ps(x, _mm256_set1_ps(std::f32::consts::LOG2_E)),
        );
        let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693_145_75), x);
        let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.428_606_8e-6), r);
        let mut p = _mm256_set1_ps(1.987_569_1e-4);
        for c in [
            1.398_199_9e-3,
            8.333_452e-3,
            4.166_579_6e-2,
            1.666_666_5e-1,
            0.5,
        ] {
            p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c));
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
    unsafe fn tail_mask256(len: usize) -> __m256i {
        _mm256_cmpgt_epi32(
            _mm256_set1_epi32(len as i32),
            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
        )
    }

    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn reduce_max256(v: __m256) -> f32 {
        let m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
        let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
        _mm_cvtss_f32(_mm_max_ss(m, _mm_shuffle_ps::<1>(m, m)))
    }

    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn reduce_add256(v: __m256) -> f32 {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps::<1>(s, s)))
    }

    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn reduce_add256d(v: __m256d) -> f64 {
        let s = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd::<1>(v));
        _mm_cvtsd_f64(_mm_add_sd(s, _mm_unpackhi_pd(s, s)))
    }

    /// Softmax of `scale * row[valid]`, zeros outside `valid`: `softmax_scaled_avx512` on
    /// 8 lanes, the tail through `maskload` / `maskstore`.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn softmax_scaled_avx2(row: &mut [f32], scale: f32, valid: Range<usize>) {
        row[..valid.start].fill(0.0);
        row[valid.end..].fill(0.0);
        let seg = &mut row[valid];
        let len = seg.len();
        if len == 0 {
            return;
        }
        let p = seg.as_mut_ptr();
        let full = len / 8 * 8;
        let rest = len - full;
        let tail = tail_mask256(rest);
        let tail_ps = _mm256_castsi256_ps(tail);
        let sv = _mm256_set1_ps(scale);
        let neg_inf = _mm256_set1_ps(f32::NEG_INFINITY);
        let mut maxv = neg_inf;
        let mut i = 0;
        // SAFETY (all loops): `i + 8 <= full <= len` for full vectors; the tail loads and
        // stores only the `rest` lanes that exist (masked lanes are not accessed).
        while i < full {
            let v = _mm256_mul_ps(_mm256_loadu_ps(p.add(i)), sv);
            _mm256_storeu_ps(p.add(i), v);
            maxv = _mm256_max_ps(maxv, v);
            i += 8;
        }
        if rest != 0 {
            let v = _mm256_mul_ps(_mm256_maskload_ps(p.add(full), tail), sv);
            _mm256_maskstore_ps(p.add(full), tail, v);
            maxv = _mm256_max_ps(maxv, _mm256_blendv_ps(neg_inf, v, tail_ps));
        }
        let maxs = _mm256_set1_ps(reduce_max256(maxv));
        let mut sumv = _mm256_setzero_ps();
        i = 0;
        while i < full {
            let e = exp256(_mm256_sub_ps(_mm256_loadu_ps(p.add(i)), maxs));
            _mm256_storeu_ps(p.add(i), e);
            sumv = _mm256_add_ps(sumv, e);
            i += 8;
        }
        if rest != 0 {
            let e = exp256(_mm256_sub_ps(_mm256_maskload_ps(p.add(full), tail), maxs));
            _mm256_maskstore_ps(p.add(full), tail, e);
            sumv = _mm256_add_ps(sumv, _mm256_and_ps(e, tail_ps));
        }
        let inv = _mm256_set1_ps(1.0 / reduce_add256(sumv));
        i = 0;
        while i < full {
            _mm256_storeu_ps(p.add(i), _mm256_mul_ps(_mm256_loadu_ps(p.add(i)), inv));
            i += 8;
        }
        if rest != 0 {
            let v = _mm256_mul_ps(_mm256_maskload_ps(p.add(full), tail), inv);
            _mm256_maskstore_ps(p.add(full), tail, v);
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

    /// LayerNorm rows with the mean and variance summed in four f64 lanes (16 inputs per step,
    /// four accumulators); the columns past the last multiple of 16 are added in order. The
    /// output is written 8 wide in the scalar body's operation order.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn layer_norm_avx2(
        x: &[f32],
        out: &mut [f32],
        d: usize,
        w: &[f32],
        b: Option<&[f32]>,
        eps: f32,
    ) {
        let full = d / 16 * 16;
        let full8 = d / 8 * 8;
        for (row, orow) in x.chunks_exact(d).zip(out.chunks_exact_mut(d)) {
            let rp = row.as_ptr();
            // SAFETY (all loads and stores): offsets below `full <= full8 <= d` in `d`-long
            // rows of `x`, `out`, `w` and `b` (lengths checked by `layer_norm`).
            let mut s = [_mm256_setzero_pd(); 4];
            let mut i = 0;
            while i < full {
                let v = widen16(rp.add(i));
                for (acc, v) in s.iter_mut().zip(v) {
                    *acc = _mm256_add_pd(*acc, v);
                }
                i += 16;
            }
            let sum = reduce_add256d(_mm256_add_pd(
                _mm256_add_pd(s[0], s[1]),
                _mm256_add_pd(s[2], s[3]),
            ));
            let mean = super::add_f64(sum, &row[full..]) / d as f64;
            let mv = _mm256_set1_pd(mean);
            let mut q = [_mm256_setzero_pd(); 4];
            i = 0;
            while i < full {
                let v = widen16(rp.add(i));
                for (acc, v) in q.iter_mut().zip(v) {
                    let t = _mm256_sub_pd(v, mv);
                    *acc = _mm256_fmadd_pd(t, t, *acc);
                }
                i += 16;
            }
            let var = reduce_add256d(_mm256_add_pd(
                _mm256_add_pd(q[0], q[1]),
                _mm256_add_pd(q[2], q[3]),
            ));
            let rstd =
                super::layer_norm_rstd(super::add_sq_dev_f64(var, &row[full..], mean), d, eps);
            let mean = mean as f32;
            let (mf, rf) = (_mm256_set1_ps(mean), _mm256_set1_ps(rstd));
            let op = orow.as_mut_ptr();
            i = 0;
            while i < full8 {
                // Same operation order as the scalar body: ((x - mean) * rstd) * w (+ b),
                // no fused multiply-add.
                let v = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(rp.add(i)), mf), rf);
                let mut v = _mm256_mul_ps(v, _mm256_loadu_ps(w.as_ptr().add(i)));
                if let Some(b) = b {
                    v = _mm256_add_ps(v, _mm256_loadu_ps(b.as_ptr().add(i)));
                }
                _mm256_storeu_ps(op.add(i), v);
                i += 8;
            }
            super::normalize_from(full8, row, orow, mean, rstd, w, b);
        }
    }

    /// GeGLU on 8 lanes: `geglu_avx512` with AVX2+FMA instructions (A&S 7.1.26 with
    /// `exp256`); the tail past the last multiple of 8 runs the scalar formula.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn geglu_avx2(z: &[f32], out: &mut [f32]) {
        let f = out.len();
        let (a, g) = z.split_at(f);
        let full = f / 8 * 8;
        let one = _mm256_set1_ps(1.0);
        let half = _mm256_set1_ps(0.5);
        let sign_bit = _mm256_set1_ps(-0.0);
        let mut i = 0;
        while i < full {
            // SAFETY: `i + 8 <= full <= f` and `a`, `g`, `out` hold at least `f` elements.
            let x = _mm256_loadu_ps(a.as_ptr().add(i));
            let gate = _mm256_loadu_ps(g.as_ptr().add(i));
            let u = _mm256_mul_ps(x, _mm256_set1_ps(std::f32::consts::FRAC_1_SQRT_2));
            let au = _mm256_andnot_ps(sign_bit, u);
            let t = _mm256_div_ps(one, _mm256_fmadd_ps(_mm256_set1_ps(0.327_591_1), au, one));
            let mut r = _mm256_set1_ps(1.061_405_4);
            for c in [-1.453_152, 1.421_413_8, -0.284_496_74, 0.254_829_6] {
                r = _mm256_fmadd_ps(r, t, _mm256_set1_ps(c));
            }
            r = _mm256_mul_ps(r, t);
            let e = exp256(_mm256_sub_ps(_mm256_setzero_ps(), _mm256_mul_ps(au, au)));
            let y = _mm256_fnmadd_ps(r, e, one);
            // erf is odd: give y the sign of u.
            let erf = _mm256_or_ps(y, _mm256_and_ps(u, sign_bit));
            let gelu = _mm256_mul_ps(_mm256_mul_ps(half, x), _mm256_add_ps(one, erf));
            _mm256_storeu_ps(out.as_mut_ptr().add(i), _mm256_mul_ps(gelu, gate));
            i += 8;
        }
        for j in full..f {
            out[j] =
                0.5 * a[j] * (1.0 + super::erf_as(a[j] * std::f32::consts::FRAC_1_SQRT_2)) * g[j];
        }
    }
}

/// WebAssembly SIMD128 kernels (4 f32 lanes). WebAssembly has no fused multiply-add, so every
/// lane does the scalar body's multiplications and additions in the scalar body's order: the
/// matrix product, the exponentials, GELU and the LayerNorm normalisation equal the portable
/// kernels bit for bit; only the horizontal sums (softmax denominator, LayerNorm mean and
/// variance) add in a different order.
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
mod wasm {
    use super::Gemm;
    use core::arch::wasm32::*;
    use std::ops::Range;

    /// Rows and 4-lane column vectors per tile. 4 x 8 keeps 8 accumulators, two B vectors and
    /// a broadcast in registers: V8's x86-64 code generator has 16 xmm registers and keeps
    /// some as scratch, and a 6 x 8 tile (12 accumulators) spilled and ran 1.6x slower.
    const ROWS: usize = 4;
    const VECS: usize = 2;
    const COLS: usize = 4 * VECS;

    /// `C (+)= A · B` in tiles of up to [`ROWS`] rows x [`COLS`] columns, then one 4-column
    /// strip; a tail narrower than 4 goes through the portable kernel. Every element is summed
    /// in the portable kernel's order, so the three give the same bits.
    ///
    /// # Safety
    /// `g.check` must have passed for the C at `c`, and no other thread touches this
    /// product's elements of C during the call.
    pub(super) unsafe fn gemm_simd128(g: Gemm, a: &[f32], b: &[f32], c: *mut f32) {
        let full = g.n / COLS * COLS;
        let mut j0 = 0;
        while j0 < full {
            columns::<VECS>(g, a, b, c, j0);
            j0 += COLS;
        }
        // Attention's Q·Kᵀ has one column per key: up to 7 left over on every row.
        if g.n - j0 >= 4 {
            columns::<1>(g, a, b, c, j0);
            j0 += 4;
        }
        if j0 < g.n {
            let rest = Gemm { n: g.n - j0, ..g };
            super::gemm_scalar_raw(rest, a, &b[j0..], c.add(j0));
        }
    }

    /// Every row tile of the `4 * V` columns from `j0`.
    ///
    /// # Safety
    /// As [`gemm_simd128`], with columns `j0..j0 + 4 * V` inside the checked bounds.
    #[inline(always)]
    unsafe fn columns<const V: usize>(g: Gemm, a: &[f32], b: &[f32], c: *mut f32, j0: usize) {
        let mut i0 = 0;
        while i0 < g.m {
            let rows = ROWS.min(g.m - i0);
            // SAFETY (all arms): tile indices stay inside the bounds `Gemm::check` verified.
            match rows {
                4 => tile::<4, V>(g, a, b, c, i0, j0),
                3 => tile::<3, V>(g, a, b, c, i0, j0),
                2 => tile::<2, V>(g, a, b, c, i0, j0),
                _ => tile::<1, V>(g, a, b, c, i0, j0),
            }
            i0 += rows;
        }
    }

    /// # Safety
    /// Rows `i0..i0 + R` and columns `j0..j0 + 4 * V` are inside the checked bounds.
    #[inline(always)]
    unsafe fn tile<const R: usize, const V: usize>(
        g: Gemm,
        a: &[f32],
        b: &[f32],
        c: *mut f32,
        i0: usize,
        j0: usize,
    ) {
        let cp = c;
        let ap = a.as_ptr();
        let bp = b.as_ptr();
        let mut acc = [[f32x4_splat(0.0); V]; R];
        if g.accumulate {
            for (r, acc_r) in acc.iter_mut().enumerate() {
                let base = cp.add((i0 + r) * g.ldc + j0);
                for (v, acc_v) in acc_r.iter_mut().enumerate() {
                    *acc_v = v128_load(base.add(4 * v) as *const v128);
                }
            }
        }
        for p in 0..g.k {
            let brow = bp.add(p * g.ldb + j0);
            let mut bv = [f32x4_splat(0.0); V];
            for (v, b_v) in bv.iter_mut().enumerate() {
                *b_v = v128_load(brow.add(4 * v) as *const v128);
            }
            for (r, acc_r) in acc.iter_mut().enumerate() {
                // load32_splat: one broadcast-from-memory instruction (vbroadcastss).
                let av = v128_load32_splat(ap.add((i0 + r) * g.lda + p) as *const u32);
                for (acc_v, &b_v) in acc_r.iter_mut().zip(&bv) {
                    *acc_v = f32x4_add(*acc_v, f32x4_mul(av, b_v));
                }
            }
        }
        for (r, acc_r) in acc.iter().enumerate() {
            let base = cp.add((i0 + r) * g.ldc + j0);
            for (v, &acc_v) in acc_r.iter().enumerate() {
                v128_store(base.add(4 * v) as *mut v128, acc_v);
            }
        }
    }

    /// `exp_fast` on 4 lanes: the same clamp, reduction, polynomial and exponent bits.
    #[inline(always)]
    fn exp4(x: v128) -> v128 {
        // pmin / pmax (`a < b ? b : a`): one x86 instruction each, where min / max's IEEE
        // NaN and signed-zero rules cost V8 several; for a clamp to finite bounds the two give
        // the same values, NaN included.
        let x = f32x4_pmin(f32x4_pmax(x, f32x4_splat(-87.3)), f32x4_splat(88.3));
        let magic = f32x4_splat(12_582_912.0);
        let shifted = f32x4_add(f32x4_mul(x, f32x4_splat(std::f32::consts::LOG2_E)), magic);
        let n = f32x4_sub(shifted, magic);
        let r = f32x4_sub(
            f32x4_sub(x, f32x4_mul(n, f32x4_splat(0.693_145_75))),
            f32x4_mul(n, f32x4_splat(1.428_606_8e-6)),
        );
        let mut p = f32x4_splat(1.987_569_1e-4);
        for c in [
            1.398_199_9e-3,
            8.333_452e-3,
            4.166_579_6e-2,
            1.666_666_5e-1,
            0.5,
        ] {
            p = f32x4_add(f32x4_mul(p, r), f32x4_splat(c));
        }
        let one = f32x4_splat(1.0);
        let y = f32x4_add(f32x4_add(f32x4_mul(f32x4_mul(p, r), r), r), one);
        // n + 127 from the bits of `shifted` (1.5 * 2^23 + n, so its low mantissa bits are
        // n): an integer subtract where `i32x4.trunc_sat_f32x4_s` costs V8 about eight x86
        // instructions for its NaN and overflow cases, which the clamp above rules out.
        let biased = i32x4_sub(shifted, i32x4_splat(0x4B40_0000 - 127));
        let bits = i32x4_shl(biased, 23);
        f32x4_mul(y, bits)
    }

    #[inline(always)]
    fn lanes(v: v128) -> [f32; 4] {
        [
            f32x4_extract_lane::<0>(v),
            f32x4_extract_lane::<1>(v),
            f32x4_extract_lane::<2>(v),
            f32x4_extract_lane::<3>(v),
        ]
    }

    /// The first 4 elements of `s` (panics if there are fewer: callers pass 4-element chunks).
    #[inline(always)]
    fn load4(s: &[f32]) -> v128 {
        let s = &s[..4];
        // SAFETY: `s` holds 4 f32 = 16 readable bytes; v128_load has no alignment requirement.
        unsafe { v128_load(s.as_ptr() as *const v128) }
    }

    /// Store `v` into the first 4 elements of `s`.
    #[inline(always)]
    fn store4(s: &mut [f32], v: v128) {
        let s = &mut s[..4];
        // SAFETY: `s` holds 4 f32 = 16 writable bytes, borrowed mutably here.
        unsafe { v128_store(s.as_mut_ptr() as *mut v128, v) }
    }

    /// Attention softmax of one row over `valid` (0 elsewhere), 4 lanes.
    pub(super) fn softmax_scaled_simd128(row: &mut [f32], scale: f32, valid: Range<usize>) {
        row[..valid.start].fill(0.0);
        row[valid.end..].fill(0.0);
        let seg = &mut row[valid];
        if seg.is_empty() {
            return;
        }
        let sv = f32x4_splat(scale);
        let mut maxv = f32x4_splat(f32::NEG_INFINITY);
        let mut max_tail = f32::NEG_INFINITY;
        let (body, tail) = seg.split_at_mut(seg.len() / 4 * 4);
        for ch in body.chunks_exact_mut(4) {
            let v = f32x4_mul(load4(ch), sv);
            store4(ch, v);
            // pmax (one instruction) skips a NaN `v` as the scalar body's `f32::max` does.
            maxv = f32x4_pmax(maxv, v);
        }
        for v in tail.iter_mut() {
            *v *= scale;
            max_tail = max_tail.max(*v);
        }
        let max = lanes(maxv).into_iter().fold(max_tail, f32::max);
        let ms = f32x4_splat(max);
        let mut sumv = f32x4_splat(0.0);
        for ch in body.chunks_exact_mut(4) {
            let e = exp4(f32x4_sub(load4(ch), ms));
            store4(ch, e);
            sumv = f32x4_add(sumv, e);
        }
        let mut sum = lanes(sumv).into_iter().sum::<f32>();
        for v in tail.iter_mut() {
            *v = super::exp_fast(*v - max);
            sum += *v;
        }
        let inv = 1.0 / sum;
        let iv = f32x4_splat(inv);
        for ch in body.chunks_exact_mut(4) {
            let v = f32x4_mul(load4(ch), iv);
            store4(ch, v);
        }
        for v in tail.iter_mut() {
            *v *= inv;
        }
    }

    /// LayerNorm rows: mean and variance summed in two f64x2 accumulators (4 inputs per step),
    /// the columns past the last multiple of 4 in order; normalisation as the scalar body.
    pub(super) fn layer_norm_simd128(
        x: &[f32],
        out: &mut [f32],
        d: usize,
        w: &[f32],
        b: Option<&[f32]>,
        eps: f32,
    ) {
        let full = d / 4 * 4;
        for (row, orow) in x.chunks_exact(d).zip(out.chunks_exact_mut(d)) {
            let widen = |v: v128| {
                let hi = i32x4_shuffle::<2, 3, 0, 1>(v, v);
                (f64x2_promote_low_f32x4(v), f64x2_promote_low_f32x4(hi))
            };
            let (mut s0, mut s1) = (f64x2_splat(0.0), f64x2_splat(0.0));
            for ch in row[..full].chunks_exact(4) {
                let (lo, hi) = widen(load4(ch));
                s0 = f64x2_add(s0, lo);
                s1 = f64x2_add(s1, hi);
            }
            let s = f64x2_add(s0, s1);
            let sum = f64x2_extract_lane::<0>(s) + f64x2_extract_lane::<1>(s);
            let mean = super::add_f64(sum, &row[full..]) / d as f64;
            let mv = f64x2_splat(mean);
            let (mut q0, mut q1) = (f64x2_splat(0.0), f64x2_splat(0.0));
            for ch in row[..full].chunks_exact(4) {
                let (lo, hi) = widen(load4(ch));
                let (t0, t1) = (f64x2_sub(lo, mv), f64x2_sub(hi, mv));
                q0 = f64x2_add(q0, f64x2_mul(t0, t0));
                q1 = f64x2_add(q1, f64x2_mul(t1, t1));
            }
            let q = f64x2_add(q0, q1);
            let var = f64x2_extract_lane::<0>(q) + f64x2_extract_lane::<1>(q);
            let rstd =
                super::layer_norm_rstd(super::add_sq_dev_f64(var, &row[full..], mean), d, eps);
            let mean = mean as f32;
            let (mf, rf) = (f32x4_splat(mean), f32x4_splat(rstd));
            for (j, (och, ch)) in orow[..full]
                .chunks_exact_mut(4)
                .zip(row[..full].chunks_exact(4))
                .enumerate()
            {
                // Same operation order as the scalar body: ((x - mean) * rstd) * w (+ b).
                let v = f32x4_mul(f32x4_sub(load4(ch), mf), rf);
                let mut v = f32x4_mul(v, load4(&w[j * 4..]));
                if let Some(b) = b {
                    v = f32x4_add(v, load4(&b[j * 4..]));
                }
                store4(och, v);
            }
            super::normalize_from(full, row, orow, mean, rstd, w, b);
        }
    }

    /// GeGLU on 4 lanes: `erf_as` (A&S 7.1.26 with `exp4`) with the scalar body's operations.
    pub(super) fn geglu_simd128(z: &[f32], out: &mut [f32]) {
        let f = out.len();
        let (a, g) = z.split_at(f);
        let full = f / 4 * 4;
        let one = f32x4_splat(1.0);
        let half = f32x4_splat(0.5);
        for (j, och) in out[..full].chunks_exact_mut(4).enumerate() {
            let x = load4(&a[j * 4..]);
            let gate = load4(&g[j * 4..]);
            let u = f32x4_mul(x, f32x4_splat(std::f32::consts::FRAC_1_SQRT_2));
            let au = f32x4_abs(u);
            let t = f32x4_div(one, f32x4_add(f32x4_mul(f32x4_splat(0.327_591_1), au), one));
            let mut r = f32x4_splat(1.061_405_4);
            for c in [-1.453_152, 1.421_413_8, -0.284_496_74, 0.254_829_6] {
                r = f32x4_add(f32x4_mul(r, t), f32x4_splat(c));
            }
            r = f32x4_mul(r, t);
            let e = exp4(f32x4_neg(f32x4_mul(au, au)));
            let y = f32x4_sub(one, f32x4_mul(r, e));
            // erf is odd: negate where u < 0 (as the scalar body's branch; -0.0 stays +).
            let neg = f32x4_lt(u, f32x4_splat(0.0));
            let erf = v128_bitselect(f32x4_neg(y), y, neg);
            let gelu = f32x4_mul(f32x4_mul(half, x), f32x4_add(one, erf));
            store4(och, f32x4_mul(gelu, gate));
        }
        for j in full..f {
            out[j] =
                0.5 * a[j] * (1.0 + super::erf_as(a[j] * std::f32::consts::FRAC_1_SQRT_2)) * g[j];
        }
    }
}

/// In-place softmax of one row (f32, max-subtracted).
pub fn softmax_row(isa: Isa, row: &mut [f32]) {
    let len = row.len();
    softmax_scaled(isa, row, 1.0, 0..len);
}

/// In-place attention softmax of one score row: `softmax(scale * row)` over the columns in
/// `valid`, 0 elsewhere (the keys a sliding window masks out).
pub fn softmax_scaled(isa: Isa, row: &mut [f32], scale: f32, valid: std::ops::Range<usize>) {
    let valid = valid.start.min(row.len())..valid.end.min(row.len());
    match isa {
        // SAFETY: the feature was detected on this CPU (`available`).
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 if isa.available() => unsafe {
            x86_elementwise::softmax_scaled_avx512(row, scale, valid)
        },
        // SAFETY: as above.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 if isa.available() => unsafe {
            x86_elementwise::softmax_scaled_avx2(row, scale, valid)
        },
        #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
        Isa::Simd128 => wasm::softmax_scaled_simd128(row, scale, valid),
        _ => {
            // The order calibration has always used (its statistics, and so the calibrated
            // file's digest, must not depend on the machine): scale, mask to -inf, softmax.
            for (j, v) in row.iter_mut().enumerate() {
                *v = if valid.contains(&j) {
                    *v * scale
                } else {
                    f32::NEG_INFINITY
                };
            }
            softmax_body(row)
        }
    }
}

/// GeGLU of one row: `out[j] = GELU(z[j]) * z[f + j]` with `f = out.len()`, `z.len() >= 2f`.
pub fn geglu_row(isa: Isa, z: &[f32], out: &mut [f32]) {
    match isa {
        // SAFETY: the feature was detected on this CPU (`available`).
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 if isa.available() => unsafe { x86_elementwise::geglu_avx512(z, out) },
        // SAFETY: as above.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 if isa.available() => unsafe { x86_elementwise::geglu_avx2(z, out) },
        #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
        Isa::Simd128 => wasm::geglu_simd128(z, out),
        _ => geglu_body(z, out),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rand_vec(n: usize, seed: &mut u64) -> Vec<f32> {
        (0..n)
            .map(|_| {
                *seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((*seed >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
            })
            .collect()
    }

    fn reference(g: Gemm, a: &[f32], b: &[f32], c0: &[f32]) -> Vec<f64> {
        let mut out = vec![0f64; g.m * g.ldc];
        for i in 0..g.m {
            for j in 0..g.n {
                let mut s = if g.accumulate {
                    c0[i * g.ldc + j] as f64
                } else {
                    0.0
                };
                for p in 0..g.k {
                    s += a[i * g.lda + p] as f64 * b[p * g.ldb + j] as f64;
                }
                out[i * g.ldc + j] = s;
            }
        }
        out
    }

    /// Every instruction set the CPU has (and the scalar one) against an f64 reference, on
    /// shapes with row and column tails, strides and accumulation. Tolerance: 1e-5 relative to
    /// the row's sum of |a*b| (f32 accumulation of k <= 300 products).
    #[test]
    fn simd_and_scalar_gemm_match_reference() {
        let mut seed = 7u64;
        for &(m, n, k) in &[
            (1, 1, 1),
            (5, 17, 3),
            (9, 33, 64),
            (13, 47, 130),
            (8, 96, 300),
            (3, 16, 8),
            // Row tails of every size after full 6- and 8-row tiles; column tails of 8 and 15.
            (10, 40, 9),
            (7, 31, 17),
            (12, 32, 5),
            (11, 24, 33),
        ] {
            for &acc in &[false, true] {
                let (lda, ldb, ldc) = (k + 3, n + 5, n + 2);
                let g = Gemm {
                    m,
                    n,
                    k,
                    lda,
                    ldb,
                    ldc,
                    accumulate: acc,
                };
                let a = rand_vec(m * lda, &mut seed);
                let b = rand_vec(k * ldb, &mut seed);
                let c0 = rand_vec(m * ldc, &mut seed);
                let want = reference(g, &a, &b, &c0);
                for isa in [Isa::Scalar, Isa::Avx2, Isa::Avx512] {
                    if !isa.available() {
                        continue;
                    }
                    let mut c = c0.clone();
                    gemm(isa, g, &a, &b, &mut c);
                    for i in 0..m {
                        for j in 0..ldc {
                            let idx = i * ldc + j;
                            if j >= n {
                                assert_eq!(c[idx], c0[idx], "{isa:?} wrote outside C at ({i},{j})");
                                continue;
                            }
                            let err = (c[idx] as f64 - want[idx]).abs();
                            assert!(
                                err <= 1e-5 * (k as f64 + 1.0),
                                "{isa:?} {m}x{n}x{k} ({i},{j}): {err}"
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn erf_matches_known_values() {
        // Values from Abramowitz & Stegun table 7.1 / high-precision references.
        let cases = [
            (0.0, 0.0),
            (0.5, 0.520_499_877_813_046_5),
            (1.0, 0.842_700_792_949_714_9),
            (2.0, 0.995_322_265_018_952_7),
            (2.9, 0.999_958_902_121_900_5),
            (3.0, 0.999_977_909_503_001_4),
            (4.5, 0.999_999_999_803_383),
            (-1.0, -0.842_700_792_949_714_9),
        ];
        for (x, want) in cases {
            assert!(
                (erf64(x) - want).abs() < 5e-14,
                "erf({x}) = {} != {want}",
                erf64(x)
            );
        }
    }

    #[test]
    fn erf_table_matches_the_series() {
        let mut x = -6.0f64;
        while x < 6.0 {
            assert!((erf_fast(x) - erf64(x)).abs() < 2e-8, "erf({x})");
            x += 0.00731;
        }
    }

    /// The vectorised element-wise kernels agree with the scalar build and with exact GELU.
    #[test]
    fn elementwise_simd_matches_scalar() {
        // 100 = six vectors of 16 (twelve of 8) and a tail of 4; x runs over both signs and
        // past |x| = 4.
        let z: Vec<f32> = (0..200)
            .map(|i| ((i * 37 % 200) as f32 - 100.0) * 0.09)
            .collect();
        assert!(z[..100].iter().any(|&x| x > 4.0) && z[..100].iter().any(|&x| x < -4.0));
        let mut want = vec![0f32; 100];
        geglu_row(Isa::Scalar, &z, &mut want);
        for (j, w) in want.iter().enumerate() {
            // A&S 7.1.26 is within 1.5e-7 of erf, so GELU within 0.75e-7 |x| (times the gate).
            let exact = gelu_erf(z[j]) * z[100 + j];
            let bound = 1e-7 * (z[j] * z[100 + j]).abs() + 1e-6 * exact.abs() + 1e-9;
            assert!((w - exact).abs() <= bound, "{j}: {w} vs {exact}");
        }
        let row0: Vec<f32> = (0..77).map(|i| (i as f32 * 0.37).sin() * 9.0).collect();
        let mut soft = row0.clone();
        softmax_row(Isa::Scalar, &mut soft);
        for isa in [Isa::Avx2, Isa::Avx512] {
            if !isa.available() {
                continue;
            }
            let mut got = vec![0f32; 100];
            geglu_row(isa, &z, &mut got);
            for (a, b) in got.iter().zip(&want) {
                assert!((a - b).abs() <= 1e-6 * (1.0 + b.abs()), "{isa:?}");
            }
            let mut r = row0.clone();
            softmax_row(isa, &mut r);
            for (a, b) in r.iter().zip(&soft) {
                assert!((a - b).abs() <= 1e-7, "{isa:?}");
            }
        }
    }

    /// The fused attention softmax (scale, window, zeros outside) on every instruction set
    /// against the scalar order, on windows that start, end and sit inside the row.
    #[test]
    fn scaled_softmax_matches_scalar_on_windows() {
        let mut seed = 3u64;
        for len in [1usize, 7, 8, 9, 15, 16, 17, 40, 107] {
            let row0: Vec<f32> = rand_vec(len, &mut seed).iter().map(|v| v * 30.0).collect();
            for valid in [
                0..len,
                0..len / 2 + 1,
                len / 3..len,
                len / 4..(len / 4 + 5).min(len),
            ] {
                let mut want = row0.clone();
                softmax_scaled(Isa::Scalar, &mut want, 0.125, valid.clone());
                let total: f32 = want.iter().sum();
                assert!((total - 1.0).abs() < 1e-5, "{len} {valid:?}: sum {total}");
                for (j, v) in want.iter().enumerate() {
                    assert!(
                        valid.contains(&j) || *v < 1e-37,
                        "{len} {valid:?} col {j}: {v}"
                    );
                }
                for isa in [Isa::Avx2, Isa::Avx512] {
                    if !isa.available() {
                        continue;
                    }
                    let mut got = row0.clone();
                    softmax_scaled(isa, &mut got, 0.125, valid.clone());
                    for (j, (a, b)) in got.iter().zip(&want).enumerate() {
                        assert!((a - b).abs() <= 2e-7, "{isa:?} {len} {valid:?} col {j}");
                        if !valid.contains(&j) {
                            assert_eq!(*a, 0.0);
                        }
                    }
                }
            }
        }
    }

    /// The AVX2 and AVX-512 LayerNorms (f64 lanes) against the scalar one, with and without
    /// bias, on widths with and without a tail past the last 8 and 16 columns.
    #[test]
    fn simd_layer_norm_matches_scalar() {
        let mut seed = 11u64;
        for d in [3usize, 8, 16, 24, 31, 64, 70, 256] {
            let mut x = rand_vec(3 * d, &mut seed);
            x[d / 2] = 40.0; // a massive channel, as these models have
            let w: Vec<f32> = rand_vec(d, &mut seed).iter().map(|v| 1.0 + v).collect();
            let b = rand_vec(d, &mut seed);
            for bias in [None, Some(&b[..])] {
                let mut want = vec![0f32; 3 * d];
                layer_norm(Isa::Scalar, &x, &mut want, d, &w, bias, 1e-5);
                for isa in [Isa::Avx2, Isa::Avx512] {
                    if !isa.available() {
                        continue;
                    }
                    let mut got = vec![0f32; 3 * d];
                    layer_norm(isa, &x, &mut got, d, &w, bias, 1e-5);
                    for (a, b) in got.iter().zip(&want) {
                        assert!(
                            (a - b).abs() <= 1e-6 * (1.0 + b.abs()),
                            "{isa:?} d {d}: {a} vs {b}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn exp_fast_is_close_to_std() {
        let mut x = -87.0f32;
        while x < 88.0 {
            let (a, b) = (exp_fast(x), x.exp());
            assert!(((a - b) / b).abs() < 4e-7, "exp({x}): {a} vs {b}");
            x += 0.0137;
        }
        assert!(exp_fast(-1000.0) < 1e-37);
    }

    #[test]
    fn layer_norm_normalises() {
        let x = [1.0f32, 2.0, 3.0, 4.0];
        let mut out = [0f32; 4];
        layer_norm(
            Isa::Scalar,
            &x,
            &mut out,
            4,
            &[1.0; 4],
            Some(&[0.5; 4]),
            0.0,
        );
        let want = [-1.341_640_8f32, -0.447_213_6, 0.447_213_6, 1.341_640_8];
        for i in 0..4 {
            assert!((out[i] - 0.5 - want[i]).abs() < 1e-6);
        }
    }
}
