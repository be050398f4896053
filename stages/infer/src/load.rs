//! Loading an [`Engine`] from GGUF bytes (core, no filesystem) and, with the `std-fs`
//! feature, from a `.gguf` file or a Laya checkpoint (a directory, or its files in memory).

use crate::config::{ModelConfig, Temperatures};
use crate::engine::Engine;
use crate::error::{InferError, Result};
use crate::model::Model;
use crate::sequence::SpecialTokens;
use sky_gguf::{GgufFile, Value as GValue};
use sky_laya::config::limits;

fn upstream(
    component: &'static str,
    e: impl Into<Box<dyn std::error::Error + Send + Sync>>,
) -> InferError {
    InferError::upstream(component, e)
}

/// Laya bucket name from a GGUF temperature key suffix (`choice.3_5` -> `choice:3-5`,
/// `choice.11` -> `choice:11+`).
pub fn laya_bucket_from_gguf(suffix: &str) -> Option<String> {
    let (t, size) = suffix.split_once('.')?;
    let size = match size {
        "2" => "2",
        "3_5" => "3-5",
        "6_10" => "6-10",
        "11" => "11+",
        _ => return None,
    };
    Some(format!("{t}:{size}"))
}

struct Meta<'f, 'a> {
    f: &'f GgufFile<'a>,
    arch: String,
}

impl<'f, 'a> Meta<'f, 'a> {
    /// The metadata of `f`, whose keys are prefixed by its `general.architecture`.
    fn new(f: &'f GgufFile<'a>) -> Result<Self> {
        let arch = f
            .get("general.architecture")
            .and_then(GValue::as_str)
            .ok_or_else(|| InferError::MissingKey {
                origin: "GGUF".into(),
                key: "general.architecture".into(),
            })?
            .to_string();
        Ok(Meta { f, arch })
    }
    fn key(&self, k: &str) -> String {
        format!("{}.{k}", self.arch)
    }
    fn get(&self, k: &str) -> Option<&GValue> {
        self.f.get(&self.key(k))
    }
    fn req_u(&self, k: &str) -> Result<usize> {
        let v = self.get(k).ok_or_else(|| InferError::MissingKey {
            origin: "GGUF".into(),
            key: self.key(k),
        })?;
        v.as_u64()
            .map(|x| x as usize)
            .ok_or_else(|| InferError::BadValue {
                key: self.key(k),
                message: format!("expected an unsigned integer, found {:?}", v.value_type()),
            })
    }
    /// [`Meta::req_u`] checked against `max` (a count that sizes an allocation: checked before
    /// anything is sized, so a hostile file costs nothing).
    fn req_u_max(&self, k: &str, max: usize) -> Result<usize> {
        let v = self.req_u(k)?;
        self.within(k, v, max)
    }
    /// [`Meta::opt_u`] checked against `max`.
    fn opt_u_max(&self, k: &str, max: usize) -> Result<Option<usize>> {
        self.opt_u(k)?.map(|v| self.within(k, v, max)).transpose()
    }
    fn within(&self, k: &str, v: usize, max: usize) -> Result<usize> {
        limits::check(v, max).map_err(|message| InferError::BadValue {
            key: self.key(k),
            message,
        })?;
        Ok(v)
    }
    fn opt_u(&self, k: &str) -> Result<Option<usize>> {
        match self.get(k) {
            None => Ok(None),
            Some(_) => self.req_u(k).map(Some),
        }
    }
    fn opt_f(&self, k: &str) -> Result<Option<f64>> {
        match self.get(k) {
            None => Ok(None),
            Some(v) => v.as_f64().map(Some).ok_or_else(|| InferError::BadValue {
                key: self.key(k),
                message: format!("expected a float, found {:?}", v.value_type()),
            }),
        }
    }
}

fn gguf_u32(f: &GgufFile<'_>, key: &str) -> Result<u32> {
    let v = f.get(key).ok_or_else(|| InferError::MissingKey {
        origin: "GGUF".into(),
        key: key.into(),
    })?;
    v.as_u32().ok_or_else(|| InferError::BadValue {
        key: key.into(),
        message: "expected a u32 token id".into(),
    })
}

