//! sky-web: the browser engine. sky-infer (tokenizer + ModernBERT encoder + Laya head, f32
//! compute) behind a raw `extern "C"` ABI that a small hand-written JS loader
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
//! | `sky_questions() -> status` | the built-in benchmark questions (the twelve prompts `skyctl bench` times), as `/v1/systemone` requests (JSON array) |
//!
//! A status is 0 when the result is the answer, 1 when it is the spec's error object
//! (`{"error": {"code", "message", "type"}}`, exactly what `skyctl ask --json` prints).
//!
//! The model arrives once, as one byte array written straight into this module's memory (the
//! loader streams the download into buffer 0); `sky_infer::load::engine_from_gguf` borrows those
//! bytes (the GGUF reader never copies tensor data) and decodes each weight once into the f32
//! panels the kernels read; buffer 0 is then freed. The same functions are plain Rust, so the
//! native tests run them too ([`Session`]).

use serde_json::{json, Value};
use sky_infer::engine::{error_response, parse_json_bytes, Engine};
use sky_infer::forward::Workspace;
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
        let result = if bytes.is_empty() {
            Err(error_object(
                400,
                "invalid_request_error",
                "the model file is empty",
            ))
        } else {
            match sky_infer::load::engine_from_gguf(&bytes, name) {
                Ok(engine) => {
                    self.engine = Some(engine);
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
        json!({
            "model": e.name,
            "isa": isa_name(e.isa),
            "simd": simd(),
            "hidden": c.hidden,
            "encoder_layers": c.n_enc,
            "head_layers": c.n_head_layers,
            "vocab": c.vocab,
            "max_tokens": c.max_len,
        })
    }
}

/// Whether this build's kernels use SIMD128 (a property of the module, fixed at compile time:
/// WebAssembly has no run-time feature detection; the loader picks the module instead).
pub fn simd() -> bool {
    cfg!(all(target_arch = "wasm32", target_feature = "simd128"))
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

/// The built-in benchmark questions (JSON array of `{"id", "request"}`). Always 0.
#[no_mangle]
pub extern "C" fn sky_questions() -> i32 {
    with(Session::questions)
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
