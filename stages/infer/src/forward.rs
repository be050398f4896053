//! The forward pass: ModernBERT encoder, Laya decision head, scorer read-out at the markers.
//!
//! All buffers live in a [`Workspace`] that grows to the longest sequence seen and is then
//! reused: the pass itself allocates nothing. The last head block only finishes the rows the
//! scorer reads (the markers): keys and values need every row, but the attention output, the
//! MLP and the scorer run on the marker rows alone.

use crate::config::QType;
use crate::error::{InferError, Result};
use crate::kernels::{geglu_row, gelu_erf, gemm, layer_norm, softmax_scaled, Gemm, Isa};
use crate::model::Model;
use crate::weights::Weight;

/// Query rows per attention block (bounds the score buffer to `QB x n`).
const QB: usize = 32;

/// Calibration hook: sees the input (`rows x k`, row-major) of every matrix product, with the
/// weight's site name (`blk.0.attn_qkv`, `cls`).
pub type Observer<'a> = &'a mut dyn FnMut(&str, usize, usize, &[f32]);

/// Reusable scratch memory of the forward pass.
#[derive(Debug, Default)]
pub struct Workspace {
    cap: usize,
    x: Vec<f32>,
    h: Vec<f32>,
    qkv: Vec<f32>,
    attn: Vec<f32>,
    tmp: Vec<f32>,
    up: Vec<f32>,
    act: Vec<f32>,
    kt: Vec<f32>,
    scores: Vec<f32>,
    qrows: Vec<f32>,
    rows_out: Vec<f32>,
    /// RoPE cos/sin per position (`[pos][hd/2]`) for the global and local theta.
    rope: [(Vec<f32>, Vec<f32>); 2],
    rope_key: Option<(usize, u32, u32)>,
    /// Raw scores of the last call.
    out: Vec<f32>,
}

impl Workspace {
    /// An empty workspace; buffers grow on first use.
    pub fn new() -> Workspace {
        Workspace::default()
    }

    fn ensure(&mut self, model: &Model, n: usize, n_markers: usize) {
        let c = &model.config;
        let d = c.hidden;
        if n > self.cap {
            let wide = (2 * c.intermediate).max(4 * d);
            self.x.resize(n * d, 0.0);
            self.h.resize(n * d, 0.0);
            self.qkv.resize(n * 3 * d, 0.0);
            self.attn.resize(n * d, 0.0);
            self.tmp.resize(n * d, 0.0);
            self.up.resize(n * wide, 0.0);
            self.act.resize(n * wide, 0.0);
            self.kt.resize(n * d, 0.0);
            self.scores.resize(QB * n, 0.0);
            self.cap = n;
        }
        let m = n_markers.max(1);
        if self.qrows.len() < m * 4 * d {
            self.qrows.resize(m * 4 * d, 0.0);
            self.rows_out.resize(m * 4 * d, 0.0);
        }
        self.ensure_rope(model, n);
    }

    /// Build the RoPE tables as Hugging Face does in float32: inv_freq = 1 / theta^(2j/hd)
    /// (f32 pow), angle = pos * inv_freq (f32 product), then cos/sin.
    fn ensure_rope(&mut self, model: &Model, n: usize) {
        let c = &model.config;
        let hd = c.enc_head_dim();
        let key = (hd, c.rope_global.to_bits(), c.rope_local.to_bits());
        let have = self.rope[0].0.len() / (hd / 2).max(1);
        if self.rope_key == Some(key) && have >= n {
            return;
        }
        let len = n.max(c.max_len);
        let half = hd / 2;
        for (slot, theta) in [(0, c.rope_global), (1, c.rope_local)] {
            let (cos, sin) = &mut self.rope[slot];
            cos.clear();
            sin.clear();
            let inv: Vec<f32> = (0..half)
                .map(|j| {
                    let e = (2 * j) as f32 / hd as f32;
                    1.0f32 / ((theta as f64).powf(e as f64) as f32)
                })
                .collect();
            for pos in 0..len {
                for &f in &inv {
                    let angle = (pos as f32 * f) as f64;
                    cos.push(angle.cos() as f32);
                    sin.push(angle.sin() as f32);
                }
            }
        }
        self.rope_key = Some(key);
    }

    /// The raw scores of the last [`forward`] call, one per marker.
    pub fn last_scores(&self) -> &[f32] {
        &self.out
    }
}

fn observe(obs: &mut Option<Observer<'_>>, w: &Weight, rows: usize, x: &[f32]) {
    if let Some(o) = obs.as_mut() {
        o(&w.site, rows, w.k, &x[..rows * w.k]);
    }
}

