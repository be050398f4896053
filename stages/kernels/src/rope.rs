//! Kernel 2: partial NEOX RoPE (spec §4): only the first 64 of each 256-dim head rotate.
//!
//! For pair i ∈ 0..32 at position p: θᵢ = p · 10⁷^(−2i/64), and
//! `v'[i] = x0·cos θ − x1·sin θ`, `v'[i+32] = x0·sin θ + x1·cos θ` with `x0 = v[i]`,
//! `x1 = v[i+32]` (NEOX / HF `rotate_half` pairing, not interleaved). Dims 64..256 pass
//! through. The reference evaluates θ, cos and sin in f64 (deterministic [`crate::detmath`]),
//! rotates in f64 and rounds once to f32; position 0 reproduces the input bit for bit.

use crate::detmath;

/// Dimensions per head.
pub const HEAD_DIM: usize = 256;
/// Rotated dimensions per head.
pub const ROPE_DIM: usize = 64;
/// Frequency base (`rope.freq_base`), 10⁷.
pub const THETA_BASE: f64 = 1e7;
/// Positions the goldens are generated for.
pub const POSITIONS: [u32; 4] = [0, 1, 7, 100];

/// Rotate every head of `x` (`heads × 256`, head-major) to position `pos`.
pub fn rope_neox_partial(x: &[f32], pos: u32) -> Vec<f32> {
    let half = ROPE_DIM / 2;
    // ln 10⁷ = 7·ln 10, written out so no platform `ln` is involved.
    let ln_base = 7.0 * std::f64::consts::LN_10;
    let trig: Vec<(f64, f64)> = (0..half)
        .map(|i| {
            let freq = detmath::exp(-(2.0 * i as f64 / ROPE_DIM as f64) * ln_base);
            detmath::sin_cos(f64::from(pos) * freq)
        })
        .collect();
    let mut out = x.to_vec();
    for head in out.chunks_exact_mut(HEAD_DIM) {
        for (i, &(s, c)) in trig.iter().enumerate() {
            let (x0, x1) = (f64::from(head[i]), f64::from(head[i + half]));
            head[i] = (x0 * c - x1 * s) as f32;
            head[i + half] = (x0 * s + x1 * c) as f32;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn position_zero_is_identity_and_tail_passes_through() {
        let x: Vec<f32> = (0..512).map(|i| (i as f32 * 0.37).sin()).collect();
        assert_eq!(rope_neox_partial(&x, 0), x);
        let y = rope_neox_partial(&x, 7);
        for h in 0..2 {
            assert_eq!(
                &y[h * 256 + 64..h * 256 + 256],
                &x[h * 256 + 64..h * 256 + 256]
            );
        }
    }

    #[test]
    fn matches_libm_formula_and_preserves_pair_norms() {
        let x: Vec<f32> = (0..256)
            .map(|i| ((i * 7919) % 101) as f32 / 50.0 - 1.0)
            .collect();
        for &p in &POSITIONS {
            let y = rope_neox_partial(&x, p);
            for i in 0..32 {
                let theta = f64::from(p) * 1e7f64.powf(-(2.0 * i as f64) / 64.0);
                let (x0, x1) = (f64::from(x[i]), f64::from(x[i + 32]));
                let want0 = x0 * theta.cos() - x1 * theta.sin();
                let want1 = x0 * theta.sin() + x1 * theta.cos();
                assert!((f64::from(y[i]) - want0).abs() < 1e-6, "p={p} i={i}");
                assert!((f64::from(y[i + 32]) - want1).abs() < 1e-6, "p={p} i={i}");
            }
        }
        // Pair 0 at position 1 rotates by exactly 1 radian.
        let y = rope_neox_partial(&x, 1);
        let want = f64::from(x[0]) * 1f64.cos() - f64::from(x[32]) * 1f64.sin();
        assert!((f64::from(y[0]) - want).abs() < 1e-7);
    }
}
