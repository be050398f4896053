//! Parity with HF `tokenizers` (Python): every text of the corpus, of the Laya cases and of the
//! PyTorch goldens, on every shipped tokenizer.json, must give exactly HF's ids.
//!
//! The interpreter comes from `SKYCTL_TEST_PYTHON`, else `<workspace>/.venv/bin/python`; if
//! neither runs `import tokenizers`, the tests fail (never a silent pass).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use sky_tokenizer::Tokenizer;

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn python() -> PathBuf {
    let candidate = match std::env::var_os("SKYCTL_TEST_PYTHON") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => workspace_root().join(".venv/bin/python"),
    };
    let ok = Command::new(&candidate)
        .args(["-c", "import tokenizers"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    assert!(
        ok,
        "HF parity tests need a Python with the `tokenizers` package: set SKYCTL_TEST_PYTHON or \
         create {} (tried {})",
        workspace_root().join(".venv").display(),
        candidate.display()
    );
    candidate
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// The distinct tokenizer.json files we ship (the s1-nano/micro ones duplicate bpe2048/4096).
fn tokenizer_files() -> Vec<PathBuf> {
    let root = workspace_root();
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for rel in [
        "models/s1-pico/tokenizer/tokenizer.json",
        "fixtures/laya-ref/tokenizers/bpe2048/tokenizer.json",
        "fixtures/laya-ref/tokenizers/bpe4096/tokenizer.json",
        "models/s1-nano/tokenizer/tokenizer.json",
        "models/s1-micro/tokenizer/tokenizer.json",
    ] {
        let path = root.join(rel);
        if seen.insert(read(&path)) {
            out.push(path);
        }
    }
    assert_eq!(out.len(), 3, "expected three distinct tokenizers");
    out
}

/// Python's `json.dumps(v)` layout: `", "` and `": "` separators, non-ASCII as `\\uXXXX`.
fn py_dumps(v: &Value) -> String {
    fn string(s: &str) -> String {
        let mut out = String::from("\"");
        for c in s.chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                c if (c as u32) < 0x20 || (c as u32) > 0x7e => {
                    let mut buf = [0u16; 2];
                    for unit in c.encode_utf16(&mut buf) {
                        out.push_str(&format!("\\u{unit:04x}"));
                    }
                }
                c => out.push(c),
            }
        }
        out.push('"');
        out
    }
    match v {
        Value::String(s) => string(s),
        Value::Array(a) => format!(
            "[{}]",
            a.iter().map(py_dumps).collect::<Vec<_>>().join(", ")
        ),
        Value::Object(m) => format!(
            "{{{}}}",
            m.iter()
                .map(|(k, x)| format!("{}: {}", string(k), py_dumps(x)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Value::Null => "null".into(),
        Value::Bool(b) => if *b { "true" } else { "false" }.into(),
        Value::Number(n) => n.to_string(),
    }
}

/// Strings inside a JSON value (keys included), and the JSON text of non-strings, both
/// `json.dumps` style and with the raw non-ASCII characters.
fn collect_strings(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::String(s) => out.push(s.clone()),
        Value::Object(m) => {
            for (k, x) in m {
                out.push(k.clone());
                collect_strings(x, out);
            }
        }
        Value::Array(a) => {
            for x in a {
                collect_strings(x, out);
            }
        }
        _ => {}
    }
    if !v.is_string() {
        out.push(py_dumps(v));
        out.push(v.to_string());
    }
}

fn corpus() -> Vec<String> {
    let root = workspace_root();
    let mut texts = Vec::new();
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus.jsonl");
    for (i, line) in read(&corpus).lines().enumerate() {
        let s: String = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("corpus.jsonl line {}: {e}", i + 1));
        texts.push(s);
    }
    assert!(texts.len() >= 1000, "corpus has only {} lines", texts.len());
    // The Laya cases: instructions, criteria keys/descriptions, state.
    let cases = root.join("fixtures/laya-ref/cases.jsonl");
    for line in read(&cases).lines().filter(|l| !l.trim().is_empty()) {
        let case: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("cases.jsonl: {e}"));
        for key in ["instructions", "criteria", "state"] {
            if let Some(v) = case.get(key) {
                collect_strings(v, &mut texts);
            }
        }
    }
    // The texts the PyTorch goldens were tokenized from.
    for name in ["s1-pico", "s1-nano", "s1-micro"] {
        let path = root.join(format!("fixtures/laya-ref/goldens/{name}.f32.jsonl"));
        for line in read(&path).lines().filter(|l| !l.trim().is_empty()) {
            let rec: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{name}: {e}"));
            for key in [
                "instructions_text",
                "question_text",
                "rendered_options",
                "state_text",
            ] {
                if let Some(v) = rec.get(key) {
                    collect_strings(v, &mut texts);
                }
            }
        }
    }
    let mut seen = BTreeSet::new();
    texts.retain(|t| seen.insert(t.clone()));
    texts
}

