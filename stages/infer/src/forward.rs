//! The forward pass: ModernBERT encoder, Laya decision head, scorer read-out at the markers.
//!
//! All buffers live in a [`Workspace`] that grows to the longest sequence seen and is then
//! reused: the pass itself allocates nothing (on one thread). The last head block only
//! finishes the rows the scorer reads (the markers): keys and values need every row, but the
//! queries (where the weight allows: `marker_queries`), the attention output, the MLP and the
//! scorer run on the marker rows alone; with several threads those small products are split
//! by columns too.
//!
//! # Threads
//!
//! With [`Workspace::set_threads`] one pass runs on several threads. Everything between two
//! attentions is row-wise (LayerNorm, the matrix products, RoPE, GeGLU, residuals), and is
//! split one of two ways ([`Split`]): by rows, each thread taking a contiguous range of token
//! rows through that whole stretch (one synchronisation, but every thread streams every
//! weight), or by columns, each f32 weight product cut into ranges of its 32-column panels
//! (each thread streams its share of the weight over all rows) and the steps between the
//! products by rows (a synchronisation per step). By default a stretch with at least 1 MiB
//! of f32 weights is split by columns (s1-micro's f32 layers: 1.9x one thread where rows
//! gave 1.5-1.7x), smaller ones by rows (there the synchronisations cost more than the
//! weight traffic). Attention is split by (head, query block) after Kᵀ is built (split by
//! heads).
//! Each output element is computed by the same operations in the same order as on one thread
//! (the matrix kernels sum every element along `k` independently of the row tiling, and a
//! column split makes the very kernel calls of one thread, panel by panel), so the scores are
//! bit for bit those of one thread. An observer (calibration) runs the pass on one thread.
//!
//! # Per-op timers
//!
//! [`Workspace::set_profiling`] accumulates the time of each kind of operation
//! ([`OpTimes`]); with several threads the times of all threads are added up.

use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::config::QType;
use crate::error::{InferError, Result};
use crate::kernels::{geglu_row, gelu_erf, gemm, layer_norm, softmax_scaled, transpose, Gemm, Isa};
use crate::model::Model;
use crate::threads::{split_even, SharedOut, Threads};
use crate::weights::{Weight, WeightData, PANEL};

/// Query rows per attention block (bounds the score buffer to `QB x n` per thread).
const QB: usize = 32;

/// Fewest token rows worth a thread of their own in the row-wise stretches.
const MIN_ROWS_PER_THREAD: usize = 8;

/// Calibration hook: sees the input (`rows x k`, row-major) of every matrix product, with the
/// weight's site name (`blk.0.attn_qkv`, `cls`).
pub type Observer<'a> = &'a mut dyn FnMut(&str, usize, usize, &[f32]);

/// The kinds of operation the per-op timers tell apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// Token embedding copy and its LayerNorm.
    Embed,
    /// LayerNorms (encoder, head, final; not the embedding's or the scorer's).
    Norm,
    /// Matrix products on int8 weights (activation quantization, int8 dots, outliers).
    MatmulInt8,
    /// Matrix products on f32 weights (the head, and the encoder on the f32 path).
    MatmulF32,
    /// RoPE on Q and K.
    Rope,
    /// Kᵀ copies for the score products.
    KTranspose,
    /// `Q · Kᵀ` score products.
    AttnScores,
    /// Scaled, windowed softmax of the scores.
    Softmax,
    /// `P · V` products.
    AttnValues,
    /// GeGLU (encoder MLP).
    Geglu,
    /// Residual adds, biases, ReLU, type embedding, gathers.
    Elementwise,
    /// The scorer (LayerNorm, Linear, GELU read-out).
    Scorer,
}

impl Op {
    /// Every op, in report order.
    pub const ALL: [Op; 12] = [
        Op::Embed,
        Op::Norm,
        Op::MatmulInt8,
        Op::MatmulF32,
        Op::Rope,
        Op::KTranspose,
        Op::AttnScores,
        Op::Softmax,
        Op::AttnValues,
        Op::Geglu,
        Op::Elementwise,
        Op::Scorer,
    ];

    /// Short name for reports.
    pub fn name(self) -> &'static str {
        match self {
            Op::Embed => "embedding",
            Op::Norm => "layernorm",
            Op::MatmulInt8 => "matmul int8",
            Op::MatmulF32 => "matmul f32",
            Op::Rope => "rope",
            Op::KTranspose => "K transpose",
            Op::AttnScores => "attention Q.K",
            Op::Softmax => "softmax",
            Op::AttnValues => "attention P.V",
            Op::Geglu => "geglu",
            Op::Elementwise => "residual/bias/relu",
            Op::Scorer => "scorer",
        }
    }
}

/// Accumulated time per [`Op`] over the passes since [`Workspace::set_profiling`].
#[derive(Debug, Default)]
pub struct OpTimes {
    ns: [AtomicU64; Op::ALL.len()],
    passes: AtomicU64,
    /// Multiply-adds (rows x k x n) of the weight products on f32 and on int8 weights, and of
    /// attention's two products (Q·Kᵀ, P·V).
    macs: [AtomicU64; 4],
}

impl OpTimes {
    /// Nanoseconds spent in `op` (summed over threads).
    pub fn nanos(&self, op: Op) -> u64 {
        self.ns[op as usize].load(Ordering::Relaxed)
    }

    /// Forward passes timed.
    pub fn passes(&self) -> u64 {
        self.passes.load(Ordering::Relaxed)
    }

    /// Multiply-adds of the products over the timed passes (what their time bought: the rate
    /// against the core's ceiling): the weight products on f32 ([`Op::MatmulF32`]) or int8
    /// ([`Op::MatmulInt8`]) weights, attention's [`Op::AttnScores`] and [`Op::AttnValues`];
    /// 0 for the other ops.
    pub fn product_macs(&self, op: Op) -> u64 {
        let i = match op {
            Op::MatmulF32 => 0,
            Op::MatmulInt8 => 1,
            Op::AttnScores => 2,
            Op::AttnValues => 3,
            _ => return 0,
        };
        self.macs[i].load(Ordering::Relaxed)
    }

    /// One attention block's `rows x keys x head_dim`, once for each of its two products.
    fn count_attention(prof: Option<&OpTimes>, macs: usize) {
        if let Some(p) = prof {
            for i in [2, 3] {
                p.macs[i].fetch_add(macs as u64, Ordering::Relaxed);
            }
        }
    }

    /// A product on the output columns of panels `panels` (every column of an int8 weight).
    fn count_columns(prof: Option<&OpTimes>, w: &Weight, rows: usize, panels: Range<usize>) {
        if let Some(p) = prof {
            let i = usize::from(!w.is_f32());
            let cols = if w.is_f32() {
                (panels.end * PANEL).min(w.n) - (panels.start * PANEL).min(w.n)
            } else {
                w.n
            };
            p.macs[i].fetch_add((rows * w.k * cols) as u64, Ordering::Relaxed);
        }
    }