#[inline(always)]
fn add_bias(x: &mut [f32], bias: &[f32]) {
    for row in x.chunks_exact_mut(bias.len()) {
        for (v, b) in row.iter_mut().zip(bias) {
            *v += *b;
        }
    }
}

/// Multi-head attention for the query rows `q` (row stride `ldq`, positions `qpos0..`) over
/// every key/value row of `qkv` (`n` rows of `[Q | K | V]`, stride 3d). `window`: keys with
/// |i - j| > window are masked (sliding layers). Writes `nq x d` into `out`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn attention(
    isa: Isa,
    qkv: &[f32],
    n: usize,
    d: usize,
    heads: usize,
    q: &[f32],
    ldq: usize,
    qpos: &dyn Fn(usize) -> usize,
    nq: usize,
    window: Option<usize>,
    kt: &mut [f32],
    scores: &mut [f32],
    out: &mut [f32],
) {
    let hd = d / heads;
    let scale = 1.0 / (hd as f32).sqrt();
    for h in 0..heads {
        // Kᵀ of this head: [hd][n].
        for j in 0..n {
            let krow = &qkv[j * 3 * d + d + h * hd..j * 3 * d + d + (h + 1) * hd];
            for (t, &kv) in krow.iter().enumerate() {
                kt[t * n + j] = kv;
            }
        }
        let mut i0 = 0;
        while i0 < nq {
            let rows = QB.min(nq - i0);
            let (lo, hi) = match window {
                Some(w) => (
                    qpos(i0).saturating_sub(w),
                    (qpos(i0 + rows - 1) + w + 1).min(n),
                ),
                None => (0, n),
            };
            let width = hi - lo;
            gemm(
                isa,
                Gemm {
                    m: rows,
                    n: width,
                    k: hd,
                    lda: ldq,
                    ldb: n,
                    ldc: width,
                    accumulate: false,
                },
                &q[i0 * ldq + h * hd..],
                &kt[lo..],
                scores,
            );
            for r in 0..rows {
                let row = &mut scores[r * width..(r + 1) * width];
                // Keys j with |j - p| <= w: one contiguous run of the row.
                let valid = match window {
                    Some(w) => {
                        let p = qpos(i0 + r);
                        p.saturating_sub(w).max(lo) - lo..(p + w + 1).min(hi) - lo
                    }
                    None => 0..width,
                };
                softmax_scaled(isa, row, scale, valid);
            }
            gemm(
                isa,
                Gemm {
                    m: rows,
                    n: hd,
                    k: width,
                    lda: width,
                    ldb: 3 * d,
                    ldc: d,
                    accumulate: false,
                },
                scores,
                &qkv[lo * 3 * d + 2 * d + h * hd..],
                &mut out[i0 * d + h * hd..],
            );
            i0 += rows;
        }
    }
}

/// NEOX / Hugging Face rotate-half RoPE on the Q and K parts of every row of `qkv`.
#[inline(always)]
fn apply_rope(qkv: &mut [f32], n: usize, d: usize, heads: usize, cos: &[f32], sin: &[f32]) {
    let hd = d / heads;
    let half = hd / 2;
    for pos in 0..n {
        let c = &cos[pos * half..(pos + 1) * half];
        let s = &sin[pos * half..(pos + 1) * half];
        let row = &mut qkv[pos * 3 * d..pos * 3 * d + 2 * d];
        for head in row.chunks_exact_mut(hd) {
            let (x1, x2) = head.split_at_mut(half);
            for j in 0..half {
                let (a, b) = (x1[j], x2[j]);
                x1[j] = a * c[j] - b * s[j];
                x2[j] = b * c[j] + a * s[j];
            }
        }
    }
}

/// Run the model on one sequence and return the raw scorer output at each marker position
/// (column `qtype`). `observer` sees every matrix product's input.
pub fn forward<'w>(
    model: &Model,
    isa: Isa,
    ws: &'w mut Workspace,
    ids: &[u32],
    markers: &[usize],
    qtype: QType,
    observer: Option<Observer<'_>>,
) -> Result<&'w [f32]> {
    forward_from(
        model,
        isa,
        ws,
        ids,
        markers,
        qtype,
        observer,
        Boundaries::default(),
    )
}

/// The hidden state entering encoder layer `layer` (`layer == n_enc`: the encoder's output,
/// before its final norm), `n x d` row-major, as a pass with [`Boundaries::capture`] recorded it.
#[derive(Debug, Clone, Copy)]
pub struct Resume<'a> {
    /// The layer the pass starts at.
    pub layer: usize,
    /// Its input.
    pub x: &'a [f32],
}

