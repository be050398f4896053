//! Preset-size Laya checkpoints with random weights (`skyctl random`).
//!
//! The weight recipe follows fixtures/laya-ref/README.md section 2: N(0,1) embeddings,
//! N(0, 1/fan_in) matrices (x1.5 for `Wqkv` and the head's `in_proj`), LayerNorm weights
//! 1 + N(0, 0.01) clipped to [0.5, 1.5], small biases N(0, 0.02^2), `type_emb` N(0, 0.09)
//! (second arguments are variances). Four "massive" channels are drawn from the seed: two
//! residual channels R (`embeddings.norm.weight[R] = (20, 18)`, `final_norm.weight[R] =
//! 0.05`) and two norm channels W (every `attn_norm`/`mlp_norm` weight has `[W] = (20, 18)`);
//! the `Wqkv`/`Wi` input columns of R and W are divided by 20, as in trained models.
//!
//! The scorer output (`scorer.3.weight`) is scaled by a fixed per-preset factor: 26.0 / 11.5 /
//! 9.24 for pico / nano / micro. They started as the README's 16.2 / 15.4 / 9.24, which were
//! calibrated on the reference weights. Those factors were then re-measured on these weights
//! with `skyctl ask` over fixtures/laya-ref/cases.jsonl (41 cases) at four seeds per preset.
//! With the old factors the median option-score spread was 1.0-2.2 logits (pico), 2.1-5.9
//! (nano) and 1.8-3.1 (micro). The new factors put the median near 2.5 logits, like the
//! reference checkpoints on the same cases (2.59 / 2.54 / 3.42). The spread scales linearly
//! with the factor.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::json;

use crate::checkpoint::expected_tensors;
use crate::config::{AgentConfig, EncoderConfig};
use crate::error::{LayaError, Result};
use crate::rng::Rng;

/// A preset model size.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Preset {
    /// Preset name (`s1-pico` ...).
    pub name: &'static str,
    /// Hidden size d.
    pub hidden: usize,
    /// Vocabulary size.
    pub vocab: usize,
    /// Encoder layers.
    pub layers: usize,
    /// Encoder GLU half width f.
    pub intermediate: usize,
    /// Decision-head blocks.
    pub head_layers: usize,
    /// `head_max_len`.
    pub head_max_len: usize,
    /// Default seed (the reference checkpoints' seeds).
    pub seed: u64,
    /// Factor on `scorer.3.weight` (sets the option-score spread, see the module doc).
    pub scorer_scale: f32,
    /// Parameters of the converted model (act head and temperature buffer excluded).
    pub params: usize,
    tokenizer_json: &'static str,
}

const TOKENIZER_CONFIG: &str = r#"{
  "cls_token": "[CLS]",
  "mask_token": "[MASK]",
  "model_max_length": 1000000000000000019884624838656,
  "pad_token": "[PAD]",
  "sep_token": "[SEP]",
  "tokenizer_class": "PreTrainedTokenizerFast",
  "unk_token": "[UNK]"
}"#;

/// The three presets (spec preface).
pub const PRESETS: [Preset; 3] = [
    Preset {
        name: "s1-pico",
        hidden: 64,
        vocab: 1024,
        layers: 2,
        intermediate: 128,
        head_layers: 1,
        head_max_len: 96,
        seed: 1001,
        scorer_scale: 26.0,
        params: 202_305,
        tokenizer_json: include_str!("../assets/s1-pico/tokenizer.json"),
    },
    Preset {
        name: "s1-nano",
        hidden: 128,
        vocab: 2048,
        layers: 4,
        intermediate: 256,
        head_layers: 1,
        head_max_len: 128,
        seed: 1002,
        scorer_scale: 11.5,
        params: 1_134_209,
        tokenizer_json: include_str!("../assets/s1-nano/tokenizer.json"),
    },
    Preset {
        name: "s1-micro",
        hidden: 256,
        vocab: 4096,
        layers: 6,
        intermediate: 512,
        head_layers: 2,
        head_max_len: 192,
        seed: 1003,
        scorer_scale: 9.24,
        params: 6_630_913,
        tokenizer_json: include_str!("../assets/s1-micro/tokenizer.json"),
    },
];

/// Laya's default temperatures, as in the reference checkpoints.
const TEMPERATURE: [f32; 3] = [1.0647699, 1.3, 0.8];

