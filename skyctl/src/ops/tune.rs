//! `skyctl tune`: the smallest type policy whose answers stay within a tolerance of the f32
//! answers, and which tensors cost the accuracy.
//!
//! Every policy is measured on the file it makes, loaded as `skyctl ask FILE` loads it: F16
//! and BF16 tensors read as f32, Q8_0 matrices computed in int8 with this project's
//! outlier-aware quantization (the calibration's outlier columns recorded in the file). The
//! error of a policy is the largest |p - p_f32| over every option of every case.
//!
//! The search:
//! 1. attribution: each candidate tensor (every tensor of two or more dimensions) lowered
//!    alone to each candidate type, with its error and the bytes it saves;
//! 2. greedy: those moves in order of bytes saved per unit of error, each kept only if the
//!    whole policy, verified on the cases, stays within the tolerance (errors do not add up);
//! 3. the smallest uniform policy that meets the tolerance replaces the greedy result when it
//!    is smaller;
//! 4. a second pass retries every move the first rejected, against the final policy.
//!
//! Everything is deterministic: moves are ordered by value then tensor order, and each
//! verification is a full run.

use std::collections::BTreeMap;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use rayon::prelude::*;
use serde::Serialize;
use serde_json::Value;
use sky_gguf::{GgmlType, GgufFile};
use sky_infer::engine::Engine;
use sky_infer::forward::{Boundaries, Resume, Workspace};
use sky_infer::int8::{apply, quantize_gguf, ComputeOptions};
use sky_infer::sequence::{Question, Sequence};
use sky_laya::TypePolicy;
use sky_quant::Calibration;

use super::policy::{render, type_name};
use anyhow::Context;
use std::path::Path;

/// What to tune.
pub struct Spec<'a> {
    /// The float model as GGUF bytes (F32 or F16/BF16 tensors).
    pub reference: &'a [u8],
    /// `general.name`-like label for messages and the policy comment.
    pub name: &'a str,
    /// Calibration for the Q8_0 candidates' outlier columns.
    pub calibration: &'a Calibration,
    /// Outlier ratio of the Q8_0 candidates.
    pub outlier_ratio: f32,
    /// The cases the policy is tuned on.
    pub cases: &'a [Value],
    /// Held-out cases, only reported (may be empty).
    pub holdout: &'a [Value],
    /// Largest error allowed.
    pub tolerance: f64,
    /// Fraction of the tolerance held back: the search keeps the error on the tuned cases
    /// within `(1 - margin) x tolerance`, a reserve for cases it has not seen (no guarantee:
    /// bench/results/ has held-out errors). 0 searches at the tolerance itself.
    pub margin: f64,
    /// Largest file allowed, in bytes.
    pub budget: Option<u64>,
    /// Candidate types, lower than F32.
    pub types: &'a [GgmlType],
}

/// Why tuning failed, beyond a model or case that does not load (those keep their own
/// error, with its sources, under an `anyhow` context).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TuneError {
    /// The tolerance is negative or not a number.
    #[error("tolerance {0} is not a number >= 0")]
    BadTolerance(f64),
    /// The margin is not in [0, 1).
    #[error("margin {0} is not a fraction in [0, 1) of the tolerance")]
    BadMargin(f64),
    /// The candidate types hold F32 or a type the converter cannot write, or none.
    #[error("{0}")]
    BadTypes(String),
    /// No policy meets both the tolerance and the budget.
    #[error(
        "no policy of at most {budget} bytes meets the tolerance: the smallest file that does is \
         {smallest} bytes (error {smallest_error:.3e}){}",
        within_budget(best_within)
    )]
    OverBudget {
        /// The budget asked for.
        budget: u64,
        /// The smallest file found that meets the tolerance.
        smallest: u64,
        /// Its error.
        smallest_error: f64,
        /// The lowest error of any policy tried within the budget, with its size and name.
        best_within: Option<(f64, u64, String)>,
    },
}

/// The end of [`TuneError::OverBudget`]'s message.
fn within_budget(best: &Option<(f64, u64, String)>) -> String {
    match best {
        Some((e, b, what)) => {
            format!("; within the budget the best error reached is {e:.3e} ({what}, {b} bytes)")
        }
        None => "; no policy tried fits the budget".to_string(),
    }
}

/// One candidate tensor of the report.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct TensorRow {
    /// GGUF name.
    pub name: String,
    /// PyTorch-order shape.
    pub shape: Vec<u64>,
    /// Bytes of the tensor data per type (F32 and each candidate it can take).
    pub bytes: BTreeMap<String, u64>,
    /// Error of the model with only this tensor lowered to each candidate type.
    pub error_alone: BTreeMap<String, f64>,
    /// The type the tuned policy gives it.
    pub chosen: String,
}

