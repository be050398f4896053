//! The two JSON configs of a Laya directory: `encoder/config.json` (Hugging Face
//! `ModernBertConfig`) and `rl_agent_config.json` (the decision head).

use std::path::Path;

use serde_json::{Map, Value};

use crate::error::{LayaError, Result};

/// The size limit a checkpoint file is read under ([`sky_fs::CONFIG`], [`sky_fs::TOKENIZER`]).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Size {
    /// A JSON config (`encoder/config.json`, `rl_agent_config.json`, ...).
    Config,
    /// `tokenizer/tokenizer.json`.
    Tokenizer,
}

/// Read a file's bytes (missing: [`LayaError::MissingFile`] saying `what` it is for) with
/// [`sky_fs::read`]: a regular file after following links, within the limit of its `size`.
#[cfg(feature = "fs")]
pub(crate) fn read_file(path: &Path, what: &'static str, size: Size) -> Result<Vec<u8>> {
    let limit = match size {
        Size::Config => sky_fs::CONFIG,
        Size::Tokenizer => sky_fs::TOKENIZER,
    };
    match sky_fs::read(path, limit) {
        Ok(b) => Ok(b),
        Err(e) if e.is_not_found() => Err(LayaError::MissingFile {
            path: path.to_path_buf(),
            what,
        }),
        Err(e) => Err(LayaError::io(path, e.into())),
    }
}

/// Without the file-system part there are no files to read.
#[cfg(not(feature = "fs"))]
pub(crate) fn read_file(path: &Path, _what: &'static str, _size: Size) -> Result<Vec<u8>> {
    Err(LayaError::io(
        path,
        std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            "sky-laya was built without its file-system part",
        ),
    ))
}

/// Read a file that may be absent (absent: `None`; present, it must be a regular file).
pub(crate) fn read_optional(path: &Path, what: &'static str) -> Result<Option<Vec<u8>>> {
    if std::fs::symlink_metadata(path).is_err() {
        return Ok(None);
    }
    read_file(path, what, Size::Config).map(Some)
}

/// A file's bytes as text (the error `std::fs::read_to_string` gives).
pub(crate) fn utf8<'a>(path: &Path, bytes: &'a [u8]) -> Result<&'a str> {
    std::str::from_utf8(bytes).map_err(|_| {
        LayaError::io(
            path,
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "stream did not contain valid UTF-8",
            ),
        )
    })
}

/// Parse a JSON file's bytes whose top level must be an object.
pub(crate) fn parse_json_object(path: &Path, bytes: &[u8]) -> Result<Map<String, Value>> {
    match serde_json::from_str::<Value>(utf8(path, bytes)?) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err(LayaError::key(
            path,
            "<top level>",
            "expected a JSON object",
        )),
        Err(e) => Err(LayaError::Json {
            path: path.to_path_buf(),
            source: e,
        }),
    }
}

/// Read and parse a JSON file whose top level must be an object.
#[cfg_attr(not(feature = "fs"), allow(dead_code))] // used by the file-system part
pub(crate) fn read_json_object(path: &Path, what: &'static str) -> Result<Map<String, Value>> {
    parse_json_object(path, &read_file(path, what, Size::Config)?)
}

/// What `encoder/config.json` is for, when it is missing.
pub(crate) const ENCODER_WHAT: &str = "encoder/config.json, the ModernBERT config";
/// What `rl_agent_config.json` is for, when it is missing.
pub(crate) const AGENT_WHAT: &str = "rl_agent_config.json, the decision-head config";

/// Typed access to the keys of one JSON object, with errors naming file and key.
pub(crate) struct Keys<'a> {
    pub path: &'a Path,
    pub map: &'a Map<String, Value>,
}

impl Keys<'_> {
    pub fn opt_usize(&self, key: &str) -> Result<Option<usize>> {
        match self.map.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => v
                .as_u64()
                .and_then(|n| usize::try_from(n).ok())
                .map(Some)
                .ok_or_else(|| {
                    LayaError::key(
                        self.path,
                        key,
                        format!("expected a non-negative integer, found {v}"),
                    )
                }),
        }
    }

    pub fn usize(&self, key: &str) -> Result<usize> {
        self.opt_usize(key)?
            .ok_or_else(|| LayaError::key(self.path, key, "missing (required)"))
    }

    pub fn opt_f64(&self, key: &str) -> Result<Option<f64>> {
        match self.map.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => v.as_f64().map(Some).ok_or_else(|| {
                LayaError::key(self.path, key, format!("expected a number, found {v}"))
            }),
        }
    }

    pub fn opt_str(&self, key: &str) -> Result<Option<String>> {
        match self.map.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(v) => Err(LayaError::key(
                self.path,
                key,
                format!("expected a string, found {v}"),
            )),
        }
    }
}