/// The model config of a GGUF file written for a Laya decision model (its `<arch>.*` keys, as
/// [`sky_laya::config::write_model_keys`] writes them), checked by [`ModelConfig::validate`]:
/// the converter's own check, so every file `convert` writes loads.
pub fn config_from_gguf(f: &GgufFile<'_>) -> Result<ModelConfig> {
    let m = Meta::new(f)?;
    // Every count below sizes something (layer lists, RoPE tables, weights): each is checked
    // against the engine's limits as it is read.
    let n_layer = m.req_u_max("block_count", 2 * limits::MAX_LAYERS)?;
    let n_dec = m.req_u_max("decision.block_count", limits::MAX_LAYERS)?;
    if n_dec >= n_layer {
        return Err(InferError::BadValue {
            key: m.key("decision.block_count"),
            message: format!("{n_dec} head blocks leave no encoder in {n_layer} blocks"),
        });
    }
    let n_enc = n_layer - n_dec;
    let hidden = m.req_u_max("embedding_length", limits::MAX_HIDDEN)?;
    let ff_key = m.key("feed_forward_length");
    let intermediate = match m.get("feed_forward_length") {
        Some(GValue::Array(a)) => a.items.first().and_then(GValue::as_u64).map(|x| x as usize),
        Some(v) => v.as_u64().map(|x| x as usize),
        None => None,
    }
    .ok_or_else(|| InferError::MissingKey {
        origin: "GGUF".into(),
        key: ff_key,
    })?;
    let intermediate = m.within(
        "feed_forward_length",
        intermediate,
        limits::MAX_INTERMEDIATE,
    )?;
    let pattern = m
        .opt_u("attention.sliding_window_pattern")?
        .unwrap_or(3)
        .max(1);
    let window = m
        .opt_u_max("attention.sliding_window", limits::MAX_SEQUENCE)?
        .unwrap_or(0);
    let eps = match m.opt_f("attention.layer_norm_epsilon")? {
        Some(e) => e,
        None => m.opt_f("attention.layer_norm_rms_epsilon")?.unwrap_or(1e-5),
    };
    let rope_global = m.opt_f("rope.freq_base")?.unwrap_or(160_000.0);
    let cfg = ModelConfig {
        hidden,
        vocab: m.opt_u_max("vocab_size", limits::MAX_VOCAB)?.map_or_else(
            || {
                f.tensor("token_embd.weight")
                    .map(|t| t.shape().first().copied().unwrap_or(0) as usize)
                    .ok_or(InferError::MissingTensor {
                        name: "token_embd.weight".into(),
                    })
            },
            Ok,
        )?,
        n_enc,
        enc_heads: m.req_u_max("attention.head_count", limits::MAX_HEADS)?,
        intermediate,
        n_head_layers: n_dec,
        head_heads: sky_laya::config::head_heads(hidden),
        eps: eps as f32,
        global_layers: (0..n_enc)
            .map(|i| sky_laya::config::is_global_layer(i, pattern))
            .collect(),
        // 0 (or no key) would mean "no window"; the converter never writes it and the
        // config check refuses it, naming `local_attention`.
        local_attention: window,
        rope_global: rope_global as f32,
        rope_local: m.opt_f("rope.freq_base_swa")?.unwrap_or(rope_global) as f32,
        max_len: m
            .opt_u_max("decision.max_tokens", limits::MAX_SEQUENCE)?
            .unwrap_or(sky_laya::config::DEFAULT_MAX_LEN),
        max_head_tokens: m
            .opt_u_max("decision.max_head_tokens", limits::MAX_SEQUENCE)?
            .unwrap_or(256),
    };
    cfg.validate()?;
    Ok(cfg)
}

