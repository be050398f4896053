//! The browser engine's ABI layer, run natively: the same `Session` calls the wasm exports make,
//! compared with sky-infer's own `Engine::systemone` (what `skyctl ask --json` prints) on every
//! golden case. The browser side of the same comparison is site/tests/site.test.js.

use serde_json::{json, Value};
use sky_infer::forward::Workspace;
use sky_web::{Session, ERR, OK};
use std::path::PathBuf;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn pico_gguf() -> Vec<u8> {
    let ckpt = sky_laya::LayaCheckpoint::open(root().join("models/s1-pico")).expect("checkpoint");
    let (w, _) =
        sky_laya::build_writer(&ckpt, &sky_laya::ConvertOptions::default()).expect("converts");
    w.to_bytes().expect("serializes")
}

fn write(s: &mut Session, slot: usize, bytes: &[u8]) {
    s.reserve(slot, bytes.len())
        .expect("slot exists")
        .copy_from_slice(bytes);
}

fn out(s: &Session) -> Value {
    serde_json::from_slice(s.out()).expect("result is JSON")
}

fn loaded(bytes: &[u8]) -> Session {
    let mut s = Session::new();
    write(&mut s, 0, bytes);
    write(&mut s, 1, b"s1-pico.gguf");
    assert_eq!(s.load(), OK, "{}", String::from_utf8_lossy(s.out()));
    s
}

fn cases() -> Vec<(String, Value)> {
    let text = std::fs::read_to_string(root().join("golden/laya/cases.jsonl")).expect("cases");
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let c: Value = serde_json::from_str(l).expect("case is JSON");
            let id = c["id"].as_str().expect("id").to_string();
            let mut q = json!({"type": c["type"], "instructions": c["instructions"]});
            if let Some(crit) = c.get("criteria") {
                q["criteria"] = crit.clone();
            }
            (
                id.clone(),
                // Some cases have options Laya's layout cuts; the goldens record that cut.
                json!({"state": c["state"], "cut_options": true, "questions": {id: q}}),
            )
        })
        .collect()
}

#[test]
fn answers_equal_the_engine_on_every_golden_case() {
    let bytes = pico_gguf();
    let mut s = loaded(&bytes);
    let info = out(&s);
    assert_eq!(info["model"], "s1-pico.gguf");
    assert_eq!(info["simd"], false);
    let engine = sky_infer::load::engine_from_gguf(&bytes, "s1-pico.gguf".into()).expect("loads");
    let mut ws = Workspace::new();
    let cases = cases();
    assert_eq!(cases.len(), 41);
    for (id, req) in &cases {
        write(&mut s, 1, req.to_string().as_bytes());
        assert_eq!(s.ask(), OK, "{id}: {}", String::from_utf8_lossy(s.out()));
        let want = engine.systemone(&mut ws, req).expect("engine answers");
        // Byte-identical to what `skyctl ask --json` prints (`{resp}`).
        assert_eq!(String::from_utf8_lossy(s.out()), want.to_string(), "{id}");
    }
}