/// ModernBERT hyperparameters from `encoder/config.json`.
///
/// Optional keys take the defaults of transformers' `ModernBertConfig`.
#[derive(Debug, Clone, PartialEq)]
pub struct EncoderConfig {
    /// `hidden_size` (d).
    pub hidden_size: usize,
    /// `intermediate_size` (f, the GLU half width: `mlp.Wi` has 2f rows).
    pub intermediate_size: usize,
    /// `num_hidden_layers` (encoder depth n_enc).
    pub num_hidden_layers: usize,
    /// `num_attention_heads`.
    pub num_attention_heads: usize,
    /// `vocab_size`.
    pub vocab_size: usize,
    /// `max_position_embeddings` (default 8192).
    pub max_position_embeddings: usize,
    /// `local_attention`: the full sliding window width (default 128).
    pub local_attention: usize,
    /// `global_attn_every_n_layers` (default 3).
    pub global_attn_every_n_layers: usize,
    /// RoPE theta of the full-attention layers (`rope_parameters.full_attention.rope_theta`
    /// or `global_rope_theta`, default 160000).
    pub global_rope_theta: f64,
    /// RoPE theta of the sliding layers (`rope_parameters.sliding_attention.rope_theta` or
    /// `local_rope_theta`, default 10000).
    pub local_rope_theta: f64,
    /// `rms_norm_eps` or `norm_eps` when the config spells it so (transformers' ModernBERT
    /// spelling; the value is the LayerNorm eps).
    pub norm_eps: Option<f64>,
    /// `layer_norm_eps` / `layer_norm_epsilon` / `norm_epsilon` when the config spells it so.
    pub layer_norm_eps: Option<f64>,
    /// `hidden_activation` ("gelu" in ModernBERT), when present.
    pub hidden_activation: Option<String>,
    /// `layer_types` (transformers v5), when present: per layer, true for
    /// `full_attention`, false for `sliding_attention`. GGUF records only
    /// `global_attn_every_n_layers`, so [`validate`] requires the two to agree.
    pub layer_types: Option<Vec<bool>>,
}

impl EncoderConfig {
    /// The LayerNorm epsilon: the LayerNorm spelling if present, else `norm_eps`, else the
    /// transformers default 1e-5.
    pub fn eps(&self) -> f64 {
        self.layer_norm_eps.or(self.norm_eps).unwrap_or(1e-5)
    }

    /// Head dimension (hidden / heads).
    pub fn head_dim(&self) -> usize {
        self.hidden_size / self.num_attention_heads.max(1)
    }

    /// Parse `encoder/config.json`.
    pub fn load(path: &Path) -> Result<EncoderConfig> {
        EncoderConfig::parse(path, &read_file(path, ENCODER_WHAT, Size::Config)?)
    }

    /// Parse the bytes of `encoder/config.json` (`path` names it in errors).
    pub(crate) fn parse(path: &Path, bytes: &[u8]) -> Result<EncoderConfig> {
        EncoderConfig::from_map(path, &parse_json_object(path, bytes)?)
    }

