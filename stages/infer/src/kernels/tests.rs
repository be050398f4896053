//! Every instruction set of this CPU against the portable definition, bit for bit, and the
//! definition against exact references.

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

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|f| f.to_bits()).collect()
}

/// The vector instruction sets this CPU runs (the scalar one is the reference).
fn vector_isas() -> Vec<Isa> {
    Isa::NATIVE
        .into_iter()
        .filter(|i| *i != Isa::Scalar && i.available())
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

/// Every instruction set gives the scalar product's bits, with and without a next B to
/// prefetch ([`Ahead`]), and the scalar product is within 1e-5 relative to k of an f64
/// reference, on shapes with row and column tails, strides and accumulation; nothing outside
/// C's columns is written.
#[test]
fn every_gemm_path_gives_the_scalar_bits() {
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
            let mut scalar = c0.clone();
            gemm(Isa::Scalar, g, &a, &b, &mut scalar);
            for i in 0..m {
                for j in 0..n {
                    let idx = i * ldc + j;
                    let err = (scalar[idx] as f64 - want[idx]).abs();
                    assert!(
                        err <= 1e-5 * (k as f64 + 1.0),
                        "{m}x{n}x{k} ({i},{j}): {err}"
                    );
                }
            }
            // More 64-byte lines than the first tile asks for, and a last line cut short.
            let ahead = rand_vec(2 * k * 16 + 5, &mut seed);
            for isa in vector_isas() {
                let mut c = c0.clone();
                gemm(isa, g, &a, &b, &mut c);
                for i in 0..m {
                    for j in n..ldc {
                        let idx = i * ldc + j;
                        assert_eq!(c[idx], c0[idx], "{isa} wrote outside C at ({i},{j})");
                    }
                }
                assert_eq!(bits(&c), bits(&scalar), "{isa} {m}x{n}x{k} acc {acc}");
                let mut c = c0.clone();
                // SAFETY: `c` is borrowed for the call and holds `c.len()` elements.
                unsafe { gemm_raw(isa, g, &a, &b, c.as_mut_ptr(), c.len(), &ahead) };
                assert_eq!(bits(&c), bits(&scalar), "{isa} {m}x{n}x{k} acc {acc} ahead");
            }
        }
    }
}

/// Row tiles cover every row once, none wider than a full tile, and past one full tile none
/// narrower than 4 rows on AVX-512 (3 on AVX2's 6-row tiles): no tail of 1 to 3 rows.
#[cfg(target_arch = "x86_64")]
#[test]
fn row_tiles_leave_no_thin_tail() {
    for (full, least) in [(8, 4), (6, 3)] {
        for m in 1..60 {
            let mut tiles = Vec::new();
            let mut i = 0;
            while i < m {
                let rows = tile_rows(m - i, full);
                assert!(rows >= 1 && rows <= full, "m {m}: {tiles:?} then {rows}");
                tiles.push(rows);
                i += rows;
            }
            assert_eq!(i, m);
            if m >= full {
                assert!(tiles.iter().all(|&r| r >= least), "m {m}: {tiles:?}");
            }
        }
    }
    assert_eq!(tile_rows(9, 8), 5);
    assert_eq!(tile_rows(4, 8), 4);
}

/// The lines of a prefetched B go to the tiles in order, at most `k` per tile, each once,
/// every one starting inside the slice (the last one cut short).
#[cfg(target_arch = "x86_64")]
#[test]
fn ahead_hands_out_each_line_once() {
    let next = vec![0f32; 3 * LINE + 1];
    let base = next.as_ptr();
    let mut ahead = Ahead::new(&next);
    let taken: Vec<(usize, usize)> = (0..4)
        .map(|_| {
            let (first, lines) = ahead.take(3);
            ((first as usize - base as usize) / 4, lines)
        })
        .collect();
    assert_eq!(taken[..2], [(0, 3), (3 * LINE, 1)]);
    assert_eq!(taken[2].1, 0);
    assert_eq!(taken[3].1, 0);
    let mut none = Ahead::new(&[]);
    assert_eq!(none.take(64).1, 0);
}

/// The product's terms are fused multiply-adds on every path: `(1 + 2^-12)^2 - (1 + 2^-11)`
/// is 2^-24 with one rounding and 0 with two.
#[test]
fn products_fuse_the_multiply_and_the_add() {
    let a = [1.0 + f32::EPSILON * 2048.0];
    let g = Gemm {
        m: 1,
        n: 1,
        k: 1,
        lda: 1,
        ldb: 1,
        ldc: 1,
        accumulate: true,
    };
    for isa in Isa::NATIVE.into_iter().filter(|i| i.available()) {
        let mut c = [-(1.0 + f32::EPSILON * 4096.0)];
        gemm(isa, g, &a, &a, &mut c);
        assert_eq!(c[0], 2f32.powi(-24), "{isa}");
    }
}

