//! int8 x int8 -> int32 dot-product kernels over Q8_0 blocks: a portable scalar path that is
//! always built, and x86_64 paths (AVX2 `maddubs`, AVX-VNNI and AVX-512 VNNI `dpbusd`) chosen
//! at run time with `is_x86_feature_detected!`.
//!
//! [`crate::Q8Matrix::matmul`] runs the AVX-512 VNNI path through [`dot_packed`]: weights
//! repacked at construction into groups of 16 rows ([`Packed16`]), activations biased to
//! unsigned bytes, all tokens of a call at once (4 at a time), the outlier channels fused in,
//! and every output summed in the scalar path's order with its roundings (no FMA), so its
//! results equal the scalar path's bit for bit; the AVX-VNNI and AVX2 paths do the same 256
//! bits wide through [`dot_packed8`] (groups of 8 rows, [`Packed8`]). [`dot_rows`] (one
//! activation row against every weight row) is the scalar path's kernel and the 256-bit
//! paths' row kernel, kept for the tests. Q8x2 on the AVX-512 VNNI path goes through
//! [`dot_packed_x2`] instead: weights widened to i16 ([`Packed16W`]) and each activation's two
//! passes as one i16 `128 q + r`, one `vpdpwssd` chain where [`dot_packed`] runs two `dpbusd`
//! chains, with the same integers.
//!
//! All paths compute the same int32 block dot products bit for bit (integer arithmetic, no
//! saturation possible: see [`KernelPath`]); they differ only in the order in which the f32
//! products `scale * dot` are summed, hence the 1e-6 relative agreement of their f32 results.
//!
//! # The sign trick
//!
//! `maddubs` and `dpbusd` multiply an *unsigned* byte by a signed byte. With weights `w` and
//! activations `x` both signed, we feed `|w|` as the unsigned operand and `x * sign(w)` as the
//! signed one: `|w| * (x * sign(w)) = x * w`. `|w|` is exact as an unsigned byte even for
//! `w = -128` (128), and `x * sign(w)` cannot overflow because our quantized activations stay in
//! `-127..=127`. `maddubs` adds two products into an i16: `2 * 128 * 127 = 32512 < 32767`, so
//! it never saturates.

/// Which dot-product implementation runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KernelPath {
    /// Portable Rust, always available (and the only path on wasm32 and non-x86 targets).
    Scalar,
    /// AVX2 + FMA: `_mm256_maddubs_epi16` then `_mm256_madd_epi16`.
    Avx2,
    /// AVX-VNNI (256-bit VEX encoding): `_mm256_dpbusd_avx_epi32`.
    AvxVnni,
    /// AVX-512 F/BW + VNNI: `_mm512_dpbusd_epi32` over 16 weight rows at once (one int32
    /// lane per row), plus a vectorized activation quantizer.
    Avx512Vnni,
}

impl KernelPath {
    /// Every path, fastest first. [`KernelPath::detect`] takes the first this CPU runs at or
    /// below the `SKYCTL_ISA` level ([`crate::cpu`]).
    pub const ALL: [KernelPath; 4] = [
        KernelPath::Avx512Vnni,
        KernelPath::AvxVnni,
        KernelPath::Avx2,
        KernelPath::Scalar,
    ];