/// Where a pass starts and what it records, for runs that share a prefix of layers with an
/// earlier one (`skyctl tune` lowers one tensor at a time: the layers before it need not run
/// again). Both default to none: a whole pass.
#[derive(Debug, Default)]
pub struct Boundaries<'a> {
    /// Start at this layer with this input instead of at the embeddings. The result equals a
    /// whole pass bit for bit when the layers before it are those of the pass that captured it.
    pub resume: Option<Resume<'a>>,
    /// Append the hidden state at every layer boundary the pass crosses: before each encoder
    /// layer from the start on, and after the last (`n_enc + 1 - start` entries).
    pub capture: Option<&'a mut Vec<Vec<f32>>>,
}

/// [`forward`] from a layer boundary and/or recording the boundaries.
///
/// Errors (besides [`forward`]'s): a resume layer above `n_enc`, or a resume state that is not
/// `n x d`.
#[allow(clippy::too_many_arguments)]
pub fn forward_from<'w>(
    model: &Model,
    isa: Isa,
    ws: &'w mut Workspace,
    ids: &[u32],
    markers: &[usize],
    qtype: QType,
    observer: Option<Observer<'_>>,
    bounds: Boundaries<'_>,
) -> Result<&'w [f32]> {
    if let Some(r) = &bounds.resume {
        let (n, d) = (ids.len(), model.config.hidden);
        if r.layer > model.layers.len() || r.x.len() != n * d {
            return Err(InferError::BadRequest {
                path: "resume".into(),
                message: format!(
                    "a resume state for layer {} of {} values; the model has {} encoder layers and the sequence needs {}",
                    r.layer,
                    r.x.len(),
                    model.layers.len(),
                    n * d
                ),
            });
        }
    }
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx512 && isa.available() {
        // SAFETY: avx512f was detected on this CPU.
        return unsafe { forward_avx512(model, isa, ws, ids, markers, qtype, observer, bounds) };
    }
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx2 && isa.available() {
        // SAFETY: avx2 and fma were detected on this CPU.
        return unsafe { forward_avx2(model, isa, ws, ids, markers, qtype, observer, bounds) };
    }
    forward_body(model, isa, ws, ids, markers, qtype, observer, bounds)
}

/// The same pass compiled for AVX-512, so that the element-wise loops inlined into it (residual
/// adds, biases, RoPE, the Kᵀ copy) vectorise 16 wide. Same operations in the same order per
/// element: the results equal the baseline build's.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[allow(clippy::too_many_arguments)]
unsafe fn forward_avx512<'w>(
    model: &Model,
    isa: Isa,
    ws: &'w mut Workspace,
    ids: &[u32],
    markers: &[usize],
    qtype: QType,
    observer: Option<Observer<'_>>,
    bounds: Boundaries<'_>,
) -> Result<&'w [f32]> {
    forward_body(model, isa, ws, ids, markers, qtype, observer, bounds)
}

/// The same pass compiled for AVX2+FMA (8 lanes), as `forward_avx512` is for AVX-512. Rust
/// never contracts a multiply and an add into an FMA on its own, so enabling `fma` here leaves
/// every element's operations, and so the results, those of the baseline build.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn forward_avx2<'w>(
    model: &Model,
    isa: Isa,
    ws: &'w mut Workspace,
    ids: &[u32],
    markers: &[usize],
    qtype: QType,
    observer: Option<Observer<'_>>,
    bounds: Boundaries<'_>,
) -> Result<&'w [f32]> {
    forward_body(model, isa, ws, ids, markers, qtype, observer, bounds)
}