    // wasm32 has no clock, so nothing is ever timed there.
    #[cfg_attr(target_arch = "wasm32", allow(dead_code))]
    fn add(&self, op: Op, ns: u64) {
        self.ns[op as usize].fetch_add(ns, Ordering::Relaxed);
    }
}

/// A started timer (nothing when profiling is off, and never on wasm32, which has no clock).
struct Tick(#[cfg(not(target_arch = "wasm32"))] Option<std::time::Instant>);

impl Tick {
    #[inline(always)]
    fn start(prof: Option<&OpTimes>) -> Tick {
        #[cfg(not(target_arch = "wasm32"))]
        return Tick(prof.map(|_| std::time::Instant::now()));
        #[cfg(target_arch = "wasm32")]
        {
            let _ = prof;
            Tick()
        }
    }

    /// Adds the time since `start` to `op` and restarts.
    #[inline(always)]
    fn lap(&mut self, prof: Option<&OpTimes>, op: Op) {
        #[cfg(not(target_arch = "wasm32"))]
        if let (Some(p), Some(t0)) = (prof, self.0) {
            let now = std::time::Instant::now();
            p.add(op, (now - t0).as_nanos() as u64);
            self.0 = Some(now);
        }
        #[cfg(target_arch = "wasm32")]
        let _ = (prof, op);
    }
}

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
    /// `QB x (n + d)` per thread: scores, and the values of one block.
    scores: Vec<f32>,
    qrows: Vec<f32>,
    rows_out: Vec<f32>,
    /// RoPE cos/sin per position (`[pos][hd/2]`) for the global and local theta.
    rope: [(Vec<f32>, Vec<f32>); 2],
    rope_key: Option<(usize, u32, u32)>,
    /// Raw scores of the last call.
    out: Vec<f32>,
    threads: Threads,
    split: Split,
    profile: Option<Box<OpTimes>>,
}

/// How a pass on several threads splits the row-wise stretches between two attentions
/// ([`Workspace::set_split`]). Both give the scores of one thread bit for bit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Split {
    /// Columns where the stretch multiplies f32 weights big enough to matter, rows elsewhere
    /// (the default).
    #[default]
    Auto,
    /// By token rows: each thread runs the whole stretch on its rows, streaming every weight
    /// (one synchronisation per stretch).
    Rows,
    /// By the output columns of each f32 weight product (each thread streams its share of
    /// the weight over every row), the steps between the products by rows: a synchronisation
    /// per step.
    Columns,
}

impl Split {
    /// Whether stretch `what` runs split by columns.
    fn columns(self, model: &Model, what: Stretch) -> bool {
        match self {
            Split::Rows => false,
            Split::Columns => true,
            Split::Auto => {
                let f32_bytes: usize = what
                    .weights(model)
                    .filter(|w| w.is_f32())
                    .map(|w| w.k * w.n * 4)
                    .sum();
                f32_bytes >= COLUMN_SPLIT_BYTES
            }
        }
    }
}

/// Bytes of f32 weights from which [`Split::Auto`] splits a stretch by columns.
const COLUMN_SPLIT_BYTES: usize = 1 << 20;

impl Workspace {
    /// An empty workspace; buffers grow on first use.
    pub fn new() -> Workspace {
        Workspace::default()
    }

    /// Runs each following pass on `n` threads (1 = the calling thread only, the default);
    /// the answers are the same bit for bit. Starts `n - 1` worker threads, which live as long
    /// as the workspace.
    ///
    /// Errors: `n` is 0 or above [`crate::threads::MAX_THREADS`], the threads cannot be
    /// started, or (wasm32) `n > 1`.
    pub fn set_threads(&mut self, n: usize) -> Result<()> {
        if n != self.threads.count() {
            self.threads = Threads::new(n)?;
        }
        Ok(())
    }

    /// How passes on several threads split their row-wise stretches ([`Split::Auto`] by
    /// default); the answers are the same bit for bit.
    pub fn set_split(&mut self, split: Split) {
        self.split = split;
    }

    /// The split set by [`Workspace::set_split`].
    pub fn split(&self) -> Split {
        self.split
    }

    /// Threads a pass runs on.
    pub fn threads(&self) -> usize {
        self.threads.count()
    }

    /// Starts (`true`, from zero) or stops the per-op timers.
    pub fn set_profiling(&mut self, on: bool) {
        self.profile = on.then(Box::default);
    }

    /// The per-op times since [`Workspace::set_profiling`]`(true)`.
    pub fn op_times(&self) -> Option<&OpTimes> {
        self.profile.as_deref()
    }

    fn ensure(&mut self, model: &Model, n: usize, n_markers: usize) {
        let c = &model.config;
        let d = c.hidden;
        if n > self.cap {
            let wide = row_wide(model);
            self.x.resize(n * d, 0.0);
            self.h.resize(n * d, 0.0);
            self.qkv.resize(n * 3 * d, 0.0);
            self.attn.resize(n * d, 0.0);
            self.tmp.resize(n * d, 0.0);
            self.up.resize(n * wide, 0.0);
            self.act.resize(n * wide, 0.0);
            self.kt.resize(n * d, 0.0);
            self.cap = n;
        }
        let scores = self.threads.count() * QB * (self.cap + d);
        if self.scores.len() < scores {
            self.scores.resize(scores, 0.0);
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

/// Row width of the `up` / `act` buffers: the encoder's `2f` or the head's `4d`.
fn row_wide(model: &Model) -> usize {
    (2 * model.config.intermediate).max(4 * model.config.hidden)
}

#[inline(always)]
fn add_bias(x: &mut [f32], bias: &[f32]) {
    for row in x.chunks_exact_mut(bias.len()) {
        for (v, b) in row.iter_mut().zip(bias) {
            *v += *b;
        }
    }
}

#[inline(always)]
fn add_into(x: &mut [f32], y: &[f32]) {
    for (a, b) in x.iter_mut().zip(y) {
        *a += *b;
    }
}

/// What every part of a pass reads.
struct Ctx<'a> {
    model: &'a Model,
    isa: Isa,
    ids: &'a [u32],
    qtype: QType,
    /// Where the pass ends: an encoder-only pass adds no type embedding after the final norm.
    until: Until,
    rope: &'a [(Vec<f32>, Vec<f32>); 2],
    prof: Option<&'a OpTimes>,
    /// The first matrix product that failed (an external kernel refused its shapes): the
    /// pass returns it instead of scores. Set from any thread; checked once at the end, so
    /// the hot path carries no `Result`.
    failed: std::sync::OnceLock<InferError>,
}

impl Ctx<'_> {
    /// `out = x · Wᵀ` on `rows` rows, observed and timed.
    #[inline(always)]
    fn matmul(
        &self,
        w: &Weight,
        x: &[f32],
        rows: usize,
        out: &mut [f32],
        obs: &mut Option<Observer<'_>>,
    ) {
        self.matmul_cols(w, x, rows, out, 0..w.panels(), obs);
    }

    /// [`Ctx::matmul`] on the output columns of panels `panels` alone (every column of an
    /// int8 weight, which has no panels); the observer sees the whole input, as for the whole
    /// product.
    #[inline(always)]
    fn matmul_cols(
        &self,
        w: &Weight,
        x: &[f32],
        rows: usize,
        out: &mut [f32],
        panels: Range<usize>,
        obs: &mut Option<Observer<'_>>,
    ) {
        if let Some(o) = obs.as_mut() {
            o(&w.site, rows, w.k, &x[..rows * w.k]);
        }
        OpTimes::count_columns(self.prof, w, rows, panels.clone());
        let mut t = Tick::start(self.prof);
        if let Err(e) = w.matmul_cols(self.isa, x, rows, out, panels) {
            let _ = self.failed.set(e);
        }
        let op = match w.data {
            WeightData::F32(_) => Op::MatmulF32,
            WeightData::Int8(_) => Op::MatmulInt8,
        };
        t.lap(self.prof, op);
    }

    #[inline(always)]
    fn norm(&self, x: &[f32], out: &mut [f32], w: &[f32], b: Option<&[f32]>) {
        let c = &self.model.config;
        layer_norm(self.isa, x, out, c.hidden, w, b, c.eps);
    }
}

/// The per-row buffers of one range of token rows `r` (each slice starts at row `r.start`).
struct Rows<'b> {
    r: Range<usize>,
    x: &'b mut [f32],
    h: &'b mut [f32],
    qkv: &'b mut [f32],
    attn: &'b mut [f32],
    tmp: &'b mut [f32],
    up: &'b mut [f32],
    act: &'b mut [f32],
}