    /// Short lowercase name (`scalar`, `avx2`, `avx-vnni`, `avx512-vnni`).
    pub fn name(self) -> &'static str {
        match self {
            KernelPath::Scalar => "scalar",
            KernelPath::Avx2 => "avx2",
            KernelPath::AvxVnni => "avx-vnni",
            KernelPath::Avx512Vnni => "avx512-vnni",
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
            KernelPath::Scalar => IsaLevel::Scalar,
            KernelPath::Avx2 => IsaLevel::Avx2,
            KernelPath::AvxVnni => IsaLevel::AvxVnni,
            KernelPath::Avx512Vnni => IsaLevel::Avx512,
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

#[inline]
fn dot_i8_scalar(x: &[i8], w: &[i8]) -> i32 {
    x.iter()
        .zip(w)
        .map(|(&a, &b)| i32::from(a) * i32::from(b))
        .sum()
}

/// `128 * dot(q, w) + dot(r, w)` in one pass: `128 * q + r` fits an i16 (|q| <= 127,
/// |r| <= 127 gives at most 16383), which lets LLVM use 16-bit multiply-adds.
#[inline]
fn dot_x2_scalar(q: &[i8; 32], r: &[i8; 32], w: &[i8; 32]) -> i32 {
    q.iter()
        .zip(r)
        .zip(w)
        .map(|((&a, &b), &c)| i32::from(i16::from(a) * 128 + i16::from(b)) * i32::from(c))
        .sum()
}

/// The int32 dot product of every block of `act` with the weight row `w` (test and debug
/// aid: the fused kernels use the same integer code).
#[cfg(test)]
pub(crate) fn block_dots(path: KernelPath, act: ActRow<'_>, w: &[i8], out: &mut [i32]) {
    let nb = act.scales.len();
    assert!(act.q.len() == nb * 32 && w.len() == nb * 32 && out.len() == nb);
    assert!(act.r.is_none_or(|r| r.len() == nb * 32));
    assert!(path.is_available(), "kernel path {path} not available");
    match path {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the features the path needs were checked just above, and the slices have
        // the lengths the kernel reads (checked by the asserts).
        KernelPath::Avx2 => unsafe { x86::block_dots_avx2(act, w, out) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above.
        KernelPath::AvxVnni => unsafe { x86::block_dots_avxvnni(act, w, out) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above.
        KernelPath::Avx512Vnni => unsafe { x86::block_dots_avx512(act, w, out) },
        _ => {
            for (b, o) in out.iter_mut().enumerate() {
                let s = b * 32..(b + 1) * 32;
                let dq = dot_i8_scalar(&act.q[s.clone()], &w[s.clone()]);
                *o = match act.r {
                    None => dq,
                    Some(r) => 128 * dq + dot_i8_scalar(&r[s.clone()], &w[s]),
                };
            }
        }
    }
}

/// `out[j] = sum_b (scales[j * nb + b] * act.scales[b]) * idot(act, row j, block b)` for every
/// weight row `j` of `qs` (`out.len()` rows of `k = 32 * nb` bytes).
///
/// Panics if the slice lengths disagree or the path is unavailable: both are internal
/// invariants that [`crate::Q8Matrix::matmul`] establishes before calling.
pub(crate) fn dot_rows(
    path: KernelPath,
    act: ActRow<'_>,
    qs: &[i8],
    scales: &[f32],
    out: &mut [f32],
) {
    let nb = act.scales.len();
    let k = nb * 32;
    assert!(act.q.len() == k && act.r.is_none_or(|r| r.len() == k));
    assert!(qs.len() == out.len() * k && scales.len() == out.len() * nb);
    assert!(path.is_available(), "kernel path {path} not available");
    match path {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the CPU features of the path were checked just above; every pointer the
        // kernel forms stays inside the slices whose lengths the asserts pin down.
        KernelPath::Avx2 => unsafe { x86::dot_rows_avx2(act, qs, scales, out) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above.
        KernelPath::AvxVnni => unsafe { x86::dot_rows_avxvnni(act, qs, scales, out) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above.
        KernelPath::Avx512Vnni => unsafe { x86::dot_rows_avx512(act, qs, scales, out) },
        _ => dot_rows_scalar(act, qs, scales, out),
    }
}

fn dot_rows_scalar(act: ActRow<'_>, qs: &[i8], scales: &[f32], out: &mut [f32]) {
    let nb = act.scales.len();
    let k = nb * 32;
    // Fixed-size blocks and one loop per mode, so that LLVM unrolls and vectorizes the
    // 32-element dot products (the wasm32 build runs this path).
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
                    let idot = dot_i8_scalar(&block(act.q, b), &block(w, b));
                    acc += (w_scale * x_scale) * idot as f32;
                }
            }
            Some(r) => {
                for (b, (&w_scale, &x_scale)) in ws.iter().zip(act.scales).enumerate() {
                    let idot = dot_x2_scalar(&block(act.q, b), &block(r, b), &block(w, b));
                    acc += (w_scale * x_scale) * idot as f32;
                }
            }
        }
        *o = acc;
    }
}

/// Weights repacked for the AVX-512 VNNI kernel ([`dot_packed`]): rows in groups of 16 (one
/// int32 lane per row), so that one `dpbusd` advances 16 rows by 4 values and a whole Q8_0
/// block of 16 rows takes 8 of them, with no horizontal sums. Per group and block: 8 chunks
/// of 16 rows x 4 bytes, the 16 f32 row scales, and `-128 * sum(w)` of each row's block,
/// which undoes the `+128` that makes the activations unsigned for `dpbusd`
/// (`dot(x + 128, w) - 128 * sum(w) = dot(x, w)`, exact in int32). Rows past `rows` are zero.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct Packed16 {
    qs: Vec<i8>,
    scales: Vec<f32>,
    neg_sums: Vec<i32>,
}

impl Packed16 {
    /// Repacks `rows x k` Q8_0 values (`qs`, row-major) and their block scales.
    pub(crate) fn new(qs: &[i8], scales: &[f32], rows: usize, k: usize) -> Packed16 {
        let nb = k / 32;
        let groups = rows.div_ceil(16);
        let mut p = Packed16 {
            qs: vec![0; groups * nb * 512],
            scales: vec![0.0; groups * nb * 16],
            neg_sums: vec![0; groups * nb * 16],
        };
        for row in 0..rows {
            let (g, lane) = (row / 16, row % 16);
            for b in 0..nb {
                let base = g * nb + b;
                let w = &qs[row * k + b * 32..row * k + (b + 1) * 32];
                for (i, &v) in w.iter().enumerate() {
                    p.qs[base * 512 + (i / 4) * 64 + lane * 4 + i % 4] = v;
                }
                p.scales[base * 16 + lane] = scales[row * nb + b];
                p.neg_sums[base * 16 + lane] = -128 * w.iter().map(|&v| i32::from(v)).sum::<i32>();
            }
        }
        p
    }
}

/// The outlier channels added in f32 by [`dot_packed`]: `out[i, j] += x[i, c] * cols[o][j]`
/// for the `o`-th channel `c`, in channel order.
#[derive(Clone, Copy)]
// Only the x86-64 packed kernel takes it; other targets (wasm32) never build one.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) struct OutlierTerms<'a> {
    /// Input channels (each `< k`).
    pub channels: &'a [u32],
    /// One column of `rows` exact weights per channel.
    pub cols: &'a [f32],
    /// The unquantized activations, `n x k`.
    pub x: &'a [f32],
}

/// `out[i * rows + j] = sum_b (w_scale[j, b] * x_scale[i, b]) * idot(i, j, b)`, plus the
/// outlier terms, for all `n`
/// activation rows at once, on the AVX-512 VNNI path. `uq` (and `ur` for Q8x2) hold the
/// quantized activations biased to unsigned (`q + 128`, i.e. `q ^ 0x80`), `n x 32 * nb`
/// bytes; `x_scales` is `n x nb`.
///
/// Panics if the lengths disagree or the CPU lacks AVX-512 VNNI: internal invariants that
/// [`crate::Q8Matrix::matmul`] establishes before calling.
#[cfg(target_arch = "x86_64")]
pub(crate) fn dot_packed(
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
    let groups = rows.div_ceil(16);
    assert!(uq.len() == n * k && ur.is_none_or(|r| r.len() == n * k));
    assert!(x_scales.len() == n * nb && out.len() == n * rows);
    assert!(packed.qs.len() == groups * nb * 512 && packed.scales.len() == groups * nb * 16);
    assert!(packed.neg_sums.len() == groups * nb * 16);
    assert!(
        KernelPath::Avx512Vnni.is_available(),
        "AVX-512 VNNI not available"
    );
    // SAFETY: features checked just above; the asserts pin every length the kernel indexes.
    unsafe { x86::dot_packed_avx512(packed, rows, nb, (uq, ur, x_scales), outl, n, out) }
}

/// Weights repacked for the AVX-512 VNNI Q8x2 kernel ([`dot_packed_x2`]): the int8 values
/// sign-extended to i16, rows in groups of 16 (one int32 lane per row), per group and block 16
/// chunks of 16 rows x 2 values (one 512-bit vector each), and the 16 f32 row scales. One
/// `vpdpwssd` of a chunk with the pair `a = 128 q + r` of two activations (i16, |a| <= 16383)
/// adds `128 (q w) + r w` of both to each row's int32, so a block's 16 chunks give Q8x2's
/// `128 dot(q, w) + dot(r, w)` in one chain: exactly the integer of the two `dpbusd` passes,
/// without their shift, add and unsigned-offset correction. Rows past `rows` are zero.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct Packed16W {
    qs: Vec<i16>,
    scales: Vec<f32>,
}

