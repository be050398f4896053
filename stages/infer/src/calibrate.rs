//! Calibration: run the f32 model over a prompt set and record, at every matrix product
//! ("site", the weight's GGUF name without `.weight`), the max |x| of each input channel.
//!
//! The statistics and their file format live in [`sky_quant::Calibration`]; this module only
//! drives the engine: each prompt is a decision request (`type`, `instructions`, `criteria`,
//! `state`) built into a sequence exactly as the runtime builds it (same budgets, same
//! truncation) and run through [`crate::forward::forward`] with an observer, on the scalar
//! kernel path so that the calibration bytes are the same on every machine.

use crate::engine::Engine;
use crate::error::{InferError, Result};
use crate::forward::{forward, Workspace};
use crate::sequence::Question;
use crate::weights::WeightData;
use sky_quant::{calibration_prompts, Calibration, PromptRequest};

/// What a calibration run saw, besides the statistics.
#[derive(Debug, Clone)]
pub struct CalibrationRun {
    /// Per-site channel maxima.
    pub calibration: Calibration,
    /// Prompts run.
    pub prompts: usize,
    /// Tokens run (sum of sequence lengths).
    pub tokens: usize,
    /// Prompts whose state did not fit `max_len` and was truncated as the runtime truncates
    /// it: `(id, state tokens, state tokens kept)`.
    pub truncated: Vec<(String, usize, usize)>,
    /// The model's `max_len` (for messages).
    pub max_len: usize,
}

impl CalibrationRun {
    /// One line per truncated prompt, for the user (the runtime truncates silently; a
    /// calibration that did not see the whole prompt should say so).
    pub fn notes(&self) -> Vec<String> {
        let max_len = self.max_len;
        self.truncated
            .iter()
            .map(|(id, all, kept)| {
                format!("prompt {id}: state of {all} tokens truncated to {kept} to fit max_len = {max_len} (as the runtime does)")
            })
            .collect()
    }
}

pub(crate) fn quant_err(e: sky_quant::Error) -> InferError {
    InferError::upstream("sky-quant", e)
}

/// Calibrate `engine` (which must compute in f32) on `prompts`.
///
/// Errors: an empty prompt list, a model whose weights are already quantized, a prompt the
/// runtime rejects (the message names the prompt id), non-finite activations.
pub fn calibrate(engine: &Engine, prompts: &[PromptRequest]) -> Result<CalibrationRun> {
    if prompts.is_empty() {
        return Err(InferError::BadRequest {
            path: "prompts".into(),
            message: "the calibration set has no usable prompt; give at least one decision request"
                .into(),
        });
    }
    let mut model_sites = Vec::new();
    for l in &engine.model.layers {
        model_sites.extend([&l.qkv, &l.attn_out, &l.ffn_up, &l.ffn_down]);
    }
    if let Some(w) = model_sites
        .iter()
        .find(|w| matches!(w.data, WeightData::Int8(_)))
    {
        return Err(InferError::BadValue {
            key: w.site.clone(),
            message: "calibration needs the f32 model, but this weight is already quantized".into(),
        });
    }
    let mut calibration = Calibration::new();
    let mut ws = Workspace::new();
    let mut truncated = Vec::new();
    let mut tokens = 0usize;
    for p in prompts {
        engine.check_stop()?;
        let def = serde_json::json!({"type": p.kind, "instructions": p.instructions, "criteria": p.criteria});
        let q = Question::parse(&p.id, &def)?;
        let seq = engine.sequence(&q, &p.state, &p.id)?;
        if seq.state_tokens_used < seq.state_tokens {
            truncated.push((p.id.clone(), seq.state_tokens, seq.state_tokens_used));
        }
        tokens += seq.ids.len();
        let mut failure: Option<sky_quant::Error> = None;
        let mut observer = |site: &str, rows: usize, k: usize, x: &[f32]| {
            if failure.is_none() {
                if let Err(e) = calibration.observe(site, x, rows, k) {
                    failure = Some(e);
                }
            }
        };
        // Every instruction set computes the same bits (`kernels`), so the calibration file
        // (and the digest a Q8_0 file records) is the same on every machine.
        let scores = forward(
            &engine.model,
            engine.isa,
            &mut ws,
            &seq.ids,
            &seq.markers,
            q.qtype,
            Some(&mut observer),
        )?;
        if let Some(e) = failure {
            return Err(InferError::upstream("calibration", e).at(format!("prompt {}", p.id)));
        }
        // Every activation the maxima come from was checked by `observe`; the scores close
        // the pass (a model that overflows after the last observed site calibrates nothing).
        crate::engine::finite_scores(scores)
            .map_err(|e| InferError::upstream("calibration", e).at(format!("prompt {}", p.id)))?;
    }
    Ok(CalibrationRun {
        calibration,
        prompts: prompts.len(),
        tokens,
        truncated,
        max_len: engine.model.config.max_len,
    })
}

/// Calibrate on the twelve built-in prompts ([`sky_quant::CALIBRATION_PROMPTS`]).
pub fn calibrate_builtin(engine: &Engine) -> Result<CalibrationRun> {
    calibrate(engine, &calibration_prompts())
}

/// Parse a JSONL prompt set (one decision request per line), with the line number in errors.
pub fn parse_prompts(text: &str) -> Result<Vec<PromptRequest>> {
    sky_quant::parse_prompt_set(text).map_err(quant_err)
}