/// Row widths of the buffers a stretch cuts into row ranges: the hidden width `d`, and the
/// widths of its `up` and `act` rows (its stage's MLP; 0 when it has none). Every step of the
/// stretch, whichever thread runs it, sees rows `r` of a buffer at `r.start * width`.
#[derive(Clone, Copy)]
struct Widths {
    d: usize,
    up: usize,
    act: usize,
}

/// Which buffer of [`Rows`] a weight product reads or writes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Buf {
    X,
    H,
    Qkv,
    Attn,
    Tmp,
    Up,
    Act,
}

impl<'b> Rows<'b> {
    /// Cuts these rows into the parts of `ranges` (contiguous, ascending, covering `r`).
    fn split(
        &mut self,
        ranges: impl Iterator<Item = Range<usize>>,
        w: Widths,
    ) -> impl Iterator<Item = Rows<'_>> {
        split_rows(
            ranges,
            w,
            &mut self.x[..],
            &mut self.h[..],
            &mut self.qkv[..],
            &mut self.attn[..],
            &mut self.tmp[..],
            &mut self.up[..],
            &mut self.act[..],
        )
    }

    /// The input (`src`) and the output (`dst`) of a weight product, two distinct buffers.
    fn pair(&mut self, src: Buf, dst: Buf) -> (&[f32], &mut [f32]) {
        let mut all = [
            Some(&mut *self.x),
            Some(&mut *self.h),
            Some(&mut *self.qkv),
            Some(&mut *self.attn),
            Some(&mut *self.tmp),
            Some(&mut *self.up),
            Some(&mut *self.act),
        ];
        let slot = |b: Buf| match b {
            Buf::X => 0,
            Buf::H => 1,
            Buf::Qkv => 2,
            Buf::Attn => 3,
            Buf::Tmp => 4,
            Buf::Up => 5,
            Buf::Act => 6,
        };
        let s = all[slot(src)].take();
        let d = all[slot(dst)].take();
        match (s, d) {
            (Some(s), Some(d)) => (s, d),
            // Internal invariant: every product of the pass names two different buffers.
            _ => panic!("a weight product reads and writes one buffer"),
        }
    }
}

/// Cuts the row buffers into the parts of `ranges` (contiguous, ascending, from the buffers'
/// first row).
#[allow(clippy::too_many_arguments)]
fn split_rows<'b>(
    ranges: impl Iterator<Item = Range<usize>>,
    w: Widths,
    mut x: &'b mut [f32],
    mut h: &'b mut [f32],
    mut qkv: &'b mut [f32],
    mut attn: &'b mut [f32],
    mut tmp: &'b mut [f32],
    mut up: &'b mut [f32],
    mut act: &'b mut [f32],
) -> impl Iterator<Item = Rows<'b>> {
    let d = w.d;
    ranges.map(move |r| {
        let m = r.len();
        fn cut<'s>(v: &mut &'s mut [f32], len: usize) -> &'s mut [f32] {
            let (head, rest) = std::mem::take(v).split_at_mut(len);
            *v = rest;
            head
        }
        Rows {
            x: cut(&mut x, m * d),
            h: cut(&mut h, m * d),
            qkv: cut(&mut qkv, m * 3 * d),
            attn: cut(&mut attn, m * d),
            tmp: cut(&mut tmp, m * d),
            up: cut(&mut up, m * w.up),
            act: cut(&mut act, m * w.act),
            r,
        }
    })
}

