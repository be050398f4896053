//! [`Engine`]: a model, its tokenizer, special tokens and temperatures; answers questions.

use crate::answer::{answer, probabilities};
use crate::config::{ModelConfig, QType, Temperatures};
use crate::error::{bad_request, InferError, Result};
use crate::forward::{forward_from, Boundaries, Observer, Workspace};
use crate::kernels::Isa;
use crate::model::Model;
use crate::sequence::{
    build_sequence, encode_state, Budget, OptionCut, Question, Sequence, SpecialTokens,
    TextEncoder, OPTION_TOKENS,
};
use serde::Serialize;
use serde_json::{json, Map, Value};

/// Version of the engine's numerics; part of golden cache keys.
pub const ENGINE_VERSION: &str = concat!("sky-infer ", env!("CARGO_PKG_VERSION"), " f32-v2");

/// A loaded decision model ready to answer.
pub struct Engine {
    /// Name reported in responses (file or directory name).
    pub name: String,
    /// Weights and hyperparameters.
    pub model: Model,
    /// Tokenizer.
    pub tokenizer: Box<dyn TextEncoder>,
    /// CLS / SEP / MASK.
    pub special: SpecialTokens,
    /// Temperatures (Laya buckets).
    pub temperatures: Temperatures,
    /// Instruction set of the matrix products.
    pub isa: Isa,
    /// Asked before every forward pass: `true` ends the work with [`InferError::Cancelled`],
    /// so that a build told to stop (SIGINT, SIGTERM) leaves a long calibration or golden
    /// suite within one question's time.
    pub stop: Option<fn() -> bool>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("name", &self.name)
            .field("config", &self.model.config)
            .field("isa", &self.isa)
            .finish()
    }
}

/// Everything computed for one question (the `--requests` line and golden comparison).
#[derive(Debug, Clone, Serialize)]
pub struct CaseResult {
    /// Token ids.
    pub ids: Vec<u32>,
    /// Marker positions.
    pub markers: Vec<usize>,
    /// Raw scores at the markers (before temperature).
    pub scores: Vec<f32>,
    /// Temperature bucket used (Laya name).
    pub temperature_bucket: String,
    /// Temperature applied (after clamping).
    pub temperature: f64,
    /// Softmax probabilities in option order.
    pub probabilities: Vec<f32>,
    /// The answer object.
    pub answer: Value,
}

impl CaseResult {
    /// The `skyctl ask --requests` output line: `id`, `ids`, `markers`, `scores`,
    /// `temperature`, `probabilities`, `answer`.
    pub fn line(&self, id: &str) -> Value {
        json!({
            "id": id,
            "input_ids": self.ids,
            "markers": self.markers,
            "scores": self.scores,
            "temperature": self.temperature,
            "probabilities": self.probabilities,
            "answer": self.answer,
        })
    }
}

/// Parse request bytes as JSON, with errors that name the file and the position: invalid
/// UTF-8 by byte offset, JSON syntax as `FILE:LINE:COL`.
pub fn parse_json_bytes(bytes: &[u8], what: &str) -> Result<Value> {
    parse_json_at(bytes, what, None)
}

/// [`parse_json_bytes`] of line `line` (1-based) of `file`: positions read `FILE:LINE:COL`.
pub fn parse_json_line(bytes: &[u8], file: &str, line: usize) -> Result<Value> {
    parse_json_at(bytes, file, Some(line))
}

fn parse_json_at(bytes: &[u8], file: &str, line: Option<usize>) -> Result<Value> {
    let text = std::str::from_utf8(bytes).map_err(|e| {
        let at = line.map_or_else(|| file.to_string(), |l| format!("{file}:{l}"));
        bad_request(
            at,
            format!("invalid UTF-8 at byte offset {}", e.valid_up_to()),
        )
    })?;
    serde_json::from_str(text).map_err(|e| {
        // serde_json's text ends in " at line L column C"; the position goes in front instead.
        let full = e.to_string();
        let message = full
            .rsplit_once(" at line ")
            .map_or(full.as_str(), |(m, _)| m);
        let at = match line {
            Some(l) => format!("{file}:{l}:{}", e.column()),
            None => format!("{file}:{}:{}", e.line(), e.column()),
        };
        bad_request(at, format!("invalid JSON: {message}"))
    })
}

impl Engine {
    /// Assemble an engine from parts (the loaders call this).
    pub fn new(
        name: String,
        model: Model,
        tokenizer: Box<dyn TextEncoder>,
        special: SpecialTokens,
        temperatures: Temperatures,
    ) -> Engine {
        Engine {
            name,
            model,
            tokenizer,
            special,
            temperatures,
            isa: Isa::detect(),
            stop: None,
        }
    }