/// One verified step of the search.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Step {
    /// 1: greedy; 2: the retry of rejected moves.
    pub pass: u8,
    /// The tensor lowered.
    pub tensor: String,
    /// To this type.
    #[serde(rename = "type")]
    pub ty: String,
    /// Error of the policy with this move; `None` when above the target (the run stopped at
    /// the first case that showed it).
    pub error: Option<f64>,
    /// Whether the move was kept.
    pub accepted: bool,
    /// Error of the policy after the step.
    pub error_after: f64,
    /// File bytes after the step.
    pub bytes_after: u64,
}

/// A uniform policy (every candidate tensor one type).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Uniform {
    /// The type.
    #[serde(rename = "type")]
    pub ty: String,
    /// File bytes.
    pub bytes: u64,
    /// Error on the tuned cases.
    pub error: f64,
    /// Error on the held-out cases (`None` without held-out cases).
    pub holdout_error: Option<f64>,
}

/// The result of a search.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Tuned {
    /// Tolerance asked for.
    pub tolerance: f64,
    /// Margin asked for.
    pub margin: f64,
    /// The error the search allowed on the tuned cases: `(1 - margin) x tolerance`.
    pub target: f64,
    /// Budget asked for.
    pub budget: Option<u64>,
    /// Tuned cases.
    pub cases: usize,
    /// Held-out cases.
    pub holdout_cases: usize,
    /// Error of the tuned file on the tuned cases.
    pub error: f64,
    /// Error on the held-out cases.
    pub holdout_error: Option<f64>,
    /// Bytes of the tuned file.
    pub bytes: u64,
    /// Bytes of the all-F32 file.
    pub f32_bytes: u64,
    /// The uniform policies, measured.
    pub uniform: Vec<Uniform>,
    /// Whether the smallest uniform policy meeting the tolerance was the start of pass 2.
    pub from_uniform: Option<String>,
    /// One row per candidate tensor, in model order.
    pub tensors: Vec<TensorRow>,
    /// Every verified step, in order.
    pub steps: Vec<Step>,
    /// Full runs on the tuned cases.
    pub evaluations: usize,
    /// `general.file_type` type of the encoder (the type most encoder bytes take).
    #[serde(skip)]
    pub policy: TypePolicy,
    /// The tuned file's bytes.
    #[serde(skip)]
    pub file: Vec<u8>,
}

impl Tuned {
    /// The candidate tensors that cost the most accuracy: largest error alone at the lowest
    /// type tried, at most `n`.
    pub fn costliest(&self, n: usize) -> Vec<(&str, f64)> {
        let mut v: Vec<(&str, f64)> = self
            .tensors
            .iter()
            .map(|t| {
                let worst = t.error_alone.values().copied().fold(0.0, f64::max);
                (t.name.as_str(), worst)
            })
            .collect();
        v.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(b.0)));
        v.truncate(n);
        v
    }
}

struct Candidate {
    name: String,
    shape: Vec<u64>,
    head: bool,
    /// The first encoder layer it feeds (`None`: the embeddings).
    first_layer: Option<usize>,
    /// Bytes per type, F32 first.
    bytes: Vec<(GgmlType, u64)>,
}

impl Candidate {
    fn bytes_of(&self, ty: GgmlType) -> u64 {
        self.bytes
            .iter()
            .find(|(t, _)| *t == ty)
            .map_or(0, |(_, b)| *b)
    }
}

/// A case built into its token sequence (the same for every policy: the tokenizer and the
/// budgets do not change with the tensor types).
struct Prepared {
    /// `` `id` `` (or `#N`), for messages.
    id: String,
    question: Question,
    seq: Sequence,
}

/// A case list with the f32 model's answers, run longest first (a run ends with its longest
/// case, and one left for last keeps a core idle).
struct CaseSet {
    prepared: Vec<Prepared>,
    reference: Vec<Vec<f32>>,
    order: Vec<usize>,
}

/// Per case, the hidden state at every encoder layer boundary (`n_enc + 1` of them) of one
/// policy's file: a run that changes nothing before layer L starts there.
type States = Vec<Vec<Vec<f32>>>;

/// Where a run starts: the boundary and the states of the policy it differs from.
#[derive(Clone, Copy)]
struct From<'s> {
    layer: usize,
    states: &'s States,
}

/// What a run measured.
struct Run {
    /// Largest error on the tuned cases; `None`: above the limit (the run stopped early).
    error: Option<f64>,
    /// The file.
    file: Vec<u8>,
    /// The new policy's states, when asked for.
    states: Option<States>,
}