    /// Parse a parsed `encoder/config.json` (`path` names it in errors).
    pub fn from_map(path: &Path, map: &Map<String, Value>) -> Result<EncoderConfig> {
        let k = Keys { path, map };
        let (mut global, mut local) = (
            k.opt_f64("global_rope_theta")?,
            k.opt_f64("local_rope_theta")?,
        );
        if let Some(rp) = map.get("rope_parameters") {
            let theta = |kind: &str| -> Result<Option<f64>> {
                match rp.get(kind).and_then(|o| o.get("rope_theta")) {
                    None => Ok(None),
                    Some(v) => v.as_f64().map(Some).ok_or_else(|| {
                        LayaError::key(
                            path,
                            format!("rope_parameters.{kind}.rope_theta"),
                            format!("expected a number, found {v}"),
                        )
                    }),
                }
            };
            if let Some(t) = theta("full_attention")? {
                global = Some(t);
            }
            if let Some(t) = theta("sliding_attention")? {
                local = Some(t);
            }
        }
        let mut norm_eps = None;
        for key in ["rms_norm_eps", "norm_eps"] {
            if let Some(v) = k.opt_f64(key)? {
                norm_eps = Some(v);
                break;
            }
        }
        let mut layer_norm_eps = None;
        for key in ["layer_norm_eps", "layer_norm_epsilon", "norm_epsilon"] {
            if let Some(v) = k.opt_f64(key)? {
                layer_norm_eps = Some(v);
                break;
            }
        }
        let layer_types = match map.get("layer_types") {
            None | Some(Value::Null) => None,
            Some(Value::Array(items)) => Some(
                items
                    .iter()
                    .enumerate()
                    .map(|(i, t)| match t.as_str() {
                        Some("full_attention") => Ok(true),
                        Some("sliding_attention") => Ok(false),
                        _ => Err(LayaError::key(
                            path,
                            format!("layer_types[{i}]"),
                            format!(
                                "expected \"full_attention\" or \"sliding_attention\", found {t}"
                            ),
                        )),
                    })
                    .collect::<Result<Vec<_>>>()?,
            ),
            Some(v) => {
                return Err(LayaError::key(
                    path,
                    "layer_types",
                    format!("expected a list of layer types, found {v}"),
                ))
            }
        };
        let cfg = EncoderConfig {
            hidden_size: k.usize("hidden_size")?,
            intermediate_size: k.usize("intermediate_size")?,
            num_hidden_layers: k.usize("num_hidden_layers")?,
            num_attention_heads: k.usize("num_attention_heads")?,
            vocab_size: k.usize("vocab_size")?,
            max_position_embeddings: k.opt_usize("max_position_embeddings")?.unwrap_or(8192),
            local_attention: k.opt_usize("local_attention")?.unwrap_or(128),
            global_attn_every_n_layers: k.opt_usize("global_attn_every_n_layers")?.unwrap_or(3),
            global_rope_theta: global.unwrap_or(160_000.0),
            local_rope_theta: local.unwrap_or(10_000.0),
            norm_eps,
            layer_norm_eps,
            hidden_activation: k.opt_str("hidden_activation")?,
            layer_types,
        };
        for (key, v) in [
            ("hidden_size", cfg.hidden_size),
            ("num_hidden_layers", cfg.num_hidden_layers),
            ("num_attention_heads", cfg.num_attention_heads),
            ("vocab_size", cfg.vocab_size),
            ("intermediate_size", cfg.intermediate_size),
        ] {
            if v == 0 {
                return Err(LayaError::key(path, key, "must be positive"));
            }
        }
        for (key, v, max) in [
            ("hidden_size", cfg.hidden_size, limits::MAX_HIDDEN),
            (
                "intermediate_size",
                cfg.intermediate_size,
                limits::MAX_INTERMEDIATE,
            ),
            (
                "num_hidden_layers",
                cfg.num_hidden_layers,
                limits::MAX_LAYERS,
            ),
            (
                "num_attention_heads",
                cfg.num_attention_heads,
                limits::MAX_HEADS,
            ),
            ("vocab_size", cfg.vocab_size, limits::MAX_VOCAB),
            (
                "max_position_embeddings",
                cfg.max_position_embeddings,
                limits::MAX_SEQUENCE,
            ),
            ("local_attention", cfg.local_attention, limits::MAX_SEQUENCE),
        ] {
            limits::check(v, max).map_err(|m| LayaError::key(path, key, m))?;
        }
        if !cfg.hidden_size.is_multiple_of(cfg.num_attention_heads) {
            return Err(LayaError::key(
                path,
                "num_attention_heads",
                format!(
                    "{} does not divide hidden_size {}",
                    cfg.num_attention_heads, cfg.hidden_size
                ),
            ));
        }
        Ok(cfg)
    }
}

/// Limits on what a checkpoint's configs may declare: far above any model this tool builds
/// (s1-micro: hidden 256, 6 layers, vocab 4,096, 512 tokens) and low enough that a hostile or
/// mistyped config is refused before it sizes an allocation (a `num_hidden_layers` in the
/// millions, a `max_len` near 2^63). The engine's loader checks the same limits, for GGUF
/// metadata too.
pub mod limits {
    /// `hidden_size`.
    pub const MAX_HIDDEN: usize = 1 << 16;
    /// `intermediate_size`.
    pub const MAX_INTERMEDIATE: usize = 1 << 18;
    /// `num_hidden_layers`, `head_layers`.
    pub const MAX_LAYERS: usize = 1 << 10;
    /// `num_attention_heads`.
    pub const MAX_HEADS: usize = 1 << 10;
    /// `vocab_size`.
    pub const MAX_VOCAB: usize = 1 << 22;
    /// `max_len`, `head_max_len`, `max_position_embeddings`, `local_attention`.
    pub const MAX_SEQUENCE: usize = 1 << 16;

    /// `Err(message)` when `value` is above `max`.
    pub fn check(value: usize, max: usize) -> Result<(), String> {
        if value > max {
            return Err(format!("{value} is above the limit of {max}"));
        }
        Ok(())
    }
}