/// How a row-wise stretch runs. Row split (`cols` none): the whole stretch on one range of
/// rows, the part of one thread (or all rows on one thread). Column split: all rows on the
/// calling thread, each step spread over the threads, the f32 weight products by output
/// panels (each thread streams its share of the weight over every row) and the steps between
/// them by rows; an external (int8) product by rows.
struct Run<'r, 'b> {
    rows: Rows<'b>,
    widths: Widths,
    /// Column split: the threads, and the parts each step is cut into.
    cols: Option<(&'r Threads, usize)>,
}

impl Run<'_, '_> {
    /// Runs `f` on these rows, or (column split) on row ranges of them across the threads.
    #[inline(always)]
    fn rows(&mut self, f: impl Fn(&mut Rows<'_>) + Sync) {
        match self.cols {
            None => f(&mut self.rows),
            Some((threads, parts)) => {
                let r = self.rows.r.clone();
                let ranges = split_even(r.len(), parts).map(|p| r.start + p.start..r.start + p.end);
                let it = self.rows.split(ranges, self.widths);
                threads.for_each(it, |mut p| f(&mut p));
            }
        }
    }

    /// `dst = src · Wᵀ` on these rows (observed and timed).
    #[inline(always)]
    fn matmul(
        &mut self,
        c: &Ctx<'_>,
        w: &Weight,
        src: Buf,
        dst: Buf,
        obs: &mut Option<Observer<'_>>,
    ) {
        self.matmul_cols(c, w, src, dst, 0..w.panels(), obs);
    }

    /// [`Run::matmul`] on the output columns of panels `panels` alone (see
    /// [`Ctx::matmul_cols`]).
    #[inline(always)]
    fn matmul_cols(
        &mut self,
        c: &Ctx<'_>,
        w: &Weight,
        src: Buf,
        dst: Buf,
        panels: Range<usize>,
        obs: &mut Option<Observer<'_>>,
    ) {
        let m = self.rows.r.len();
        let cols = self.cols;
        let (x, out) = self.rows.pair(src, dst);
        let (x, out) = (&x[..m * w.k], &mut out[..m * w.n]);
        product(c, cols, w, x, m, out, panels, obs);
    }
}

/// `out = x · Wᵀ` on `m` rows, the output columns of panels `panels` (every column of an
/// int8 weight), observed and timed: on the calling thread, or (`split`: the threads and the
/// parts) an f32 weight by ranges of those panels across the threads (each thread streams its
/// share of the weight over every row) and an int8 one by rows. Every element is computed by
/// the same operations as on one thread.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn product(
    c: &Ctx<'_>,
    split: Option<(&Threads, usize)>,
    w: &Weight,
    x: &[f32],
    m: usize,
    out: &mut [f32],
    panels: Range<usize>,
    obs: &mut Option<Observer<'_>>,
) {
    let Some((threads, parts)) = split.filter(|&(_, parts)| parts > 1) else {
        c.matmul_cols(w, x, m, out, panels, obs);
        return;
    };
    if w.is_f32() {
        OpTimes::count_columns(c.prof, w, m, panels.clone());
        let shared = SharedOut::new(out);
        let first = panels.start;
        let ranges = split_even(panels.len(), parts).map(|r| first + r.start..first + r.end);
        threads.for_each(ranges, |panels| {
            let mut t = Tick::start(c.prof);
            // SAFETY: the panel ranges of `split_even` are disjoint, so each column of
            // `shared` is written by one thread only, and `shared` holds the output's
            // exclusive borrow until every part has returned.
            unsafe { w.matmul_panels(c.isa, x, m, &shared, panels) };
            t.lap(c.prof, Op::MatmulF32);
        });
    } else {
        let (mut xs, mut outs) = (x, out);
        let it = split_even(m, parts).map(move |r| {
            let (a, rest) = xs.split_at(r.len() * w.k);
            xs = rest;
            let (o, rest) = std::mem::take(&mut outs).split_at_mut(r.len() * w.n);
            outs = rest;
            (r.len(), a, o)
        });
        threads.for_each(it, |(rows, a, o)| c.matmul(w, a, rows, o, &mut None));
    }
}

/// The panels of the last head block's queries when its Q/K/V product leaves them to the
/// marker rows: only the markers continue past its attention, so only their queries are
/// read, while keys and values are read on every row. `None` (every row gets its queries, as
/// in any other block) where the queries do not fill whole panels of an f32 weight.
fn marker_queries(model: &Model) -> Option<Range<usize>> {
    let blk = model.head.last()?;
    let d = model.config.hidden;
    (blk.qkv.is_f32() && d.is_multiple_of(PANEL)).then_some(0..d / PANEL)
}

/// One stage of the pass: an attention layer with what follows it up to the next one.
#[derive(Clone, Copy)]
enum Stage {
    Enc(usize),
    Head(usize),
}

/// What one row-wise stretch does on its rows, in order.
#[derive(Clone, Copy)]
struct Stretch {
    /// Token embeddings and their LayerNorm.
    embed: bool,
    /// The rest of this stage after its attention.
    post: Option<Stage>,
    /// The final encoder norm plus the type embedding (the head's input).
    finish_encoder: bool,
    /// Up to this stage's Q/K/V.
    pre: Option<Stage>,
}

impl Stretch {
    /// The row widths of its buffers.
    fn widths(self, model: &Model) -> Widths {
        let c = &model.config;
        let (up, act) = match self.post {
            Some(Stage::Enc(_)) => (2 * c.intermediate, c.intermediate),
            Some(Stage::Head(_)) => (4 * c.hidden, 0),
            None => (0, 0),
        };
        Widths {
            d: c.hidden,
            up,
            act,
        }
    }