/// Build an engine from the bytes of a GGUF written for a Laya decision model
/// (`modern-bert` with `decision.type = "laya"`). F32/F16/BF16/Q8_0 tensors are decoded to f32.
pub fn engine_from_gguf(bytes: &[u8], name: String) -> Result<Engine> {
    let f = GgufFile::parse(bytes).map_err(|e| upstream("gguf", e))?;
    let m = Meta::new(&f)?;
    match m.get("decision.type").and_then(GValue::as_str) {
        Some("laya") => {}
        Some(other) => {
            return Err(InferError::NotDecisionModel {
                message: format!(
                    "{} is {other:?}; only \"laya\" is supported",
                    m.key("decision.type")
                ),
            })
        }
        None => {
            return Err(InferError::NotDecisionModel {
                message: format!("the file has no {} key", m.key("decision.type")),
            })
        }
    }
    let cfg = config_from_gguf(&f)?;
    let mut temps = Temperatures::default();
    let prefix = m.key("decision.temperature.");
    for (k, v) in f.metadata.iter() {
        let Some(suffix) = k.strip_prefix(&prefix) else {
            continue;
        };
        let t = v.as_f64().ok_or_else(|| InferError::BadValue {
            key: k.clone(),
            message: "expected a float temperature".into(),
        })?;
        match suffix {
            "choice" => temps.by_type[0] = Some(t),
            "score" => temps.by_type[1] = Some(t),
            "noul" => temps.by_type[2] = Some(t),
            other => {
                if let Some(b) = laya_bucket_from_gguf(other) {
                    temps.by_bucket.push((b, t));
                }
            }
        }
    }
    let src = |name: &str| -> Result<Option<(Vec<usize>, Vec<f32>)>> {
        let Some(t) = f.tensor(name) else {
            return Ok(None);
        };
        let shape = t.shape().iter().map(|&x| x as usize).collect();
        let data = t.to_f32().map_err(|e| InferError::BadTensor {
            name: name.into(),
            message: e.to_string(),
        })?;
        Ok(Some((shape, data)))
    };
    let model = Model::build(cfg, &src)?;
    let tok = sky_laya::tokenizer_from_gguf(&f).map_err(|e| upstream("tokenizer", e))?;
    let mask = gguf_u32(&f, "tokenizer.ggml.mask_token_id")?;
    let sep = gguf_u32(&f, "tokenizer.ggml.seperator_token_id")?;
    let mask_text = tok
        .id_to_token(mask)
        .ok_or_else(|| InferError::BadValue {
            key: "tokenizer.ggml.mask_token_id".into(),
            message: format!("id {mask} is not in the vocabulary"),
        })?
        .to_string();
    // The CLS id has no GGUF key: take the text the systemone template starts with.
    let cls = f
        .get("tokenizer.chat_template.systemone")
        .and_then(GValue::as_str)
        .and_then(|t| t.split("{{").next())
        .and_then(|text| tok.token_to_id(text))
        .map(Ok)
        .unwrap_or_else(|| gguf_u32(&f, "tokenizer.ggml.bos_token_id"))?;
    let special = SpecialTokens {
        cls,
        sep,
        mask,
        mask_text,
    };
    Ok(Engine::new(name, model, Box::new(tok), special, temps))
}

#[cfg(feature = "std-fs")]
mod fs {
    use super::*;
    use sky_laya::CheckpointFiles;
    use std::path::Path;

    fn io(path: &Path, e: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> InferError {
        InferError::io(path.display().to_string(), e)
    }

    fn file_name(path: &Path) -> String {
        path.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| path.display().to_string())
    }

    /// Load a Laya checkpoint directory (safetensors computed in f32).
    pub fn engine_from_laya_dir(dir: &Path) -> Result<Engine> {
        if let Some(e) = sky_laya::checkpoint::not_a_checkpoint(dir) {
            return Err(upstream("laya checkpoint", e));
        }
        let read = |rel: &str| {
            let p = dir.join(rel);
            sky_fs::read(&p, sky_fs::CONFIG).map_err(|e| io(&p, std::io::Error::from(e)))
        };
        let (enc, agent) = (read("encoder/config.json"), read("rl_agent_config.json"));
        engine_from_laya(dir, enc, agent, || sky_laya::LayaCheckpoint::open(dir))
    }