struct Search<'a> {
    spec: &'a Spec<'a>,
    file: GgufFile<'a>,
    n_enc: usize,
    candidates: Vec<Candidate>,
    tuned: CaseSet,
    holdout: CaseSet,
    /// The f32 file's states on the tuned cases.
    reference_states: States,
    evaluations: AtomicUsize,
}

/// A full policy: one type per candidate, in candidate order.
type Assignment = Vec<GgmlType>;

impl<'a> Search<'a> {
    fn new(spec: &'a Spec<'a>) -> anyhow::Result<Search<'a>> {
        let file = GgufFile::parse(spec.reference)?;
        let n_enc = encoder_layers(&file)?;
        let mut candidates = Vec::new();
        for t in &file.tensors {
            if !matches!(t.ty, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16) {
                anyhow::bail!(
                    "tensor `{}` is {}: tuning needs a float model (f32, f16 or bf16 weights)",
                    t.name,
                    t.ty.name()
                );
            }
            let shape = t.shape();
            if shape.len() < 2 {
                continue;
            }
            let inner = shape.last().copied().unwrap_or(1);
            let rows: u64 = shape[..shape.len() - 1].iter().product();
            let mut bytes = vec![(GgmlType::F32, inner * 4 * rows)];
            for &ty in spec.types {
                // The converter writes a Q8_0 tensor whose rows do not split into blocks as
                // F16: that candidate is the F16 one.
                if ty == GgmlType::Q8_0 && !inner.is_multiple_of(32) {
                    continue;
                }
                bytes.push((ty, ty.row_bytes(inner)? * rows));
            }
            candidates.push(Candidate {
                name: t.name.clone(),
                head: sky_laya::is_head_tensor(&t.name, n_enc),
                first_layer: first_layer(&t.name, n_enc),
                shape,
                bytes,
            });
        }
        let empty = || CaseSet {
            prepared: Vec::new(),
            reference: Vec::new(),
            order: Vec::new(),
        };
        let mut s = Search {
            spec,
            file,
            n_enc,
            candidates,
            tuned: empty(),
            holdout: empty(),
            reference_states: Vec::new(),
            evaluations: AtomicUsize::new(0),
        };
        let bytes = s.build(&s.all(GgmlType::F32))?;
        let engine = load(&bytes, spec.name)?;
        let (tuned, states) = reference_set(&engine, spec.cases, true)?;
        s.tuned = tuned;
        s.reference_states = states;
        s.holdout = reference_set(&engine, spec.holdout, false)?.0;
        Ok(s)
    }

    fn all(&self, ty: GgmlType) -> Assignment {
        self.candidates
            .iter()
            .map(|c| {
                if c.bytes.iter().any(|(t, _)| *t == ty) {
                    ty
                } else if ty == GgmlType::Q8_0 {
                    GgmlType::F16
                } else {
                    GgmlType::F32
                }
            })
            .collect()
    }

    /// The converter's policy for an assignment: exact rules for every candidate, `type` and
    /// `head_type` the types most of the encoder's and the head's bytes take (they only set
    /// `general.file_type`: every tensor of two or more dimensions has a rule).
    fn policy(&self, a: &Assignment) -> TypePolicy {
        let dominant = |head: bool| {
            let mut by_type: BTreeMap<u8, (GgmlType, u64)> = BTreeMap::new();
            for (c, &ty) in self.candidates.iter().zip(a) {
                if c.head == head {
                    let e = by_type.entry(precision_rank(ty)).or_insert((ty, 0));
                    e.1 += c.bytes_of(GgmlType::F32);
                }
            }
            // most bytes; on a tie the more precise type
            by_type
                .values()
                .max_by(|x, y| {
                    x.1.cmp(&y.1)
                        .then(precision_rank(y.0).cmp(&precision_rank(x.0)))
                })
                .map_or(GgmlType::F32, |(t, _)| *t)
        };
        TypePolicy {
            ftype: dominant(false),
            head_type: dominant(true),
            rules: self
                .candidates
                .iter()
                .zip(a)
                .map(|(c, &ty)| (c.name.clone(), ty))
                .collect(),
        }
    }

    fn build(&self, a: &Assignment) -> anyhow::Result<Vec<u8>> {
        let q = quantize_gguf(
            &self.file,
            self.spec.calibration,
            self.spec.outlier_ratio,
            &self.policy(a),
            false,
        )?;
        Ok(q.bytes)
    }

    /// The boundary a run of `a` can start at when the states of `base` (whose assignment
    /// `base_a` is) are at hand: the first layer any changed tensor feeds.
    fn start<'s>(
        &self,
        a: &Assignment,
        base_a: &Assignment,
        states: &'s States,
    ) -> Option<From<'s>> {
        let mut layer = self.n_enc;
        for ((c, x), y) in self.candidates.iter().zip(a).zip(base_a) {
            if x != y {
                layer = layer.min(c.first_layer?);
            }
        }
        Some(From { layer, states })
    }

    /// Measure an assignment's file on the tuned cases: from `from` (or a whole pass), stopping
    /// once a case is above `limit`, recording the states when `capture`.
    fn measure(
        &self,
        a: &Assignment,
        from: Option<From<'_>>,
        limit: Option<f64>,
        capture: bool,
    ) -> anyhow::Result<Run> {
        let file = self.build(a)?;
        let engine = load(&file, self.spec.name)?;
        let (error, states) = error_on(&engine, &self.tuned, from, limit, capture)?;
        self.evaluations.fetch_add(1, Ordering::Relaxed);
        Ok(Run {
            error,
            file,
            states,
        })
    }

    fn holdout_error(&self, bytes: &[u8]) -> anyhow::Result<Option<f64>> {
        if self.holdout.prepared.is_empty() {
            return Ok(None);
        }
        let engine = load(bytes, self.spec.name)?;
        Ok(error_on(&engine, &self.holdout, None, None, false)?.0)
    }
}