// Only the x86-64 packed kernel builds one; other targets (wasm32) never do.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
impl Packed16W {
    /// Repacks `rows x k` Q8_0 values (`qs`, row-major) and their block scales.
    pub(crate) fn new(qs: &[i8], scales: &[f32], rows: usize, k: usize) -> Packed16W {
        let nb = k / 32;
        let groups = rows.div_ceil(16);
        let mut p = Packed16W {
            qs: vec![0; groups * nb * 512],
            scales: vec![0.0; groups * nb * 16],
        };
        for row in 0..rows {
            let (g, lane) = (row / 16, row % 16);
            for b in 0..nb {
                let base = g * nb + b;
                let w = &qs[row * k + b * 32..row * k + (b + 1) * 32];
                for (i, &v) in w.iter().enumerate() {
                    p.qs[base * 512 + (i / 2) * 32 + lane * 2 + i % 2] = i16::from(v);
                }
                p.scales[base * 16 + lane] = scales[row * nb + b];
            }
        }
        p
    }
}

/// [`dot_packed`] for Q8x2 activations given as `a = 128 q + r` (i16, `n x 32 * nb`, from
/// [`quantize_rows_x2_wide_avx512`]) against [`Packed16W`] weights, on the AVX-512 VNNI path:
/// the same integers, hence the same outputs bit for bit.
///
/// Panics if the lengths disagree or the CPU lacks AVX-512 VNNI: internal invariants that
/// [`crate::Q8Matrix::matmul`] establishes before calling.
#[cfg(target_arch = "x86_64")]
#[allow(clippy::too_many_arguments)]
pub(crate) fn dot_packed_x2(
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
    let groups = rows.div_ceil(16);
    assert!(a.len() == n * k && x_scales.len() == n * nb && out.len() == n * rows);
    assert!(packed.qs.len() == groups * nb * 512 && packed.scales.len() == groups * nb * 16);
    assert!(
        KernelPath::Avx512Vnni.is_available(),
        "AVX-512 VNNI not available"
    );
    // SAFETY: features checked just above; the asserts pin every length the kernel indexes.
    unsafe { x86::dot_packed_x2_avx512(packed, rows, nb, a, x_scales, outl, n, out) }
}

/// Weights repacked for the 256-bit packed kernels ([`dot_packed8`], AVX-VNNI and AVX2): rows
/// in groups of 8 (one int32 lane per row), per group and block 8 chunks of 8 rows x 4 bytes
/// (one 256-bit vector each), the 8 f32 row scales, and `-128 * sum(w)` of each row's block
/// for the AVX-VNNI path's unsigned activations. Rows past `rows` are zero.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct Packed8 {
    qs: Vec<i8>,
    scales: Vec<f32>,
    neg_sums: Vec<i32>,
}

// Only the x86-64 256-bit kernels build one; other targets (wasm32) never do.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
impl Packed8 {
    /// Repacks `rows x k` Q8_0 values (`qs`, row-major) and their block scales.
    pub(crate) fn new(qs: &[i8], scales: &[f32], rows: usize, k: usize) -> Packed8 {
        let nb = k / 32;
        let groups = rows.div_ceil(8);
        let mut p = Packed8 {
            qs: vec![0; groups * nb * 256],
            scales: vec![0.0; groups * nb * 8],
            neg_sums: vec![0; groups * nb * 8],
        };
        for row in 0..rows {
            let (g, lane) = (row / 8, row % 8);
            for b in 0..nb {
                let base = g * nb + b;
                let w = &qs[row * k + b * 32..row * k + (b + 1) * 32];
                for (i, &v) in w.iter().enumerate() {
                    p.qs[base * 256 + (i / 4) * 32 + lane * 4 + i % 4] = v;
                }
                p.scales[base * 8 + lane] = scales[row * nb + b];
                p.neg_sums[base * 8 + lane] = -128 * w.iter().map(|&v| i32::from(v)).sum::<i32>();
            }
        }
        p
    }
}

/// [`dot_packed`] on the 256-bit paths: `path` is [`KernelPath::AvxVnni`] (activations biased
/// to unsigned, `q ^ 0x80`, as for [`dot_packed`]) or [`KernelPath::Avx2`] (activations as
/// signed bytes, the sign trick of the module docs). Every output is summed in the portable
/// path's order with its roundings (multiply, then add), so the results equal it bit for bit.
///
/// Panics if the lengths disagree, `path` is another path or this CPU cannot run it: internal
/// invariants that [`crate::Q8Matrix::matmul`] establishes before calling.
#[cfg(target_arch = "x86_64")]
#[allow(clippy::too_many_arguments)]
pub(crate) fn dot_packed8(
    path: KernelPath,
    packed: &Packed8,
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
    let groups = rows.div_ceil(8);
    assert!(uq.len() == n * k && ur.is_none_or(|r| r.len() == n * k));
    assert!(x_scales.len() == n * nb && out.len() == n * rows);
    assert!(packed.qs.len() == groups * nb * 256 && packed.scales.len() == groups * nb * 8);
    assert!(packed.neg_sums.len() == groups * nb * 8);
    assert!(path.is_available(), "kernel path {path} not available");
    let a = (uq, ur, x_scales);
    match path {
        // SAFETY: features checked just above; the asserts pin every length the kernel indexes.
        KernelPath::AvxVnni => unsafe {
            x86::dot_packed8_avxvnni(packed, rows, nb, a, outl, n, out)
        },
        // SAFETY: as above.
        KernelPath::Avx2 => unsafe { x86::dot_packed8_avx2(packed, rows, nb, a, outl, n, out) },
        _ => panic!("dot_packed8 runs on the 256-bit paths only, not {path}"),
    }
}

/// Vectorized twin of `quantize_act_row` in `matmul.rs` (same operations in the same order
/// per value, so bit-identical results for finite input) on one row. `x2` selects the Q8x2
/// residual pass.
///
/// Panics unless `x`, `q`, `r` are `32 * scales.len()` long and the CPU has AVX-512 F/BW.
#[cfg(all(test, target_arch = "x86_64"))]
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
    unsafe {
        x86::quantize_rows_avx512::<false, false>(x, &[], scales.len(), q, r, &mut [], scales, x2)
    }
}

