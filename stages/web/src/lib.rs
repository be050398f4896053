//! sky-web: the browser engine. sky-infer (tokenizer + ModernBERT encoder + Laya head; f32
//! compute for a float file, the native int8 path for a Q8_0 file) behind a raw `extern "C"` ABI that a small hand-written JS loader
//! (`site/src/sky-engine.js`) drives; no wasm-bindgen.
//!
//! The module owns two byte buffers the host writes into and one it reads from:
//!
//! | export | what it does |
//! |---|---|
//! | `sky_reserve(slot, len) -> ptr` | make buffer `slot` (0: model bytes, 1: text: a request or the model's name) `len` bytes long (zeroed) and return where it starts |
//! | `sky_load() -> status` | parse buffer 0 as a GGUF named by buffer 1, build the engine, drop buffer 0 |
//! | `sky_ask() -> status` | answer buffer 1 (a `/v1/systemone` request, JSON) |
//! | `sky_info() -> status` | describe the loaded model (JSON) |
//! | `sky_out_ptr()`, `sky_out_len()` | the result of the last call: JSON, UTF-8 |
//! | `sky_simd() -> 0/1` | whether this build's kernels are SIMD128 |
//! | `sky_form() -> status` | turn the demo form in buffer 1 (`{"state", "type", "instructions", "options"}`, the fields as typed) into the `/v1/systemone` request it sends: `{"request", "options": [{"key", "text"}]}`, or the refusal ([`form_request`]) |
//! | `sky_int8_check() -> status` | the int8 kernel paths this module runs, each checked bit for bit against the portable scalar path on extreme and random blocks, both activation modes, with outlier columns ([`int8_check`]) |
//! | `sky_questions() -> status` | the built-in benchmark questions (the twelve prompts `skyctl bench` times), as `/v1/systemone` requests (JSON array) |
//!
//! A status is 0 when the result is the answer, 1 when it is the spec's error object
//! (`{"error": {"code", "message", "type"}}`, exactly what `skyctl ask --json` prints).
//!
//! The model arrives once, as one byte array written straight into this module's memory (the
//! loader streams the download into buffer 0); `sky_infer::int8::open_bytes` (what `skyctl ask`
//! runs on a file) borrows those bytes (the GGUF reader never copies tensor data), decodes each
//! float weight once into the f32 panels the kernels read and takes each Q8_0 matrix as it is
//! for the int8 kernels (outlier columns in f32); buffer 0 is then freed. The same functions are plain Rust, so the
//! native tests run them too ([`Session`]).

use serde_json::{json, Value};
use sky_infer::engine::{error_response, parse_json_bytes, Engine};
use sky_infer::error::InferError;
use sky_infer::forward::Workspace;
use sky_infer::int8::ComputeReport;
use sky_infer::kernels::Isa;
use std::cell::RefCell;

/// Status of a call whose result is the answer.
pub const OK: i32 = 0;
/// Status of a call whose result is an error object.
pub const ERR: i32 = 1;

/// The engine state of one module instance (the browser engine keeps one in a thread-local).
#[derive(Default)]
pub struct Session {
    engine: Option<Engine>,
    /// How the loaded file computes (f32, or int8 from its Q8_0 matrices).
    compute: Option<ComputeReport>,
    ws: Workspace,
    /// Buffer 0: GGUF bytes until `load`; buffer 1: request text or model name.
    bufs: [Vec<u8>; 2],
    /// Result of the last call.
    out: Vec<u8>,
}

fn error_object(code: u16, kind: &str, message: impl Into<String>) -> Value {
    json!({"error": {"code": code, "message": message.into(), "type": kind}})
}

impl Session {
    /// A session with no model.
    pub fn new() -> Session {
        Session::default()
    }

    /// Buffer `slot` resized to `len` zero bytes (`None` for a slot that does not exist).
    pub fn reserve(&mut self, slot: usize, len: usize) -> Option<&mut Vec<u8>> {
        let buf = self.bufs.get_mut(slot)?;
        // A fresh allocation: the old contents are never needed again, and `clear` + `resize`
        // would keep a model-sized capacity alive after the model was dropped.
        *buf = vec![0u8; len];
        Some(buf)
    }

    /// The JSON result of the last call.
    pub fn out(&self) -> &[u8] {
        &self.out
    }

    fn finish(&mut self, result: Result<Value, Value>) -> i32 {
        let (status, value) = match result {
            Ok(v) => (OK, v),
            Err(e) => (ERR, e),
        };
        self.out = value.to_string().into_bytes();
        status
    }