/// The first encoder layer a tensor feeds: its block for an encoder block's tensors, the
/// encoder's output for the head's (blocks past the encoder, token types, scorer); `None` for
/// the token embeddings (a whole pass).
fn first_layer(name: &str, n_enc: usize) -> Option<usize> {
    if name == "token_embd.weight" {
        return None;
    }
    let block = name
        .strip_prefix("blk.")
        .and_then(|r| r.split('.').next())
        .and_then(|n| n.parse::<usize>().ok());
    Some(block.map_or(n_enc, |b| b.min(n_enc)))
}

/// A file's engine, on the compute path `skyctl ask FILE` takes.
fn load(bytes: &[u8], name: &str) -> anyhow::Result<Engine> {
    let mut engine = sky_infer::load::engine_from_gguf(bytes, name.to_string())?;
    let f = GgufFile::parse(bytes)?;
    apply(&mut engine, Some(&f), &ComputeOptions::default(), None)?;
    Ok(engine)
}

/// The f32 model on `cases`: each built into its sequence, its answers, the longest-first
/// order, and (with `capture`) its states.
fn reference_set(
    engine: &Engine,
    cases: &[Value],
    capture: bool,
) -> anyhow::Result<(CaseSet, States)> {
    let prepared: Vec<Prepared> = cases
        .iter()
        .enumerate()
        .map(|(i, case)| {
            let (name, question, seq) = engine
                .case_sequence(case)
                .map_err(|e| anyhow::anyhow!("case {}: {e}", case_id(case, i)))?;
            Ok(Prepared {
                id: format!("`{name}`"),
                question,
                seq,
            })
        })
        .collect::<anyhow::Result<_>>()?;
    let mut order: Vec<usize> = (0..prepared.len()).collect();
    order.sort_by_key(|&i| (std::cmp::Reverse(prepared[i].seq.ids.len()), i));
    let mut set = CaseSet {
        prepared,
        reference: Vec::new(),
        order,
    };
    let (answers, states) = run_set(engine, &set, None, None, capture)?;
    set.reference = answers.into_iter().map(|(p, _)| p).collect();
    Ok((set, states.unwrap_or_default()))
}

/// Run every case of `set` (from `from`), returning per case its probabilities and error
/// against `set.reference` (0 when there is none yet); `None` for the cases skipped once one
/// was above `limit`. With `capture`, the new states (`None` if any case was skipped).
#[allow(clippy::type_complexity)]
fn run_set(
    engine: &Engine,
    set: &CaseSet,
    from: Option<From<'_>>,
    limit: Option<f64>,
    capture: bool,
) -> anyhow::Result<(Vec<(Vec<f32>, f64)>, Option<States>)> {
    let stop = AtomicBool::new(false);
    let mut runs: Vec<(usize, Option<(Vec<f32>, f64, Vec<Vec<f32>>)>)> = set
        .order
        .par_iter()
        .map_init(Workspace::new, |ws, &i| {
            if stop.load(Ordering::Relaxed) {
                return Ok((i, None));
            }
            // A build asked to stop ends the search here: one case takes milliseconds.
            if let Some(sig) = sky_dag::interrupt::requested() {
                anyhow::bail!("interrupted by signal {sig}");
            }
            let p = &set.prepared[i];
            let mut tail = Vec::new();
            let bounds = Boundaries {
                resume: from.map(|f| Resume {
                    layer: f.layer,
                    x: &f.states[i][f.layer],
                }),
                capture: capture.then_some(&mut tail),
            };
            let scores = engine
                .scores_from(ws, &p.seq, p.question.qtype, None, bounds)
                .map_err(|e| anyhow::anyhow!("case {}: {e}", p.id))?;
            let probs = engine.probabilities(&p.question, &p.seq, &scores);
            let e = match set.reference.get(i) {
                Some(r) => {
                    case_error(r, &probs).map_err(|m| anyhow::anyhow!("case {}: {m}", p.id))?
                }
                None => 0.0,
            };
            if limit.is_some_and(|l| e > l) {
                stop.store(true, Ordering::Relaxed);
            }
            let states = match from {
                Some(f) if capture => {
                    let mut all = f.states[i][..f.layer].to_vec();
                    all.extend(tail);
                    all
                }
                _ => tail,
            };
            Ok((i, Some((probs, e, states))))
        })
        .collect::<anyhow::Result<_>>()?;
    runs.sort_by_key(|(i, _)| *i);
    let complete = runs.iter().all(|(_, r)| r.is_some());
    let mut answers = Vec::with_capacity(runs.len());
    let mut states = Vec::with_capacity(if capture { runs.len() } else { 0 });
    for (p, e, st) in runs.into_iter().filter_map(|(_, r)| r) {
        answers.push((p, e));
        if capture {
            states.push(st);
        }
    }
    Ok((answers, (capture && complete).then_some(states)))
}

