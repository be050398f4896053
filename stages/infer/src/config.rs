//! Model hyperparameters and temperatures, from a Laya directory's JSON configs or from GGUF
//! metadata.

use crate::error::{InferError, Result};
use serde_json::Value;
use sky_laya::config::{head_heads, limits};
use sky_laya::ModelNumbers;

/// Hyperparameters of a Laya decision model (ModernBERT encoder + decision head).
#[derive(Debug, Clone, PartialEq)]
pub struct ModelConfig {
    /// Hidden width d.
    pub hidden: usize,
    /// Vocabulary size.
    pub vocab: usize,
    /// Encoder layers.
    pub n_enc: usize,
    /// Encoder attention heads.
    pub enc_heads: usize,
    /// Encoder GLU half width f (`intermediate_size`).
    pub intermediate: usize,
    /// Decision-head blocks.
    pub n_head_layers: usize,
    /// Decision-head attention heads: max(1, d / 64), as PyTorch Laya builds them.
    pub head_heads: usize,
    /// LayerNorm epsilon.
    pub eps: f32,
    /// Per encoder layer: full (global) attention, else sliding window.
    pub global_layers: Vec<bool>,
    /// Sliding window full width (`local_attention`); a key is visible when |i - j| <= width / 2.
    pub local_attention: usize,
    /// RoPE theta of global layers.
    pub rope_global: f32,
    /// RoPE theta of sliding layers.
    pub rope_local: f32,
    /// Laya `max_len`: the whole sequence is cut to this many tokens.
    pub max_len: usize,
    /// Laya `head_max_len` (`max_head_tokens`): budget of question + options.
    pub max_head_tokens: usize,
}

impl ModelConfig {
    /// Encoder head width.
    pub fn enc_head_dim(&self) -> usize {
        self.hidden / self.enc_heads
    }

    /// Decision-head head width.
    pub fn head_head_dim(&self) -> usize {
        self.hidden / self.head_heads
    }

    /// The numbers [`sky_laya::ModelNumbers::check`] validates (the one validation that
    /// `convert`, `ask DIR` and GGUF loading share).
    pub fn numbers(&self) -> ModelNumbers {
        ModelNumbers {
            hidden_size: self.hidden,
            intermediate_size: self.intermediate,
            num_hidden_layers: self.n_enc,
            num_attention_heads: self.enc_heads,
            vocab_size: self.vocab,
            head_layers: self.n_head_layers,
            local_attention: self.local_attention,
            global_layers: self.global_layers.clone(),
            global_attn_every_n_layers: None,
            norm_eps: f64::from(self.eps),
            global_rope_theta: f64::from(self.rope_global),
            local_rope_theta: f64::from(self.rope_local),
            max_len: self.max_len,
            head_max_len: self.max_head_tokens,
        }
    }

    /// Check the config with [`sky_laya::ModelNumbers::check`] (the converter's check, so a
    /// file `convert` wrote always loads), and that the decision head's width is the one
    /// PyTorch Laya derives from d.
    pub fn validate(&self) -> Result<()> {
        self.numbers()
            .check()
            .map_err(|issue| InferError::BadValue {
                key: issue.field,
                message: issue.message,
            })?;
        if self.head_heads != head_heads(self.hidden) {
            return Err(InferError::BadValue {
                key: "hidden_size".into(),
                message: format!(
                    "{} decision-head heads, but max(1, d // 64) is {}",
                    self.head_heads,
                    head_heads(self.hidden)
                ),
            });
        }
        Ok(())
    }