    /// Load buffer 0 as a GGUF named by buffer 1 (UTF-8, lossy); frees buffer 0.
    pub fn load(&mut self) -> i32 {
        let bytes = std::mem::take(&mut self.bufs[0]);
        let name = String::from_utf8_lossy(&self.bufs[1]).into_owned();
        self.engine = None;
        self.compute = None;
        let result = if bytes.is_empty() {
            Err(error_object(
                400,
                "invalid_request_error",
                "the model file is empty",
            ))
        } else {
            // The file's own compute path, as `skyctl ask` opens it: a Q8_0 file runs in int8
            // with its outlier columns in f32, a float file in f32.
            let opts = sky_infer::int8::ComputeOptions::default();
            match sky_infer::int8::open_bytes(&bytes, name, &opts, None) {
                Ok((engine, report)) => {
                    self.engine = Some(engine);
                    self.compute = Some(report);
                    Ok(self.info_value())
                }
                Err(e) => Err(error_response(&e)),
            }
        };
        self.finish(result)
    }

    /// Answer buffer 1 as a `/v1/systemone` request: the response object `skyctl ask --json`
    /// prints, or its error object.
    pub fn ask(&mut self) -> i32 {
        let result = match &self.engine {
            None => Err(error_object(503, "server_error", "no model is loaded")),
            Some(engine) => parse_json_bytes(&self.bufs[1], "request")
                .and_then(|req| engine.systemone(&mut self.ws, &req))
                .map_err(|e| error_response(&e)),
        };
        self.finish(result)
    }

    /// Describe the loaded model.
    pub fn info(&mut self) -> i32 {
        let result = match &self.engine {
            None => Err(error_object(503, "server_error", "no model is loaded")),
            Some(_) => Ok(self.info_value()),
        };
        self.finish(result)
    }

    /// Buffer 1 as the demo form: the request it sends, or its refusal ([`form_request`]).
    pub fn form(&mut self) -> i32 {
        let result = parse_json_bytes(&self.bufs[1], "form")
            .map_err(|e| error_response(&e))
            .and_then(|f| form_request(&f));
        self.finish(result)
    }

    /// The built-in questions: `sky_quant::CALIBRATION_PROMPTS` (what `skyctl bench` times), each
    /// as a one-question `/v1/systemone` request `{"id", "request"}`.
    pub fn questions(&mut self) -> i32 {
        let list: Vec<Value> = sky_quant::calibration_prompts()
            .into_iter()
            .map(|p| {
                json!({
                    "id": p.id,
                    "request": {
                        "state": p.state,
                        "questions": {
                            p.id.clone(): {
                                "type": p.kind,
                                "instructions": p.instructions,
                                "criteria": p.criteria,
                            }
                        }
                    }
                })
            })
            .collect();
        self.finish(Ok(Value::Array(list)))
    }

    fn info_value(&self) -> Value {
        let Some(e) = &self.engine else {
            return Value::Null;
        };
        let c = e.config();
        let (compute, int8_matrices, outlier_columns) = match &self.compute {
            Some(r) => (compute_name(r), r.int8.matrices, r.int8.outlier_columns),
            None => ("f32", 0, 0),
        };
        json!({
            "model": e.name,
            "compute": compute,
            "int8_matrices": int8_matrices,
            "outlier_columns": outlier_columns,
            "isa": isa_name(e.isa),
            "int8_kernel": e.isa.int8_path().name(),
            "simd": simd(),
            "hidden": c.hidden,
            "encoder_layers": c.n_enc,
            "head_layers": c.n_head_layers,
            "vocab": c.vocab,
            "max_tokens": c.max_len,
        })
    }
}

/// A refused form field, in the engine's words (`state: ...`, as the engine names a request's
/// fields; the page rewords `state` and `questions.q.*` as the form's fields).
fn form_error(path: &str, message: impl Into<String>) -> InferError {
    InferError::BadRequest {
        path: path.into(),
        message: message.into(),
    }
}

/// The state box as a request's `state`: text that is a JSON value is sent as that value (so
/// `null` meets the engine's refusal of a null state, as `skyctl ask` does); text that starts
/// like JSON (`{` or `[`) but does not parse is refused rather than silently sent as text;
/// anything else is sent as the text typed.
pub fn form_state(text: &str) -> Result<Value, InferError> {
    let t = text.trim();
    match serde_json::from_str::<Value>(t) {
        Ok(v) if !t.is_empty() => Ok(v),
        Err(e) if t.starts_with('{') || t.starts_with('[') => {
            let full = e.to_string();
            let why = full
                .rsplit_once(" at line ")
                .map_or(full.as_str(), |(m, _)| m);
            Err(form_error(
                "state",
                format!(
                    "starts like JSON but is not valid JSON (line {}, column {}: {why}); fix the JSON, or write the state as plain text",
                    e.line(),
                    e.column()
                ),
            ))
        }
        _ => Ok(Value::String(text.to_string())),
    }
}