#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn forward_body<'w>(
    model: &Model,
    isa: Isa,
    ws: &'w mut Workspace,
    ids: &[u32],
    markers: &[usize],
    qtype: QType,
    mut observer: Option<Observer<'_>>,
    bounds: Boundaries<'_>,
) -> Result<&'w [f32]> {
    let Boundaries {
        resume,
        mut capture,
    } = bounds;
    let c = &model.config;
    let (d, f, n) = (c.hidden, c.intermediate, ids.len());
    if n == 0 {
        return Err(InferError::BadRequest {
            path: "input_ids".into(),
            message: "empty sequence".into(),
        });
    }
    for (position, &id) in ids.iter().enumerate() {
        if id as usize >= c.vocab {
            return Err(InferError::TokenOutOfRange {
                position,
                id,
                vocab: c.vocab,
            });
        }
    }
    if let Some(&m) = markers.iter().find(|&&m| m >= n) {
        return Err(InferError::BadRequest {
            path: "markers".into(),
            message: format!("marker position {m} is outside the {n}-token sequence"),
        });
    }
    ws.ensure(model, n, markers.len());
    let Workspace {
        x,
        h,
        qkv,
        attn,
        tmp,
        up,
        act,
        kt,
        scores,
        qrows,
        rows_out,
        rope,
        out,
        ..
    } = ws;

    let start = match resume {
        Some(r) => {
            x[..n * d].copy_from_slice(r.x);
            r.layer
        }
        None => {
            // Embeddings + norm.
            for (t, &id) in ids.iter().enumerate() {
                let id = id as usize;
                h[t * d..(t + 1) * d].copy_from_slice(&model.tok_embd[id * d..(id + 1) * d]);
            }
            layer_norm(
                isa,
                &h[..n * d],
                &mut x[..n * d],
                d,
                &model.embd_norm,
                None,
                c.eps,
            );
            0
        }
    };

    let heads = c.enc_heads;
    let half_window = c.local_attention / 2;
    for layer in &model.layers[start..] {
        if let Some(cap) = capture.as_deref_mut() {
            cap.push(x[..n * d].to_vec());
        }
        let hin: &[f32] = match &layer.attn_norm {
            Some(w) => {
                layer_norm(isa, &x[..n * d], &mut h[..n * d], d, w, None, c.eps);
                &h[..n * d]
            }
            None => &x[..n * d],
        };
        observe(&mut observer, &layer.qkv, n, hin);
        layer.qkv.matmul(isa, hin, n, &mut qkv[..n * 3 * d]);
        let (cos, sin) = if layer.global { &rope[0] } else { &rope[1] };
        apply_rope(&mut qkv[..n * 3 * d], n, d, heads, cos, sin);
        attention(
            isa,
            &qkv[..n * 3 * d],
            n,
            d,
            heads,
            &qkv[..n * 3 * d],
            3 * d,
            &|i| i,
            n,
            if layer.global {
                None
            } else {
                Some(half_window)
            },
            kt,
            scores,
            &mut attn[..n * d],
        );
        observe(&mut observer, &layer.attn_out, n, attn);
        layer
            .attn_out
            .matmul(isa, &attn[..n * d], n, &mut tmp[..n * d]);
        for (a, b) in x[..n * d].iter_mut().zip(&tmp[..n * d]) {
            *a += *b;
        }
        layer_norm(
            isa,
            &x[..n * d],
            &mut h[..n * d],
            d,
            &layer.ffn_norm,
            None,
            c.eps,
        );
        observe(&mut observer, &layer.ffn_up, n, h);
        layer
            .ffn_up
            .matmul(isa, &h[..n * d], n, &mut up[..n * 2 * f]);
        for t in 0..n {
            geglu_row(
                isa,
                &up[t * 2 * f..(t + 1) * 2 * f],
                &mut act[t * f..(t + 1) * f],
            );
        }
        observe(&mut observer, &layer.ffn_down, n, act);
        layer
            .ffn_down
            .matmul(isa, &act[..n * f], n, &mut tmp[..n * d]);
        for (a, b) in x[..n * d].iter_mut().zip(&tmp[..n * d]) {
            *a += *b;
        }
    }
    if let Some(cap) = capture {
        cap.push(x[..n * d].to_vec());
    }
    layer_norm(
        isa,
        &x[..n * d],
        &mut h[..n * d],
        d,
        &model.output_norm,
        None,
        c.eps,
    );
    // Decision head input: last_hidden_state + type embedding.
    let temb = &model.token_types[qtype as usize * d..(qtype as usize + 1) * d];
    for t in 0..n {
        for j in 0..d {
            x[t * d + j] = h[t * d + j] + temb[j];
        }
    }

    let nm = markers.len();
    let hh = c.head_heads;
    for (li, blk) in model.head.iter().enumerate() {
        let last = li + 1 == model.head.len();
        layer_norm(
            isa,
            &x[..n * d],
            &mut h[..n * d],
            d,
            &blk.norm1.0,
            Some(&blk.norm1.1),
            c.eps,
        );
        observe(&mut observer, &blk.qkv, n, h);
        blk.qkv.matmul(isa, &h[..n * d], n, &mut qkv[..n * 3 * d]);
        add_bias(&mut qkv[..n * 3 * d], &blk.qkv_b);
        if !last {
            attention(
                isa,
                &qkv[..n * 3 * d],
                n,
                d,
                hh,
                &qkv[..n * 3 * d],
                3 * d,
                &|i| i,
                n,
                None,
                kt,
                scores,
                &mut attn[..n * d],
            );
            observe(&mut observer, &blk.attn_out, n, attn);
            blk.attn_out
                .matmul(isa, &attn[..n * d], n, &mut tmp[..n * d]);
            add_bias(&mut tmp[..n * d], &blk.attn_out_b);
            for (a, b) in x[..n * d].iter_mut().zip(&tmp[..n * d]) {
                *a += *b;
            }
            layer_norm(
                isa,
                &x[..n * d],
                &mut h[..n * d],
                d,
                &blk.norm2.0,
                Some(&blk.norm2.1),
                c.eps,
            );
            observe(&mut observer, &blk.ffn_up, n, h);
            blk.ffn_up.matmul(isa, &h[..n * d], n, &mut up[..n * 4 * d]);
            add_bias(&mut up[..n * 4 * d], &blk.ffn_up_b);
            for v in up[..n * 4 * d].iter_mut() {
                *v = v.max(0.0);
            }
            observe(&mut observer, &blk.ffn_down, n, up);
            blk.ffn_down
                .matmul(isa, &up[..n * 4 * d], n, &mut tmp[..n * d]);
            add_bias(&mut tmp[..n * d], &blk.ffn_down_b);
            for (a, b) in x[..n * d].iter_mut().zip(&tmp[..n * d]) {
                *a += *b;
            }
        } else {
            // Only the marker rows continue: gather their queries and residuals.
            for (r, &m) in markers.iter().enumerate() {
                qrows[r * 3 * d..r * 3 * d + d].copy_from_slice(&qkv[m * 3 * d..m * 3 * d + d]);
            }
            attention(
                isa,
                &qkv[..n * 3 * d],
                n,
                d,
                hh,
                &qrows[..],
                3 * d,
                &|r| markers[r],
                nm,
                None,
                kt,
                scores,
                &mut attn[..nm * d],
            );
            observe(&mut observer, &blk.attn_out, nm, attn);
            blk.attn_out
                .matmul(isa, &attn[..nm * d], nm, &mut tmp[..nm * d]);
            add_bias(&mut tmp[..nm * d], &blk.attn_out_b);
            for (r, &m) in markers.iter().enumerate() {
                for j in 0..d {
                    h[r * d + j] = x[m * d + j] + tmp[r * d + j];
                }
            }
            // h[..nm*d] = residual rows after attention; MLP on them into x[..nm*d].
            layer_norm(
                isa,
                &h[..nm * d],
                &mut rows_out[..nm * d],
                d,
                &blk.norm2.0,
                Some(&blk.norm2.1),
                c.eps,
            );
            observe(&mut observer, &blk.ffn_up, nm, rows_out);
            blk.ffn_up
                .matmul(isa, &rows_out[..nm * d], nm, &mut up[..nm * 4 * d]);
            add_bias(&mut up[..nm * 4 * d], &blk.ffn_up_b);
            for v in up[..nm * 4 * d].iter_mut() {
                *v = v.max(0.0);
            }
            observe(&mut observer, &blk.ffn_down, nm, up);
            blk.ffn_down
                .matmul(isa, &up[..nm * 4 * d], nm, &mut tmp[..nm * d]);
            add_bias(&mut tmp[..nm * d], &blk.ffn_down_b);
            for r in 0..nm * d {
                x[r] = h[r] + tmp[r];
            }
        }
    }
    if model.head.is_empty() {
        for (r, &m) in markers.iter().enumerate() {
            h[r * d..(r + 1) * d].copy_from_slice(&x[m * d..(m + 1) * d]);
        }
        x[..nm * d].copy_from_slice(&h[..nm * d]);
    }
    // Scorer on the marker rows (now x[..nm*d]).
    layer_norm(
        isa,
        &x[..nm * d],
        &mut h[..nm * d],
        d,
        &model.cls_norm.0,
        Some(&model.cls_norm.1),
        c.eps,
    );
    observe(&mut observer, &model.cls, nm, h);
    model.cls.matmul(isa, &h[..nm * d], nm, &mut tmp[..nm * d]);
    add_bias(&mut tmp[..nm * d], &model.cls_b);
    out.clear();
    for r in 0..nm {
        let row = &tmp[r * d..(r + 1) * d];
        let mut s = 0f32;
        for (v, w) in row.iter().zip(&model.cls_out) {
            s += gelu_erf(*v) * w;
        }
        out.push(s + model.cls_out_b);
    }
    Ok(&out[..])
}