/// Find a preset by name.
pub fn preset(name: &str) -> Result<Preset> {
    PRESETS
        .iter()
        .copied()
        .find(|p| p.name == name)
        .ok_or_else(|| {
            LayaError::Invalid(format!(
                "unknown preset {name:?} (expected s1-pico, s1-nano or s1-micro)"
            ))
        })
}

/// Element type of the written safetensors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WeightDtype {
    /// f32 (as the seed's exporter writes).
    #[default]
    F32,
    /// f16 (as Laya's `save_checkpoint` writes).
    F16,
    /// bf16.
    BF16,
}

impl Preset {
    fn encoder_json(&self) -> serde_json::Value {
        let layer_types: Vec<&str> = (0..self.layers)
            .map(|i| {
                if i.is_multiple_of(3) {
                    "full_attention"
                } else {
                    "sliding_attention"
                }
            })
            .collect();
        json!({
            "attention_bias": false, "attention_dropout": 0.0, "bos_token_id": 2,
            "classifier_activation": "gelu", "classifier_bias": false, "classifier_dropout": 0.0,
            "classifier_pooling": "cls", "cls_token_id": 2, "decoder_bias": true,
            "deterministic_flash_attn": false, "embedding_dropout": 0.0, "eos_token_id": 3,
            "global_attn_every_n_layers": 3, "hidden_activation": "gelu", "hidden_size": self.hidden,
            "initializer_cutoff_factor": 2.0, "initializer_range": 0.02,
            "intermediate_size": self.intermediate, "layer_types": layer_types, "local_attention": 128,
            "max_position_embeddings": 512, "mlp_bias": false, "mlp_dropout": 0.0,
            "model_type": "modernbert", "norm_bias": false, "norm_eps": 1e-05,
            "num_attention_heads": self.hidden / 64, "num_hidden_layers": self.layers,
            "pad_token_id": 0,
            "rope_parameters": {
                "full_attention": {"rope_theta": 160000.0, "rope_type": "default"},
                "sliding_attention": {"rope_theta": 10000.0, "rope_type": "default"}
            },
            "sep_token_id": 3, "sparse_pred_ignore_index": -100, "sparse_prediction": false,
            "tie_word_embeddings": true, "vocab_size": self.vocab
        })
    }

    fn agent_json(&self) -> serde_json::Value {
        json!({
            "encoder": format!("skyctl random {} (random init, config in encoder/)", self.name),
            "model_name": self.name,
            "head_layers": self.head_layers,
            "max_len": 512,
            "head_max_len": self.head_max_len,
            "act_costs": {"escalate": 0.5},
            "amp_dtype": "bf16",
            "temperature": TEMPERATURE,
            "temperature_by_options": {
                "choice:2": 0.9, "choice:3-5": 1.12, "choice:11+": 0.1006,
                "score:3-5": 1.55, "score:6-10": 7.5, "noul:2": 0.75
            }
        })
    }
}

/// Tensors by PyTorch name: (shape, f32 values).
pub type TensorMap = BTreeMap<String, (Vec<usize>, Vec<f32>)>;