/// The options box as `criteria`, and the options as sent, `[{"key", "text"}]` (`key`: how the
/// engine names an option, a label or a score level's index; `text`: what was typed). One
/// option a line, blank lines skipped. Score: the levels, in order. Choice and noul: labels
/// alone make a list, any `label: description` line makes an object (a line without a colon
/// is a label without description). No lines: an empty list for choice and score (the engine
/// counts the options), no criteria for noul. A noul question's lines are sent as typed, so
/// the engine refuses criteria that are not `true` / `false`, as `skyctl ask` does.
pub fn form_criteria(qtype: &str, text: &str) -> (Value, Vec<(String, String)>) {
    let lines: Vec<&str> = text
        .split('\n')
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let label = |l: &str| l.split(':').next().unwrap_or("").trim().to_string();
    if qtype == "noul" && lines.is_empty() {
        return (Value::Null, Vec::new());
    }
    if qtype == "score" || !lines.iter().any(|l| l.contains(':')) {
        let labels: Vec<String> = lines.iter().map(|l| label(l)).collect();
        let options = labels
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let key = if qtype == "score" {
                    i.to_string()
                } else {
                    c.clone()
                };
                (key, c.clone())
            })
            .collect();
        return (json!(labels), options);
    }
    let mut map = serde_json::Map::new();
    for l in lines {
        match l.split_once(':') {
            None => map.insert(l.to_string(), Value::Null),
            Some((k, d)) => {
                let d = d.trim();
                let desc = if d.is_empty() {
                    Value::Null
                } else {
                    Value::String(d.to_string())
                };
                map.insert(k.trim().to_string(), desc)
            }
        };
    }
    let options = map.keys().map(|k| (k.clone(), k.clone())).collect();
    (Value::Object(map), options)
}

/// The demo form (`{"state", "type", "instructions", "options"}`, each the text typed) as the
/// `/v1/systemone` request it sends, checked as `skyctl ask` checks a request: the result is
/// `{"request", "options"}` (see [`form_criteria`]), or the spec's error object with the
/// refusal `skyctl ask` gives for that request (plus `"options"`, when the options were read,
/// so that the page can name an option by what was typed). An empty question is answered, as
/// by `skyctl ask` (Laya's golden case `c2_empty` asks one).
pub fn form_request(form: &Value) -> Result<Value, Value> {
    let field = |name: &str| -> Result<&str, Value> {
        form.get(name).and_then(Value::as_str).ok_or_else(|| {
            error_response(&form_error(
                "form",
                format!("the form's `{name}` field is missing or not text"),
            ))
        })
    };
    let state = form_state(field("state")?).map_err(|e| error_response(&e))?;
    let qtype = field("type")?;
    let (criteria, options) = form_criteria(qtype, field("options")?);
    let options: Vec<Value> = options
        .into_iter()
        .map(|(key, text)| json!({"key": key, "text": text}))
        .collect();
    let mut q = json!({"type": qtype, "instructions": field("instructions")?});
    if !criteria.is_null() {
        q["criteria"] = criteria;
    }
    let request = json!({"state": state, "questions": {"q": q}});
    // The engine's own checks, the ones `skyctl ask` runs before it tokenizes.
    if let Err(e) = sky_infer::engine::check_request(&request) {
        let mut err = error_response(&e);
        err["options"] = Value::Array(options);
        return Err(err);
    }
    Ok(json!({"request": request, "options": options}))
}

