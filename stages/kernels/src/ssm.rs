//! Kernels 5 and 6: the gated delta-rule recurrence (spec §7) and the causal depthwise
//! conv1d + SiLU with its state roll (spec §8), single decode token.
//!
//! Recurrence, per value head h and row j of the *transposed* state
//! (`s[h·S·S + j·S + i] = S_h[i][j]`, row j contiguous over the key index i):
//! decay `row *= exp(g[h])`, predict `pred = row·k[h]`, `δ = (v[h][j] − pred)·β[h]`,
//! rank-1 write `row += k[h]·δ`, then read out *after* the write:
//! `y[h][j] = (1/√S)·(row·q[h])`.
//!
//! Conv: `a_c = Σ_{t<3} state[c·3+t]·w[c·4+t] + x[c]·w[c·4+3]`, `out[c] = SiLU(a_c)`, and
//! the state rolls towards the past: `state[c] ← (state[c·3+1], state[c·3+2], x[c])`.
//!
//! All arithmetic in f64, each output rounded once to f32.

use crate::detmath;

/// Value heads of the linear-attention (GDN) layers.
pub const N_V_HEADS: usize = 32;
/// State size S (head_k_dim = head_v_dim).
pub const STATE_SIZE: usize = 128;
/// Conv channels: q (2048) | k (2048) | v (4096).
pub const CONV_DIM: usize = 8192;
/// Conv kernel taps.
pub const CONV_KERNEL: usize = 4;

/// Inputs of one recurrence step (q and k already L2-normalised and expanded to all heads).
#[derive(Debug, Clone, Copy)]
pub struct RecurInputs<'a> {
    /// Transposed state, `heads × S × S` (`h, j, i`).
    pub state: &'a [f32],
    /// Queries, `heads × S`.
    pub q: &'a [f32],
    /// Keys, `heads × S`.
    pub k: &'a [f32],
    /// Values, `heads × S`.
    pub v: &'a [f32],
    /// Log-decay per head (the kernel applies `exp`).
    pub g: &'a [f32],
    /// β per head (already a sigmoid output).
    pub beta: &'a [f32],
}

/// One delta-rule step with state size `s`: returns (y, updated state).
pub fn delta_rule_step(inp: &RecurInputs<'_>, s: usize) -> (Vec<f32>, Vec<f32>) {
    let scale = 1.0 / (s as f64).sqrt();
    let mut y = Vec::with_capacity(inp.v.len());
    let mut state_out = Vec::with_capacity(inp.state.len());
    let mut row = vec![0.0f64; s];
    for (h, state_h) in inp.state.chunks_exact(s * s).enumerate() {
        let decay = detmath::exp(f64::from(inp.g[h]));
        let beta = f64::from(inp.beta[h]);
        let k = &inp.k[h * s..(h + 1) * s];
        let q = &inp.q[h * s..(h + 1) * s];
        for (j, row_in) in state_h.chunks_exact(s).enumerate() {
            for (r, &v) in row.iter_mut().zip(row_in) {
                *r = f64::from(v) * decay;
            }
            let pred: f64 = row.iter().zip(k).map(|(r, &ki)| r * f64::from(ki)).sum();
            let delta = (f64::from(inp.v[h * s + j]) - pred) * beta;
            for (r, &ki) in row.iter_mut().zip(k) {
                *r += f64::from(ki) * delta;
            }
            let read: f64 = row.iter().zip(q).map(|(r, &qi)| r * f64::from(qi)).sum();
            y.push((scale * read) as f32);
            state_out.extend(row.iter().map(|&r| r as f32));
        }
    }
    (y, state_out)
}

/// Causal depthwise conv (kernel `CONV_KERNEL`) + SiLU over all channels of `x`; returns
/// (output, rolled state).
pub fn conv1d_silu(x: &[f32], weight: &[f32], state: &[f32]) -> (Vec<f32>, Vec<f32>) {
    let hist = CONV_KERNEL - 1;
    let mut out = Vec::with_capacity(x.len());
    let mut state_out = Vec::with_capacity(state.len());
    for (c, &xc) in x.iter().enumerate() {
        let st = &state[c * hist..(c + 1) * hist];
        let w = &weight[c * CONV_KERNEL..(c + 1) * CONV_KERNEL];
        let past: f64 = st
            .iter()
            .zip(w)
            .map(|(&s, &wt)| f64::from(s) * f64::from(wt))
            .sum();
        let a = past + f64::from(xc) * f64::from(w[hist]);
        out.push(detmath::silu(a) as f32);
        state_out.extend_from_slice(&st[1..]);
        state_out.push(xc);
    }
    (out, state_out)
}

/// `x / max(‖x‖₂, eps)` per chunk of `dim` (how the generator prepares q and k).
pub fn l2_normalize_heads(x: &[f32], dim: usize, eps: f64) -> Vec<f32> {
    let mut out = Vec::with_capacity(x.len());
    for head in x.chunks_exact(dim.max(1)) {
        let norm = head
            .iter()
            .map(|&v| f64::from(v) * f64::from(v))
            .sum::<f64>()
            .sqrt()
            .max(eps);
        out.extend(head.iter().map(|&v| (f64::from(v) / norm) as f32));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delta_rule_on_a_tiny_case_by_hand() {
        // One head, S = 2. State S_h[i][j] stored transposed: s[j·2 + i].
        let state = [1.0f32, 2.0, 3.0, 4.0]; // row j=0: (1, 2), row j=1: (3, 4)
        let (q, k, v) = ([1.0f32, 0.0], [0.0f32, 1.0], [10.0f32, 20.0]);
        let (g, beta) = ([0.0f32], [0.5f32]);
        let inp = RecurInputs {
            state: &state,
            q: &q,
            k: &k,
            v: &v,
            g: &g,
            beta: &beta,
        };
        let (y, s) = delta_rule_step(&inp, 2);
        // Row 0: pred = 2, δ = (10−2)·0.5 = 4, row = (1, 6), y = (1/√2)·1.
        // Row 1: pred = 4, δ = 8, row = (3, 12), y = (1/√2)·3.
        assert_eq!(s, vec![1.0, 6.0, 3.0, 12.0]);
        let r = std::f32::consts::FRAC_1_SQRT_2;
        assert!(
            (y[0] - r).abs() < 1e-7 && (y[1] - 3.0 * r).abs() < 1e-6,
            "{y:?}"
        );
    }

    #[test]
    fn decay_applies_before_predict() {
        let state = [2.0f32];
        let inp = RecurInputs {
            state: &state,
            q: &[1.0],
            k: &[1.0],
            v: &[0.0],
            g: &[-(2.0f32.ln())],
            beta: &[1.0],
        };
        let (y, s) = delta_rule_step(&inp, 1);
        // row = 2·½ = 1, pred = 1, δ = −1, row = 0, y = 0.
        assert!(s[0].abs() < 1e-7 && y[0].abs() < 1e-7, "{s:?} {y:?}");
    }

    #[test]
    fn conv_rolls_towards_the_past() {
        let (out, st) = conv1d_silu(&[5.0], &[1.0, 0.0, 0.0, 0.0], &[1.0, 2.0, 3.0]);
        assert_eq!(st, vec![2.0, 3.0, 5.0]);
        assert!((f64::from(out[0]) - 1.0 / (1.0 + (-1.0f64).exp())).abs() < 1e-7);
    }
}