/// The numbers of a Laya model that the engine computes with, in the types it computes with
/// them, gathered from either source: the two JSON configs of a checkpoint
/// ([`ModelNumbers::from_configs`]) or the metadata of a converted GGUF file (sky-infer's
/// loader). [`ModelNumbers::check`] is the one validation both run, so whatever `convert`
/// accepts, loading the converted file accepts, and `ask DIR` refuses what `convert` refuses.
/// Field names are the Laya config spellings.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelNumbers {
    /// `hidden_size`.
    pub hidden_size: usize,
    /// `intermediate_size`.
    pub intermediate_size: usize,
    /// `num_hidden_layers`.
    pub num_hidden_layers: usize,
    /// `num_attention_heads`.
    pub num_attention_heads: usize,
    /// `vocab_size`.
    pub vocab_size: usize,
    /// `head_layers`.
    pub head_layers: usize,
    /// `local_attention` (the sliding window's full width).
    pub local_attention: usize,
    /// Per encoder layer: full attention (else sliding).
    pub global_layers: Vec<bool>,
    /// `global_attn_every_n_layers`, when the layer list must follow it (a checkpoint; a GGUF
    /// file's list is built from it).
    pub global_attn_every_n_layers: Option<usize>,
    /// The LayerNorm epsilon (used as f32).
    pub norm_eps: f64,
    /// RoPE theta of full-attention layers (used as f32).
    pub global_rope_theta: f64,
    /// RoPE theta of sliding layers (used as f32).
    pub local_rope_theta: f64,
    /// `max_len`.
    pub max_len: usize,
    /// `head_max_len`.
    pub head_max_len: usize,
}

/// A config value [`ModelNumbers::check`] refuses: the field (Laya spelling) and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigIssue {
    /// The field, e.g. `norm_eps`, `layer_types[2]`.
    pub field: String,
    /// What is wrong.
    pub message: String,
}

/// The engine's whole-sequence limit when `max_len` is absent.
pub const DEFAULT_MAX_LEN: usize = 512;

/// Decision-head attention heads: max(1, d / 64), as PyTorch Laya builds them.
pub fn head_heads(hidden_size: usize) -> usize {
    (hidden_size / 64).max(1)
}

/// Whether encoder layer `i` is a full-attention layer under `global_attn_every_n_layers`
/// (0 reads as 1, as transformers and llama.cpp read it).
pub fn is_global_layer(i: usize, every: usize) -> bool {
    i.is_multiple_of(every.max(1))
}

impl ModelNumbers {
    /// The numbers of a checkpoint's configs, with the defaults the engine applies.
    pub fn from_configs(enc: &EncoderConfig, agent: &AgentConfig) -> ModelNumbers {
        let every = enc.global_attn_every_n_layers;
        ModelNumbers {
            hidden_size: enc.hidden_size,
            intermediate_size: enc.intermediate_size,
            num_hidden_layers: enc.num_hidden_layers,
            num_attention_heads: enc.num_attention_heads,
            vocab_size: enc.vocab_size,
            head_layers: agent.head_layers,
            local_attention: enc.local_attention,
            global_layers: enc.layer_types.clone().unwrap_or_else(|| {
                (0..enc.num_hidden_layers)
                    .map(|i| is_global_layer(i, every))
                    .collect()
            }),
            global_attn_every_n_layers: Some(every),
            norm_eps: enc.eps(),
            global_rope_theta: enc.global_rope_theta,
            local_rope_theta: enc.local_rope_theta,
            max_len: agent.max_len.unwrap_or(DEFAULT_MAX_LEN),
            head_max_len: agent.head_max_len,
        }
    }

