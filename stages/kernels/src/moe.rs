//! Kernel 4: MoE routing and the shared-expert gate (spec §6).
//!
//! Router: softmax over the logits (max subtracted, f64), top-k by selection sort taking in
//! each pass the *first* index with the strictly greatest remaining probability (so ties go
//! to the lower index), weights renormalised over the selection (the sum clamped to at least
//! 6.1035e-5 as llama.cpp does) and multiplied by `expert_weights_scale`. Shared gate:
//! `σ(Σ gate_w[i]·x[i])`. All in f64, outputs rounded once to f32.

use crate::detmath;

/// Experts selected per token.
pub const TOP_K: usize = 8;
/// `expert_weights_scale` (GGUF default).
pub const EXPERT_WEIGHTS_SCALE: f64 = 1.0;
/// llama.cpp's lower clamp on the renormalisation sum.
pub const MIN_WEIGHT_SUM: f64 = 6.1035e-5;

/// Softmax probabilities of `logits`, in f64.
pub fn softmax(logits: &[f32]) -> Vec<f64> {
    let max = logits
        .iter()
        .fold(f64::NEG_INFINITY, |m, &l| m.max(f64::from(l)));
    let exps: Vec<f64> = logits
        .iter()
        .map(|&l| detmath::exp(f64::from(l) - max))
        .collect();
    let sum: f64 = exps.iter().sum();
    exps.iter().map(|e| e / sum).collect()
}

/// Top-`k` selection with first-seen tie-break; indices in selection order.
pub fn select_top_k(p: &[f64], k: usize) -> Vec<usize> {
    let mut taken = vec![false; p.len()];
    let mut selected = Vec::with_capacity(k);
    for _ in 0..k.min(p.len()) {
        let mut best: Option<usize> = None;
        for (i, &pi) in p.iter().enumerate() {
            if !taken[i] && best.is_none_or(|b| pi > p[b]) {
                best = Some(i);
            }
        }
        if let Some(b) = best {
            taken[b] = true;
            selected.push(b);
        }
    }
    selected
}

/// Route one token: (expert indices, renormalised and scaled weights), both in selection
/// order.
pub fn route(logits: &[f32], k: usize) -> (Vec<i32>, Vec<f32>) {
    let p = softmax(logits);
    let sel = select_top_k(&p, k);
    let sum: f64 = sel.iter().map(|&i| p[i]).sum();
    let sum = sum.max(MIN_WEIGHT_SUM);
    let weights = sel
        .iter()
        .map(|&i| (p[i] / sum * EXPERT_WEIGHTS_SCALE) as f32)
        .collect();
    (sel.iter().map(|&i| i as i32).collect(), weights)
}

/// The shared-expert gate `σ(w · x)`.
pub fn shared_gate(w: &[f32], x: &[f32]) -> f32 {
    let dot: f64 = w
        .iter()
        .zip(x)
        .map(|(&a, &b)| f64::from(a) * f64::from(b))
        .sum();
    detmath::sigmoid(dot) as f32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ties_go_to_the_lower_index() {
        let logits = [0.5f32, 2.0, 2.0, 1.0, 2.0, 1.0];
        let (idx, w) = route(&logits, 4);
        assert_eq!(idx, vec![1, 2, 4, 3]);
        assert_eq!(w[0], w[1]);
        assert!((w.iter().sum::<f32>() - 1.0).abs() < 1e-6);
    }

    #[test]
    fn gate_is_sigmoid_of_dot() {
        assert_eq!(shared_gate(&[1.0, 2.0], &[0.5, -0.25]), 0.5);
        let g = shared_gate(&[2.0], &[1.0]);
        assert!((f64::from(g) - 1.0 / (1.0 + (-2.0f64).exp())).abs() < 1e-7);
    }
}
