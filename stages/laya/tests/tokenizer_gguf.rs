//! The tokenizer rebuilt from a converted GGUF alone encodes exactly like the checkpoint's
//! tokenizer.json: checked with sky-tokenizer, and with Hugging Face `tokenizers` in Python
//! (the independent reference) on the rebuilt JSON.

use std::path::{Path, PathBuf};
use std::process::Command;

use sky_gguf::GgufFile;
use sky_laya::{
    build_writer, tokenizer_from_gguf, tokenizer_json_from_gguf, ConvertOptions, LayaCheckpoint,
};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn python() -> PathBuf {
    match std::env::var_os("SKYCTL_TEST_PYTHON") {
        Some(p) => PathBuf::from(p),
        None => root().join(".venv/bin/python"),
    }
}

/// Texts the goldens tokenize: questions, rendered options, states, plus the tokenizer samples.
fn texts(model: &str) -> Vec<String> {
    let mut out = Vec::new();
    let goldens = std::fs::read_to_string(
        root().join(format!("fixtures/laya-ref/goldens/{model}.f32.jsonl")),
    )
    .unwrap();
    for line in goldens.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        for k in ["question_text", "state_text", "instructions_text"] {
            if let Some(s) = v[k].as_str() {
                out.push(s.to_string());
            }
        }
        for o in v["rendered_options"].as_array().into_iter().flatten() {
            if let Some(s) = o.as_str() {
                out.push(format!(" {s}"));
            }
        }
    }
    for dir in ["bpe2048", "bpe4096"] {
        let s = std::fs::read_to_string(
            root().join(format!("fixtures/laya-ref/tokenizers/{dir}/samples.json")),
        )
        .unwrap();
        let v: serde_json::Value = serde_json::from_str(&s).unwrap();
        for (_, sample) in v.as_object().unwrap() {
            if let Some(t) = sample["text"].as_str() {
                out.push(t.to_string());
            }
        }
    }
    out.push("  leading spaces [MASK]  and [SEP]trailing [CLS] ".into());
    out.push("Cafe\u{301} na\u{ef}ve \u{1F469}\u{200D}\u{1F4BB} \u{4E2D}\u{6587}".into());
    assert!(out.len() > 100, "too few texts: {}", out.len());
    out
}

fn converted(model: &str) -> (LayaCheckpoint, Vec<u8>) {
    let ckpt = LayaCheckpoint::open(root().join("models").join(model)).unwrap();
    let (w, _) = build_writer(&ckpt, &ConvertOptions::default()).unwrap();
    (ckpt, w.to_bytes().unwrap())
}

#[test]
fn rebuilt_tokenizer_encodes_like_tokenizer_json() {
    for model in ["s1-pico", "s1-nano", "s1-micro"] {
        let (ckpt, bytes) = converted(model);
        let file = GgufFile::parse(&bytes).unwrap();
        let original = ckpt.tokenizer.tokenizer().unwrap();
        let rebuilt = tokenizer_from_gguf(&file).unwrap();
        for t in texts(model) {
            assert_eq!(rebuilt.encode(&t), original.encode(&t), "{model}: {t:?}");
        }
    }
}

#[test]
fn rebuilt_json_encodes_like_the_original_in_hf_tokenizers() {
    let dir = tempfile::tempdir().unwrap();
    let mut args = Vec::new();
    for model in ["s1-pico", "s1-micro"] {
        let (_, bytes) = converted(model);
        let json = tokenizer_json_from_gguf(&GgufFile::parse(&bytes).unwrap()).unwrap();
        let rebuilt = dir.path().join(format!("{model}.json"));
        std::fs::write(&rebuilt, json).unwrap();
        args.push(root().join(format!("models/{model}/tokenizer/tokenizer.json")));
        args.push(rebuilt);
    }
    let texts_path = dir.path().join("texts.json");
    std::fs::write(
        &texts_path,
        serde_json::to_string(&texts("s1-micro")).unwrap(),
    )
    .unwrap();
    let script = r#"
import json, sys
from tokenizers import Tokenizer
texts = json.load(open(sys.argv[1]))
pairs = sys.argv[2:]
for orig, rebuilt in zip(pairs[::2], pairs[1::2]):
    a, b = Tokenizer.from_file(orig), Tokenizer.from_file(rebuilt)
    assert a.get_vocab_size() == b.get_vocab_size(), (orig, a.get_vocab_size(), b.get_vocab_size())
    for t in texts:
        x = a.encode(t, add_special_tokens=False).ids
        y = b.encode(t, add_special_tokens=False).ids
        assert x == y, (orig, t, x, y)
print("OK", len(texts))
"#;
    let py = python();
    let out = Command::new(&py)
        .arg("-c")
        .arg(script)
        .arg(&texts_path)
        .args(&args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {} (set SKYCTL_TEST_PYTHON): {e}", py.display()));
    assert!(
        out.status.success(),
        "python check failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("OK"));
}

#[test]
fn missing_skycmd_keys_are_named() {
    let (_, bytes) = converted("s1-pico");
    let file = GgufFile::parse(&bytes).unwrap();
    let mut w = sky_gguf::GgufWriter::new();
    for (k, v) in &file.metadata {
        if k != "skycmd.tokenizer.added.lstrip" {
            w.add_kv(k.clone(), v.clone());
        }
    }
    let stripped = w.to_bytes().unwrap();
    let err = tokenizer_json_from_gguf(&GgufFile::parse(&stripped).unwrap())
        .unwrap_err()
        .to_string();
    assert!(err.contains("skycmd.tokenizer.added.lstrip"), "{err}");
}
