//! Helpers shared by the golden tests: repository paths, golden records, a safetensors loader
//! independent of sky-laya.
#![allow(dead_code)]

use std::path::PathBuf;

use serde_json::Value;
use sky_infer::{Model, ModelConfig};
use sky_laya::gguf_name;

/// The unsigned integers of a golden record's array `key`, converted.
pub fn numbers<T>(v: &Value, key: &str, conv: impl Fn(u64) -> T) -> Vec<T> {
    let arr = v[key].as_array().unwrap_or_else(|| panic!("golden {key}"));
    arr.iter()
        .map(|x| conv(x.as_u64().unwrap_or_else(|| panic!("golden {key}: {x}"))))
        .collect()
}

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

pub fn read_jsonl(path: &std::path::Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).expect("golden line is JSON"))
        .collect()
}

pub fn golden(model: &str, precision: &str) -> Vec<Value> {
    read_jsonl(&repo_root().join(format!(
        "fixtures/laya-ref/goldens/{model}.{precision}.jsonl"
    )))
}

/// Model directory for a golden name (`s1-pico-f32` lives under fixtures).
pub fn model_dir(name: &str) -> PathBuf {
    if name == "s1-pico-f32" {
        repo_root().join("fixtures/laya-ref/s1-pico-f32")
    } else {
        repo_root().join("models").join(name)
    }
}

/// Load a Laya directory with the safetensors crate directly (F16 or F32 tensors).
pub fn load_safetensors_model(dir: &std::path::Path) -> Model {
    let enc: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("encoder/config.json")).unwrap())
            .unwrap();
    let agent: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("rl_agent_config.json")).unwrap())
            .unwrap();
    let cfg = ModelConfig::from_laya_json(&enc, &agent).unwrap();
    let bytes = std::fs::read(dir.join("model.safetensors")).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let mut map = std::collections::HashMap::new();
    for (name, view) in st.tensors() {
        let Some(g) = gguf_name(&name, cfg.n_enc) else {
            continue;
        };
        let data: Vec<f32> = match view.dtype() {
            safetensors::Dtype::F16 => view
                .data()
                .chunks_exact(2)
                .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32())
                .collect(),
            safetensors::Dtype::F32 => view
                .data()
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect(),
            other => panic!("unexpected dtype {other:?}"),
        };
        map.insert(g, (view.shape().to_vec(), data));
    }
    let src = move |name: &str| -> sky_infer::Result<Option<(Vec<usize>, Vec<f32>)>> {
        Ok(map.get(name).cloned())
    };
    Model::build(cfg, &src).unwrap()
}

/// The environment variable that limits the per-model golden suites to a comma-separated list
/// of models (`SKYCTL_TEST_MODELS=s1-pico`): `bench/aarch64.sh` sets it under qemu, where the
/// nano and micro suites would take an hour. Unset, every model runs.
pub const TEST_MODELS_ENV: &str = "SKYCTL_TEST_MODELS";

/// Whether the per-model suites of `model` run (see [`TEST_MODELS_ENV`]).
pub fn model_selected(model: &str) -> bool {
    match std::env::var(TEST_MODELS_ENV) {
        Ok(list) => list.split(',').any(|m| m.trim() == model),
        Err(_) => true,
    }
}
