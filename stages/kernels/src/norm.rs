//! Kernels 3 and 7: per-head RMSNorm (spec §5) and the gated RMSNorm of the GDN output
//! (spec §9).
//!
//! Per head: `ms = (1/n)·Σ x²`, `y = x · (1/√(ms + eps)) · w` with one weight vector shared
//! by all heads; the gated form multiplies by `SiLU(z)`. The reference sums the exact f64
//! squares, evaluates the rest in f64 and rounds each output once to f32.

use crate::detmath;

/// `rms_norm_eps` of qwen35moe.
pub const RMS_NORM_EPS: f64 = 1e-6;

fn inv_rms(head: &[f32], eps: f64) -> f64 {
    let sum: f64 = head.iter().map(|&v| f64::from(v) * f64::from(v)).sum();
    let ms = sum / head.len().max(1) as f64;
    1.0 / (ms + eps).sqrt()
}

/// RMSNorm of each head of `x` (`heads × w.len()`), weight `w` shared by all heads.
pub fn rms_norm_heads(x: &[f32], w: &[f32], eps: f64) -> Vec<f32> {
    let dim = w.len().max(1);
    let mut out = Vec::with_capacity(x.len());
    for head in x.chunks_exact(dim) {
        let scale = inv_rms(head, eps);
        out.extend(
            head.iter()
                .zip(w)
                .map(|(&v, &wd)| (f64::from(v) * scale * f64::from(wd)) as f32),
        );
    }
    out
}

/// `RMSNorm(y_h)[d] · w[d] · SiLU(z[h·S + d])` for each head of `y` (`heads × w.len()`).
pub fn gated_rms_norm(y: &[f32], w: &[f32], z: &[f32], eps: f64) -> Vec<f32> {
    let dim = w.len().max(1);
    let mut out = Vec::with_capacity(y.len());
    for (head, gate) in y.chunks_exact(dim).zip(z.chunks_exact(dim)) {
        let scale = inv_rms(head, eps);
        out.extend(head.iter().zip(w).zip(gate).map(|((&v, &wd), &zd)| {
            (f64::from(v) * scale * f64::from(wd) * detmath::silu(f64::from(zd))) as f32
        }));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unit_rms_after_norm_and_eps_matters_for_tiny_inputs() {
        let x: Vec<f32> = (0..8).map(|i| i as f32 - 3.5).collect();
        let w = vec![1.0f32; 4];
        let y = rms_norm_heads(&x, &w, RMS_NORM_EPS);
        for head in y.chunks(4) {
            let ms: f32 = head.iter().map(|v| v * v).sum::<f32>() / 4.0;
            assert!((ms - 1.0).abs() < 1e-5, "{ms}");
        }
        let tiny = vec![1e-4f32; 4];
        let with = rms_norm_heads(&tiny, &w, RMS_NORM_EPS)[0];
        let without = rms_norm_heads(&tiny, &w, 0.0)[0];
        assert!(
            (with - 1e-4 / (1e-8f32 + 1e-6).sqrt()).abs() < 1e-6,
            "{with}"
        );
        assert!((without - 1.0).abs() < 1e-6);
    }

    #[test]
    fn gated_norm_multiplies_by_silu_of_z() {
        let y = [1.0f32, -1.0];
        let z = [2.0f32, 0.0];
        let out = gated_rms_norm(&y, &[2.0, 2.0], &z, 0.0);
        let silu2 = 2.0 / (1.0 + (-2.0f64).exp());
        assert!((f64::from(out[0]) - 2.0 * silu2).abs() < 1e-6);
        assert_eq!(out[1], 0.0);
    }
}
