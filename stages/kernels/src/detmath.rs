//! Deterministic elementary functions in f64, built only from IEEE-754 `+ − × ÷` and
//! `round`, so that every machine computes bit-identical goldens (platform `libm`s differ in
//! the last ulp of `exp`, `sin` and `cos`). Accuracy is within a few f64 ulp over the ranges
//! the kernels use, far below the f32 rounding applied to every output.

/// ln 2 split for Cody–Waite reduction (fdlibm's bit patterns): `LN2_HI` has trailing zero bits so
/// `k · LN2_HI` is exact for |k| < 2¹¹.
const LN2_HI: f64 = f64::from_bits(0x3FE6_2E42_FEE0_0000);
const LN2_LO: f64 = f64::from_bits(0x3DEA_39EF_3579_3C76);
/// π/2 in three parts of 33 bits each (fdlibm `pio2_1`, `pio2_2`, `pio2_3`), so `k · part`
/// is exact for |k| < 2²⁰.
const PIO2_1: f64 = f64::from_bits(0x3FF9_21FB_5440_0000);
const PIO2_2: f64 = f64::from_bits(0x3DD0_B461_1A60_0000);
const PIO2_3: f64 = f64::from_bits(0x3BA3_198A_2E00_0000);

/// `2^k` for |k| ≤ 1022.
fn pow2(k: i64) -> f64 {
    f64::from_bits(((k + 1023) as u64) << 52)
}

/// eˣ.
pub fn exp(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    if x > 709.78 {
        return f64::INFINITY;
    }
    if x < -745.2 {
        return 0.0;
    }
    let k = (x * std::f64::consts::LOG2_E).round();
    let r = (x - k * LN2_HI) - k * LN2_LO; // |r| ≤ 0.35
                                           // Taylor series to r¹⁶ in Horner form: 0.35¹⁷/17! ≈ 1e-22, below f64 precision.
    let mut p = 1.0;
    for i in (1..=16).rev() {
        p = 1.0 + p * r / f64::from(i);
    }
    // Split the scaling so both factors stay normal over the whole domain.
    let k = k as i64;
    let half = k / 2;
    p * pow2(half) * pow2(k - half)
}

/// (sin x, cos x), accurate for |x| < 2²⁰ (the kernels use |x| ≤ 100).
pub fn sin_cos(x: f64) -> (f64, f64) {
    let k = (x * std::f64::consts::FRAC_2_PI).round();
    let r = ((x - k * PIO2_1) - k * PIO2_2) - k * PIO2_3; // |r| ≤ π/4 (+ tiny)
    let r2 = r * r;
    // Taylor series to r²³ / r²²: (π/4)²⁴/24! ≈ 4e-27.
    let mut s = 1.0;
    let mut c = 1.0;
    for n in (1..=11).rev() {
        let n = f64::from(n);
        s = 1.0 - s * r2 / ((2.0 * n) * (2.0 * n + 1.0));
        c = 1.0 - c * r2 / ((2.0 * n - 1.0) * (2.0 * n));
    }
    let s = s * r;
    match (k as i64).rem_euclid(4) {
        0 => (s, c),
        1 => (c, -s),
        2 => (-s, -c),
        _ => (-c, s),
    }
}

/// σ(z) = 1 / (1 + e^(−z)).
pub fn sigmoid(z: f64) -> f64 {
    1.0 / (1.0 + exp(-z))
}

/// SiLU(a) = a · σ(a), written as a / (1 + e^(−a)) as the spec does.
pub fn silu(a: f64) -> f64 {
    a / (1.0 + exp(-a))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ulps(a: f64, b: f64) -> u64 {
        (a.to_bits() as i64 - b.to_bits() as i64).unsigned_abs()
    }

    #[test]
    fn exp_matches_libm_within_a_few_ulp() {
        for i in -4000..=4000 {
            let x = f64::from(i) * 0.0137;
            let (a, b) = (exp(x), x.exp());
            assert!(ulps(a, b) <= 4, "exp({x}) = {a} vs libm {b}");
        }
        assert_eq!(exp(0.0), 1.0);
        assert_eq!(exp(800.0), f64::INFINITY);
        assert_eq!(exp(-800.0), 0.0);
        assert!(exp(f64::NAN).is_nan());
    }

    #[test]
    fn sin_cos_match_libm_closely() {
        for i in -20000..=20000 {
            let x = f64::from(i) * 0.00731;
            let (s, c) = sin_cos(x);
            assert!((s - x.sin()).abs() <= 4.0 * f64::EPSILON, "sin({x})");
            assert!((c - x.cos()).abs() <= 4.0 * f64::EPSILON, "cos({x})");
        }
        assert_eq!(
            sin_cos(0.0),
            (0.0, 1.0),
            "position 0 must be an exact identity"
        );
    }

    #[test]
    fn sigmoid_and_silu() {
        assert_eq!(sigmoid(0.0), 0.5);
        assert!((silu(2.0) - 2.0 / (1.0 + (-2.0f64).exp())).abs() < 1e-15);
    }
}