    /// From the two JSON configs of a Laya directory (`encoder/config.json`,
    /// `rl_agent_config.json`), given as parsed values.
    pub fn from_laya_json(encoder: &Value, agent: &Value) -> Result<ModelConfig> {
        let enc_src = "encoder/config.json";
        let agent_src = "rl_agent_config.json";
        let hidden = get_usize(encoder, "hidden_size", enc_src)?;
        let n_enc = get_usize(encoder, "num_hidden_layers", enc_src)?;
        // Before anything is sized by them.
        within("hidden_size", hidden, limits::MAX_HIDDEN)?;
        within("num_hidden_layers", n_enc, limits::MAX_LAYERS)?;
        let every = opt_usize(encoder, "global_attn_every_n_layers")?
            .unwrap_or(3)
            .max(1);
        let global_layers = match encoder.get("layer_types").and_then(Value::as_array) {
            Some(types) => types
                .iter()
                .map(|t| match t.as_str() {
                    Some("full_attention") => Ok(true),
                    Some("sliding_attention") => Ok(false),
                    _ => Err(InferError::BadValue {
                        key: "layer_types".into(),
                        message: format!("unknown layer type {t}"),
                    }),
                })
                .collect::<Result<Vec<_>>>()?,
            None => (0..n_enc).map(|i| i % every == 0).collect(),
        };
        let (mut rope_global, mut rope_local) = (160_000f64, 10_000f64);
        if let Some(v) = encoder.get("global_rope_theta").and_then(Value::as_f64) {
            rope_global = v;
        }
        if let Some(v) = encoder.get("local_rope_theta").and_then(Value::as_f64) {
            rope_local = v;
        }
        if let Some(rp) = encoder.get("rope_parameters") {
            if let Some(v) = rp
                .pointer("/full_attention/rope_theta")
                .and_then(Value::as_f64)
            {
                rope_global = v;
            }
            if let Some(v) = rp
                .pointer("/sliding_attention/rope_theta")
                .and_then(Value::as_f64)
            {
                rope_local = v;
            }
        }
        // The converter's order (`sky_laya::EncoderConfig::eps`): a LayerNorm spelling first,
        // then the RMS spellings.
        let eps = [
            "layer_norm_eps",
            "layer_norm_epsilon",
            "norm_epsilon",
            "rms_norm_eps",
            "norm_eps",
        ]
        .iter()
        .find_map(|k| encoder.get(*k).and_then(Value::as_f64))
        .unwrap_or(1e-5);
        let cfg = ModelConfig {
            hidden,
            vocab: get_usize(encoder, "vocab_size", enc_src)?,
            n_enc,
            enc_heads: get_usize(encoder, "num_attention_heads", enc_src)?,
            intermediate: get_usize(encoder, "intermediate_size", enc_src)?,
            n_head_layers: get_usize(agent, "head_layers", agent_src)?,
            head_heads: head_heads(hidden),
            eps: eps as f32,
            global_layers,
            local_attention: opt_usize(encoder, "local_attention")?.unwrap_or(128),
            rope_global: rope_global as f32,
            rope_local: rope_local as f32,
            max_len: opt_usize(agent, "max_len")?.unwrap_or(sky_laya::config::DEFAULT_MAX_LEN),
            max_head_tokens: opt_usize(agent, "head_max_len")?.unwrap_or(192),
        };
        cfg.validate()?;
        Ok(cfg)
    }
}

fn opt_usize(v: &Value, key: &str) -> Result<Option<usize>> {
    match v.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(x) => x
            .as_u64()
            .map(|n| Some(n as usize))
            .ok_or_else(|| InferError::BadValue {
                key: key.into(),
                message: format!("expected a non-negative integer, found {x}"),
            }),
    }
}

fn get_usize(v: &Value, key: &str, source: &str) -> Result<usize> {
    opt_usize(v, key)?.ok_or_else(|| InferError::MissingKey {
        origin: source.into(),
        key: key.into(),
    })
}

/// Question types, in the order of the type embedding rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QType {
    /// Pick one option.
    Choice = 0,
    /// Ordered levels; the answer is the expected level.
    Score = 1,
    /// Yes/no; options are [false, true].
    Noul = 2,
}

impl QType {
    /// The request spelling.
    pub fn name(self) -> &'static str {
        match self {
            QType::Choice => "choice",
            QType::Score => "score",
            QType::Noul => "noul",
        }
    }

    /// Parse the request spelling.
    pub fn parse(s: &str) -> Option<QType> {
        match s {
            "choice" => Some(QType::Choice),
            "score" => Some(QType::Score),
            "noul" => Some(QType::Noul),
            _ => None,
        }
    }
}