/// Largest |p - p_f32| over every option of every case of `set`; `None` once a case is above
/// `limit` (the other runs stop early). With `capture`, the states of a complete run.
fn error_on(
    engine: &Engine,
    set: &CaseSet,
    from: Option<From<'_>>,
    limit: Option<f64>,
    capture: bool,
) -> anyhow::Result<(Option<f64>, Option<States>)> {
    let (answers, states) = run_set(engine, set, from, limit, capture)?;
    if answers.len() < set.prepared.len() {
        return Ok((None, None));
    }
    Ok((
        Some(answers.iter().map(|(_, e)| *e).fold(0.0, f64::max)),
        states,
    ))
}

/// Largest |p - p_ref| over the options of one case; NaN counts as infinitely wrong.
fn case_error(reference: &[f32], got: &[f32]) -> Result<f64, String> {
    if reference.len() != got.len() {
        return Err(format!(
            "{} options, the f32 model has {}",
            got.len(),
            reference.len()
        ));
    }
    let mut worst = 0.0f64;
    for (a, b) in reference.iter().zip(got) {
        let d = (f64::from(*a) - f64::from(*b)).abs();
        if d.is_nan() {
            return Ok(f64::INFINITY);
        }
        worst = worst.max(d);
    }
    Ok(worst)
}

/// Lower is less precise; orders ties.
fn precision_rank(t: GgmlType) -> u8 {
    match t {
        GgmlType::F32 => 3,
        GgmlType::F16 => 2,
        GgmlType::BF16 => 1,
        _ => 0,
    }
}

fn encoder_layers(file: &GgufFile<'_>) -> anyhow::Result<usize> {
    let arch = file
        .get("general.architecture")
        .and_then(|v| v.as_str())
        .unwrap_or("modern-bert");
    let count = |k: &str| {
        file.get(&format!("{arch}.{k}"))
            .and_then(|v| v.as_u64())
            .map(|v| v as usize)
    };
    let n = count("block_count")
        .ok_or_else(|| anyhow::anyhow!("the model has no `{arch}.block_count`"))?;
    Ok(n.saturating_sub(count("decision.block_count").unwrap_or(0)))
}

fn case_id(case: &Value, i: usize) -> String {
    case.get("id")
        .and_then(Value::as_str)
        .map_or_else(|| format!("#{}", i + 1), |s| format!("`{s}`"))
}

/// A move: candidate `tensor` to `ty`.
#[derive(Clone, Copy)]
struct Move {
    tensor: usize,
    ty: GgmlType,
    saved: u64,
    error: f64,
}

/// The policy the search stands at.
struct Current {
    a: Assignment,
    error: f64,
    bytes: u64,
    states: States,
}

/// Verify one move against the current policy and keep it when the whole policy stays within
/// `target`; every verification is a step of the report. A move that lowers nothing (the
/// tensor already is that small) counts as kept and is no step.
fn try_move(
    s: &Search<'_>,
    target: f64,
    pass: u8,
    m: &Move,
    cur: &mut Current,
    steps: &mut Vec<Step>,
) -> anyhow::Result<bool> {
    let c = &s.candidates[m.tensor];
    if c.bytes_of(m.ty) >= c.bytes_of(cur.a[m.tensor]) {
        return Ok(true);
    }
    let mut a = cur.a.clone();
    a[m.tensor] = m.ty;
    let from = s.start(&a, &cur.a, &cur.states);
    let run = s.measure(&a, from, Some(target), true)?;
    let bytes = run.file.len() as u64;
    let accepted = match (run.error, run.states) {
        (Some(e), Some(states)) if e <= target => {
            *cur = Current {
                a,
                error: e,
                bytes,
                states,
            };
            true
        }
        _ => false,
    };
    steps.push(Step {
        pass,
        tensor: c.name.clone(),
        ty: type_name(m.ty)?.into(),
        error: run.error,
        accepted,
        error_after: cur.error,
        bytes_after: cur.bytes,
    });
    Ok(accepted)
}