    /// The one validation of a Laya model's numbers (see [`ModelNumbers`]): counts positive
    /// and within [`limits`], head widths that divide the hidden size into even (RoPE)
    /// halves, a sliding window of at least 1, a layer list that GGUF can record, a sequence
    /// room of at least 4 tokens and a head budget of at least 1, and an epsilon and RoPE
    /// thetas that are positive and finite as f32 (the type the engine and GGUF use).
    pub fn check(&self) -> std::result::Result<(), ConfigIssue> {
        let bad = |field: &str, message: String| {
            Err(ConfigIssue {
                field: field.to_string(),
                message,
            })
        };
        for (field, v) in [
            ("hidden_size", self.hidden_size),
            ("intermediate_size", self.intermediate_size),
            ("num_hidden_layers", self.num_hidden_layers),
            ("num_attention_heads", self.num_attention_heads),
            ("vocab_size", self.vocab_size),
            ("head_layers", self.head_layers),
        ] {
            if v == 0 {
                return bad(field, "must be positive".into());
            }
        }
        for (field, v, max) in [
            ("hidden_size", self.hidden_size, limits::MAX_HIDDEN),
            (
                "intermediate_size",
                self.intermediate_size,
                limits::MAX_INTERMEDIATE,
            ),
            (
                "num_hidden_layers",
                self.num_hidden_layers,
                limits::MAX_LAYERS,
            ),
            (
                "num_attention_heads",
                self.num_attention_heads,
                limits::MAX_HEADS,
            ),
            ("vocab_size", self.vocab_size, limits::MAX_VOCAB),
            ("head_layers", self.head_layers, limits::MAX_LAYERS),
            (
                "local_attention",
                self.local_attention,
                limits::MAX_SEQUENCE,
            ),
            ("max_len", self.max_len, limits::MAX_SEQUENCE),
            ("head_max_len", self.head_max_len, limits::MAX_SEQUENCE),
        ] {
            if let Err(m) = limits::check(v, max) {
                return bad(field, m);
            }
        }
        let (d, heads) = (self.hidden_size, self.num_attention_heads);
        if !d.is_multiple_of(heads) || !(d / heads).is_multiple_of(2) {
            return bad(
                "num_attention_heads",
                format!("{heads} heads do not split hidden_size {d} into even head widths (RoPE rotates pairs)"),
            );
        }
        let hh = head_heads(d);
        if !d.is_multiple_of(hh) {
            return bad(
                "hidden_size",
                format!("the decision head's {hh} heads (max(1, d // 64)) do not divide hidden_size {d}"),
            );
        }
        if self.local_attention == 0 {
            return bad(
                "local_attention",
                "must be at least 1 (the sliding window's full width; GGUF reads 0 as no window)"
                    .into(),
            );
        }
        if self.global_layers.len() != self.num_hidden_layers {
            return bad(
                "layer_types",
                format!(
                    "{} entries for num_hidden_layers {}",
                    self.global_layers.len(),
                    self.num_hidden_layers
                ),
            );
        }
        if let Some(every) = self.global_attn_every_n_layers {
            for (i, &g) in self.global_layers.iter().enumerate() {
                if g != is_global_layer(i, every) {
                    let kind = |g: bool| {
                        if g {
                            "full_attention"
                        } else {
                            "sliding_attention"
                        }
                    };
                    return bad(
                        &format!("layer_types[{i}]"),
                        format!(
                            "is {} but global_attn_every_n_layers {every} makes it {} (GGUF records only the pattern)",
                            kind(g),
                            kind(!g)
                        ),
                    );
                }
            }
        }
        if self.max_len < 4 {
            return bad(
                "max_len",
                format!(
                    "{} leaves no room for a question (at least 4 tokens)",
                    self.max_len
                ),
            );
        }
        if self.head_max_len == 0 {
            return bad("head_max_len", "must be positive".into());
        }
        let eps = self.norm_eps as f32;
        if !(eps.is_finite() && eps > 0.0) {
            return bad(
                "norm_eps",
                format!("{} is not a positive number finite as f32", self.norm_eps),
            );
        }
        for (field, theta) in [
            (
                "global_rope_theta (rope_parameters.full_attention.rope_theta)",
                self.global_rope_theta,
            ),
            (
                "local_rope_theta (rope_parameters.sliding_attention.rope_theta)",
                self.local_rope_theta,
            ),
        ] {
            let t = theta as f32;
            if !(t.is_finite() && t > 0.0) {
                return bad(
                    field,
                    format!("{theta} is not a positive number finite as f32"),
                );
            }
        }
        Ok(())
    }
}

/// Validate a checkpoint's two configs together ([`ModelNumbers::check`]), naming the file
/// and the field: what the converter and `ask DIR` run on opening a checkpoint.
pub fn validate(
    enc_path: &Path,
    enc: &EncoderConfig,
    agent_path: &Path,
    agent: &AgentConfig,
) -> Result<()> {
    // Both epsilon spellings go into the file (the RMS key from `norm_eps`), whichever one
    // the engine uses: each must be usable.
    for (field, eps) in [
        ("norm_eps", enc.norm_eps),
        ("layer_norm_eps", enc.layer_norm_eps),
    ] {
        if let Some(eps) = eps {
            let e = eps as f32;
            if !(e.is_finite() && e > 0.0) {
                return Err(LayaError::key(
                    enc_path,
                    field,
                    format!("{eps} is not a positive number finite as f32"),
                ));
            }
        }
    }
    ModelNumbers::from_configs(enc, agent)
        .check()
        .map_err(|issue| {
            let path = match issue.field.as_str() {
                "head_layers" | "max_len" | "head_max_len" => agent_path,
                _ => enc_path,
            };
            LayaError::key(path, issue.field, issue.message)
        })
}