/// The temperature of one bucket lookup, with where it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct TemperatureChoice {
    /// Laya bucket name, e.g. `choice:3-5`.
    pub bucket: String,
    /// The value as configured.
    pub raw: f64,
    /// The value applied (clamped to [0.5, 5.0], non-finite -> 1.0, as the Laya runtime does).
    pub applied: f64,
}

/// Temperatures per question type and per option-count bucket (Laya `temperature` and
/// `temperature_by_options`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Temperatures {
    /// `temperature[type]` (choice, score, noul); missing -> 1.0.
    pub by_type: [Option<f64>; 3],
    /// `temperature_by_options`, Laya keys (`choice:3-5`, `choice:11+`).
    pub by_bucket: Vec<(String, f64)>,
}

/// The Laya runtime's clamp: [0.5, 5.0], non-finite -> 1.0.
pub fn clamp_temperature(t: f64) -> f64 {
    if !t.is_finite() {
        return 1.0;
    }
    t.clamp(0.5, 5.0)
}

/// Laya bucket name for `k` options: `<type>:2`, `:3-5`, `:6-10`, `:11+`.
pub fn temperature_bucket(qtype: QType, k: usize) -> String {
    let size = if k <= 2 {
        "2"
    } else if k <= 5 {
        "3-5"
    } else if k <= 10 {
        "6-10"
    } else {
        "11+"
    };
    format!("{}:{size}", qtype.name())
}

impl Temperatures {
    /// From `rl_agent_config.json` (`temperature` list, `temperature_by_options` object).
    pub fn from_laya_json(agent: &Value) -> Temperatures {
        let mut t = Temperatures::default();
        if let Some(list) = agent.get("temperature").and_then(Value::as_array) {
            for (slot, v) in t.by_type.iter_mut().zip(list) {
                // Non-numbers become 1.0 at clamp time, as in Laya.
                *slot = Some(v.as_f64().unwrap_or(f64::NAN));
            }
        }
        if let Some(map) = agent
            .get("temperature_by_options")
            .and_then(Value::as_object)
        {
            for (k, v) in map {
                t.by_bucket
                    .push((k.clone(), v.as_f64().unwrap_or(f64::NAN)));
            }
        }
        t
    }

    /// The temperature Laya applies to a question of `qtype` with `k` options.
    pub fn pick(&self, qtype: QType, k: usize) -> TemperatureChoice {
        let bucket = temperature_bucket(qtype, k);
        let raw = self
            .by_bucket
            .iter()
            .find(|(name, _)| *name == bucket)
            .map(|(_, v)| *v)
            .or(self.by_type[qtype as usize])
            .unwrap_or(1.0);
        TemperatureChoice {
            bucket,
            raw,
            applied: clamp_temperature(raw),
        }
    }
}

/// The checkpoint limits of the converter (one set for both), as this crate's error.
fn within(key: &str, value: usize, max: usize) -> Result<()> {
    limits::check(value, max).map_err(|message| InferError::BadValue {
        key: key.into(),
        message,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temperature_buckets_and_clamp_follow_laya() {
        let agent: Value = serde_json::json!({
            "temperature": [1.0647699, 1.3, 0.8],
            "temperature_by_options": {"choice:2": 0.9, "choice:11+": 0.1006, "score:6-10": 7.5}
        });
        let t = Temperatures::from_laya_json(&agent);
        assert_eq!(t.pick(QType::Choice, 2).applied, 0.9);
        assert_eq!(t.pick(QType::Choice, 12).applied, 0.5);
        assert_eq!(t.pick(QType::Choice, 12).raw, 0.1006);
        assert_eq!(t.pick(QType::Choice, 8).applied, 1.0647699);
        assert_eq!(t.pick(QType::Score, 6).applied, 5.0);
        assert_eq!(t.pick(QType::Score, 2).applied, 1.3);
        assert_eq!(t.pick(QType::Noul, 2).bucket, "noul:2");
        assert_eq!(clamp_temperature(f64::NAN), 1.0);
    }
}