/// Run the search.
pub fn tune(spec: &Spec<'_>) -> anyhow::Result<Tuned> {
    if !(spec.tolerance >= 0.0 && spec.tolerance.is_finite()) {
        return Err(TuneError::BadTolerance(spec.tolerance).into());
    }
    if !(0.0..1.0).contains(&spec.margin) {
        return Err(TuneError::BadMargin(spec.margin).into());
    }
    if spec.types.is_empty() {
        return Err(TuneError::BadTypes("no candidate types".into()).into());
    }
    for &t in spec.types {
        if !matches!(t, GgmlType::F16 | GgmlType::BF16 | GgmlType::Q8_0) {
            return Err(TuneError::BadTypes(format!(
                "candidate type {t} is not one of f16, bf16, q8_0"
            ))
            .into());
        }
    }
    let mut s = Search::new(spec)?;
    let t = spec.tolerance * (1.0 - spec.margin);
    let n = s.candidates.len();
    let f32s = s.all(GgmlType::F32);

    // 1. Attribution: every (tensor, type) alone.
    let singles: Vec<(usize, GgmlType)> = s
        .candidates
        .iter()
        .enumerate()
        .flat_map(|(i, c)| c.bytes.iter().skip(1).map(move |(ty, _)| (i, *ty)))
        .collect();
    let alone: Vec<f64> = singles
        .par_iter()
        .map(|&(i, ty)| {
            let mut a = f32s.clone();
            a[i] = ty;
            let from = s.start(&a, &f32s, &s.reference_states);
            s.measure(&a, from, None, false)
                .map(|r| r.error.unwrap_or(f64::INFINITY))
        })
        .collect::<anyhow::Result<_>>()?;
    let mut moves: Vec<Move> = singles
        .iter()
        .zip(&alone)
        .map(|(&(i, ty), &error)| {
            let c = &s.candidates[i];
            Move {
                tensor: i,
                ty,
                saved: c.bytes_of(GgmlType::F32) - c.bytes_of(ty),
                error,
            }
        })
        .collect();
    // Most bytes saved per unit of error first; an error of zero is the best value there is.
    let value = |m: &Move| m.saved as f64 / m.error.max(f64::MIN_POSITIVE);
    moves.sort_by(|a, b| {
        value(b)
            .total_cmp(&value(a))
            .then(b.saved.cmp(&a.saved))
            .then(a.tensor.cmp(&b.tensor))
            .then(precision_rank(b.ty).cmp(&precision_rank(a.ty)))
    });

    // Uniform policies.
    let mut uniform = Vec::new();
    for &ty in spec.types {
        let a = s.all(ty);
        let run = s.measure(&a, None, None, false)?;
        uniform.push((
            a,
            Uniform {
                ty: type_name(ty)?.into(),
                bytes: run.file.len() as u64,
                error: run.error.unwrap_or(f64::INFINITY),
                holdout_error: s.holdout_error(&run.file)?,
            },
        ));
    }

    // 2. Greedy from all-F32, each step verified.
    let mut steps = Vec::new();
    let f32_bytes = s.build(&f32s)?.len() as u64;
    let mut cur = Current {
        a: f32s.clone(),
        error: 0.0,
        bytes: f32_bytes,
        states: std::mem::take(&mut s.reference_states),
    };
    let mut rejected = Vec::new();
    for m in &moves {
        // a move that alone misses the target is not tried: the others only add to it
        if m.error > t {
            continue;
        }
        if !try_move(&s, t, 1, m, &mut cur, &mut steps)? {
            rejected.push(*m);
        }
    }

    // 3. Never larger than the smallest uniform policy that meets the target.
    let mut from_uniform = None;
    if let Some((a, u)) = uniform
        .iter()
        .filter(|(_, u)| u.error <= t)
        .min_by_key(|(_, u)| u.bytes)
    {
        if u.bytes < cur.bytes {
            let run = s.measure(a, None, None, true)?;
            cur = Current {
                a: a.clone(),
                error: u.error,
                bytes: u.bytes,
                states: run.states.unwrap_or_default(),
            };
            from_uniform = Some(u.ty.clone());
            // every move is worth retrying from there
            rejected = moves.iter().filter(|m| m.error <= t).copied().collect();
        }
    }

    // 4. Retry what was rejected, against the final policy.
    for m in &rejected {
        try_move(&s, t, 2, m, &mut cur, &mut steps)?;
    }
    let Current {
        a: current,
        error: cur_err,
        bytes: cur_bytes,
        ..
    } = cur;

    let file = s.build(&current)?;
    let holdout_error = s.holdout_error(&file)?;
    if let Some(budget) = spec.budget {
        if cur_bytes > budget {
            let mut best: Option<(f64, u64, String)> = None;
            let tried = uniform
                .iter()
                .map(|(_, u)| (u.error, u.bytes, format!("uniform {}", u.ty)));
            for (e, b, what) in tried {
                if b <= budget && best.as_ref().is_none_or(|x| e < x.0) {
                    best = Some((e, b, what));
                }
            }
            return Err(TuneError::OverBudget {
                budget,
                smallest: cur_bytes,
                smallest_error: cur_err,
                best_within: best,
            }
            .into());
        }
    }

    let tensors = s
        .candidates
        .iter()
        .enumerate()
        .map(|(i, c)| {
            Ok(TensorRow {
                name: c.name.clone(),
                shape: c.shape.clone(),
                bytes: c
                    .bytes
                    .iter()
                    .map(|(ty, b)| Ok((type_name(*ty)?.to_string(), *b)))
                    .collect::<anyhow::Result<_>>()?,
                error_alone: singles
                    .iter()
                    .zip(&alone)
                    .filter(|((j, _), _)| *j == i)
                    .map(|((_, ty), e)| Ok((type_name(*ty)?.to_string(), *e)))
                    .collect::<anyhow::Result<_>>()?,
                chosen: type_name(current[i])?.into(),
            })
        })
        .collect::<anyhow::Result<_>>()?;
    debug_assert_eq!(current.len(), n);
    Ok(Tuned {
        tolerance: spec.tolerance,
        margin: spec.margin,
        target: t,
        budget: spec.budget,
        cases: spec.cases.len(),
        holdout_cases: spec.holdout.len(),
        error: cur_err,
        holdout_error,
        bytes: cur_bytes,
        f32_bytes,
        uniform: uniform.into_iter().map(|(_, u)| u).collect(),
        from_uniform,
        tensors,
        steps,
        evaluations: s.evaluations.load(std::sync::atomic::Ordering::Relaxed),
        policy: s.policy(&current),
        file,
    })
}