    /// [`engine_from_laya_dir`] on the checkpoint's files in memory, with the same checks and
    /// errors (paths under `dir`, which is not read).
    pub fn engine_from_laya_files(dir: &Path, files: &CheckpointFiles<'_>) -> Result<Engine> {
        engine_from_laya(
            dir,
            Ok(files.encoder_config),
            Ok(files.agent_config),
            || sky_laya::LayaCheckpoint::from_files(dir, files),
        )
    }

    /// What both loaders share: `enc` and `agent` are the two configs as read (a read error
    /// is reported in its turn), `open` opens the checkpoint.
    fn engine_from_laya<B: AsRef<[u8]>>(
        dir: &Path,
        enc: Result<B>,
        agent: Result<B>,
        open: impl FnOnce() -> sky_laya::Result<sky_laya::LayaCheckpoint>,
    ) -> Result<Engine> {
        let json = |rel: &str, bytes: Result<B>| -> Result<serde_json::Value> {
            let p = dir.join(rel);
            let bytes = bytes?;
            let text = std::str::from_utf8(bytes.as_ref())
                .map_err(|_| io(&p, "stream did not contain valid UTF-8"))?;
            serde_json::from_str(text).map_err(|e| io(&p, format!("invalid JSON: {e}")))
        };
        let enc = json("encoder/config.json", enc)?;
        let agent = json("rl_agent_config.json", agent)?;
        let cfg = ModelConfig::from_laya_json(&enc, &agent)?;
        let ckpt = open().map_err(|e| upstream("laya checkpoint", e))?;
        let mut map = std::collections::HashMap::new();
        for (gguf, _pt, shape, data) in ckpt.iter_f32() {
            map.insert(gguf.to_string(), (shape.to_vec(), data));
        }
        let lookup =
            |name: &str| -> Result<Option<(Vec<usize>, Vec<f32>)>> { Ok(map.get(name).cloned()) };
        let model = Model::build(cfg, &lookup)?;
        let tk = &ckpt.tokenizer;
        let tok = tk.tokenizer().map_err(|e| upstream("tokenizer", e))?;
        let id_of = |key: &str| -> Result<(u32, String)> {
            let text = tk.special_text(key).map_err(|e| upstream("tokenizer", e))?;
            let id = tk.added_id(&text).ok_or_else(|| InferError::BadValue {
                key: key.into(),
                message: format!("{text:?} has no id"),
            })?;
            Ok((id, text))
        };
        let (cls, _) = id_of("cls_token")?;
        let (sep, _) = id_of("sep_token")?;
        let (mask, mask_text) = id_of("mask_token")?;
        let temps = Temperatures::from_laya_json(&agent);
        Ok(Engine::new(
            file_name(dir),
            model,
            Box::new(tok),
            SpecialTokens {
                cls,
                sep,
                mask,
                mask_text,
            },
            temps,
        ))
    }

    /// Load a `.gguf` file or a Laya directory.
    pub fn open(path: &Path) -> Result<Engine> {
        if path.is_dir() {
            return engine_from_laya_dir(path);
        }
        // Mapped, not read: only what the header names is touched, and a file that is not a
        // regular file (a FIFO, a device) is refused before it is opened.
        let map = sky_gguf::GgufMmap::open(path).map_err(|e| match e {
            sky_gguf::Error::Io { err, .. } => io(path, err),
            other => upstream("gguf", other),
        })?;
        engine_from_gguf(map.bytes(), file_name(path)).map_err(|e| e.at(path.display().to_string()))
    }
}

