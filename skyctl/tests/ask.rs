//! `skyctl ask` end to end: the real binary on the shipped s1-pico checkpoint and goldens.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{json, Value};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn ask(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_skyctl"))
        .arg("ask")
        .args(args)
        .output()
        .expect("run skyctl")
}

fn pico() -> String {
    root().join("models/s1-pico").display().to_string()
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> String {
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p.display().to_string()
}

/// `--requests` over golden cases reproduces the PyTorch ids, markers and probabilities.
#[test]
fn requests_lines_match_the_goldens() {
    let dir = tempfile::tempdir().unwrap();
    let cases: Vec<&str> = include_str!("../../golden/laya/cases.jsonl")
        .lines()
        .take(12)
        .collect();
    let file = write(dir.path(), "cases.jsonl", cases.join("\n").as_bytes());
    let out = ask(&[&pico(), "--requests", &file, "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let expected: Vec<Value> = include_str!("../../golden/laya/s1-pico.expected.jsonl")
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let lines: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 12);
    for (got, want) in lines.iter().zip(&expected) {
        assert_eq!(got["id"], want["id"]);
        assert_eq!(got["input_ids"], want["input_ids"], "{}", got["id"]);
        assert_eq!(got["markers"], want["markers"]);
        assert_eq!(got["temperature"].as_f64(), want["temperature"].as_f64());
        for (p, q) in got["probabilities"]
            .as_array()
            .unwrap()
            .iter()
            .zip(want["probabilities"].as_array().unwrap())
        {
            assert!((p.as_f64().unwrap() - q.as_f64().unwrap()).abs() < 1e-3);
        }
        assert!(
            got["scores"].as_array().unwrap().len() == got["markers"].as_array().unwrap().len()
        );
    }
}

/// `--request` answers the spec's example request in the response shape.
#[test]
fn request_prints_the_response_shape() {
    let dir = tempfile::tempdir().unwrap();
    let req = json!({
        "state": "I was charged twice for my order last week and nobody has replied.",
        "questions": {
            "route": {"type": "choice", "instructions": "Which team should handle this?",
                      "criteria": {"billing": "payments and refunds", "shipping": null, "technical": null}},
            "urgency": {"type": "score", "instructions": "How urgent is this?", "criteria": ["can wait", "this week", "today", "right now"]},
            "angry": {"type": "noul", "instructions": "Is the customer angry?"}
        }
    });
    let file = write(dir.path(), "req.json", req.to_string().as_bytes());
    let out = ask(&[&pico(), "--request", &file, "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let resp: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(resp["model"], "s1-pico");
    let answers = resp["answers"].as_object().unwrap();
    assert_eq!(
        answers.keys().collect::<Vec<_>>(),
        ["route", "urgency", "angry"]
    );
    let route = &answers["route"];
    let probs = route["probabilities"].as_object().unwrap();
    assert_eq!(
        probs.keys().collect::<Vec<_>>(),
        ["billing", "shipping", "technical"]
    );
    let sum: f64 = probs.values().map(|v| v.as_f64().unwrap()).sum();
    assert!((sum - 1.0).abs() < 1e-5);
    // c3_route and s4_urgency of the goldens are these very questions.
    let gold: Vec<Value> = include_str!("../../golden/laya/s1-pico.expected.jsonl")
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let c3 = gold.iter().find(|g| g["id"] == "c3_route").unwrap();
    assert!(
        (probs["billing"].as_f64().unwrap() - c3["probabilities"][0].as_f64().unwrap()).abs()
            < 1e-3
    );
    assert_eq!(answers["urgency"]["type"], "score");
    assert!(answers["angry"]["noul"].as_f64().unwrap() > 0.0);
    assert!(resp["usage"]["input_tokens"].as_u64().unwrap() > 100);
}

fn error_of(req: &[u8]) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), "req.json", req);
    let out = ask(&[&pico(), "--request", &file, "--json"]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "stdout {}",
        String::from_utf8_lossy(&out.stdout)
    );
    let v: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)));
    assert_eq!(v["error"]["code"], 400);
    assert_eq!(v["error"]["type"], "invalid_request_error");
    v
}