/// GGUF architecture name of Laya files.
pub const ARCH: &str = "modern-bert";

/// The model keys of a converted file, from `block_count` to the temperatures, in llama.cpp's
/// converter order (spec 2.2), with `general.file_type` (`file_type`) in its place among them:
/// what [`crate::convert`] writes between the `general.*` header keys and the tokenizer, and
/// what sky-infer's GGUF loader reads back into the numbers [`ModelNumbers::check`] checks.
/// `encoder_only`: no head blocks and no `decision.*` keys.
pub fn write_model_keys(
    w: &mut sky_gguf::GgufWriter,
    enc: &EncoderConfig,
    agent: &AgentConfig,
    file_type: u32,
    encoder_only: bool,
) -> Result<()> {
    use sky_gguf::Value as GValue;
    let k = |s: &str| format!("{ARCH}.{s}");
    let u = |n: usize| -> Result<u32> {
        u32::try_from(n)
            .map_err(|_| LayaError::Invalid(format!("value {n} does not fit a GGUF u32")))
    };
    let head_layers = if encoder_only { 0 } else { agent.head_layers };
    let n_blocks = enc.num_hidden_layers + head_layers;
    w.add_kv(k("block_count"), u(n_blocks)?);
    w.add_kv(k("context_length"), u(enc.max_position_embeddings)?);
    w.add_kv(k("embedding_length"), u(enc.hidden_size)?);
    let mut ffn = vec![enc.intermediate_size; enc.num_hidden_layers];
    ffn.extend(std::iter::repeat_n(4 * enc.hidden_size, head_layers));
    let ffn: Vec<i32> = ffn
        .into_iter()
        .map(|f| {
            i32::try_from(f).map_err(|_| {
                LayaError::Invalid(format!("feed_forward_length {f} does not fit i32"))
            })
        })
        .collect::<Result<_>>()?;
    w.add_kv(k("feed_forward_length"), GValue::i32_array(ffn));
    w.add_kv(k("attention.head_count"), u(enc.num_attention_heads)?);
    w.add_kv(k("rope.freq_base"), enc.global_rope_theta as f32);
    w.add_kv(k("rope.freq_base_swa"), enc.local_rope_theta as f32);
    if let Some(eps) = enc.norm_eps {
        // llama.cpp's converter maps the `norm_eps` spelling to the RMS key
        w.add_kv(k("attention.layer_norm_rms_epsilon"), eps as f32);
    }
    // required by llama.cpp's loader; from `norm_eps` when that is the only spelling
    w.add_kv(k("attention.layer_norm_epsilon"), enc.eps() as f32);
    w.add_kv("general.file_type", file_type);
    w.add_kv(k("attention.causal"), false);
    w.add_kv(k("attention.sliding_window"), u(enc.local_attention)?);
    w.add_kv(
        k("attention.sliding_window_pattern"),
        u(enc.global_attn_every_n_layers)?,
    );
    w.add_kv(k("rope.scaling.type"), "none");
    w.add_kv(k("vocab_size"), u(enc.vocab_size)?);
    if let Some(act) = &enc.hidden_activation {
        w.add_kv(k("hidden_activation"), act.as_str());
    }
    if !encoder_only {
        w.add_kv(k("decision.type"), "laya");
        w.add_kv(k("decision.block_count"), u(agent.head_layers)?);
        w.add_kv(k("decision.max_head_tokens"), u(agent.head_max_len)?);
        if let Some(max_len) = agent.max_len {
            // not read by llama.cpp: Laya's whole-sequence limit
            w.add_kv(k("decision.max_tokens"), u(max_len)?);
        }
        for (name, t) in agent.temperatures() {
            w.add_kv(k(&format!("decision.temperature.{name}")), t);
        }
    }
    Ok(())
}

/// Decision-head settings from `rl_agent_config.json`.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentConfig {
    /// `head_layers`: number of decision-head transformer blocks (required).
    pub head_layers: usize,
    /// `head_max_len` (llama.cpp's converter default 256 when absent).
    pub head_max_len: usize,
    /// `max_len`: Laya's whole-sequence limit, when present.
    pub max_len: Option<usize>,
    /// `temperature`: [choice, score, noul] (may be shorter).
    pub temperature: Vec<f32>,
    /// `temperature_by_options` in file order, with Laya bucket names (`choice:3-5`).
    pub temperature_by_options: Vec<(String, f32)>,
    /// `architecture` (Julia checkpoints say `JuliaDecisionModel`).
    pub architecture: Option<String>,
}