    /// The weight products it runs, in order.
    fn weights(self, model: &Model) -> impl Iterator<Item = &Weight> {
        let post: [Option<&Weight>; 3] = match self.post {
            Some(Stage::Enc(li)) => {
                let l = &model.layers[li];
                [Some(&l.attn_out), Some(&l.ffn_up), Some(&l.ffn_down)]
            }
            Some(Stage::Head(bi)) => {
                let b = &model.head[bi];
                [Some(&b.attn_out), Some(&b.ffn_up), Some(&b.ffn_down)]
            }
            None => [None; 3],
        };
        let pre = match self.pre {
            Some(Stage::Enc(li)) => Some(&model.layers[li].qkv),
            Some(Stage::Head(bi)) => Some(&model.head[bi].qkv),
            None => None,
        };
        post.into_iter().chain([pre]).flatten()
    }
}

/// NEOX / Hugging Face rotate-half RoPE on the Q and K parts of every row of `qkv`, whose
/// first row is position `pos0`.
#[inline(always)]
fn apply_rope(qkv: &mut [f32], pos0: usize, d: usize, heads: usize, cos: &[f32], sin: &[f32]) {
    let hd = d / heads;
    let half = hd / 2;
    for (i, row) in qkv.chunks_exact_mut(3 * d).enumerate() {
        let pos = pos0 + i;
        let c = &cos[pos * half..(pos + 1) * half];
        let s = &sin[pos * half..(pos + 1) * half];
        for head in row[..2 * d].chunks_exact_mut(hd) {
            let (x1, x2) = head.split_at_mut(half);
            for j in 0..half {
                let (a, b) = (x1[j], x2[j]);
                x1[j] = a * c[j] - b * s[j];
                x2[j] = b * c[j] + a * s[j];
            }
        }
    }
}

/// One row-wise stretch: its weight products, and the row-wise steps between them (which
/// [`Run`] runs on one range of rows, or splits across the threads).
#[inline(always)]
fn stretch(c: &Ctx<'_>, what: Stretch, run: &mut Run<'_, '_>, obs: &mut Option<Observer<'_>>) {
    let model = c.model;
    let cfg = &model.config;
    let (d, f) = (cfg.hidden, cfg.intermediate);
    match what.post {
        Some(Stage::Enc(li)) => {
            let layer = &model.layers[li];
            run.matmul(c, &layer.attn_out, Buf::Attn, Buf::Tmp, obs);
            run.rows(|p| {
                let m = p.r.len();
                let mut t = Tick::start(c.prof);
                add_into(&mut p.x[..m * d], &p.tmp[..m * d]);
                t.lap(c.prof, Op::Elementwise);
                c.norm(&p.x[..m * d], &mut p.h[..m * d], &layer.ffn_norm, None);
                t.lap(c.prof, Op::Norm);
            });
            run.matmul(c, &layer.ffn_up, Buf::H, Buf::Up, obs);
            run.rows(|p| {
                let mut t = Tick::start(c.prof);
                for i in 0..p.r.len() {
                    geglu_row(
                        c.isa,
                        &p.up[i * 2 * f..(i + 1) * 2 * f],
                        &mut p.act[i * f..(i + 1) * f],
                    );
                }
                t.lap(c.prof, Op::Geglu);
            });
            run.matmul(c, &layer.ffn_down, Buf::Act, Buf::Tmp, obs);
        }
        Some(Stage::Head(bi)) => {
            let blk = &model.head[bi];
            run.matmul(c, &blk.attn_out, Buf::Attn, Buf::Tmp, obs);
            run.rows(|p| {
                let m = p.r.len();
                let mut t = Tick::start(c.prof);
                add_bias(&mut p.tmp[..m * d], &blk.attn_out_b);
                add_into(&mut p.x[..m * d], &p.tmp[..m * d]);
                t.lap(c.prof, Op::Elementwise);
                c.norm(
                    &p.x[..m * d],
                    &mut p.h[..m * d],
                    &blk.norm2.0,
                    Some(&blk.norm2.1),
                );
                t.lap(c.prof, Op::Norm);
            });
            run.matmul(c, &blk.ffn_up, Buf::H, Buf::Up, obs);
            run.rows(|p| {
                let m = p.r.len();
                let mut t = Tick::start(c.prof);
                add_bias(&mut p.up[..m * 4 * d], &blk.ffn_up_b);
                for v in p.up[..m * 4 * d].iter_mut() {
                    *v = v.max(0.0);
                }
                t.lap(c.prof, Op::Elementwise);
            });
            run.matmul(c, &blk.ffn_down, Buf::Up, Buf::Tmp, obs);
        }
        None => {}
    }
    // The steps between the stage's last product and the next stage's first, in one go.
    let pre_norm = match what.pre {
        Some(Stage::Enc(li)) => model.layers[li].attn_norm.is_some(),
        Some(Stage::Head(_)) => true,
        None => false,
    };
    if what.embed || what.post.is_some() || what.finish_encoder || pre_norm {
        run.rows(|p| boundary(c, what, p));
    }
    match what.pre {
        Some(Stage::Enc(li)) => {
            let layer = &model.layers[li];
            let src = if layer.attn_norm.is_some() {
                Buf::H
            } else {
                Buf::X
            };
            run.matmul(c, &layer.qkv, src, Buf::Qkv, obs);
            run.rows(|p| {
                let mut t = Tick::start(c.prof);
                let m = p.r.len();
                let (cos, sin) = if layer.global { &c.rope[0] } else { &c.rope[1] };
                apply_rope(
                    &mut p.qkv[..m * 3 * d],
                    p.r.start,
                    d,
                    cfg.enc_heads,
                    cos,
                    sin,
                );
                t.lap(c.prof, Op::Rope);
            });
        }
        Some(Stage::Head(bi)) => {
            let blk = &model.head[bi];
            // The last block's queries are left to the marker rows (see `marker_queries`):
            // here its keys and values, on every row.
            let kv = marker_queries(model)
                .filter(|_| bi + 1 == model.head.len())
                .map_or(0, |q| q.end);
            run.matmul_cols(c, &blk.qkv, Buf::H, Buf::Qkv, kv..blk.qkv.panels(), obs);
            let from = (kv * PANEL).min(3 * d);
            run.rows(|p| {
                let m = p.r.len();
                let mut t = Tick::start(c.prof);
                for row in p.qkv[..m * 3 * d].chunks_exact_mut(3 * d) {
                    add_bias(&mut row[from..], &blk.qkv_b[from..]);
                }
                t.lap(c.prof, Op::Elementwise);
            });
        }
        None => {}
    }
}

/// The row-wise steps of a stretch between its stage's last weight product and the next
/// stage's first: the embeddings, the stage's last residual add, the final encoder norm with
/// the type embedding, the next stage's input norm.
#[inline(always)]
fn boundary(c: &Ctx<'_>, what: Stretch, p: &mut Rows<'_>) {
    let model = c.model;
    let d = model.config.hidden;
    let m = p.r.len();
    let mut t = Tick::start(c.prof);
    if what.embed {
        for (i, &id) in c.ids[p.r.clone()].iter().enumerate() {
            let id = id as usize;
            p.h[i * d..(i + 1) * d].copy_from_slice(&model.tok_embd[id * d..(id + 1) * d]);
        }
        c.norm(&p.h[..m * d], &mut p.x[..m * d], &model.embd_norm, None);
        t.lap(c.prof, Op::Embed);
    }
    match what.post {
        Some(Stage::Enc(_)) => {
            add_into(&mut p.x[..m * d], &p.tmp[..m * d]);
            t.lap(c.prof, Op::Elementwise);
        }
        Some(Stage::Head(bi)) => {
            add_bias(&mut p.tmp[..m * d], &model.head[bi].ffn_down_b);
            add_into(&mut p.x[..m * d], &p.tmp[..m * d]);
            t.lap(c.prof, Op::Elementwise);
        }
        None => {}
    }
    if what.finish_encoder {
        c.norm(&p.x[..m * d], &mut p.h[..m * d], &model.output_norm, None);
        t.lap(c.prof, Op::Norm);
        if c.until == Until::Encoder {
            return;
        }
        // Decision head input: last_hidden_state + type embedding.
        let q = c.qtype as usize;
        let temb = &model.token_types[q * d..(q + 1) * d];
        let rows = p.x[..m * d]
            .chunks_exact_mut(d)
            .zip(p.h[..m * d].chunks_exact(d));
        for (xr, hr) in rows {
            for ((xv, hv), tv) in xr.iter_mut().zip(hr).zip(temb) {
                *xv = *hv + *tv;
            }
        }
        t.lap(c.prof, Op::Elementwise);
    }
    match what.pre {
        Some(Stage::Enc(li)) => {
            if let Some(w) = &model.layers[li].attn_norm {
                c.norm(&p.x[..m * d], &mut p.h[..m * d], w, None);
                t.lap(c.prof, Op::Norm);
            }
        }
        Some(Stage::Head(bi)) => {
            let blk = &model.head[bi];
            c.norm(
                &p.x[..m * d],
                &mut p.h[..m * d],
                &blk.norm1.0,
                Some(&blk.norm1.1),
            );
            t.lap(c.prof, Op::Norm);
        }
        None => {}
    }
}

/// Kᵀ of heads `heads` of `qkv` (`n` rows of `[Q | K | V]`): head `h` at
/// `kt[(h - heads.start) * hd * n..]`, `[hd][n]`.
#[inline(always)]
fn transpose_k(
    isa: Isa,
    qkv: &[f32],
    n: usize,
    d: usize,
    hd: usize,
    heads: Range<usize>,
    kt: &mut [f32],
) {
    for (hi, h) in heads.enumerate() {
        let kh = &mut kt[hi * hd * n..(hi + 1) * hd * n];
        transpose(isa, &qkv[d + h * hd..], 3 * d, n, hd, kh, n);
    }
}

/// Where the queries of an attention come from.
#[derive(Clone, Copy)]
struct Queries<'a> {
    /// Query rows (`nq` rows of stride `ldq`, head `h` at column `h * hd`).
    q: &'a [f32],
    ldq: usize,
    /// Sequence position of query `i` (None: `i` itself).
    pos: Option<&'a [usize]>,
}

impl Queries<'_> {
    #[inline(always)]
    fn pos(&self, i: usize) -> usize {
        self.pos.map_or(i, |p| p[i])
    }
}