    /// [`InferError::Cancelled`] when [`Engine::stop`] says so.
    pub fn check_stop(&self) -> Result<()> {
        match self.stop {
            Some(stop) if stop() => Err(InferError::Cancelled),
            _ => Ok(()),
        }
    }

    /// The model's hyperparameters.
    pub fn config(&self) -> &ModelConfig {
        &self.model.config
    }

    fn budget(&self) -> Budget {
        Budget {
            max_len: self.model.config.max_len,
            max_head_tokens: self.model.config.max_head_tokens,
        }
    }

    /// Build the sequence of one question over a state.
    pub fn sequence(&self, q: &Question, state: &Value, path: &str) -> Result<Sequence> {
        let (state_ids, left) = encode_state(self.tokenizer.as_ref(), &self.special, state);
        build_sequence(
            self.tokenizer.as_ref(),
            &self.special,
            self.budget(),
            q,
            &state_ids,
            left,
            path,
        )
    }

    /// Raw scores of a built sequence.
    pub fn scores(
        &self,
        ws: &mut Workspace,
        seq: &Sequence,
        qtype: QType,
        observer: Option<Observer<'_>>,
    ) -> Result<Vec<f32>> {
        self.scores_from(ws, seq, qtype, observer, Boundaries::default())
    }

    /// [`Engine::scores`] from a layer boundary and/or recording the boundaries (see
    /// [`crate::forward::Boundaries`]).
    pub fn scores_from(
        &self,
        ws: &mut Workspace,
        seq: &Sequence,
        qtype: QType,
        observer: Option<Observer<'_>>,
        bounds: Boundaries<'_>,
    ) -> Result<Vec<f32>> {
        self.check_stop()?;
        let scores = forward_from(
            &self.model,
            self.isa,
            ws,
            &seq.ids,
            &seq.markers,
            qtype,
            observer,
            bounds,
        )?;
        finite_scores(scores)?;
        Ok(scores.to_vec())
    }

    /// The option probabilities of a question's raw scores: its temperature, then softmax.
    pub fn probabilities(&self, q: &Question, seq: &Sequence, scores: &[f32]) -> Vec<f32> {
        let t = self.temperatures.pick(q.qtype, seq.markers.len());
        probabilities(scores, t.applied)
    }

    /// Answer one question (sequence, forward, temperature, softmax, answer object).
    pub fn run_question(
        &self,
        ws: &mut Workspace,
        q: &Question,
        state: &Value,
        path: &str,
    ) -> Result<CaseResult> {
        let seq = self.sequence(q, state, path)?;
        let scores = self.scores(ws, &seq, q.qtype, None)?;
        let t = self.temperatures.pick(q.qtype, seq.markers.len());
        let p = probabilities(&scores, t.applied);
        Ok(CaseResult {
            answer: answer(q, &p),
            ids: seq.ids,
            markers: seq.markers,
            scores,
            temperature_bucket: t.bucket,
            temperature: t.applied,
            probabilities: p,
        })
    }

    /// One `--requests` case line (`{"id", "type", "instructions", "criteria", "state"}`).
    pub fn run_case(&self, ws: &mut Workspace, case: &Value) -> Result<(String, CaseResult)> {
        let (id, q, state) = case_parts(case)?;
        let r = self.run_question(ws, &q, state, &id)?;
        Ok((id, r))
    }

    /// One case line built into its sequence (what [`Engine::run_case`] runs), for callers that
    /// run the same cases many times: `(id, question, sequence)`.
    pub fn case_sequence(&self, case: &Value) -> Result<(String, Question, Sequence)> {
        let (id, q, state) = case_parts(case)?;
        let seq = self.sequence(&q, state, &id)?;
        Ok((id, q, seq))
    }

    /// Answer a `/v1/systemone` request (spec 5.1) with the response shape (5.2).
    pub fn systemone(&self, ws: &mut Workspace, request: &Value) -> Result<Value> {
        let CheckedRequest {
            state,
            cut_options,
            questions: parsed,
        } = check_request(request)?;
        let (state_ids, left) = encode_state(self.tokenizer.as_ref(), &self.special, state);
        let mut answers = Map::new();
        let mut tokens = 0usize;
        for (id, q) in &parsed {
            let path = format!("questions.{id}");
            let seq = build_sequence(
                self.tokenizer.as_ref(),
                &self.special,
                self.budget(),
                q,
                &state_ids,
                left,
                &path,
            )?;
            if let Some(cut) = seq.option_cut.filter(|_| !cut_options) {
                return Err(option_too_long(&path, q, &cut, self.budget()));
            }
            tokens += seq.ids.len();
            let scores = self.scores(ws, &seq, q.qtype, None)?;
            let t = self.temperatures.pick(q.qtype, seq.markers.len());
            answers.insert(id.clone(), answer(q, &probabilities(&scores, t.applied)));
        }
        Ok(json!({
            "model": self.name,
            "answers": answers,
            "usage": {"input_tokens": tokens, "output_tokens": 0},
        }))
    }
}