// Reports: the policy file's comment, the JSON report, the table on stdout.

/// Read a cases file.
pub fn read_cases(path: &Path) -> anyhow::Result<Vec<serde_json::Value>> {
    let text = sky_fs::read_to_string(path, sky_fs::CASES)?;
    let cases =
        sky_infer::golden::parse_cases(&text).with_context(|| format!("`{}`", path.display()))?;
    anyhow::ensure!(!cases.is_empty(), "`{}` holds no cases", path.display());
    Ok(cases)
}

/// A model's label: the directory or file name without `.gguf`.
pub fn model_name(model: &Path) -> String {
    model
        .file_name()
        .map(|n| n.to_string_lossy().trim_end_matches(".gguf").to_string())
        .unwrap_or_else(|| model.display().to_string())
}

/// Where a tuned policy came from, for its comment.
pub struct Provenance<'a> {
    /// The model's label.
    pub model: &'a str,
    /// The tuned cases file.
    pub cases: &'a Path,
    /// The held-out cases file.
    pub holdout: Option<&'a Path>,
}

/// The policy file: a comment with what was measured, then the table.
pub fn policy_text(t: &Tuned, table: &str, how: &Provenance<'_>) -> anyhow::Result<String> {
    let mut comment = vec![
        format!(
            "skyctl tune {}: tolerance {}, margin {} (tuned to {:.3e}), on {} cases ({})",
            how.model,
            t.tolerance,
            t.margin,
            t.target,
            t.cases,
            how.cases.display()
        ),
        format!(
            "measured error {:.3e}, {} bytes ({:.1}% of f32)",
            t.error,
            t.bytes,
            100.0 * t.bytes as f64 / t.f32_bytes.max(1) as f64
        ),
    ];
    if let (Some(h), Some(p)) = (t.holdout_error, how.holdout) {
        comment.push(format!(
            "held-out error {h:.3e} on {} cases ({})",
            t.holdout_cases,
            p.display()
        ));
    }
    for u in &t.uniform {
        comment.push(format!(
            "uniform {}: {} bytes, error {:.3e}",
            u.ty, u.bytes, u.error
        ));
    }
    if t.policy.rules.iter().any(|(_, ty)| *ty == GgmlType::Q8_0) {
        comment.push(
            "Q8_0 tensors carry calibrated outlier columns: build the file with `skyctl quantize \
             MODEL OUT --policy THIS_FILE` and the same calibration"
                .into(),
        );
    } else {
        comment.push("build the file with `skyctl convert MODEL OUT --policy THIS_FILE`".into());
    }
    render(
        table,
        &comment,
        t.policy.ftype,
        t.policy.head_type,
        &t.policy.rules,
    )
}