#[test]
fn bad_requests_get_the_error_shape() {
    let msg = |v: Value| v["error"]["message"].as_str().unwrap().to_string();
    let m = msg(error_of(
        br#"{"questions": {"a": {"type": "noul", "instructions": "x"}}}"#,
    ));
    assert!(m.contains("state"), "{m}");
    let m = msg(error_of(
        br#"{"state": "s", "questions": {"a": {"type": "maybe", "instructions": "x"}}}"#,
    ));
    assert!(m.contains("questions.a.type") && m.contains("maybe"), "{m}");
    let m = msg(error_of(br#"{"state": "s", "questions": {"a": {"type": "choice", "instructions": "x", "criteria": {}}}}"#));
    assert!(m.contains("questions.a.criteria"), "{m}");
    let m = msg(error_of(
        br#"{"state": "s", "questions": {"a": {"type": "choice", "criteria": ["x", "y"]}}}"#,
    ));
    assert!(m.contains("instructions"), "{m}");
    let many: Vec<String> = (0..40).map(|i| format!("option {i}")).collect();
    let req = json!({"state": "s", "questions": {"a": {"type": "choice", "instructions": "x", "criteria": many}}});
    let m = msg(error_of(req.to_string().as_bytes()));
    assert!(m.contains("at most 20 options"), "{m}");
    let m = msg(error_of(b"{\"state\": \"caf\xe9\", \"questions\": {}}"));
    assert!(m.contains("invalid UTF-8 at byte offset 14"), "{m}");
    let m = msg(error_of(b"{\"state\": "));
    assert!(
        m.ends_with("req.json:1:10: invalid JSON: EOF while parsing a value"),
        "{m}"
    );
}

/// A 1 MB state is tokenized and cut to max_len like any other.
#[test]
fn a_one_megabyte_state_is_truncated_not_refused() {
    let dir = tempfile::tempdir().unwrap();
    let state = "the parcel is late again and nobody answers the phone. ".repeat(1 << 20 >> 6);
    assert!(state.len() >= 900_000);
    let case = json!({"id": "big", "type": "noul", "instructions": "Is the customer angry?", "criteria": null, "state": state});
    let file = write(dir.path(), "big.jsonl", case.to_string().as_bytes());
    let out = ask(&[&pico(), "--requests", &file, "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(line["input_ids"].as_array().unwrap().len(), 512);
}

/// Files that are not Laya decision models are refused with a message, not a panic.
#[test]
fn non_decision_gguf_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = sky_gguf::GgufWriter::new();
    w.add_kv("general.architecture", "llama");
    let plain = dir.path().join("plain.gguf");
    w.write_file(&plain).unwrap();
    let req = write(
        dir.path(),
        "r.json",
        br#"{"state": "s", "questions": {"a": {"type": "noul", "instructions": "x"}}}"#,
    );
    let out = ask(&[plain.to_str().unwrap(), "--request", &req]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("not a Laya decision model") && err.contains("llama.decision.type"),
        "{err}"
    );

    let mut w = sky_gguf::GgufWriter::new();
    w.add_kv("general.architecture", "modern-bert");
    w.add_kv("modern-bert.decision.type", "laya");
    let partial = dir.path().join("partial.gguf");
    w.write_file(&partial).unwrap();
    let out = ask(&[partial.to_str().unwrap(), "--request", &req]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("modern-bert.block_count"), "{err}");

    let junk = write(dir.path(), "junk.gguf", b"not a gguf at all");
    let out = ask(&[&junk, "--request", &req]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("junk.gguf"));
}

/// In `--requests`, a bad case does not stop the others; its error names the case by its id
/// (null when the line is too broken to carry one) and by its line.
#[test]
fn bad_lines_in_requests_are_named_by_case_id() {
    let dir = tempfile::tempdir().unwrap();
    let good = json!({"id": "ok1", "type": "noul", "instructions": "Is the customer angry?", "criteria": null, "state": "late again"});
    let bad =
        json!({"id": "bad1", "type": "maybe", "instructions": "x", "criteria": null, "state": "s"});
    let body = format!("{good}\n{bad}\n{{\"id\": \n{good}\n");
    let file = write(dir.path(), "cases.jsonl", body.as_bytes());
    let out = ask(&[&pico(), "--requests", &file, "--json"]);
    assert_eq!(out.status.code(), Some(2));
    let lines: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 4);
    assert_eq!(lines[0]["id"], "ok1");
    assert!(lines[0]["probabilities"].is_array());
    assert_eq!(lines[1]["id"], "bad1");
    assert_eq!(lines[1]["line"], 2);
    assert_eq!(lines[1]["error"]["code"], 400);
    assert!(lines[2]["id"].is_null());
    assert_eq!(lines[2]["line"], 3);
    assert_eq!(lines[3]["id"], "ok1");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("2 case(s)"), "{err}");

    let out = ask(&[&pico(), "--requests", &file]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(":2 (case \"bad1\")"), "{err}");
}

/// Issue 26, item 10: an option that Laya's layout would cut is refused, naming the option and
/// the room there is (the 48-token cap, and the share of the head window when many options
/// crowd it); `"cut_options": true` answers with the runtime's cut, as the goldens need.
#[test]
fn options_that_do_not_fit_are_refused_unless_cut_is_asked_for() {
    let msg = |v: Value| v["error"]["message"].as_str().unwrap().to_string();
    // c3_long_option: its first option is 141 tokens, over the 48 of one option.
    let case: Value = include_str!("../../golden/laya/cases.jsonl")
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|c| c["id"] == "c3_long_option")
        .unwrap();
    let label = case["criteria"]
        .as_object()
        .map(|o| o.keys().next().unwrap().clone())
        .unwrap_or_else(|| case["criteria"][0].as_str().unwrap().to_string());
    let q = json!({"type": case["type"], "instructions": case["instructions"], "criteria": case["criteria"]});
    let req = json!({"state": case["state"], "questions": {"q": q}});
    let m = msg(error_of(req.to_string().as_bytes()));
    assert_eq!(
        m,
        format!(
            "questions.q.criteria: option `{label}` is 141 tokens long; at most 48 tokens fit per option: shorten it"
        )
    );
    // Twenty options of 8 words: each fits 48 tokens, but not all in s1-pico's 96-token window.
    let many: Vec<String> = (0..20)
        .map(|i| format!("option {i} is a reasonably long description"))
        .collect();
    let req = json!({"state": "s", "questions": {"a": {"type": "choice", "instructions": "x", "criteria": many}}});
    let m = msg(error_of(req.to_string().as_bytes()));
    assert!(
        m.starts_with("questions.a.criteria: option `option 0 is a reasonably long description` is ")
            && m.ends_with(" tokens long; with 20 options, at most 3 tokens fit per option in the head window of 96 tokens: shorten it"),
        "{m}"
    );
    let m = msg(error_of(
        br#"{"state": "s", "cut_options": "yes", "questions": {"a": {"type": "noul", "instructions": "x"}}}"#,
    ));
    assert_eq!(m, r#"cut_options: expected true or false, found "yes""#);

    // Asked for, the cut gives the golden's answer (the `--requests` path cuts as Laya does).
    let dir = tempfile::tempdir().unwrap();
    let mut req = req_with_cut(&case);
    let file = write(dir.path(), "req.json", req.to_string().as_bytes());
    let out = ask(&[&pico(), "--request", &file, "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let resp: Value = serde_json::from_slice(&out.stdout).unwrap();
    let expected: Value = include_str!("../../golden/laya/s1-pico.expected.jsonl")
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|e| e["id"] == "c3_long_option")
        .unwrap();
    let got = resp["answers"]["q"]["probabilities"].as_object().unwrap();
    let want = expected["probabilities"].as_array().unwrap();
    assert_eq!(got.len(), want.len());
    for (g, w) in got.values().zip(want) {
        assert!(
            (g.as_f64().unwrap() - w.as_f64().unwrap()).abs() <= 1e-5,
            "{g} vs {w}"
        );
    }
    req["cut_options"] = json!(false);
    let m = msg(error_of(req.to_string().as_bytes()));
    assert!(m.contains("is 141 tokens long"), "{m}");
}

fn req_with_cut(case: &Value) -> Value {
    let q = json!({"type": case["type"], "instructions": case["instructions"], "criteria": case["criteria"]});
    json!({"state": case["state"], "cut_options": true, "questions": {"q": q}})
}
