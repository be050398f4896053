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