/// The report, as JSON with the model's label.
pub fn report_json(t: &Tuned, model: &str) -> String {
    let mut v = serde_json::to_value(t).unwrap_or_default();
    if let Some(o) = v.as_object_mut() {
        o.insert("model".into(), model.into());
        let costliest: Vec<serde_json::Value> = t
            .costliest(3)
            .into_iter()
            .map(|(n, e)| serde_json::json!({"tensor": n, "error_alone": e}))
            .collect();
        o.insert("costliest".into(), costliest.into());
    }
    let mut s = serde_json::to_string_pretty(&v).unwrap_or_default();
    s.push('\n');
    s
}

fn err_cell(e: Option<&f64>) -> String {
    e.map_or_else(|| "-".into(), |e| format!("{e:.2e}"))
}

/// The readable table: one row per tensor, then the totals.
pub fn table(t: &Tuned) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let w = t
        .tensors
        .iter()
        .map(|r| r.name.len())
        .max()
        .unwrap_or(6)
        .max(6);
    let _ = writeln!(
        s,
        "{:<w$}  {:>12}  {:>10}  {:>9}  {:>9}  {:>9}  chosen",
        "tensor", "shape", "f32 bytes", "f16", "bf16", "q8_0"
    );
    for r in &t.tensors {
        let shape = r
            .shape
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join("x");
        let _ = writeln!(
            s,
            "{:<w$}  {:>12}  {:>10}  {:>9}  {:>9}  {:>9}  {}",
            r.name,
            shape,
            r.bytes.get("f32").copied().unwrap_or(0),
            err_cell(r.error_alone.get("f16")),
            err_cell(r.error_alone.get("bf16")),
            err_cell(r.error_alone.get("q8_0")),
            r.chosen
        );
    }
    let _ = writeln!(s, "(error with only that tensor lowered)");
    for u in &t.uniform {
        let held = u
            .holdout_error
            .map_or_else(String::new, |h| format!(", held out {h:.3e}"));
        let _ = writeln!(
            s,
            "uniform {:<5} {:>10} bytes, error {:.3e}{held}{}",
            u.ty,
            u.bytes,
            u.error,
            if u.error <= t.target { "" } else { " (misses)" }
        );
    }
    let held = t.holdout_error.map_or_else(String::new, |h| {
        format!(", {h:.3e} on {} held-out cases", t.holdout_cases)
    });
    let _ = writeln!(
        s,
        "tuned         {:>10} bytes, error {:.3e} on {} cases{held} (tolerance {}, tuned to {:.3e}; f32 {} bytes)",
        t.bytes, t.error, t.cases, t.tolerance, t.target, t.f32_bytes
    );
    let costliest: Vec<String> = t
        .costliest(3)
        .into_iter()
        .map(|(n, e)| format!("{n} ({e:.2e})"))
        .collect();
    let _ = writeln!(s, "costliest tensors: {}", costliest.join(", "));
    let lowered: Vec<String> = ["f16", "bf16", "q8_0"]
        .iter()
        .map(|name| {
            let n = t.tensors.iter().filter(|r| r.chosen == *name).count();
            format!("{n} {name}")
        })
        .collect();
    let _ = writeln!(
        s,
        "chosen: {} of {} tensors lowered ({})",
        t.tensors.iter().filter(|r| r.chosen != "f32").count(),
        t.tensors.len(),
        lowered.join(", ")
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tune_errors_read_as_before() {
        assert_eq!(
            TuneError::BadTolerance(-1.0).to_string(),
            "tolerance -1 is not a number >= 0"
        );
        assert_eq!(
            TuneError::BadMargin(1.5).to_string(),
            "margin 1.5 is not a fraction in [0, 1) of the tolerance"
        );
        let e = TuneError::OverBudget {
            budget: 300,
            smallest: 424,
            smallest_error: 0.001,
            best_within: Some((0.02, 290, "blk.0 -> Q8_0".into())),
        };
        assert_eq!(
            e.to_string(),
            "no policy of at most 300 bytes meets the tolerance: the smallest file that does is 424 bytes (error 1.000e-3); within the budget the best error reached is 2.000e-2 (blk.0 -> Q8_0, 290 bytes)"
        );
        let e = TuneError::OverBudget {
            budget: 300,
            smallest: 424,
            smallest_error: 0.001,
            best_within: None,
        };
        assert!(e.to_string().ends_with("; no policy tried fits the budget"));
    }
}