/// Generate every tensor of a preset for a seed.
pub fn random_tensors(p: &Preset, seed: u64) -> Result<TensorMap> {
    let enc_map = match p.encoder_json() {
        serde_json::Value::Object(m) => m,
        _ => return Err(LayaError::Invalid("preset encoder config".into())),
    };
    let agent_map = match p.agent_json() {
        serde_json::Value::Object(m) => m,
        _ => return Err(LayaError::Invalid("preset agent config".into())),
    };
    let enc = EncoderConfig::from_map(Path::new("<preset>"), &enc_map)?;
    let agent = AgentConfig::from_map(Path::new("<preset>"), &agent_map)?;
    let d = p.hidden;
    let mut shapes: BTreeMap<String, Vec<usize>> = expected_tensors(&enc, &agent)
        .into_iter()
        .filter(|e| e.required)
        .map(|e| (e.name, e.shape))
        .collect();
    // Laya's act head and temperature buffer: carried by real checkpoints, dropped on conversion
    shapes.insert("act_head.0.weight".into(), vec![256, d + 4]);
    shapes.insert("act_head.0.bias".into(), vec![256]);
    shapes.insert("act_head.2.weight".into(), vec![2, 256]);
    shapes.insert("act_head.2.bias".into(), vec![2]);
    shapes.insert("temperature".into(), vec![3]);

    let mut rng = Rng::new(seed);
    let mut channels = Vec::new();
    while channels.len() < 4 {
        let c = rng.below(d);
        if !channels.contains(&c) {
            channels.push(c);
        }
    }
    let (r, w) = ([channels[0], channels[1]], [channels[2], channels[3]]);

    let mut out = BTreeMap::new();
    for (name, shape) in shapes {
        let n: usize = shape.iter().product();
        let is_norm_weight = name.ends_with("norm.weight")
            || name.ends_with("norm1.weight")
            || name.ends_with("norm2.weight")
            || name == "scorer.0.weight";
        let mut v: Vec<f32> = if name == "temperature" {
            TEMPERATURE.to_vec()
        } else if name == "encoder.embeddings.tok_embeddings.weight" {
            (0..n).map(|_| rng.normal() as f32).collect()
        } else if is_norm_weight {
            (0..n)
                .map(|_| (1.0 + 0.1 * rng.normal()).clamp(0.5, 1.5) as f32)
                .collect()
        } else if name == "type_emb.weight" {
            (0..n).map(|_| (0.3 * rng.normal()) as f32).collect()
        } else if shape.len() == 1 {
            (0..n).map(|_| (0.02 * rng.normal()) as f32).collect()
        } else {
            let fan_in = shape[1] as f64;
            let gain = if name.ends_with("Wqkv.weight") || name.ends_with("in_proj_weight") {
                1.5
            } else {
                1.0
            };
            let std = gain / fan_in.sqrt();
            (0..n).map(|_| (std * rng.normal()) as f32).collect()
        };
        if name == "encoder.embeddings.norm.weight" {
            v[r[0]] = 20.0;
            v[r[1]] = 18.0;
        }
        if name == "encoder.final_norm.weight" {
            v[r[0]] = 0.05;
            v[r[1]] = 0.05;
        }
        if name.starts_with("encoder.layers.")
            && (name.ends_with("attn_norm.weight") || name.ends_with("mlp_norm.weight"))
        {
            v[w[0]] = 20.0;
            v[w[1]] = 18.0;
        }
        if name.ends_with("attn.Wqkv.weight") || name.ends_with("mlp.Wi.weight") {
            let cols = shape[1];
            for row in v.chunks_exact_mut(cols) {
                for &c in r.iter().chain(&w) {
                    row[c] /= 20.0;
                }
            }
        }
        if name == "scorer.3.weight" {
            for x in &mut v {
                *x *= p.scorer_scale;
            }
        }
        out.insert(name, (shape, v));
    }
    Ok(out)
}

struct RawTensor {
    dtype: safetensors::Dtype,
    shape: Vec<usize>,
    data: Vec<u8>,
}

impl safetensors::View for &RawTensor {
    fn dtype(&self) -> safetensors::Dtype {
        self.dtype
    }
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn data(&self) -> std::borrow::Cow<'_, [u8]> {
        std::borrow::Cow::Borrowed(&self.data)
    }
    fn data_len(&self) -> usize {
        self.data.len()
    }
}

/// Serialize tensors to safetensors bytes in the given dtype.
pub fn safetensors_bytes(tensors: &TensorMap, dtype: WeightDtype) -> Result<Vec<u8>> {
    let raw: BTreeMap<&str, RawTensor> = tensors
        .iter()
        .map(|(name, (shape, v))| {
            let (dt, data): (safetensors::Dtype, Vec<u8>) = match dtype {
                WeightDtype::F32 => (
                    safetensors::Dtype::F32,
                    v.iter().flat_map(|x| x.to_le_bytes()).collect(),
                ),
                WeightDtype::F16 => (
                    safetensors::Dtype::F16,
                    v.iter()
                        .flat_map(|x| sky_gguf::f32_to_f16(*x).to_le_bytes())
                        .collect(),
                ),
                WeightDtype::BF16 => (
                    safetensors::Dtype::BF16,
                    v.iter()
                        .flat_map(|x| sky_gguf::f32_to_bf16(*x).to_le_bytes())
                        .collect(),
                ),
            };
            (
                name.as_str(),
                RawTensor {
                    dtype: dt,
                    shape: shape.clone(),
                    data,
                },
            )
        })
        .collect();
    safetensors::serialize(raw.iter().map(|(n, t)| (*n, t)), &None)
        .map_err(|e| LayaError::Invalid(format!("serializing safetensors: {e:?}")))
}