/// The AVX-512 quantizer's rounding of `v` (16 lanes) to -127..=127, half away from zero,
/// as i32: through the float path of the Q8x2 values and the truncating one of the others
/// (both, for the test to compare with `round_away`).
///
/// Panics unless the CPU has AVX-512 F.
#[cfg(all(test, target_arch = "x86_64"))]
pub(crate) fn round_clamp_avx512(v: &[f32; 16]) -> ([i32; 16], [i32; 16]) {
    assert!(
        KernelPath::Avx512Vnni.is_available(),
        "AVX-512 not available"
    );
    // SAFETY: the feature was checked just above; the arrays hold 16 lanes each.
    unsafe { x86::round_clamp_lanes(v) }
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
#[cfg(target_arch = "x86_64")]
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
    unsafe { x86::quantize_rows_avx512::<true, false>(x, zero, nb, q, r, &mut [], scales, x2) }
}

/// [`quantize_rows_biased_avx512`] for Q8x2, storing each value's pair as one i16
/// `a = 128 q + r` (`a`: `32 * scales.len()` values, the layout [`dot_packed_x2`] reads)
/// instead of the two biased bytes; `q`, `r` and the stored scales are the same.
///
/// Panics unless `x` and `a` are `32 * scales.len()` long, `nb > 0` divides `scales.len()`,
/// `zero` is empty (no outliers) or `nb` long, and the CPU has AVX-512 F/BW.
#[cfg(target_arch = "x86_64")]
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
    unsafe {
        x86::quantize_rows_avx512::<true, true>(x, zero, nb, &mut [], &mut [], a, scales, true)
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    //! x86_64 kernels. Every function here is `unsafe` only because it is compiled with
    //! `#[target_feature]`: the callers in the parent module check the features at run time
    //! and the slice lengths with asserts before calling.

    use super::{ActRow, OutlierTerms, Packed16, Packed16W, Packed8};
    use std::arch::x86_64::*;

    #[cfg(test)]
    #[target_feature(enable = "avx2")]
    fn hsum_i32_256(v: __m256i) -> i32 {
        let lo = _mm256_castsi256_si128(v);
        let hi = _mm256_extracti128_si256::<1>(v);
        let s = _mm_add_epi32(lo, hi);
        let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b01_00_11_10>(s));
        let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b10_11_00_01>(s));
        _mm_cvtsi128_si32(s)
    }

    #[target_feature(enable = "avx2")]
    fn hsum_f32_256(v: __m256) -> f32 {
        let lo = _mm256_castps256_ps128(v);
        let hi = _mm256_extractf128_ps::<1>(v);
        let s = _mm_add_ps(lo, hi);
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_movehdup_ps(s));
        _mm_cvtss_f32(s)
    }

    /// # Safety
    /// `p` must be valid for reading 32 bytes.
    #[target_feature(enable = "avx2")]
    unsafe fn load32(p: *const i8) -> __m256i {
        // SAFETY: the caller guarantees 32 readable bytes; loadu has no alignment need.
        unsafe { _mm256_loadu_si256(p.cast()) }
    }

    // ---- AVX2 -------------------------------------------------------------------------

    /// 8 lanes of partial int32 sums of `x * w` (sign trick, see the parent module).
    #[target_feature(enable = "avx2")]
    fn mul_sum_avx2(aw: __m256i, x: __m256i, w: __m256i) -> __m256i {
        let sx = _mm256_sign_epi8(x, w);
        _mm256_madd_epi16(_mm256_maddubs_epi16(aw, sx), _mm256_set1_epi16(1))
    }

    /// # Safety
    /// `q`, `r` (if any) and `w` must be valid for 32 bytes.
    #[target_feature(enable = "avx2")]
    unsafe fn block_avx2(q: *const i8, r: Option<*const i8>, w: *const i8) -> __m256i {
        // SAFETY: forwarded caller guarantee.
        let (wv, qv) = unsafe { (load32(w), load32(q)) };
        let aw = _mm256_sign_epi8(wv, wv);
        let dq = mul_sum_avx2(aw, qv, wv);
        match r {
            None => dq,
            Some(r) => {
                // SAFETY: forwarded caller guarantee.
                let rv = unsafe { load32(r) };
                _mm256_add_epi32(_mm256_slli_epi32::<7>(dq), mul_sum_avx2(aw, rv, wv))
            }
        }
    }

    #[cfg(test)]
    /// # Safety
    /// The CPU must support AVX2; lengths as asserted by `super::block_dots`.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn block_dots_avx2(act: ActRow<'_>, w: &[i8], out: &mut [i32]) {
        for (b, o) in out.iter_mut().enumerate() {
            // SAFETY: block b lies inside q, r and w (each 32 * out.len() bytes).
            let v = unsafe {
                block_avx2(
                    act.q.as_ptr().add(b * 32),
                    act.r.map(|r| r.as_ptr().add(b * 32)),
                    w.as_ptr().add(b * 32),
                )
            };
            *o = hsum_i32_256(v);
        }
    }

    /// Sums each of four vectors: lane t of the result is the sum of `a[t]`.
    #[target_feature(enable = "avx2")]
    fn hsum4_256(a: [__m256; 4]) -> __m128 {
        let h01 = _mm256_hadd_ps(a[0], a[1]);
        let h23 = _mm256_hadd_ps(a[2], a[3]);
        let h = _mm256_hadd_ps(h01, h23);
        _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps::<1>(h))
    }

    /// The fused row kernel of the 256-bit paths (AVX2, AVX-VNNI), generated from one source
    /// so that the AVX-VNNI instance, which this project's CI machine cannot run, has exactly
    /// the structure of the tested AVX2 one. Four weight rows at a time share the activation
    /// loads and one horizontal reduction.
    macro_rules! rows_kernel_256 {
        ($name:ident, $features:literal, $block:ident) => {
            /// # Safety
            /// The CPU must support the enabled features; lengths as asserted by
            /// `super::dot_rows`.
            #[target_feature(enable = $features)]
            pub(super) unsafe fn $name(
                act: ActRow<'_>,
                qs: &[i8],
                scales: &[f32],
                out: &mut [f32],
            ) {
                let nb = act.scales.len();
                let k = nb * 32;
                let rows = out.len();
                let mut j = 0;
                while j + 4 <= rows {
                    let mut acc = [_mm256_setzero_ps(); 4];
                    for (b, &x_scale) in act.scales.iter().enumerate() {
                        for (t, a) in acc.iter_mut().enumerate() {
                            // SAFETY: row j + t < rows, block b < nb: inside qs
                            // (rows * k bytes) and inside the activation rows (k bytes).
                            let v = unsafe {
                                $block(
                                    act.q.as_ptr().add(b * 32),
                                    act.r.map(|r| r.as_ptr().add(b * 32)),
                                    qs.as_ptr().add((j + t) * k + b * 32),
                                )
                            };
                            let s = _mm256_set1_ps(scales[(j + t) * nb + b] * x_scale);
                            *a = _mm256_fmadd_ps(_mm256_cvtepi32_ps(v), s, *a);
                        }
                    }
                    let sums = hsum4_256(acc);
                    // SAFETY: out[j..j + 4] exists (j + 4 <= rows); unaligned store.
                    unsafe { _mm_storeu_ps(out.as_mut_ptr().add(j), sums) };
                    j += 4;
                }
                for (jj, o) in out.iter_mut().enumerate().skip(j) {
                    let mut acc = _mm256_setzero_ps();
                    for (b, &x_scale) in act.scales.iter().enumerate() {
                        // SAFETY: as above, for row jj < rows.
                        let v = unsafe {
                            $block(
                                act.q.as_ptr().add(b * 32),
                                act.r.map(|r| r.as_ptr().add(b * 32)),
                                qs.as_ptr().add(jj * k + b * 32),
                            )
                        };
                        let s = _mm256_set1_ps(scales[jj * nb + b] * x_scale);
                        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(v), s, acc);
                    }
                    *o = hsum_f32_256(acc);
                }
            }
        };
    }

    rows_kernel_256!(dot_rows_avx2, "avx2,fma", block_avx2);
    rows_kernel_256!(dot_rows_avxvnni, "avx2,fma,avxvnni", block_avxvnni);

    /// The 256-bit packed kernels, from one source: `T` activation rows from `i0` against the
    /// 8-row weight group `g` (see `Packed8`), per block 8 chunks of 4 activation bytes
    /// broadcast against 8 rows, then the portable path's f32 steps: `s = w_scale * x_scale`,
    /// `acc = acc + s * idot` (no FMA), the outliers added in order the same way.
    macro_rules! packed8_kernel {
        ($tile:ident, $driver:ident, $features:literal, $chunk:ident, $biased:literal) => {
            /// # Safety
            /// The CPU must support the enabled features; rows `i0..i0 + T` exist; lengths as
            /// asserted by `super::dot_packed8`; `lanes` (1..=8) rows of group `g` exist.
            #[target_feature(enable = $features)]
            #[allow(clippy::too_many_arguments)]
            unsafe fn $tile<const T: usize, const X2: bool>(
                p: &Packed8,
                g: usize,
                nb: usize,
                act: (&[u8], Option<&[u8]>, &[f32]),
                outl: OutlierTerms<'_>,
                i0: usize,
                rows: usize,
                lanes: usize,
                out: &mut [f32],
            ) {
                let (uq, ur, xs) = act;
                let k = nb * 32;
                let ur = ur.unwrap_or(uq);
                let mut acc = [_mm256_setzero_ps(); T];
                for b in 0..nb {
                    let base = g * nb + b;
                    // SAFETY: group g, block b: 256 bytes, 8 scales, 8 sums inside the packed
                    // arrays (g < groups, b < nb).
                    let (corr, ws, wp) = unsafe {
                        (
                            // Unsigned (biased) activations: start at -128 * sum(w).
                            if $biased {
                                _mm256_loadu_si256(p.neg_sums.as_ptr().add(base * 8).cast())
                            } else {
                                _mm256_setzero_si256()
                            },
                            _mm256_loadu_ps(p.scales.as_ptr().add(base * 8)),
                            p.qs.as_ptr().add(base * 256),
                        )
                    };
                    let mut dq = [corr; T];
                    let mut dr = [corr; T];
                    for c in 0..8 {
                        // SAFETY: chunk c of the block lies inside the 256 bytes above.
                        let w = unsafe { _mm256_loadu_si256(wp.add(c * 32).cast()) };
                        for t in 0..T {
                            let at = (i0 + t) * k + b * 32 + c * 4;
                            // SAFETY: bytes at..at + 4 of row i0 + t lie inside the
                            // activations (n x k).
                            let (xq, xr) = unsafe {
                                (
                                    uq.as_ptr().add(at).cast::<i32>().read_unaligned(),
                                    ur.as_ptr().add(at).cast::<i32>().read_unaligned(),
                                )
                            };
                            dq[t] = $chunk(dq[t], xq, w);
                            if X2 {
                                dr[t] = $chunk(dr[t], xr, w);
                            }
                        }
                    }
                    for (t, a) in acc.iter_mut().enumerate() {
                        let mut idot = dq[t];
                        if X2 {
                            idot = _mm256_add_epi32(_mm256_slli_epi32::<7>(idot), dr[t]);
                        }
                        let s = _mm256_mul_ps(ws, _mm256_set1_ps(xs[(i0 + t) * nb + b]));
                        *a = _mm256_add_ps(*a, _mm256_mul_ps(s, _mm256_cvtepi32_ps(idot)));
                    }
                }
                let mask = _mm256_cmpgt_epi32(
                    _mm256_set1_epi32(lanes as i32),
                    _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                );
                for (t, a) in acc.iter_mut().enumerate() {
                    for (o, &c) in outl.channels.iter().enumerate() {
                        let xo = _mm256_set1_ps(outl.x[(i0 + t) * k + c as usize]);
                        // SAFETY: the mask limits the load to rows < rows of column o, which
                        // lies inside cols (channels.len() x rows).
                        let col = unsafe {
                            _mm256_maskload_ps(outl.cols.as_ptr().add(o * rows + g * 8), mask)
                        };
                        *a = _mm256_add_ps(*a, _mm256_mul_ps(xo, col));
                    }
                    let at = (i0 + t) * rows + g * 8;
                    // SAFETY: the mask limits the store to the rows of the group that exist,
                    // which lie inside out (row i0 + t < n, out is n x rows).
                    unsafe { _mm256_maskstore_ps(out.as_mut_ptr().add(at), mask, *a) };
                }
            }

            /// # Safety
            /// The CPU must support the enabled features; lengths as asserted by
            /// `super::dot_packed8`.
            #[target_feature(enable = $features)]
            pub(super) unsafe fn $driver(
                p: &Packed8,
                rows: usize,
                nb: usize,
                act: (&[u8], Option<&[u8]>, &[f32]),
                outl: OutlierTerms<'_>,
                n: usize,
                out: &mut [f32],
            ) {
                let x2 = act.1.is_some();
                for g in 0..rows.div_ceil(8) {
                    let lanes = (rows - g * 8).min(8);
                    let mut i = 0;
                    // SAFETY (all calls): tokens i..i + 4 (or i) < n; as the caller guarantees.
                    while i + 4 <= n {
                        unsafe {
                            if x2 {
                                $tile::<4, true>(p, g, nb, act, outl, i, rows, lanes, out);
                            } else {
                                $tile::<4, false>(p, g, nb, act, outl, i, rows, lanes, out);
                            }
                        }
                        i += 4;
                    }
                    while i < n {
                        unsafe {
                            if x2 {
                                $tile::<1, true>(p, g, nb, act, outl, i, rows, lanes, out);
                            } else {
                                $tile::<1, false>(p, g, nb, act, outl, i, rows, lanes, out);
                            }
                        }
                        i += 1;
                    }
                }
            }
        };
    }

    /// AVX-VNNI: `dpbusd` of 4 unsigned activation bytes (broadcast) with 8 rows' 4 weights.
    #[inline]
    #[target_feature(enable = "avx2,avxvnni")]
    fn chunk_avxvnni(acc: __m256i, x: i32, w: __m256i) -> __m256i {
        _mm256_dpbusd_avx_epi32(acc, _mm256_set1_epi32(x), w)
    }

    /// AVX2: the sign trick on 4 signed activation bytes (broadcast) and 8 rows' 4 weights,
    /// `maddubs(|w|, x * sign(w))` then pairs summed to int32 (no saturation: see the module
    /// docs; the AVX2 activations are not biased).
    #[inline]
    #[target_feature(enable = "avx2")]
    fn chunk_avx2(acc: __m256i, x: i32, w: __m256i) -> __m256i {
        let sx = _mm256_sign_epi8(_mm256_set1_epi32(x), w);
        let p = _mm256_madd_epi16(
            _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), sx),
            _mm256_set1_epi16(1),
        );
        _mm256_add_epi32(acc, p)
    }

    packed8_kernel!(
        packed8_tile_avxvnni,
        dot_packed8_avxvnni,
        "avx2,fma,avxvnni",
        chunk_avxvnni,
        true
    );
    packed8_kernel!(
        packed8_tile_avx2,
        dot_packed8_avx2,
        "avx2,fma",
        chunk_avx2,
        false
    );

    // ---- AVX-VNNI ---------------------------------------------------------------------

    /// # Safety
    /// `q`, `r` (if any) and `w` must be valid for 32 bytes.
    #[target_feature(enable = "avx2,avxvnni")]
    unsafe fn block_avxvnni(q: *const i8, r: Option<*const i8>, w: *const i8) -> __m256i {
        // SAFETY: forwarded caller guarantee.
        let (wv, qv) = unsafe { (load32(w), load32(q)) };
        let aw = _mm256_sign_epi8(wv, wv);
        let dq = _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), aw, _mm256_sign_epi8(qv, wv));
        match r {
            None => dq,
            Some(r) => {
                // SAFETY: forwarded caller guarantee.
                let rv = unsafe { load32(r) };
                _mm256_dpbusd_avx_epi32(_mm256_slli_epi32::<7>(dq), aw, _mm256_sign_epi8(rv, wv))
            }
        }
    }

    #[cfg(test)]
    /// # Safety
    /// The CPU must support AVX2 and AVX-VNNI; lengths as asserted by `super::block_dots`.
    #[target_feature(enable = "avx2,avxvnni")]
    pub(super) unsafe fn block_dots_avxvnni(act: ActRow<'_>, w: &[i8], out: &mut [i32]) {
        for (b, o) in out.iter_mut().enumerate() {
            // SAFETY: block b lies inside q, r and w.
            let v = unsafe {
                block_avxvnni(
                    act.q.as_ptr().add(b * 32),
                    act.r.map(|r| r.as_ptr().add(b * 32)),
                    w.as_ptr().add(b * 32),
                )
            };
            *o = hsum_i32_256(v);
        }
    }

    // ---- AVX-512 VNNI -------------------------------------------------------------------

    /// Loads two blocks (64 bytes), or one block and 32 zero bytes when `two` is false.
    ///
    /// # Safety
    /// `p` must be valid for 64 bytes when `two`, else 32.
    #[target_feature(enable = "avx512f,avx512bw")]
    unsafe fn load_pair(p: *const i8, two: bool) -> __m512i {
        let mask: __mmask64 = if two { u64::MAX } else { 0xFFFF_FFFF };
        // SAFETY: masked-off bytes are not read (no fault), the rest are in bounds by the
        // caller guarantee.
        unsafe { _mm512_maskz_loadu_epi8(mask, p) }
    }

    /// x * sign(w), bytewise: AVX-512 has no `sign_epi8`, so negate x where w < 0 and zero
    /// it where w == 0 (the product is 0 there anyway since |w| = 0).
    #[target_feature(enable = "avx512f,avx512bw")]
    fn apply_sign_512(x: __m512i, w: __m512i) -> __m512i {
        let neg = _mm512_movepi8_mask(w);
        _mm512_mask_sub_epi8(x, neg, _mm512_setzero_si512(), x)
    }

    /// 16 lanes: lanes 0..8 hold partial sums of the first block, 8..16 of the second.
    ///
    /// # Safety
    /// Pointers valid for 64 bytes when `two`, else 32.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    unsafe fn pair_avx512(q: *const i8, r: Option<*const i8>, w: *const i8, two: bool) -> __m512i {
        // SAFETY: forwarded caller guarantee.
        let (wv, qv) = unsafe { (load_pair(w, two), load_pair(q, two)) };
        let aw = _mm512_abs_epi8(wv);
        let dq = _mm512_dpbusd_epi32(_mm512_setzero_si512(), aw, apply_sign_512(qv, wv));
        match r {
            None => dq,
            Some(r) => {
                // SAFETY: forwarded caller guarantee.
                let rv = unsafe { load_pair(r, two) };
                _mm512_dpbusd_epi32(_mm512_slli_epi32::<7>(dq), aw, apply_sign_512(rv, wv))
            }
        }
    }

    #[cfg(test)]
    /// # Safety
    /// The CPU must support AVX-512 F/BW/VNNI; lengths as asserted by `super::block_dots`.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx2")]
    pub(super) unsafe fn block_dots_avx512(act: ActRow<'_>, w: &[i8], out: &mut [i32]) {
        let nb = out.len();
        let mut b = 0;
        while b < nb {
            let two = b + 1 < nb;
            // SAFETY: blocks b (and b + 1 when `two`) lie inside q, r and w.
            let v = unsafe {
                pair_avx512(
                    act.q.as_ptr().add(b * 32),
                    act.r.map(|r| r.as_ptr().add(b * 32)),
                    w.as_ptr().add(b * 32),
                    two,
                )
            };
            out[b] = hsum_i32_256(_mm512_castsi512_si256(v));
            if two {
                out[b + 1] = hsum_i32_256(_mm512_extracti64x4_epi64::<1>(v));
            }
            b += 2;
        }
    }

    /// The largest f32 below 0.5 (0.49999997).
    const BELOW_HALF: u32 = 0x3EFF_FFFF;

    /// `round_away` of `matmul.rs` lane-wise, clamped to -127..=127, short of its final
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
    /// `matmul.rs` lane-wise, as a float (see [`round_clamp_untruncated_512`]).
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
    pub(super) unsafe fn round_clamp_lanes(v: &[f32; 16]) -> ([i32; 16], [i32; 16]) {
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
    /// `super::quantize_rows_biased_avx512` (rows of `nb` blocks). `BIASED`: store `q ^ 0x80`
    /// (and `r ^ 0x80`) and read the lanes of `zero[b]` as 0.0 (`zero` empty: none). `WIDE`
    /// (with `x2`): store `128 q + r` into `a` (as long as `x`) and leave `q`, `r` (then
    /// empty) alone.
    #[target_feature(enable = "avx512f,avx512bw")]
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn quantize_rows_avx512<const BIASED: bool, const WIDE: bool>(
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
            let values = |j: usize| {
                let v = load(j);
                let (idv, dv, i128v) = (
                    _mm512_set1_ps(ids[j]),
                    _mm512_set1_ps(ds[j]),
                    _mm512_set1_ps(id128s[j]),
                );
                let mut qi = [_mm512_setzero_si512(); 2];
                let mut ri = [_mm512_setzero_si512(); 2];
                for h in 0..2 {
                    let y = _mm512_mul_ps(v[h], idv);
                    if x2 {
                        // The residual needs q as a float.
                        let qf = round_clamp_512(y);
                        qi[h] = _mm512_cvttps_epi32(qf);
                        let res = _mm512_mul_ps(_mm512_sub_ps(v[h], _mm512_mul_ps(dv, qf)), i128v);
                        ri[h] = _mm512_cvttps_epi32(round_clamp_untruncated_512(res));
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
    /// by `super::dot_packed`; `mask` covers only rows `< rows` of the group.
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
                        let xq =
                            unsafe { uq.as_ptr().add(at + c * 4).cast::<i32>().read_unaligned() };
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
            let col =
                unsafe { _mm512_maskz_loadu_ps(mask, outl.cols.as_ptr().add(o * rows + g * 16)) };
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
    /// The CPU must support AVX-512 F/BW/VNNI; lengths as asserted by `super::dot_packed`.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    pub(super) unsafe fn dot_packed_avx512(
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
    /// by `super::dot_packed_x2`; `mask` covers only rows `< rows` of the group.
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
    /// The CPU must support AVX-512 F/BW/VNNI; lengths as asserted by `super::dot_packed_x2`.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn dot_packed_x2_avx512(
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

    /// Sum of the two 256-bit halves of a 512-bit float vector.
    #[target_feature(enable = "avx512f")]
    fn fold_512(v: __m512) -> __m256 {
        let hi = _mm512_extractf64x4_pd::<1>(_mm512_castps_pd(v));
        _mm256_add_ps(_mm512_castps512_ps256(v), _mm256_castpd_ps(hi))
    }

    /// `ROWS` weight rows (1 or 4) starting at `j` against one activation row: per pair of
    /// blocks, one int32 vector per row, scaled by a permute of the precomputed block scales.
    ///
    /// # Safety
    /// Rows `j..j + ROWS` exist; lengths as asserted by `super::dot_rows`.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx2")]
    unsafe fn rows_avx512<const ROWS: usize>(
        act: ActRow<'_>,
        qs: &[i8],
        scales: &[f32],
        j: usize,
    ) -> [__m512; ROWS] {
        let nb = act.scales.len();
        let k = nb * 32;
        // Lane i of a scale vector: block 0 of the pair for lanes 0..8, block 1 for 8..16.
        let pair_lanes = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
        let mut acc = [_mm512_setzero_ps(); ROWS];
        // Up to 16 block scales (w_scale * x_scale) at once, then one permute per pair
        // instead of two broadcasts and a blend.
        let mut b0 = 0;
        while b0 < nb {
            let cnt = (nb - b0).min(16);
            let m: __mmask16 = if cnt == 16 { 0xFFFF } else { (1u16 << cnt) - 1 };
            // SAFETY: the mask limits the loads to the `cnt` scales that exist
            // (b0 + cnt <= nb; rows j + t < rows); masked lanes read nothing.
            let xs = unsafe { _mm512_maskz_loadu_ps(m, act.scales.as_ptr().add(b0)) };
            let mut s_all = [_mm512_setzero_ps(); ROWS];
            for (t, s) in s_all.iter_mut().enumerate() {
                // SAFETY: see above.
                let ws =
                    unsafe { _mm512_maskz_loadu_ps(m, scales.as_ptr().add((j + t) * nb + b0)) };
                *s = _mm512_mul_ps(ws, xs);
            }
            let mut idx = pair_lanes;
            let mut p = 0;
            while p < cnt {
                let b = b0 + p;
                let two = p + 1 < cnt;
                for (t, a) in acc.iter_mut().enumerate() {
                    // SAFETY: blocks b (and b + 1 when `two`) of row j + t lie inside qs; the
                    // same blocks inside the activation rows.
                    let v = unsafe {
                        pair_avx512(
                            act.q.as_ptr().add(b * 32),
                            act.r.map(|r| r.as_ptr().add(b * 32)),
                            qs.as_ptr().add((j + t) * k + b * 32),
                            two,
                        )
                    };
                    // Without a second block, lanes 8..16 of v are 0 and their scale lane is
                    // a masked-off 0, so they add nothing.
                    let s = _mm512_permutexvar_ps(idx, s_all[t]);
                    *a = _mm512_fmadd_ps(_mm512_cvtepi32_ps(v), s, *a);
                }
                idx = _mm512_add_epi32(idx, _mm512_set1_epi32(2));
                p += 2;
            }
            b0 += 16;
        }
        acc
    }

    /// # Safety
    /// The CPU must support AVX-512 F/BW/VNNI; lengths as asserted by `super::dot_rows`.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx2")]
    pub(super) unsafe fn dot_rows_avx512(
        act: ActRow<'_>,
        qs: &[i8],
        scales: &[f32],
        out: &mut [f32],
    ) {
        let rows = out.len();
        let mut j = 0;
        while j + 4 <= rows {
            // SAFETY: rows j..j + 4 exist.
            let acc = unsafe { rows_avx512::<4>(act, qs, scales, j) };
            let sums = hsum4_256([
                fold_512(acc[0]),
                fold_512(acc[1]),
                fold_512(acc[2]),
                fold_512(acc[3]),
            ]);
            // SAFETY: out[j..j + 4] exists; unaligned store.
            unsafe { _mm_storeu_ps(out.as_mut_ptr().add(j), sums) };
            j += 4;
        }
        while j < rows {
            // SAFETY: row j exists.
            let acc = unsafe { rows_avx512::<1>(act, qs, scales, j) };
            out[j] = _mm512_reduce_add_ps(acc[0]);
            j += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rand_i8(n: usize, seed: u64, lo: i32, hi: i32) -> Vec<i8> {
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

    #[test]
    fn scalar_is_always_available_and_detect_returns_an_available_path() {
        assert!(KernelPath::Scalar.is_available());
        assert!(KernelPath::detect().is_available());
        assert_eq!(KernelPath::available().last(), Some(&KernelPath::Scalar));
    }

    #[test]
    fn simd_block_dots_equal_scalar_bit_for_bit() {
        // Odd block counts exercise the AVX-512 single-block tail; the extremes exercise the
        // sign trick (w = -128 from foreign files, x = +-127, r = +-64).
        for nb in [1usize, 2, 3, 7, 8, 16] {
            let k = nb * 32;
            let mut w = rand_i8(k, nb as u64, -128, 127);
            w[0] = -128;
            w[k - 1] = 127;
            let mut q = rand_i8(k, 100 + nb as u64, -127, 127);
            q[0] = -127;
            q[1] = 127;
            let r = rand_i8(k, 200 + nb as u64, -64, 64);
            let scales = vec![1.0f32; nb];
            for resid in [None, Some(r.as_slice())] {
                let act = ActRow {
                    q: &q,
                    r: resid,
                    scales: &scales,
                };
                let mut want = vec![0i32; nb];
                block_dots(KernelPath::Scalar, act, &w, &mut want);
                // The all-extreme block must reach the hand-computed value.
                assert_eq!(
                    want[0],
                    (0..32)
                        .map(|i| {
                            let d = i32::from(q[i]) * i32::from(w[i]);
                            match resid {
                                None => d,
                                Some(r) => 128 * d + i32::from(r[i]) * i32::from(w[i]),
                            }
                        })
                        .sum::<i32>()
                );
                for path in KernelPath::available() {
                    let mut got = vec![0i32; nb];
                    block_dots(path, act, &w, &mut got);
                    assert_eq!(got, want, "{path} nb={nb} resid={}", resid.is_some());
                }
            }
        }
    }

    /// The packed AVX-512 kernel's int32 block dots, read out one block at a time through
    /// one-hot activation scales (exact in f32: one product by 1.0), equal the scalar ones.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn packed_block_dots_equal_scalar_bit_for_bit() {
        if !KernelPath::Avx512Vnni.is_available() {
            return; // nothing to compare on this CPU; the scalar path is tested elsewhere
        }
        let (n, nb, rows) = (6usize, 3usize, 21usize); // a tile of 4 + 2 single tokens, 2 groups
        let k = nb * 32;
        let mut w = rand_i8(rows * k, 11, -128, 127);
        w[0] = -128;
        w[5 * k + 7] = -128;
        let mut q = rand_i8(n * k, 12, -127, 127);
        q[0] = -127;
        q[1] = 127;
        let r = rand_i8(n * k, 13, -127, 127);
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
                    let act_row = ActRow {
                        q: &q[i * k..(i + 1) * k],
                        r: resid.then(|| &r[i * k..(i + 1) * k]),
                        scales: &one,
                    };
                    for j in 0..rows {
                        let mut want = vec![0i32; nb];
                        block_dots(
                            KernelPath::Scalar,
                            act_row,
                            &w[j * k..(j + 1) * k],
                            &mut want,
                        );
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

    #[test]
    fn simd_row_dots_match_scalar_within_1e_6() {
        // 16 blocks is one AVX-512 scale chunk: cover below, at, and across chunk borders.
        for nb in [1usize, 2, 9, 16, 17, 33] {
            row_dots_case(13, nb);
        }
    }

    fn row_dots_case(rows: usize, nb: usize) {
        let k = nb * 32;
        let w = rand_i8(rows * k, 7, -127, 127);
        let q = rand_i8(k, 8, -127, 127);
        let r = rand_i8(k, 9, -64, 64);
        let ws: Vec<f32> = (0..rows * nb)
            .map(|i| 1e-3 * (1.0 + (i % 17) as f32 * 0.37))
            .collect();
        let xs: Vec<f32> = (0..nb)
            .map(|i| 0.02 / 128.0 * (1.0 + i as f32 * 0.11))
            .collect();
        for resid in [None, Some(r.as_slice())] {
            let act = ActRow {
                q: &q,
                r: resid,
                scales: &xs,
            };
            let mut want = vec![0f32; rows];
            dot_rows(KernelPath::Scalar, act, &w, &ws, &mut want);
            // Magnitude of the summed terms: the yardstick for "relative".
            let mut mag = vec![0f64; rows];
            let mut dots = vec![0i32; nb];
            for j in 0..rows {
                block_dots(KernelPath::Scalar, act, &w[j * k..(j + 1) * k], &mut dots);
                mag[j] = (0..nb)
                    .map(|b| f64::from(ws[j * nb + b] * xs[b]) * f64::from(dots[b]).abs())
                    .sum();
            }
            for path in KernelPath::available() {
                let mut got = vec![0f32; rows];
                dot_rows(path, act, &w, &ws, &mut got);
                for j in 0..rows {
                    let err = f64::from((got[j] - want[j]).abs());
                    assert!(
                        err <= 1e-6 * mag[j],
                        "{path} nb {nb} row {j}: {} vs {}",
                        got[j],
                        want[j]
                    );
                }
            }
        }
    }
}