/// The int8 kernel paths of this build (`simd128` in the SIMD128 module, then `scalar`), each
/// run on the same product as the portable scalar path: `{"paths", "products", "equal"}`,
/// `equal` when every output has the scalar path's bits (the integer dots are exact on every
/// path, and the f32 steps are the scalar path's). Extreme blocks (weights -128 against
/// activations of +-127 after quantization) and random ones, Q8 and Q8x2, with outlier columns.
pub fn int8_check() -> Result<Value, Value> {
    use sky_quant::{ActQuant, KernelPath, Q8Matrix, Scratch};
    let fail = |e: sky_quant::Error| error_object(500, "server_error", e.to_string());
    let (rows, k, n) = (37usize, 96usize, 3usize);
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed >> 40) as f32 / (1u64 << 24) as f32 - 0.5
    };
    let mut w: Vec<f32> = (0..rows * k).map(|_| next()).collect();
    // Row 0, block 0: one weight at -max, so it quantizes to -127 and its neighbours near it.
    w[..32].fill(-0.5);
    let mut x: Vec<f32> = (0..n * k).map(|_| next() * 4.0).collect();
    x[..32].fill(3.0);
    x[7] = 90.0; // an outlier channel
    let m = Q8Matrix::quantize(&w, rows, k, &[7, 40]).map_err(fail)?;
    let paths = KernelPath::available();
    let mut products = 0usize;
    let mut equal = true;
    for mode in [ActQuant::Q8, ActQuant::Q8x2] {
        let mut want = vec![0f32; n * rows];
        let mut scalar = Scratch::with_path(KernelPath::Scalar).map_err(fail)?;
        m.matmul(&x, n, &mut want, mode, &mut scalar)
            .map_err(fail)?;
        for &p in &paths {
            let mut got = vec![1f32; n * rows];
            let mut s = Scratch::with_path(p).map_err(fail)?;
            m.matmul(&x, n, &mut got, mode, &mut s).map_err(fail)?;
            equal &= got
                .iter()
                .zip(&want)
                .all(|(a, b)| a.to_bits() == b.to_bits());
            products += 1;
        }
    }
    let names: Vec<&str> = paths.iter().map(|p| p.name()).collect();
    Ok(json!({"paths": names, "products": products, "equal": equal}))
}

/// Whether this build's kernels use SIMD128 (a property of the module, fixed at compile time:
/// WebAssembly has no run-time feature detection; the loader picks the module instead).
pub fn simd() -> bool {
    cfg!(all(target_arch = "wasm32", target_feature = "simd128"))
}

/// Which path answers, in the page's words: `f32`, `int8, outlier-aware` (a Q8_0 file that
/// records outlier columns) or `int8` (plain Q8_0).
pub fn compute_name(r: &ComputeReport) -> &'static str {
    match (r.int8.matrices, r.int8.outlier_columns) {
        (0, _) => "f32",
        (_, 0) => "int8",
        _ => "int8, outlier-aware",
    }
}

fn isa_name(isa: Isa) -> &'static str {
    isa.name()
}

thread_local! {
    static SESSION: RefCell<Session> = RefCell::new(Session::new());
}

fn with<R>(f: impl FnOnce(&mut Session) -> R) -> R {
    SESSION.with(|s| f(&mut s.borrow_mut()))
}

/// Reserve buffer `slot` (0: model, 1: text) of `len` bytes; returns its address in linear
/// memory (0 when `slot` does not exist). The host writes the bytes there before the next call.
#[no_mangle]
pub extern "C" fn sky_reserve(slot: u32, len: u32) -> *mut u8 {
    with(|s| match s.reserve(slot as usize, len as usize) {
        Some(buf) => buf.as_mut_ptr(),
        None => std::ptr::null_mut(),
    })
}

/// Load the model in buffer 0 (named by buffer 1). 0: loaded (result: info), 1: error object.
#[no_mangle]
pub extern "C" fn sky_load() -> i32 {
    with(Session::load)
}

/// Answer the request in buffer 1. 0: response object, 1: error object.
#[no_mangle]
pub extern "C" fn sky_ask() -> i32 {
    with(Session::ask)
}

/// Describe the loaded model. 0: info object, 1: error object.
#[no_mangle]
pub extern "C" fn sky_info() -> i32 {
    with(Session::info)
}

/// The demo form in buffer 1 as a request. 0: `{"request", "options"}`, 1: error object.
#[no_mangle]
pub extern "C" fn sky_form() -> i32 {
    with(Session::form)
}

/// The built-in benchmark questions (JSON array of `{"id", "request"}`). Always 0.
#[no_mangle]
pub extern "C" fn sky_questions() -> i32 {
    with(Session::questions)
}

/// The int8 kernel paths checked against the scalar one. 0: `{"paths", "products", "equal"}`.
#[no_mangle]
pub extern "C" fn sky_int8_check() -> i32 {
    with(|s| {
        let r = int8_check();
        s.finish(r)
    })
}

/// Address of the last result.
#[no_mangle]
pub extern "C" fn sky_out_ptr() -> *const u8 {
    with(|s| s.out.as_ptr())
}

/// Length of the last result in bytes.
#[no_mangle]
pub extern "C" fn sky_out_len() -> u32 {
    with(|s| s.out.len() as u32)
}

/// 1 when this module's kernels are SIMD128, 0 for the scalar build.
#[no_mangle]
pub extern "C" fn sky_simd() -> u32 {
    u32::from(simd())
}