/// The fold is the halving tree: one value far above the others shows which pairs meet first.
#[test]
fn the_reduction_folds_by_halves() {
    let mut p = [1f32; LANES];
    p[0] = 1e8;
    // Added in order, each 1 is lost against 1e8 (an ulp there is 8). By halves the ones
    // first meet each other: 1e8 + 1, + 2, + 4 all round back to 1e8, and the last + 8 lands.
    assert_eq!(p.iter().sum::<f32>(), 1e8);
    assert_eq!(fold16(p), 100_000_008.0);
    let f64s: [f64; LANES] = std::array::from_fn(|l| l as f64 + 0.5);
    assert_eq!(
        fold16(f64s),
        (0..LANES).map(|l| l as f64 + 0.5).sum::<f64>()
    );
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

/// GeGLU: the scalar definition within A&S's bound of exact GELU, and every instruction set
/// on the scalar bits (a sweep over both signs, zero, past |x| = 4 and into exp's clamp).
#[test]
fn every_geglu_path_gives_the_scalar_bits() {
    // 1000 = 62 vectors of 16 (125 of 8) and a tail of 8 / 0.
    let f = 1000;
    let mut z: Vec<f32> = (0..f).map(|i| (i as f32 - 500.0) * 0.027).collect();
    z[3] = 0.0;
    z[4] = -0.0;
    z[5] = 30.0;
    z[6] = -30.0;
    z.extend((0..f).map(|i| ((i * 37 % 200) as f32 - 100.0) * 0.09));
    let mut want = vec![0f32; f];
    geglu_row(Isa::Scalar, &z, &mut want);
    for (j, w) in want.iter().enumerate() {
        // A&S 7.1.26 is within 1.5e-7 of erf, so GELU within 0.75e-7 |x| (times the gate).
        let exact = gelu_erf(z[j]) * z[f + j];
        let bound = 1e-7 * (z[j] * z[f + j]).abs() + 1e-6 * exact.abs() + 1e-9;
        assert!((w - exact).abs() <= bound, "{j}: {w} vs {exact}");
    }
    for isa in vector_isas() {
        for len in [f, 13, 8, 7] {
            let zz: Vec<f32> = z[..len].iter().chain(&z[f..f + len]).copied().collect();
            let mut got = vec![0f32; len];
            geglu_row(isa, &zz, &mut got);
            let mut scalar = vec![0f32; len];
            geglu_row(Isa::Scalar, &zz, &mut scalar);
            assert_eq!(bits(&got), bits(&scalar), "{isa} geglu len {len}");
        }
    }
}

/// The attention softmax (scale, window, zeros outside) on every instruction set gives the
/// scalar bits, on lengths around 8 and 16 and windows that start, end and sit inside the row.
#[test]
fn every_softmax_path_gives_the_scalar_bits() {
    let mut seed = 3u64;
    for len in [1usize, 7, 8, 9, 15, 16, 17, 31, 33, 40, 107, 300] {
        let row0: Vec<f32> = rand_vec(len, &mut seed).iter().map(|v| v * 30.0).collect();
        for valid in [
            0..len,
            0..len / 2 + 1,
            len / 3..len,
            len / 4..(len / 4 + 5).min(len),
            len / 2..len / 2,
        ] {
            let mut want = row0.clone();
            softmax_scaled(Isa::Scalar, &mut want, 0.125, valid.clone());
            if !valid.is_empty() {
                let total: f32 = want.iter().sum();
                assert!((total - 1.0).abs() < 1e-5, "{len} {valid:?}: sum {total}");
            }
            for (j, v) in want.iter().enumerate() {
                assert!(
                    valid.contains(&j) || *v == 0.0,
                    "{len} {valid:?} col {j}: {v}"
                );
            }
            for isa in vector_isas() {
                let mut got = row0.clone();
                softmax_scaled(isa, &mut got, 0.125, valid.clone());
                assert_eq!(bits(&got), bits(&want), "{isa} {len} {valid:?}");
            }
        }
    }
    let mut row = vec![0.5f32, 2.0, -1.0];
    softmax_row(Isa::Scalar, &mut row);
    let e: Vec<f64> = [0.5f64, 2.0, -1.0].iter().map(|v| v.exp()).collect();
    let s: f64 = e.iter().sum();
    for (got, e) in row.iter().zip(&e) {
        assert!((*got as f64 - e / s).abs() < 1e-6);
    }
}

/// LayerNorm (f64 partial sums) on every instruction set gives the scalar bits, with and
/// without bias, on widths with and without a tail past the last 8 and 16 columns.
#[test]
fn every_layer_norm_path_gives_the_scalar_bits() {
    let mut seed = 11u64;
    for d in [1usize, 3, 8, 16, 24, 31, 64, 70, 256, 384] {
        let mut x = rand_vec(3 * d, &mut seed);
        x[d / 2] = 40.0; // a massive channel, as these models have
        let w: Vec<f32> = rand_vec(d, &mut seed).iter().map(|v| 1.0 + v).collect();
        let b = rand_vec(d, &mut seed);
        for bias in [None, Some(&b[..])] {
            let mut want = vec![0f32; 3 * d];
            layer_norm(Isa::Scalar, &x, &mut want, d, &w, bias, 1e-5);
            for isa in vector_isas() {
                let mut got = vec![0f32; 3 * d];
                layer_norm(isa, &x, &mut got, d, &w, bias, 1e-5);
                assert_eq!(bits(&got), bits(&want), "{isa} d {d}");
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

/// The instruction-set names are the `SKYCTL_ISA` ones, and each maps to its level.
#[test]
fn names_and_levels_agree() {
    for isa in Isa::NATIVE {
        assert_eq!(Isa::at(isa.level()), isa);
        assert_eq!(IsaLevel::parse(isa.name()), Some(isa.level()));
    }
    assert_eq!(Isa::Simd128.name(), "simd128");
    assert!(Isa::Scalar.int8_path() == KernelPath::Scalar);
}

/// On aarch64 the comparisons above check the NEON table (they would compare nothing if it
/// were missing), `auto` picks it, and its int8 path uses `sdot` exactly where the CPU has it.
#[cfg(target_arch = "aarch64")]
#[test]
fn aarch64_checks_the_neon_table() {
    assert_eq!(vector_isas(), [Isa::Neon]);
    assert!(std::ptr::eq(Isa::Neon.kernels(), &neon::KERNELS));
    assert_eq!(IsaLevel::best(), IsaLevel::Neon);
    let want = if std::arch::is_aarch64_feature_detected!("dotprod") {
        KernelPath::NeonDot
    } else {
        KernelPath::Neon
    };
    assert_eq!(Isa::Neon.int8_path(), want);
}

/// The portable loops compiled plain (each fused term a libm call) and compiled with FMA (what
/// the scalar table runs on an FMA CPU) give the same bits.
#[cfg(target_arch = "x86_64")]
#[test]
fn both_compilations_of_the_portable_loops_agree() {
    if !std::arch::is_x86_feature_detected!("fma") {
        return;
    }
    let mut seed = 17u64;
    let (m, n, k) = (7, 37, 45);
    let g = Gemm {
        m,
        n,
        k,
        lda: k,
        ldb: n,
        ldc: n,
        accumulate: false,
    };
    let a = rand_vec(m * k, &mut seed);
    let b = rand_vec(k * n, &mut seed);
    let (mut plain, mut fused) = (vec![0f32; m * n], vec![0f32; m * n]);
    // SAFETY: the shapes match the slices; FMA was detected above.
    unsafe {
        scalar::gemm_raw(g, &a, &b, plain.as_mut_ptr());
        scalar::gemm_fma(g, &a, &b, fused.as_mut_ptr());
    }
    assert_eq!(bits(&plain), bits(&fused), "gemm");
    let z: Vec<f32> = rand_vec(2 * 300, &mut seed)
        .iter()
        .map(|v| v * 6.0)
        .collect();
    let (mut plain, mut fused) = (vec![0f32; 300], vec![0f32; 300]);
    scalar::geglu(&z, &mut plain);
    // SAFETY: FMA was detected above; `z` holds twice the output.
    unsafe { scalar::geglu_fma(&z, &mut fused) };
    assert_eq!(bits(&plain), bits(&fused), "geglu");
    let row: Vec<f32> = z.iter().map(|v| v * 5.0).collect();
    let (mut plain, mut fused) = (row.clone(), row);
    scalar::softmax_scaled(&mut plain, 0.3, 5..290);
    // SAFETY: FMA was detected above; the range lies inside the row.
    unsafe { scalar::softmax_fma(&mut fused, 0.3, 5..290) };
    assert_eq!(bits(&plain), bits(&fused), "softmax");
}

/// Every instruction set's transpose copies the block exactly, full register tiles and row and
/// column edges alike, and writes nothing outside it.
#[test]
fn every_transpose_path_copies_the_block() {
    let mut seed = 11u64;
    for &(rows, cols) in &[
        (1, 1),
        (3, 5),
        (8, 8),
        (16, 16),
        (17, 16),
        (16, 17),
        (33, 64),
        (173, 64),
        (40, 23),
        (7, 40),
    ] {
        let (lds, ldd) = (cols + 5, rows + 3);
        let src = rand_vec(rows * lds, &mut seed);
        for isa in Isa::NATIVE.into_iter().filter(|i| i.available()) {
            let mut dst = vec![f32::NAN; cols * ldd];
            transpose(isa, &src, lds, rows, cols, &mut dst, ldd);
            for c in 0..cols {
                for r in 0..ldd {
                    let got = dst[c * ldd + r];
                    if r < rows {
                        assert_eq!(
                            got.to_bits(),
                            src[r * lds + c].to_bits(),
                            "{isa:?} {rows}x{cols} ({r},{c})"
                        );
                    } else {
                        assert!(
                            got.is_nan(),
                            "{isa:?} {rows}x{cols}: wrote ({r},{c}) outside the block"
                        );
                    }
                }
            }
        }
    }
}