/// Question types in the order of `temperature` and `type_emb` rows.
pub const QUESTION_TYPES: [&str; 3] = ["choice", "score", "noul"];

impl AgentConfig {
    /// Parse `rl_agent_config.json`.
    pub fn load(path: &Path) -> Result<AgentConfig> {
        AgentConfig::parse(path, &read_file(path, AGENT_WHAT, Size::Config)?)
    }

    /// Parse the bytes of `rl_agent_config.json` (`path` names it in errors).
    pub(crate) fn parse(path: &Path, bytes: &[u8]) -> Result<AgentConfig> {
        AgentConfig::from_map(path, &parse_json_object(path, bytes)?)
    }

    /// Parse a parsed `rl_agent_config.json` (`path` names it in errors).
    pub fn from_map(path: &Path, map: &Map<String, Value>) -> Result<AgentConfig> {
        let k = Keys { path, map };
        // Checked in the type it is used in: f32 (finite as f64 is not enough: 1e39 is inf).
        let num = |key: String, v: &Value| -> Result<f32> {
            match v.as_f64() {
                Some(x) if (x as f32).is_finite() => Ok(x as f32),
                _ => Err(LayaError::key(
                    path,
                    key,
                    format!("expected a number finite as f32, found {v}"),
                )),
            }
        };
        let mut temperature = Vec::new();
        match map.get("temperature") {
            None | Some(Value::Null) => {}
            Some(Value::Array(items)) => {
                for (i, v) in items.iter().enumerate() {
                    temperature.push(num(format!("temperature[{i}]"), v)?);
                }
            }
            Some(v) => {
                return Err(LayaError::key(
                    path,
                    "temperature",
                    format!("expected a list of numbers, found {v}"),
                ))
            }
        }
        let mut by_options = Vec::new();
        match map.get("temperature_by_options") {
            None | Some(Value::Null) => {}
            Some(Value::Object(m)) => {
                for (name, v) in m {
                    by_options.push((
                        name.clone(),
                        num(format!("temperature_by_options.{name}"), v)?,
                    ));
                }
            }
            Some(v) => {
                return Err(LayaError::key(
                    path,
                    "temperature_by_options",
                    format!("expected an object, found {v}"),
                ))
            }
        }
        let head_layers = k.usize("head_layers")?;
        if head_layers == 0 {
            return Err(LayaError::key(path, "head_layers", "must be positive"));
        }
        limits::check(head_layers, limits::MAX_LAYERS)
            .map_err(|m| LayaError::key(path, "head_layers", m))?;
        for key in ["head_max_len", "max_len"] {
            if let Some(v) = k.opt_usize(key)? {
                limits::check(v, limits::MAX_SEQUENCE).map_err(|m| LayaError::key(path, key, m))?;
            }
        }
        Ok(AgentConfig {
            head_layers,
            head_max_len: k.opt_usize("head_max_len")?.unwrap_or(256),
            max_len: k.opt_usize("max_len")?,
            temperature,
            temperature_by_options: by_options,
            architecture: k.opt_str("architecture")?,
        })
    }

    /// Every temperature as (GGUF key suffix, value), in the order llama.cpp's converter
    /// writes them: `choice`, `score`, `noul` from `temperature`, then each
    /// `temperature_by_options` entry with its bucket name rewritten (`choice.3_5`).
    pub fn temperatures(&self) -> Vec<(String, f32)> {
        let mut out: Vec<(String, f32)> = QUESTION_TYPES
            .iter()
            .zip(&self.temperature)
            .map(|(n, t)| (n.to_string(), *t))
            .collect();
        out.extend(
            self.temperature_by_options
                .iter()
                .map(|(n, t)| (temperature_bucket_key(n), *t)),
        );
        out
    }

    /// True for Julia-1 checkpoints (other option template).
    pub fn is_julia(&self) -> bool {
        self.architecture.as_deref() == Some("JuliaDecisionModel")
    }
}

