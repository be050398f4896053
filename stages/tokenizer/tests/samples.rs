//! The samples HF `tokenizers` recorded beside the fixture tokenizers (`samples.json`: text,
//! ids with `[CLS]`/`[SEP]`, decoded text). Needs no Python.

use std::path::Path;

use serde_json::Value;
use sky_tokenizer::Tokenizer;

fn root() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

fn read(rel: &str) -> String {
    let path = root().join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap_or_else(|| panic!("ids: expected an array"))
        .iter()
        .map(|x| {
            x.as_u64()
                .and_then(|x| u32::try_from(x).ok())
                .unwrap_or(u32::MAX)
        })
        .collect()
}

#[test]
fn fixture_samples_match_hf_records() {
    let mut checked = 0;
    for name in ["bpe2048", "bpe4096"] {
        let dir = format!("fixtures/laya-ref/tokenizers/{name}");
        let tok = Tokenizer::from_json(&read(&format!("{dir}/tokenizer.json")))
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let mut raw_parts = tok.parts().clone();
        raw_parts.nfc = false;
        let without_nfc = Tokenizer::from_parts(raw_parts).unwrap_or_else(|e| panic!("{e}"));
        let samples: Value = serde_json::from_str(&read(&format!("{dir}/samples.json")))
            .unwrap_or_else(|e| panic!("{name} samples: {e}"));
        let samples = samples
            .as_object()
            .unwrap_or_else(|| panic!("{name}: samples not an object"));
        for (key, s) in samples {
            // Pairs go through the post-processor, which we do not model.
            let Some(text) = s["text"].as_str() else {
                continue;
            };
            let all = ids(&s["ids"]);
            // The recorded ids carry [CLS] ... [SEP] (add_special_tokens=True).
            assert_eq!(
                all.first(),
                tok.token_to_id("[CLS]").as_ref(),
                "{name}/{key}"
            );
            assert_eq!(
                all.last(),
                tok.token_to_id("[SEP]").as_ref(),
                "{name}/{key}"
            );
            let expected = &all[1..all.len() - 1];
            let t = if key.ends_with("without_normalizer") {
                &without_nfc
            } else {
                &tok
            };
            assert_eq!(t.encode(text), expected, "{name}/{key}: {text:?}");
            if let Some(decoded) = s["decoded"].as_str() {
                assert_eq!(tok.decode(&all), decoded, "{name}/{key}: decode");
            }
            checked += 1;
        }
    }
    assert!(checked >= 14, "only {checked} samples checked");
}
