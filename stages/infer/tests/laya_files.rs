//! A Laya checkpoint's files in memory load the engine the directory loads, with the same
//! errors.

mod common;

use serde_json::json;
use sky_infer::forward::Workspace;
use sky_infer::load::{engine_from_laya_dir, engine_from_laya_files};
use sky_laya::CheckpointFiles;

#[test]
fn files_in_memory_load_the_engine_of_the_directory() {
    let dir = common::model_dir("s1-pico");
    let read = |rel: &str| std::fs::read(dir.join(rel)).unwrap();
    let (weights, enc, agent) = (
        read("model.safetensors"),
        read("encoder/config.json"),
        read("rl_agent_config.json"),
    );
    let (tok, tok_cfg) = (
        read("tokenizer/tokenizer.json"),
        read("tokenizer/tokenizer_config.json"),
    );
    let files = CheckpointFiles {
        weights: &weights,
        encoder_config: &enc,
        agent_config: &agent,
        tokenizer_json: &tok,
        tokenizer_config: &tok_cfg,
        root_config: None,
        tokenizer_model_config: None,
    };
    let a = engine_from_laya_dir(&dir).unwrap();
    let b = engine_from_laya_files(&dir, &files).unwrap();
    assert_eq!(a.config(), b.config());
    let request = json!({"state": "WIN a FREE cruise!!!", "questions": {
        "spam": {"type": "choice", "instructions": "Is this spam?", "criteria": ["spam", "not_spam"]},
        "urgency": {"type": "score", "instructions": "How urgent?", "criteria": ["low", "high"]}}});
    let mut ws = Workspace::new();
    assert_eq!(
        a.systemone(&mut ws, &request).unwrap(),
        b.systemone(&mut ws, &request).unwrap()
    );

    // The engine's own reading of the two configs fails as the directory's does.
    let tmp = tempfile::tempdir().unwrap();
    for (rel, bad) in [
        ("encoder/config.json", &b"{\"hidden_size\": "[..]),
        ("rl_agent_config.json", &b"\xff"[..]),
    ] {
        let d = tmp.path().join(rel.replace('/', "_"));
        for (name, bytes) in [
            ("model.safetensors", &weights),
            ("encoder/config.json", &enc),
            ("rl_agent_config.json", &agent),
            ("tokenizer/tokenizer.json", &tok),
            ("tokenizer/tokenizer_config.json", &tok_cfg),
        ] {
            let p = d.join(name);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, if name == rel { bad } else { bytes }).unwrap();
        }
        let mut f = files;
        match rel {
            "encoder/config.json" => f.encoder_config = bad,
            _ => f.agent_config = bad,
        }
        let from_dir = engine_from_laya_dir(&d).err().unwrap().to_string();
        let in_memory = engine_from_laya_files(&d, &f).err().unwrap().to_string();
        assert_eq!(from_dir, in_memory, "{rel}");
        assert!(from_dir.contains(rel), "{from_dir}");
    }
}