#[cfg(feature = "std-fs")]
pub use fs::{engine_from_laya_dir, engine_from_laya_files, open};

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Map, Value};
    use sky_laya::config::{validate, write_model_keys, ARCH};
    use sky_laya::{AgentConfig, EncoderConfig};
    use std::path::Path;

    /// xorshift64: a fixed-seed source of choices, so a failure reproduces.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn pick<T: Clone>(&mut self, xs: &[T]) -> T {
            xs[(self.next() % xs.len() as u64) as usize].clone()
        }
        fn chance(&mut self, percent: u64) -> bool {
            self.next() % 100 < percent
        }
    }

    /// Put `key` in `m` unless the pick is `None` (the key absent).
    fn maybe(m: &mut Map<String, Value>, key: &str, v: Option<Value>) {
        if let Some(v) = v {
            m.insert(key.into(), v);
        }
    }

    /// A random pair of configs: each field mostly drawn from valid values, sometimes (1 in
    /// 12) from values at and past its limits (zero, negative, subnormal as f32, finite as f64
    /// but infinite as f32, above the caps, absent), so that about half the pairs are accepted.
    fn random_configs(r: &mut Rng) -> (Map<String, Value>, Map<String, Value>) {
        fn f<T: Clone>(r: &mut Rng, good: &[T], bad: &[T]) -> T {
            if r.chance(8) {
                r.pick(bad)
            } else {
                r.pick(good)
            }
        }
        let mut e = Map::new();
        let n_layers = f(r, &[1u64, 2, 3, 4, 7], &[0]);
        e.insert(
            "hidden_size".into(),
            json!(f(r, &[8u64, 64, 96, 128, 192], &[0, 6, 130, 65_537])),
        );
        e.insert(
            "num_attention_heads".into(),
            json!(f(r, &[1u64, 2, 4], &[0, 3, 8])),
        );
        e.insert(
            "intermediate_size".into(),
            json!(f(r, &[1u64, 128], &[0, 300_000])),
        );
        e.insert("num_hidden_layers".into(), json!(n_layers));
        e.insert(
            "vocab_size".into(),
            json!(f(r, &[1u64, 1024], &[0, 5_000_000])),
        );
        let every = f(r, &[None, Some(1u64), Some(2), Some(3)], &[Some(0)]);
        maybe(
            &mut e,
            "global_attn_every_n_layers",
            every.map(|v| json!(v)),
        );
        if r.chance(40) {
            // layer_types: as the pattern says, or a random list (of a random length)
            let every = every.unwrap_or(3).max(1);
            let types: Vec<&str> = if r.chance(80) {
                (0..n_layers)
                    .map(|i| {
                        if i % every == 0 {
                            "full_attention"
                        } else {
                            "sliding_attention"
                        }
                    })
                    .collect()
            } else {
                (0..r.pick(&[0u64, n_layers, n_layers + 1]))
                    .map(|_| r.pick(&["full_attention", "sliding_attention"]))
                    .collect()
            };
            e.insert("layer_types".into(), json!(types));
        }
        let local = f(
            r,
            &[None, Some(json!(1)), Some(json!(128))],
            &[Some(json!(0)), Some(json!(70_000))],
        );
        maybe(&mut e, "local_attention", local);
        let eps_good = [
            None,
            Some(json!(1e-44)),
            Some(json!(1e-5)),
            Some(json!(0.5)),
        ];
        let eps_bad = [
            Some(json!(-1.0)),
            Some(json!(0.0)),
            Some(json!(1e-60)),
            Some(json!(1e39)),
        ];
        let eps_key = r.pick(&[
            "norm_eps",
            "layer_norm_eps",
            "rms_norm_eps",
            "layer_norm_epsilon",
        ]);
        let eps = f(r, &eps_good, &eps_bad);
        maybe(&mut e, eps_key, eps);
        if r.chance(20) {
            let eps = f(r, &eps_good, &eps_bad);
            maybe(&mut e, "norm_eps", eps);
        }
        let t_good = [
            None,
            Some(json!(1e-30)),
            Some(json!(10.0)),
            Some(json!(160_000.0)),
            Some(json!(3e38)),
        ];
        let t_bad = [
            Some(json!(-5.0)),
            Some(json!(0.0)),
            Some(json!(1e-60)),
            Some(json!(1e39)),
        ];
        let (g, l) = (f(r, &t_good, &t_bad), f(r, &t_good, &t_bad));
        if r.chance(50) {
            maybe(&mut e, "global_rope_theta", g);
            maybe(&mut e, "local_rope_theta", l);
        } else {
            let mut rp = Map::new();
            if let Some(t) = g {
                rp.insert("full_attention".into(), json!({"rope_theta": t}));
            }
            if let Some(t) = l {
                rp.insert("sliding_attention".into(), json!({"rope_theta": t}));
            }
            e.insert("rope_parameters".into(), Value::Object(rp));
        }
        let mut a = Map::new();
        a.insert("head_layers".into(), json!(f(r, &[1u64, 2], &[0, 2000])));
        // Always given: when absent the converter writes llama.cpp's default 256 while the
        // PyTorch code (and `ask DIR`) use 192, a documented difference (spec 2.2).
        a.insert(
            "head_max_len".into(),
            json!(f(r, &[1u64, 96], &[0, 70_000])),
        );
        let max_len = f(
            r,
            &[None, Some(json!(4)), Some(json!(512))],
            &[
                Some(json!(0)),
                Some(json!(1)),
                Some(json!(3)),
                Some(json!(70_000)),
            ],
        );
        maybe(&mut a, "max_len", max_len);
        let (tg, tb) = (
            [json!(0.5), json!(1.0647699), json!(7.5), json!(-2.0)],
            [json!(1e39), json!(-1e39)],
        );
        let t = [f(r, &tg, &tb), f(r, &tg, &tb), f(r, &tg, &tb)];
        a.insert("temperature".into(), json!(t));
        a.insert(
            "temperature_by_options".into(),
            json!({"choice:3-5": f(r, &tg, &tb)}),
        );
        (e, a)
    }

    /// The construction of issue 53 class 6: one check ([`sky_laya::ModelNumbers::check`]),
    /// so whatever the converter accepts (configs parsed and validated), the file it writes
    /// loads ([`config_from_gguf`]) and `ask DIR` loads it too, both into the same config.
    #[test]
    fn whatever_convert_accepts_load_accepts_and_reads_the_same() {
        let mut r = Rng(0x5eed_53c0_ffee_1234);
        let (ep, ap) = (
            Path::new("encoder/config.json"),
            Path::new("rl_agent_config.json"),
        );
        let (mut accepted, mut refused) = (0, 0);
        for round in 0..20_000 {
            let (e, a) = random_configs(&mut r);
            let convert_accepts = EncoderConfig::from_map(ep, &e).and_then(|enc| {
                let agent = AgentConfig::from_map(ap, &a)?;
                validate(ep, &enc, ap, &agent)?;
                Ok((enc, agent))
            });
            let Ok((enc, agent)) = convert_accepts else {
                refused += 1;
                continue;
            };
            accepted += 1;
            let why = format!("round {round}: {e:?} {a:?}");
            let mut w = sky_gguf::GgufWriter::new();
            w.add_kv("general.architecture", ARCH);
            write_model_keys(&mut w, &enc, &agent, 1, false)
                .unwrap_or_else(|x| panic!("{why}: {x}"));
            let bytes = w
                .to_bytes()
                .unwrap_or_else(|x| panic!("{why}: writing: {x}"));
            let f = GgufFile::parse(&bytes).unwrap_or_else(|x| panic!("{why}: {x}"));
            let from_file = config_from_gguf(&f)
                .unwrap_or_else(|x| panic!("{why}: load refuses what convert accepted: {x}"));
            let from_dir = ModelConfig::from_laya_json(&Value::Object(e), &Value::Object(a))
                .unwrap_or_else(|x| panic!("{why}: ask DIR refuses what convert accepted: {x}"));
            assert_eq!(from_file, from_dir, "{why}");
        }
        assert!(
            accepted > 3_000 && refused > 3_000,
            "{accepted} accepted, {refused} refused"
        );
    }
}