/// Rewrite a Laya temperature bucket name to its GGUF key suffix, as llama.cpp's converter
/// does: `:` becomes `.`, `-` becomes `_`, and a trailing `+` is dropped
/// (`choice:3-5` -> `choice.3_5`, `choice:11+` -> `choice.11`).
pub fn temperature_bucket_key(bucket: &str) -> String {
    bucket
        .trim_end_matches('+')
        .replace(':', ".")
        .replace('-', "_")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_mutations_of_real_configs_never_panic() {
        // A deterministic stand-in for the fuzz target (fuzz/fuzz_targets/laya_checkpoint.rs):
        // flip, insert, delete and truncate bytes of s1-pico's two configs; parsing returns Ok
        // or Err, never panics, and never sizes an allocation by a field.
        let seeds: [&[u8]; 2] = [
            include_bytes!("../../../models/s1-pico/encoder/config.json"),
            include_bytes!("../../../models/s1-pico/rl_agent_config.json"),
        ];
        let mut state = 0x9E37_79B9_u32;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            state
        };
        let digits = b"0123456789-.e\"{}[],: ";
        let path = Path::new("config.json");
        for round in 0..20_000 {
            let mut b = seeds[round % 2].to_vec();
            for _ in 0..=(next() % 4) {
                let at = next() as usize % (b.len() + 1);
                match next() % 5 {
                    0 if at < b.len() => b[at] ^= 1 << (next() % 8),
                    1 => b.insert(at, next() as u8),
                    2 => b.insert(at, digits[next() as usize % digits.len()]),
                    3 if at < b.len() => {
                        b.remove(at);
                    }
                    _ => b.truncate(at),
                }
            }
            let _ = EncoderConfig::parse(path, &b);
            let _ = AgentConfig::parse(path, &b);
            let _ = parse_json_object(path, &b);
        }
    }

    #[test]
    fn bucket_keys_as_llama_cpp() {
        assert_eq!(temperature_bucket_key("choice:3-5"), "choice.3_5");
        assert_eq!(temperature_bucket_key("choice:11+"), "choice.11");
        assert_eq!(temperature_bucket_key("score:6-10"), "score.6_10");
        assert_eq!(temperature_bucket_key("noul:2"), "noul.2");
    }

    fn obj(s: &str) -> Map<String, Value> {
        match serde_json::from_str(s) {
            Ok(Value::Object(m)) => m,
            _ => panic!("test json"),
        }
    }

    #[test]
    fn both_rope_spellings_and_eps() {
        let p = Path::new("encoder/config.json");
        let old = obj(
            r#"{"hidden_size":64,"intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":1,
            "vocab_size":10,"global_rope_theta":1000.0,"local_rope_theta":10.0,"layer_norm_eps":1e-6}"#,
        );
        let c = EncoderConfig::from_map(p, &old).unwrap();
        assert_eq!((c.global_rope_theta, c.local_rope_theta), (1000.0, 10.0));
        assert_eq!(
            (c.norm_eps, c.layer_norm_eps, c.eps()),
            (None, Some(1e-6), 1e-6)
        );
        let v5 = obj(
            r#"{"hidden_size":64,"intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":1,
            "vocab_size":10,"norm_eps":2e-5,"rope_parameters":{"full_attention":{"rope_theta":5.0,"rope_type":"default"},
            "sliding_attention":{"rope_theta":7.0}}}"#,
        );
        let c = EncoderConfig::from_map(p, &v5).unwrap();
        assert_eq!((c.global_rope_theta, c.local_rope_theta), (5.0, 7.0));
        assert_eq!(
            (c.norm_eps, c.layer_norm_eps, c.eps()),
            (Some(2e-5), None, 2e-5)
        );
    }

    #[test]
    fn missing_and_bad_keys_are_named() {
        let p = Path::new("encoder/config.json");
        let e = EncoderConfig::from_map(p, &obj(r#"{"hidden_size":64}"#))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("intermediate_size") && e.contains("missing"),
            "{e}"
        );
        let e = EncoderConfig::from_map(
            p,
            &obj(r#"{"hidden_size":"x","intermediate_size":1,"num_hidden_layers":1,"num_attention_heads":1,"vocab_size":1}"#),
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("\"hidden_size\"") && e.contains("integer"),
            "{e}"
        );
        let a = Path::new("rl_agent_config.json");
        let e = AgentConfig::from_map(a, &obj(r#"{"max_len":5}"#))
            .unwrap_err()
            .to_string();
        assert!(e.contains("head_layers"), "{e}");
        let e = AgentConfig::from_map(a, &obj(r#"{"head_layers":1,"temperature":[1,"x"]}"#))
            .unwrap_err()
            .to_string();
        assert!(e.contains("temperature[1]"), "{e}");
    }

    #[test]
    fn temperatures_in_converter_order() {
        let a = AgentConfig::from_map(
            Path::new("x"),
            &obj(r#"{"head_layers":1,"temperature":[1.5,2.0],"temperature_by_options":{"choice:11+":0.1,"score:3-5":1.55}}"#),
        )
        .unwrap();
        assert_eq!(a.head_max_len, 256);
        let t = a.temperatures();
        let names: Vec<&str> = t.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["choice", "score", "choice.11", "score.3_5"]);
        assert_eq!(t[3].1, 1.55f32);
    }
}