struct Reference {
    ids: Vec<Vec<u32>>,
    decoded: Option<Vec<String>>,
}

/// Runs the Python helper on `texts` for each tokenizer file.
fn hf_reference(files: &[PathBuf], texts: &[String], decode: bool) -> Vec<Reference> {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let req = dir.path().join("request.json");
    let resp = dir.path().join("response.json");
    let paths: Vec<String> = files.iter().map(|p| p.display().to_string()).collect();
    let body = serde_json::json!({"tokenizers": paths, "texts": texts, "decode": decode});
    std::fs::write(&req, body.to_string()).unwrap_or_else(|e| panic!("writing request: {e}"));
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/hf_encode.py");
    let out = Command::new(python())
        .arg(&script)
        .arg(&req)
        .arg(&resp)
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", script.display()));
    assert!(
        out.status.success(),
        "hf_encode.py failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_str(&read(&resp)).unwrap_or_else(|e| panic!("response: {e}"));
    paths
        .iter()
        .map(|p| {
            let r = &v["results"][p];
            let ids = r["ids"]
                .as_array()
                .unwrap_or_else(|| panic!("no ids for {p}"))
                .iter()
                .map(|l| {
                    l.as_array()
                        .unwrap_or_else(|| panic!("bad ids for {p}"))
                        .iter()
                        .map(|x| {
                            x.as_u64()
                                .and_then(|x| u32::try_from(x).ok())
                                .unwrap_or(u32::MAX)
                        })
                        .collect()
                })
                .collect::<Vec<Vec<u32>>>();
            assert_eq!(ids.len(), texts.len(), "{p}: wrong number of results");
            let decoded = r["decoded"].as_array().map(|a| {
                a.iter()
                    .map(|s| s.as_str().unwrap_or_default().to_string())
                    .collect()
            });
            Reference { ids, decoded }
        })
        .collect()
}

fn load(path: &Path) -> Tokenizer {
    Tokenizer::from_json(&read(path)).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A readable mismatch: short texts whole; long ones around the first differing id.
fn mismatch(label: &str, i: usize, text: &str, expected: &[u32], got: &[u32]) -> String {
    let first = expected
        .iter()
        .zip(got)
        .position(|(a, b)| a != b)
        .unwrap_or(expected.len().min(got.len()));
    if text.chars().count() <= 200 {
        return format!("{label}: text #{i} {text:?}\n  expected {expected:?}\n  got      {got:?}");
    }
    let lo = first.saturating_sub(8);
    let window = |ids: &[u32]| ids[lo.min(ids.len())..(first + 8).min(ids.len())].to_vec();
    // Where in the text: decode-free estimate is unreliable, so show the text's start and the
    // ids around the first difference.
    let head: String = text.chars().take(120).collect();
    format!(
        "{label}: text #{i} ({} chars) {head:?}...\n  first difference at id #{first}\n  \
         expected [{lo}..] {:?}\n  got      [{lo}..] {:?}",
        text.chars().count(),
        window(expected),
        window(got)
    )
}

/// Compares and returns a report of the mismatches (empty when all agree).
fn compare(label: &str, tok: &Tokenizer, texts: &[String], reference: &Reference) -> Vec<String> {
    let mut report = Vec::new();
    for (i, text) in texts.iter().enumerate() {
        let got = tok.encode(text);
        if got != reference.ids[i] {
            report.push(mismatch(label, i, text, &reference.ids[i], &got));
        }
        if let Some(decoded) = &reference.decoded {
            let ours = tok.decode(&reference.ids[i]);
            if ours != decoded[i] {
                report.push(format!(
                    "{label}: decode of text #{i} {text:?}\n  expected {:?}\n  got      {ours:?}",
                    decoded[i]
                ));
            }
        }
    }
    report
}

fn assert_clean(report: Vec<String>, checked: usize) {
    if !report.is_empty() {
        let shown: Vec<&String> = report.iter().take(25).collect();
        panic!(
            "{} mismatches out of {checked} encodings (first {}):\n{}",
            report.len(),
            shown.len(),
            shown
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
}

#[test]
fn corpus_cases_and_goldens_match_hf_on_every_tokenizer() {
    let files = tokenizer_files();
    let texts = corpus();
    let reference = hf_reference(&files, &texts, true);
    let mut report = Vec::new();
    for (file, r) in files.iter().zip(&reference) {
        let label = file
            .strip_prefix(workspace_root())
            .unwrap_or(file)
            .display()
            .to_string();
        let tok = load(file);
        report.extend(compare(&label, &tok, &texts, r));
        // Rebuilt from its parts (what a GGUF carries), it must encode the same.
        let rebuilt = Tokenizer::from_parts(tok.parts().clone())
            .unwrap_or_else(|e| panic!("{label}: from_parts: {e}"));
        report.extend(compare(
            &format!("{label} (from_parts)"),
            &rebuilt,
            &texts,
            r,
        ));
    }
    assert_clean(report, files.len() * texts.len() * 2);
}

/// Variants of the shipped files that switch on what they leave off: ModernBERT-style `[MASK]`
/// with lstrip, rstrip, single_word and normalized (non-special) added tokens, ignore_merges,
/// add_prefix_space, no regex, no normalizer.
fn variants(dir: &Path) -> Vec<PathBuf> {
    let root = workspace_root();
    let base = |rel: &str| -> Value {
        serde_json::from_str(&read(&root.join(rel))).unwrap_or_else(|e| panic!("{rel}: {e}"))
    };
    let token = |id: u32,
                 content: &str,
                 special: bool,
                 lstrip: bool,
                 rstrip: bool,
                 normalized: bool,
                 single_word: bool| {
        serde_json::json!({"id": id, "content": content, "single_word": single_word,
            "lstrip": lstrip, "rstrip": rstrip, "normalized": normalized, "special": special})
    };
    let mut out = Vec::new();
    let mut save = |name: &str, v: Value| {
        let path = dir.join(format!("{name}.json"));
        std::fs::write(&path, v.to_string()).unwrap_or_else(|e| panic!("{name}: {e}"));
        out.push(path);
    };

    let mut v = base("models/s1-pico/tokenizer/tokenizer.json");
    v["added_tokens"][4]["lstrip"] = true.into();
    let n = v["model"]["vocab"].as_object().map_or(0, |m| m.len()) as u32;
    let extra = [
        token(n, "café", false, false, false, true, false),
        token(n + 1, "<r>", true, false, true, false, false),
        token(n + 2, "cat", false, false, false, true, true),
        token(n + 3, "\u{2126}hm", false, false, false, true, false),
        token(n + 4, " ha", false, true, true, true, false),
    ];
    if let Some(list) = v["added_tokens"].as_array_mut() {
        list.extend(extra);
    }
    save("added_flags", v);

    let mut v = base("fixtures/laya-ref/tokenizers/bpe2048/tokenizer.json");
    v["model"]["ignore_merges"] = true.into();
    v["pre_tokenizer"]["add_prefix_space"] = true.into();
    save("ignore_merges_prefix_space", v);

    // Unknown bytes: drop "z", "7" and "!" (in no merge) from the vocab, giving their ids to
    // the last three tokens, and declare an unk token, with and without fuse_unk.
    for fuse in [false, true] {
        let mut v = base("models/s1-pico/tokenizer/tokenizer.json");
        let vocab = v["model"]["vocab"]
            .as_object_mut()
            .unwrap_or_else(|| panic!("vocab"));
        let last: Vec<String> = vocab.keys().rev().take(3).cloned().collect();
        for (gone, moved) in ["z", "7", "!"].iter().zip(&last) {
            let id = vocab
                .remove(*gone)
                .unwrap_or_else(|| panic!("{gone} not in vocab"));
            vocab.insert(moved.clone(), id);
        }
        v["model"]["unk_token"] = "[UNK]".into();
        v["model"]["fuse_unk"] = fuse.into();
        save(if fuse { "unk_fused" } else { "unk_unfused" }, v);
    }

    let mut v = base("models/s1-pico/tokenizer/tokenizer.json");
    v["pre_tokenizer"]["use_regex"] = false.into();
    v["normalizer"] = Value::Null;
    save("no_regex_no_nfc", v);
    out
}

fn added_token_texts() -> Vec<String> {
    [
        "a [MASK] b",
        "a\t \u{a0}[MASK]  b",
        "[MASK]",
        " [MASK]",
        "x[MASK]",
        "<r>  x",
        "<r>\n\ny",
        "a <r> [MASK] b",
        "<r>   [MASK]",
        "café",
        "cafe\u{301} au lait",
        "un café.",
        "cat",
        "concat cat catalog cat_ 1cat cat1 cat! (cat) écat catᵃ",
        "\u{2126}hm \u{3a9}hm",
        "ha ha  ha\tha",
        "aha ha",
        " ha",
        "ha",
        "  ha  ",
        "zz7!z a7b !!! z7!x",
        "pizza 777 wow!",
        "z",
        "!z!",
        "cat\u{301} x cat\u{200d} \u{5d0}cat cat\u{203f}x 7cat \u{663}cat \u{2167}cat \u{bd}cat cat\u{b2}",
        "[CLS] cat [SEP] café [MASK] <r> ha",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

#[test]
fn added_token_flags_and_model_options_match_hf() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let files = variants(dir.path());
    let mut texts = corpus();
    texts.extend(added_token_texts());
    let reference = hf_reference(&files, &texts, true);
    let mut report = Vec::new();
    for (file, r) in files.iter().zip(&reference) {
        let label = file
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        report.extend(compare(&label, &load(file), &texts, r));
    }
    assert_clean(report, files.len() * texts.len());
}

/// Every Unicode scalar value of planes 0-3 and 14 (and a sample of the rest) in contexts that
/// exercise the regex classes and NFC (composition, reordering of combining marks).
fn codepoint_sweep_texts() -> Vec<String> {
    let cps: Vec<char> = (0u32..0x11_0000)
        .filter(|&cp| cp < 0x4_0000 || (0xE_0000..0xF_0000).contains(&cp) || cp % 97 == 0)
        .filter_map(char::from_u32)
        .collect();
    cps.chunks(128)
        .map(|chunk| {
            chunk
                .iter()
                .map(|&c| format!("a{c}\u{301} 1{c}\u{316}{c} \u{ac00}{c}\u{334}x"))
                .collect()
        })
        .collect()
}

#[test]
fn every_code_point_matches_hf() {
    let files = tokenizer_files();
    let texts = codepoint_sweep_texts();
    // The largest vocab: the most merges over multi-byte sequences.
    let file = &files[2];
    let reference = hf_reference(std::slice::from_ref(file), &texts, false);
    let report = compare("sweep", &load(file), &texts, &reference[0]);
    assert_clean(report, texts.len());
}