/// Write `bytes` to `path` atomically ([`sky_fs::write`]).
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    sky_fs::write(path, bytes).map_err(|e| LayaError::io(path, e))
}

/// Write a complete Laya directory for a preset: `model.safetensors`, `encoder/config.json`,
/// `rl_agent_config.json` and `tokenizer/` (the tokenizer of the matching reference size,
/// built into the binary). Each file is written atomically. Returns the parameter count of
/// the model (act head and temperature buffer excluded).
pub fn write_random(p: &Preset, dir: &Path, seed: u64, dtype: WeightDtype) -> Result<usize> {
    let tensors = random_tensors(p, seed)?;
    let params: usize = tensors
        .iter()
        .filter(|(n, _)| !crate::names::is_dropped(n))
        .map(|(_, (s, _))| s.iter().product::<usize>())
        .sum();
    let st = safetensors_bytes(&tensors, dtype)?;
    for sub in [
        dir.to_path_buf(),
        dir.join("encoder"),
        dir.join("tokenizer"),
    ] {
        std::fs::create_dir_all(&sub).map_err(|e| LayaError::io(&sub, e))?;
    }
    let pretty = |v: serde_json::Value| -> Result<Vec<u8>> {
        serde_json::to_vec_pretty(&v).map_err(|e| LayaError::Invalid(e.to_string()))
    };
    write_atomic(
        &dir.join("encoder").join("config.json"),
        &pretty(p.encoder_json())?,
    )?;
    write_atomic(&dir.join("rl_agent_config.json"), &pretty(p.agent_json())?)?;
    write_atomic(
        &dir.join("tokenizer").join("tokenizer.json"),
        p.tokenizer_json.as_bytes(),
    )?;
    write_atomic(
        &dir.join("tokenizer").join("tokenizer_config.json"),
        TOKENIZER_CONFIG.as_bytes(),
    )?;
    write_atomic(&dir.join("model.safetensors"), &st)?;
    Ok(params)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preset_parameter_counts() {
        for p in PRESETS {
            let t = random_tensors(&p, 1).unwrap();
            let n: usize = t
                .iter()
                .filter(|(n, _)| !crate::names::is_dropped(n))
                .map(|(_, (s, _))| s.iter().product::<usize>())
                .sum();
            assert_eq!(n, p.params, "{}", p.name);
        }
        assert!(preset("s1-huge").is_err());
    }

    #[test]
    fn massive_channels_and_determinism() {
        let p = preset("s1-pico").unwrap();
        let a = random_tensors(&p, 5).unwrap();
        assert_eq!(a, random_tensors(&p, 5).unwrap());
        assert_ne!(a, random_tensors(&p, 6).unwrap());
        let emb_norm = &a["encoder.embeddings.norm.weight"].1;
        let big: Vec<usize> = (0..64).filter(|&i| emb_norm[i] > 10.0).collect();
        assert_eq!(big.len(), 2);
        let mlp_norm = &a["encoder.layers.1.mlp_norm.weight"].1;
        let big_w: Vec<usize> = (0..64).filter(|&i| mlp_norm[i] > 10.0).collect();
        assert_eq!(big_w.len(), 2);
        assert!(big.iter().all(|c| !big_w.contains(c)));
        // the spiked channels' Wqkv columns are scaled down 20x
        let (shape, wqkv) = &a["encoder.layers.0.attn.Wqkv.weight"];
        let col_rms = |c: usize| {
            (wqkv
                .chunks_exact(shape[1])
                .map(|r| r[c] * r[c])
                .sum::<f32>()
                / shape[0] as f32)
                .sqrt()
        };
        let normal = (0..64)
            .filter(|c| !big.contains(c) && !big_w.contains(c))
            .map(col_rms)
            .sum::<f32>()
            / 60.0;
        assert!(
            col_rms(big[0]) < normal / 8.0,
            "{} vs {normal}",
            col_rms(big[0])
        );
    }
}