/// One attention block: queries `i0..i0 + nr` of head `h` over the keys their window allows
/// (`kth`: this head's Kᵀ, `[hd][n]`), into `out` (`nr x hd`, row stride `ldo`); `scores`
/// holds `QB x n`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn attend_block(
    c: &Ctx<'_>,
    qkv: &[f32],
    n: usize,
    hd: usize,
    qs: Queries<'_>,
    h: usize,
    (i0, nr): (usize, usize),
    window: Option<usize>,
    kth: &[f32],
    scores: &mut [f32],
    (out, ldo): (&mut [f32], usize),
) {
    let isa = c.isa;
    let d = c.model.config.hidden;
    let scale = 1.0 / (hd as f32).sqrt();
    let mut t = Tick::start(c.prof);
    let (lo, hi) = match window {
        Some(w) => (
            qs.pos(i0).saturating_sub(w),
            (qs.pos(i0 + nr - 1) + w + 1).min(n),
        ),
        None => (0, n),
    };
    let width = hi - lo;
    OpTimes::count_attention(c.prof, nr * width * hd);
    gemm(
        isa,
        Gemm {
            m: nr,
            n: width,
            k: hd,
            lda: qs.ldq,
            ldb: n,
            ldc: width,
            accumulate: false,
        },
        &qs.q[i0 * qs.ldq + h * hd..],
        &kth[lo..],
        scores,
    );
    t.lap(c.prof, Op::AttnScores);
    for r in 0..nr {
        let row = &mut scores[r * width..(r + 1) * width];
        // Keys j with |j - p| <= w: one contiguous run of the row.
        let valid = match window {
            Some(w) => {
                let p = qs.pos(i0 + r);
                p.saturating_sub(w).max(lo) - lo..(p + w + 1).min(hi) - lo
            }
            None => 0..width,
        };
        softmax_scaled(isa, row, scale, valid);
    }
    t.lap(c.prof, Op::Softmax);
    gemm(
        isa,
        Gemm {
            m: nr,
            n: hd,
            k: width,
            lda: width,
            ldb: 3 * d,
            ldc: ldo,
            accumulate: false,
        },
        scores,
        &qkv[lo * 3 * d + 2 * d + h * hd..],
        out,
    );
    t.lap(c.prof, Op::AttnValues);
}

/// Multi-head attention of the queries `0..nq` over every key/value row of `qkv` (`n` rows,
/// stride 3d; Kᵀ of every head in `kt`), on the calling thread. `window`: keys with
/// |i - j| > window are masked (sliding layers). Writes `nq x d` into `out`; `scores` holds
/// `QB x n`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn attend(
    c: &Ctx<'_>,
    qkv: &[f32],
    n: usize,
    heads: usize,
    qs: Queries<'_>,
    nq: usize,
    window: Option<usize>,
    kt: &[f32],
    scores: &mut [f32],
    out: &mut [f32],
) {
    let d = c.model.config.hidden;
    let hd = d / heads;
    for h in 0..heads {
        let kth = &kt[h * hd * n..(h + 1) * hd * n];
        let mut i0 = 0;
        while i0 < nq {
            let nr = QB.min(nq - i0);
            let o = &mut out[i0 * d + h * hd..];
            attend_block(c, qkv, n, hd, qs, h, (i0, nr), window, kth, scores, (o, d));
            i0 += nr;
        }
    }
}

/// [`attend`] on several threads: the (head, query block) units of the one-thread order,
/// cut into `parts` contiguous runs of about equal rows. Every block is computed exactly as
/// on one thread (same rows, same key window: the AVX2 kernel's column tail depends on the
/// window width), into a per-thread buffer, then copied to its place in `out`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn attend_split(
    c: &Ctx<'_>,
    threads: &Threads,
    parts: usize,
    qkv: &[f32],
    n: usize,
    heads: usize,
    window: Option<usize>,
    kt: &[f32],
    scratch: &mut [f32],
    out: &mut [f32],
) {
    let d = c.model.config.hidden;
    let hd = d / heads;
    let blocks = n.div_ceil(QB);
    let units = heads * blocks;
    let rows_of = |u: usize| QB.min(n - (u % blocks) * QB);
    // Unit ranges with about `n * heads / parts` rows each.
    let total = n * heads;
    let mut bounds = [0usize; crate::threads::MAX_THREADS + 1];
    let (mut u, mut acc) = (0, 0);
    for (p, b) in bounds.iter_mut().enumerate().take(parts + 1).skip(1) {
        let goal = total * p / parts;
        while u < units && acc + rows_of(u) / 2 < goal {
            acc += rows_of(u);
            u += 1;
        }
        *b = if p == parts { units } else { u };
    }
    // Each thread writes the rectangles (query block x head columns) of its own blocks, which
    // no other thread writes, and nobody reads `out` until all are done.
    let shared = SharedOut::new(&mut out[..n * d]);
    let qs = Queries {
        q: qkv,
        ldq: 3 * d,
        pos: None,
    };
    let per = QB * (n + hd);
    let mut rest = &mut scratch[..parts * per];
    let it = (0..parts).map(move |p| {
        let (s, r) = std::mem::take(&mut rest).split_at_mut(per);
        rest = r;
        (bounds[p]..bounds[p + 1], s)
    });
    threads.for_each(it, |(run, s)| {
        let (scores, vals) = s.split_at_mut(QB * n);
        for u in run {
            let (h, b) = (u / blocks, u % blocks);
            let (i0, nr) = (b * QB, rows_of(u));
            let kth = &kt[h * hd * n..(h + 1) * hd * n];
            attend_block(
                c,
                qkv,
                n,
                hd,
                qs,
                h,
                (i0, nr),
                window,
                kth,
                scores,
                (&mut vals[..nr * hd], hd),
            );
            for r in 0..nr {
                // SAFETY: unit (h, b) is the only one writing rows i0..i0 + nr of head h's
                // columns, and `out` is not read or written otherwise until every part has
                // returned.
                unsafe { shared.write((i0 + r) * d + h * hd, &vals[r * hd..(r + 1) * hd]) };
            }
        }
    });
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

/// The encoder's output for `ids` (Hugging Face's `last_hidden_state`: after the final
/// encoder norm), `n x d` row-major, in the workspace, on `model` as loaded (an int8 model on
/// its int8 path): the pass without the decision head and the scorer, bit for bit the
/// encoder part of [`forward`].
pub fn encode<'w>(
    model: &Model,
    isa: Isa,
    ws: &'w mut Workspace,
    ids: &[u32],
) -> Result<&'w [f32]> {
    if ids.is_empty() {
        return Err(InferError::BadRequest {
            path: "ids".into(),
            message: "no tokens".into(),
        });
    }
    let pass = Pass {
        ids,
        markers: &[],
        qtype: QType::Choice,
        until: Until::Encoder,
    };
    run_pass(model, isa, ws, pass, None, Boundaries::default())
}

/// [`encode`] into a new vector.
pub fn hidden_states(model: &Model, isa: Isa, ws: &mut Workspace, ids: &[u32]) -> Result<Vec<f32>> {
    encode(model, isa, ws, ids).map(<[f32]>::to_vec)
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
    let pass = Pass {
        ids,
        markers,
        qtype,
        until: Until::Scores,
    };
    run_pass(model, isa, ws, pass, observer, bounds)
}