/// A `/v1/systemone` request that passed [`check_request`].
#[derive(Debug)]
pub struct CheckedRequest<'a> {
    /// The state (never null).
    pub state: &'a Value,
    /// Whether options Laya's layout cuts are cut (`"cut_options": true`) rather than refused.
    pub cut_options: bool,
    /// The questions, validated, in request order.
    pub questions: Vec<(String, Question)>,
}

/// Every check of a `/v1/systemone` request that needs no model (its shape, the state, each
/// question's type, instructions and criteria): the refusals `skyctl ask` gives before it
/// tokenizes. The browser demo's form runs the same checks (sky-web's `form_request`).
pub fn check_request(request: &Value) -> Result<CheckedRequest<'_>> {
    let obj = request
        .as_object()
        .ok_or_else(|| bad_request("request", "must be a JSON object with state and questions"))?;
    let state = match obj.get("state") {
        None => return Err(bad_request("state", "missing (any JSON value except null)")),
        Some(Value::Null) => return Err(bad_request("state", "null (any JSON value except null)")),
        Some(s) => s,
    };
    let questions = match obj.get("questions") {
        Some(Value::Object(q)) if !q.is_empty() => q,
        Some(Value::Object(_)) => return Err(bad_request("questions", "must not be empty")),
        _ => {
            return Err(bad_request(
                "questions",
                "missing: an object of question id -> {type, instructions, criteria}",
            ))
        }
    };
    // Laya's runtime cuts an option that does not fit (48 tokens, fewer when many options
    // share the head window) and answers for the rest; by default a request with such an
    // option is refused, naming it, since its answer would ignore text the person wrote.
    // `"cut_options": true` asks for the runtime's cut (its goldens need it).
    let cut_options = match obj.get("cut_options") {
        None | Some(Value::Bool(false)) => false,
        Some(Value::Bool(true)) => true,
        Some(other) => {
            return Err(bad_request(
                "cut_options",
                format!(
                    "expected true or false, found {}",
                    crate::pyjson::dumps(other)
                ),
            ))
        }
    };
    // Validate every question before running any.
    let parsed: Vec<(String, Question)> = questions
        .iter()
        .map(|(id, def)| Question::parse(&format!("questions.{id}"), def).map(|q| (id.clone(), q)))
        .collect::<Result<_>>()?;
    Ok(CheckedRequest {
        state,
        cut_options,
        questions: parsed,
    })
}

/// A request's option that Laya's layout would cut short: `ask` refuses it (a cut option
/// answers for text the person did not write), naming the option and the room there is.
fn option_too_long(path: &str, q: &Question, cut: &OptionCut, budget: Budget) -> InferError {
    let name = q.keys.get(cut.option).map_or("?", String::as_str);
    let why = if cut.kept == OPTION_TOKENS {
        format!("at most {OPTION_TOKENS} tokens fit per option")
    } else {
        format!(
            "with {} options, at most {} tokens fit per option in the head window of {} tokens",
            q.options.len(),
            cut.kept,
            budget.max_head_tokens
        )
    };
    bad_request(
        format!("{path}.criteria"),
        format!(
            "option `{name}` is {} tokens long; {why}: shorten it",
            cut.tokens
        ),
    )
}

/// The id, question and state of one `--requests` case line.
fn case_parts(case: &Value) -> Result<(String, Question, &Value)> {
    let id = match case.get("id") {
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
        None => return Err(bad_request("id", "missing")),
    };
    let q = Question::parse(&id, case)?;
    let state = case
        .get("state")
        .ok_or_else(|| bad_request(format!("{id}.state"), "missing"))?;
    Ok((id, q, state))
}

/// Refuse non-finite scores (final logits) of a forward pass. Weights are checked once at
/// load; activations are not checked inside the hot loops: a NaN or inf anywhere in the
/// pass reaches the scores (every layer feeds the next, the scorer reads every marker), so
/// this one check on the output is enough to refuse a non-finite answer. Softmax over finite
/// scores with a clamped temperature is finite, so the probabilities need no second check.
pub fn finite_scores(scores: &[f32]) -> Result<()> {
    match scores.iter().position(|v| !v.is_finite()) {
        Some(index) => Err(InferError::NonFinite {
            what: "scores (the forward pass's output)".into(),
            index,
            value: scores[index],
        }),
        None => Ok(()),
    }
}

/// The JSON error object of spec 5.4 for an error of this crate.
pub fn error_response(err: &InferError) -> Value {
    let (code, kind) = match err {
        InferError::BadRequest { .. } => (400, "invalid_request_error"),
        InferError::NotDecisionModel { .. } => (501, "not_supported_error"),
        _ => (500, "server_error"),
    };
    json!({"error": {"code": code, "message": err.to_string(), "type": kind}})
}