#[test]
fn errors_are_the_spec_error_objects() {
    let mut s = Session::new();
    // Nothing loaded yet.
    write(&mut s, 1, b"{}");
    assert_eq!(s.ask(), ERR);
    assert_eq!(out(&s)["error"]["code"], 503);
    // An empty model, a file that is not GGUF, a truncated GGUF.
    assert_eq!(s.load(), ERR);
    assert!(out(&s)["error"]["message"]
        .as_str()
        .unwrap()
        .contains("empty"));
    write(&mut s, 0, b"this is not a GGUF file");
    assert_eq!(s.load(), ERR);
    assert_eq!(out(&s)["error"]["code"], 500);
    let bytes = pico_gguf();
    write(&mut s, 0, &bytes[..bytes.len() / 2]);
    assert_eq!(s.load(), ERR);
    assert!(s.reserve(2, 1).is_none(), "only slots 0 and 1 exist");

    let mut s = loaded(&bytes);
    for (req, code) in [
        (&b"{not json"[..], 400),
        (br#"{"state": "x"}"#, 400),
        (
            br#"{"state": "x", "questions": {"q": {"type": "choice", "instructions": "which?"}}}"#,
            400,
        ),
        (b"\xff\xfe", 400),
    ] {
        write(&mut s, 1, req);
        assert_eq!(s.ask(), ERR);
        let e = out(&s);
        assert_eq!(e["error"]["code"], code, "{e}");
        assert_eq!(e["error"]["type"], "invalid_request_error", "{e}");
    }
    // The engine still answers after refusing.
    write(&mut s, 1, cases()[0].1.to_string().as_bytes());
    assert_eq!(s.ask(), OK);
}

#[test]
fn builtin_questions_are_the_bench_prompts() {
    let mut s = loaded(&pico_gguf());
    assert_eq!(s.questions(), OK);
    let list = out(&s);
    let list = list.as_array().expect("an array");
    assert_eq!(list.len(), sky_quant::CALIBRATION_PROMPTS.len());
    for q in list {
        write(&mut s, 1, q["request"].to_string().as_bytes());
        assert_eq!(
            s.ask(),
            OK,
            "{}: {}",
            q["id"],
            String::from_utf8_lossy(s.out())
        );
    }
}

/// s1-pico as the Q8_0 variant with its outlier columns recorded: what `skyctl quantize` makes
/// (calibrated on the built-in prompts, ratio 3).
fn pico_q8_gguf() -> Vec<u8> {
    let ckpt = sky_laya::LayaCheckpoint::open(root().join("models/s1-pico")).expect("checkpoint");
    let opts = sky_laya::ConvertOptions {
        policy: sky_laya::TypePolicy {
            ftype: sky_gguf::GgmlType::F32,
            head_type: sky_gguf::GgmlType::F32,
            rules: Vec::new(),
        },
        ..Default::default()
    };
    let (w, _) = sky_laya::build_writer(&ckpt, &opts).expect("converts");
    let reference = w.to_bytes().expect("serializes");
    let engine = sky_infer::load::engine_from_gguf(&reference, "ref".into()).expect("loads");
    let calib = sky_infer::calibrate::calibrate_builtin(&engine).expect("calibrates");
    let file = sky_gguf::GgufFile::parse(&reference).expect("parses");
    let q = sky_infer::int8::quantize_gguf(
        &file,
        &calib.calibration,
        sky_infer::int8::OUTLIER_RATIO,
        &sky_infer::int8::q8_policy(),
        false,
    )
    .expect("quantizes");
    assert!(q.outlier_columns > 0, "the file records outlier columns");
    q.bytes
}

#[test]
fn a_q8_0_file_answers_through_the_native_int8_path() {
    let bytes = pico_q8_gguf();
    let mut s = Session::new();
    write(&mut s, 0, &bytes);
    write(&mut s, 1, b"s1-pico.q8_0.gguf");
    assert_eq!(s.load(), OK, "{}", String::from_utf8_lossy(s.out()));
    let info = out(&s);
    assert_eq!(info["compute"], "int8, outlier-aware");
    assert!(info["int8_matrices"].as_u64().unwrap_or(0) > 0, "{info}");
    assert!(info["outlier_columns"].as_u64().unwrap_or(0) > 0, "{info}");
    // What `skyctl ask` runs on the same file (sky_infer::int8::open on its bytes).
    let opts = sky_infer::int8::ComputeOptions::default();
    let (native, report) =
        sky_infer::int8::open_bytes(&bytes, "s1-pico.q8_0.gguf".into(), &opts, None)
            .expect("opens");
    assert_eq!(report.weights, "q8_0 file");
    // The f32 decode of the same file (what the browser engine used to run) differs.
    let decoded = sky_infer::load::engine_from_gguf(&bytes, "x".into()).expect("loads");
    let mut ws = Workspace::new();
    let mut differs = false;
    for (id, req) in cases().iter().take(12) {
        write(&mut s, 1, req.to_string().as_bytes());
        assert_eq!(s.ask(), OK, "{id}: {}", String::from_utf8_lossy(s.out()));
        let want = native.systemone(&mut ws, req).expect("native answers");
        assert_eq!(String::from_utf8_lossy(s.out()), want.to_string(), "{id}");
        differs |= decoded.systemone(&mut ws, req).expect("answers") != want;
    }
    assert!(differs, "the int8 path is not the f32 decode");
}

#[test]
fn a_float_file_says_f32_and_a_plain_q8_0_file_says_int8() {
    let mut s = loaded(&pico_gguf());
    assert_eq!(out(&s)["compute"], "f32");
    assert_eq!(s.info(), OK);
    assert_eq!(out(&s)["int8_matrices"], 0);
    // Plain Q8_0 (`skyctl convert --type q8_0`): int8, no outlier columns recorded.
    let ckpt = sky_laya::LayaCheckpoint::open(root().join("models/s1-pico")).expect("checkpoint");
    let opts = sky_laya::ConvertOptions {
        policy: sky_infer::int8::q8_policy(),
        ..Default::default()
    };
    let (w, _) = sky_laya::build_writer(&ckpt, &opts).expect("converts");
    let bytes = w.to_bytes().expect("serializes");
    write(&mut s, 0, &bytes);
    write(&mut s, 1, b"plain.gguf");
    assert_eq!(s.load(), OK, "{}", String::from_utf8_lossy(s.out()));
    let info = out(&s);
    assert_eq!(info["compute"], "int8", "{info}");
    assert_eq!(info["outlier_columns"], 0);
}

fn form(
    s: &mut Session,
    state: &str,
    qtype: &str,
    instructions: &str,
    options: &str,
) -> (i32, Value) {
    let f =
        json!({"state": state, "type": qtype, "instructions": instructions, "options": options});
    write(s, 1, f.to_string().as_bytes());
    let status = s.form();
    (status, out(s))
}

/// What `skyctl ask --json` prints for a request: the engine's answer or its error object.
fn cli(engine: &sky_infer::engine::Engine, req: &Value) -> Value {
    let mut ws = Workspace::new();
    engine
        .systemone(&mut ws, req)
        .unwrap_or_else(|e| sky_infer::engine::error_response(&e))
}

#[test]
fn the_form_refuses_what_skyctl_ask_refuses_in_its_words() {
    let bytes = pico_gguf();
    let mut s = loaded(&bytes);
    let engine = sky_infer::load::engine_from_gguf(&bytes, "s1-pico.gguf".into()).expect("loads");
    // `null` as state: the JSON null, refused as the CLI refuses `"state": null`.
    let (st, e) = form(&mut s, " null ", "choice", "Which?", "a\nb");
    assert_eq!(st, ERR);
    let want = cli(
        &engine,
        &json!({"state": null, "questions": {"q": {"type": "choice", "instructions": "Which?", "criteria": ["a", "b"]}}}),
    );
    assert_eq!(e["error"], want["error"], "{e}");
    assert_eq!(
        e["error"]["message"],
        "state: null (any JSON value except null)"
    );
    // A noul question with options: sent as typed, refused as the CLI refuses such criteria.
    let (st, e) = form(&mut s, "x", "noul", "Angry?", "yes\nno");
    assert_eq!(st, ERR);
    let want = cli(
        &engine,
        &json!({"state": "x", "questions": {"q": {"type": "noul", "instructions": "Angry?", "criteria": ["yes", "no"]}}}),
    );
    assert_eq!(e["error"], want["error"], "{e}");
    assert_eq!(
        e["options"],
        json!([{"key": "yes", "text": "yes"}, {"key": "no", "text": "no"}])
    );
    // ...while true / false descriptions are a noul question's criteria.
    let (st, r) = form(
        &mut s,
        "x",
        "noul",
        "Angry?",
        "true: the customer is angry\nfalse: calm",
    );
    assert_eq!(st, OK, "{r}");
    assert_eq!(
        r["request"]["questions"]["q"]["criteria"],
        json!({"true": "the customer is angry", "false": "calm"})
    );
    // A state that starts like JSON but does not parse: refused, never sent as text.
    let (st, e) = form(
        &mut s,
        r#"{"customer": "Ana", "message": "#,
        "choice",
        "Which?",
        "a\nb",
    );
    assert_eq!(st, ERR);
    assert_eq!(e["error"]["code"], 400);
    let msg = e["error"]["message"].as_str().unwrap_or_default();
    assert!(
        msg == ("state: starts like JSON but is not valid JSON (line 1, column 30: EOF while parsing a value); fix the JSON, or write the state as plain text"),
        "{msg}"
    );
    // An empty question is answered, as `skyctl ask` answers it (golden case c2_empty).
    let (st, r) = form(&mut s, "", "choice", "", "yes\nno");
    assert_eq!(st, OK, "{r}");
    let want = cli(&engine, &r["request"]);
    assert!(
        want.get("answers").is_some(),
        "the CLI answers an empty question: {want}"
    );
    assert_eq!(
        r["request"],
        json!({"state": "", "questions": {"q": {"type": "choice", "instructions": "", "criteria": ["yes", "no"]}}})
    );
    // JSON state is sent as JSON, plain text as the text typed.
    let (_, r) = form(
        &mut s,
        r#" {"customer": "Ana"} "#,
        "choice",
        "Which?",
        "a\nb",
    );
    assert_eq!(r["request"]["state"], json!({"customer": "Ana"}));
    let (_, r) = form(
        &mut s,
        "Ana: my card was charged twice",
        "score",
        "How angry?",
        "calm: fine\nangry",
    );
    assert_eq!(r["request"]["state"], "Ana: my card was charged twice");
    assert_eq!(
        r["request"]["questions"]["q"]["criteria"],
        json!(["calm", "angry"])
    );
    assert_eq!(
        r["options"],
        json!([{"key": "0", "text": "calm"}, {"key": "1", "text": "angry"}])
    );
    // A choice with descriptions is an object, in the typed order.
    let (_, r) = form(
        &mut s,
        "x",
        "choice",
        "Which?",
        "shipping\nbilling: payments\n\n",
    );
    assert_eq!(
        r["request"]["questions"]["q"]["criteria"],
        json!({"shipping": null, "billing": "payments"})
    );
    // A repeated label: the CLI's refusal, with the options as typed for the page's words.
    let (st, e) = form(
        &mut s,
        "x",
        "choice",
        "Which?",
        "billing\nshipping\nbilling",
    );
    assert_eq!(st, ERR);
    assert_eq!(e["error"]["message"], "questions.q.criteria[2]: the label \"billing\" is given twice (also questions.q.criteria[0])");
    // A form without its fields.
    write(&mut s, 1, br#"{"state": "x"}"#);
    assert_eq!(s.form(), ERR);
    assert!(out(&s)["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .contains("`type`"));
}

#[test]
fn the_int8_paths_check_runs_natively() {
    let r = sky_web::int8_check().expect("checks");
    assert_eq!(r["equal"], true, "{r}");
    let paths = r["paths"].as_array().expect("paths");
    assert_eq!(paths.last().and_then(Value::as_str), Some("scalar"), "{r}");
    assert_eq!(r["products"].as_u64(), Some(2 * paths.len() as u64));
    // The loaded engine names its int8 kernel.
    let s = loaded(&pico_gguf());
    assert!(out(&s)["int8_kernel"].is_string());
}