/// Where a pass ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Until {
    /// The scores at the markers: the whole model.
    Scores,
    /// The encoder's output after its final norm ([`encode`]): no decision head, no scorer.
    Encoder,
}

/// What one pass computes: the sequence, the scorer's rows and column, and where it ends.
#[derive(Debug, Clone, Copy)]
struct Pass<'a> {
    ids: &'a [u32],
    markers: &'a [usize],
    qtype: QType,
    until: Until,
}

/// A pass on the build of the pass for `isa`'s instruction set.
fn run_pass<'w>(
    model: &Model,
    isa: Isa,
    ws: &'w mut Workspace,
    pass: Pass<'_>,
    observer: Option<Observer<'_>>,
    bounds: Boundaries<'_>,
) -> Result<&'w [f32]> {
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx512 && isa.available() {
        // SAFETY: avx512f was detected on this CPU.
        return unsafe { forward_avx512(model, isa, ws, pass, observer, bounds) };
    }
    #[cfg(target_arch = "x86_64")]
    // AVX-VNNI runs the AVX2 tables (its own only in the int8 products), so its pass is the
    // AVX2 build too: without this, the element-wise loops of a CPU with AVX-VNNI and no
    // AVX-512 (its default path) ran the baseline build's SSE2 code.
    if matches!(isa, Isa::Avx2 | Isa::AvxVnni) && isa.available() {
        // SAFETY: avx2 and fma were detected on this CPU (AVX-VNNI's check includes them).
        return unsafe { forward_avx2(model, isa, ws, pass, observer, bounds) };
    }
    forward_body(model, isa, ws, pass, observer, bounds)
}

/// The same pass compiled for AVX-512, so that the element-wise loops inlined into it (residual
/// adds, biases, RoPE, the Kᵀ copy) vectorise 16 wide. Same operations in the same order per
/// element: the results equal the baseline build's. (Closures inherit the target features,
/// so the parts that run on worker threads are compiled the same way.)
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[allow(clippy::too_many_arguments)]
unsafe fn forward_avx512<'w>(
    model: &Model,
    isa: Isa,
    ws: &'w mut Workspace,
    pass: Pass<'_>,
    observer: Option<Observer<'_>>,
    bounds: Boundaries<'_>,
) -> Result<&'w [f32]> {
    forward_body(model, isa, ws, pass, observer, bounds)
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
    pass: Pass<'_>,
    observer: Option<Observer<'_>>,
    bounds: Boundaries<'_>,
) -> Result<&'w [f32]> {
    forward_body(model, isa, ws, pass, observer, bounds)
}

#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn forward_body<'w>(
    model: &Model,
    isa: Isa,
    ws: &'w mut Workspace,
    pass: Pass<'_>,
    mut observer: Option<Observer<'_>>,
    bounds: Boundaries<'_>,
) -> Result<&'w [f32]> {
    let Pass {
        ids,
        markers,
        qtype,
        until,
    } = pass;
    let Boundaries {
        resume,
        mut capture,
    } = bounds;
    let cfg = &model.config;
    let (d, n) = (cfg.hidden, ids.len());
    if n == 0 {
        return Err(InferError::BadRequest {
            path: "input_ids".into(),
            message: "empty sequence".into(),
        });
    }
    for (position, &id) in ids.iter().enumerate() {
        if id as usize >= cfg.vocab {
            return Err(InferError::TokenOutOfRange {
                position,
                id,
                vocab: cfg.vocab,
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
    let wide = row_wide(model);
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
        threads,
        split,
        profile,
        ..
    } = ws;
    let split = *split;
    let threads: &Threads = threads;
    let c = Ctx {
        model,
        isa,
        ids,
        qtype,
        until,
        rope,
        prof: profile.as_deref(),
        failed: std::sync::OnceLock::new(),
    };
    if let Some(p) = c.prof {
        p.passes.fetch_add(1, Ordering::Relaxed);
    }
    // One part per thread (fewer for short sequences); one part when observed.
    let parts = if observer.is_some() {
        1
    } else {
        threads.count().min(n / MIN_ROWS_PER_THREAD).max(1)
    };

    let n_enc = model.layers.len();
    let n_stages = match until {
        Until::Scores => n_enc + model.head.len(),
        Until::Encoder => n_enc,
    };
    let stage_at = |si: usize| {
        (si < n_stages).then(|| {
            if si < n_enc {
                Stage::Enc(si)
            } else {
                Stage::Head(si - n_enc)
            }
        })
    };
    let row_stretch = |what: Stretch,
                       x: &mut [f32],
                       h: &mut [f32],
                       qkv: &mut [f32],
                       attn: &mut [f32],
                       tmp: &mut [f32],
                       up: &mut [f32],
                       act: &mut [f32],
                       obs: &mut Option<Observer<'_>>| {
        let widths = what.widths(model);
        let columns = parts > 1 && split.columns(model, what);
        let it = split_rows(
            split_even(n, if columns { 1 } else { parts }),
            widths,
            &mut x[..n * d],
            &mut h[..n * d],
            &mut qkv[..n * 3 * d],
            &mut attn[..n * d],
            &mut tmp[..n * d],
            &mut up[..n * wide],
            &mut act[..n * wide],
        );
        let run = |rows, cols| Run { rows, widths, cols };
        if parts == 1 {
            it.for_each(|p| stretch(&c, what, &mut run(p, None), obs));
        } else if columns {
            it.for_each(|p| stretch(&c, what, &mut run(p, Some((threads, parts))), &mut None));
        } else {
            threads.for_each(it, |p| stretch(&c, what, &mut run(p, None), &mut None));
        }
    };
    // Where the pass starts: the embeddings, or a captured layer boundary.
    let start = match resume {
        Some(r) => {
            x[..n * d].copy_from_slice(r.x);
            r.layer
        }
        None => {
            let embed = Stretch {
                embed: true,
                post: None,
                finish_encoder: false,
                pre: None,
            };
            row_stretch(embed, x, h, qkv, attn, tmp, up, act, &mut observer);
            0
        }
    };
    // The hidden state before each encoder layer from `start`, and after the last.
    let capture_wanted = capture.is_some();
    let mut capture_x = |x: &[f32]| {
        if let Some(cap) = capture.as_deref_mut() {
            cap.push(x[..n * d].to_vec());
        }
    };
    capture_x(x);
    row_stretch(
        Stretch {
            embed: false,
            post: None,
            finish_encoder: start == n_enc,
            pre: stage_at(start),
        },
        x,
        h,
        qkv,
        attn,
        tmp,
        up,
        act,
        &mut observer,
    );

    let nm = markers.len();
    let last_head = model.head.len().checked_sub(1);
    for si in start..n_stages {
        let Some(stage) = stage_at(si) else { break };
        let (heads, window) = match stage {
            Stage::Enc(li) => (
                cfg.enc_heads,
                (!model.layers[li].global).then_some(cfg.local_attention / 2),
            ),
            Stage::Head(_) => (cfg.head_heads, None),
        };
        let hd = d / heads;
        let qkv_all: &[f32] = &qkv[..n * 3 * d];
        // Kᵀ of every head, split by heads.
        let mut t = Tick::start(c.prof);
        let head_parts = parts.min(heads);
        if head_parts == 1 {
            transpose_k(isa, qkv_all, n, d, hd, 0..heads, &mut kt[..n * d]);
        } else {
            let mut rest = &mut kt[..n * d];
            let it = split_even(heads, head_parts).map(move |hr| {
                let (a, b) = std::mem::take(&mut rest).split_at_mut(hr.len() * hd * n);
                rest = b;
                (hr, a)
            });
            threads.for_each(it, |(hr, k)| transpose_k(isa, qkv_all, n, d, hd, hr, k));
        }
        t.lap(c.prof, Op::KTranspose);
        let kt_all: &[f32] = &kt[..n * d];

        if let Some(bi) = last_head.filter(|&b| matches!(stage, Stage::Head(s) if s == b)) {
            let blk = &model.head[bi];
            let split = (parts > 1).then_some((threads, parts));
            // Only the marker rows continue: their queries (computed here from their
            // normalised rows, when the stretch before left them out) and residuals.
            if let Some(q) = marker_queries(model) {
                for (r, &m) in markers.iter().enumerate() {
                    rows_out[r * d..(r + 1) * d].copy_from_slice(&h[m * d..(m + 1) * d]);
                }
                // Not shown to the observer: it saw these rows' input with every other row's
                // in the stretch's product of this weight.
                product(
                    &c,
                    split,
                    &blk.qkv,
                    &rows_out[..nm * d],
                    nm,
                    &mut qrows[..nm * 3 * d],
                    q,
                    &mut None,
                );
                t = Tick::start(c.prof);
                for row in qrows[..nm * 3 * d].chunks_exact_mut(3 * d) {
                    add_bias(&mut row[..d], &blk.qkv_b[..d]);
                }
                t.lap(c.prof, Op::Elementwise);
            } else {
                for (r, &m) in markers.iter().enumerate() {
                    qrows[r * 3 * d..r * 3 * d + d].copy_from_slice(&qkv[m * 3 * d..m * 3 * d + d]);
                }
            }
            let qs = Queries {
                q: &qrows[..],
                ldq: 3 * d,
                pos: Some(markers),
            };
            attend(
                &c,
                qkv_all,
                n,
                heads,
                qs,
                nm,
                None,
                kt_all,
                &mut scores[..QB * n],
                &mut attn[..nm * d],
            );
            let obs = &mut observer;
            let all = |w: &Weight| 0..w.panels();
            product(
                &c,
                split,
                &blk.attn_out,
                &attn[..nm * d],
                nm,
                &mut tmp[..nm * d],
                all(&blk.attn_out),
                obs,
            );
            t = Tick::start(c.prof);
            add_bias(&mut tmp[..nm * d], &blk.attn_out_b);
            for (r, &m) in markers.iter().enumerate() {
                for j in 0..d {
                    h[r * d + j] = x[m * d + j] + tmp[r * d + j];
                }
            }
            t.lap(c.prof, Op::Elementwise);
            // h[..nm*d] = residual rows after attention; MLP on them into x[..nm*d].
            c.norm(
                &h[..nm * d],
                &mut rows_out[..nm * d],
                &blk.norm2.0,
                Some(&blk.norm2.1),
            );
            t.lap(c.prof, Op::Norm);
            product(
                &c,
                split,
                &blk.ffn_up,
                &rows_out[..nm * d],
                nm,
                &mut up[..nm * 4 * d],
                all(&blk.ffn_up),
                obs,
            );
            t = Tick::start(c.prof);
            add_bias(&mut up[..nm * 4 * d], &blk.ffn_up_b);
            for v in up[..nm * 4 * d].iter_mut() {
                *v = v.max(0.0);
            }
            t.lap(c.prof, Op::Elementwise);
            product(
                &c,
                split,
                &blk.ffn_down,
                &up[..nm * 4 * d],
                nm,
                &mut tmp[..nm * d],
                all(&blk.ffn_down),
                obs,
            );
            t = Tick::start(c.prof);
            add_bias(&mut tmp[..nm * d], &blk.ffn_down_b);
            for r in 0..nm * d {
                x[r] = h[r] + tmp[r];
            }
            t.lap(c.prof, Op::Elementwise);
            break;
        }

        // Attention of every row, split by (head, query block).
        if parts == 1 {
            let qs = Queries {
                q: qkv_all,
                ldq: 3 * d,
                pos: None,
            };
            attend(
                &c,
                qkv_all,
                n,
                heads,
                qs,
                n,
                window,
                kt_all,
                &mut scores[..QB * n],
                &mut attn[..n * d],
            );
        } else {
            attend_split(
                &c, threads, parts, qkv_all, n, heads, window, kt_all, scores, attn,
            );
        }

        let next = stage_at(si + 1);
        if si < n_enc && capture_wanted {
            // A boundary to record: the stretch in two, the state in between.
            let post = Stretch {
                embed: false,
                post: Some(stage),
                finish_encoder: false,
                pre: None,
            };
            row_stretch(post, x, h, qkv, attn, tmp, up, act, &mut observer);
            capture_x(x);
            let pre = Stretch {
                embed: false,
                post: None,
                finish_encoder: si + 1 == n_enc,
                pre: next,
            };
            row_stretch(pre, x, h, qkv, attn, tmp, up, act, &mut observer);
            continue;
        }
        row_stretch(
            Stretch {
                embed: false,
                post: Some(stage),
                finish_encoder: si + 1 == n_enc,
                pre: next,
            },
            x,
            h,
            qkv,
            attn,
            tmp,
            up,
            act,
            &mut observer,
        );
    }
    if until == Until::Encoder {
        if let Some(e) = c.failed.into_inner() {
            return Err(e);
        }
        // The final norm's output, which the stretch that finished the encoder left in `h`.
        let h: &'w Vec<f32> = h;
        return Ok(&h[..n * d]);
    }
    if model.head.is_empty() {
        for (r, &m) in markers.iter().enumerate() {
            h[r * d..(r + 1) * d].copy_from_slice(&x[m * d..(m + 1) * d]);
        }
        x[..nm * d].copy_from_slice(&h[..nm * d]);
    }
    // Scorer on the marker rows (now x[..nm*d]).
    let mut t = Tick::start(c.prof);
    c.norm(
        &x[..nm * d],
        &mut h[..nm * d],
        &model.cls_norm.0,
        Some(&model.cls_norm.1),
    );
    t.lap(c.prof, Op::Scorer);
    c.matmul(
        &model.cls,
        &h[..nm * d],
        nm,
        &mut tmp[..nm * d],
        &mut observer,
    );
    t = Tick::start(c.prof);
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
    t.lap(c.prof, Op::Scorer);
    if let Some(e) = c.failed.into_inner() {
        return Err(e);
    }
    Ok(&out[..])
}
