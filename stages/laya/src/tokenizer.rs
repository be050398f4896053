//! The checkpoint's `tokenizer/` directory: what GGUF needs from `tokenizer.json` and
//! `tokenizer_config.json` (tokens, token types, merges, special ids, the `systemone`
//! template), the `skycmd.tokenizer.*` keys, and rebuilding the tokenizer from a GGUF file.

use std::borrow::Cow;
use std::path::{Path, PathBuf};

use serde_json::{json, Map, Value as Json};
use sky_gguf::{GgufFile, GgufWriter, Value, ValueType};
use sky_tokenizer::AddedToken;

use crate::config::{parse_json_object, read_file, read_optional, utf8, Size};
use crate::error::{LayaError, Result};

/// ggml token types (llama.cpp `llama_token_type`).
pub mod token_type {
    /// An ordinary vocabulary entry.
    pub const NORMAL: i32 = 1;
    /// A special (control) token.
    pub const CONTROL: i32 = 3;
    /// An added token that is not special.
    pub const USER_DEFINED: i32 = 4;
    /// An id the tokenizer does not define (written as `[PAD{id}]`).
    pub const UNUSED: i32 = 5;
}

/// The tokenizer files of a Laya checkpoint, parsed.
#[derive(Debug, Clone)]
pub struct LayaTokenizer {
    /// The `tokenizer/` directory.
    pub dir: PathBuf,
    /// Text of tokenizer.json as stored.
    pub json: String,
    /// The BPE model vocabulary (`model.vocab`), token text and id.
    pub vocab: Vec<(String, u32)>,
    /// BPE merges in rank order.
    pub merges: Vec<(String, String)>,
    /// `added_tokens` in file order.
    pub added: Vec<AddedToken>,
    /// The normalizer is NFC (else there is none).
    pub nfc: bool,
    /// ByteLevel pre-tokenizer `add_prefix_space`.
    pub add_prefix_space: bool,
    /// ByteLevel pre-tokenizer `use_regex`.
    pub use_regex: bool,
    /// BPE `ignore_merges`.
    pub ignore_merges: bool,
    /// tokenizer_config.json.
    pub config: Map<String, Json>,
    /// tokenizer/config.json, when present.
    pub model_config: Option<Map<String, Json>>,
    post_processor: Option<Json>,
}

/// The files of a `tokenizer/` directory as read, each read error kept until the loader
/// reaches that file (so reading first changes no error).
pub(crate) struct TokenizerFiles<'a> {
    pub json: Result<Cow<'a, [u8]>>,
    pub config: Result<Cow<'a, [u8]>>,
    pub model_config: Result<Option<Cow<'a, [u8]>>>,
}

impl TokenizerFiles<'_> {
    /// Read the files of the `tokenizer/` directory `dir`.
    pub(crate) fn read(dir: &Path) -> TokenizerFiles<'static> {
        TokenizerFiles {
            json: read_file(
                &dir.join("tokenizer.json"),
                "the Hugging Face tokenizer of the checkpoint",
                Size::Tokenizer,
            )
            .map(Cow::Owned),
            config: read_file(
                &dir.join("tokenizer_config.json"),
                "tokenizer/tokenizer_config.json, the special token names",
                Size::Config,
            )
            .map(Cow::Owned),
            model_config: read_optional(&dir.join("config.json"), "tokenizer/config.json")
                .map(|b| b.map(Cow::Owned)),
        }
    }
}

fn tok_err(path: &Path, reason: impl Into<String>) -> LayaError {
    LayaError::Tokenizer {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

fn bool_field(
    obj: &Map<String, Json>,
    key: &str,
    default: bool,
    path: &Path,
    ctx: &str,
) -> Result<bool> {
    match obj.get(key) {
        None | Some(Json::Null) => Ok(default),
        Some(Json::Bool(b)) => Ok(*b),
        Some(v) => Err(tok_err(
            path,
            format!("{ctx}.{key}: expected true or false, found {v}"),
        )),
    }
}

/// Token text of a tokenizer_config entry (`"[CLS]"` or `{"content": "[CLS]", ...}`).
fn config_token(config: &Map<String, Json>, key: &str) -> Option<String> {
    match config.get(key)? {
        Json::String(s) => Some(s.clone()),
        Json::Object(o) => o.get("content")?.as_str().map(str::to_string),
        _ => None,
    }
}

impl LayaTokenizer {
    /// Read `dir/tokenizer.json`, `dir/tokenizer_config.json` and, if present,
    /// `dir/config.json`. Refuses tokenizers the GGUF `gpt2` model cannot describe
    /// (anything but byte-level BPE with an optional NFC normalizer).
    pub fn load(dir: &Path) -> Result<LayaTokenizer> {
        LayaTokenizer::from_files(dir, TokenizerFiles::read(dir))
    }

    /// [`LayaTokenizer::load`] on files already read (`dir` names them in errors).
    pub(crate) fn from_files(dir: &Path, files: TokenizerFiles<'_>) -> Result<LayaTokenizer> {
        let path = dir.join("tokenizer.json");
        let text = utf8(&path, &files.json?)?.to_owned();
        let root: Json = serde_json::from_str(&text).map_err(|e| LayaError::Json {
            path: path.clone(),
            source: e,
        })?;
        let root = root
            .as_object()
            .ok_or_else(|| tok_err(&path, "top level is not an object"))?;
        let model = root
            .get("model")
            .and_then(Json::as_object)
            .ok_or_else(|| tok_err(&path, "no \"model\" object"))?;
        let model_type = model.get("type").and_then(Json::as_str).unwrap_or("<none>");
        if model_type != "BPE" {
            return Err(tok_err(
                &path,
                format!("model.type is {model_type:?}; only byte-level BPE tokenizers (\"BPE\") can be converted"),
            ));
        }
        let vocab_obj = model
            .get("vocab")
            .and_then(Json::as_object)
            .ok_or_else(|| tok_err(&path, "model.vocab: expected an object"))?;
        let mut vocab = Vec::with_capacity(vocab_obj.len());
        for (tok, id) in vocab_obj {
            let id = id
                .as_u64()
                .and_then(|i| u32::try_from(i).ok())
                .ok_or_else(|| {
                    tok_err(
                        &path,
                        format!("model.vocab[{tok:?}]: expected a token id, found {id}"),
                    )
                })?;
            vocab.push((tok.clone(), id));
        }
        let mut merges = Vec::new();
        if let Some(list) = model.get("merges") {
            let list = list
                .as_array()
                .ok_or_else(|| tok_err(&path, "model.merges: expected an array"))?;
            for (i, m) in list.iter().enumerate() {
                let pair = match m {
                    Json::String(s) => s
                        .split_once(' ')
                        .map(|(a, b)| (a.to_string(), b.to_string())),
                    Json::Array(p) if p.len() == 2 => match (p[0].as_str(), p[1].as_str()) {
                        (Some(a), Some(b)) => Some((a.to_string(), b.to_string())),
                        _ => None,
                    },
                    _ => None,
                };
                merges.push(pair.ok_or_else(|| {
                    tok_err(
                        &path,
                        format!("model.merges[{i}]: expected \"a b\" or [a, b], found {m}"),
                    )
                })?);
            }
        }
        let ignore_merges = bool_field(model, "ignore_merges", false, &path, "model")?;
        let mut added = Vec::new();
        if let Some(list) = root.get("added_tokens") {
            let list = list
                .as_array()
                .ok_or_else(|| tok_err(&path, "added_tokens: expected an array"))?;
            for (i, t) in list.iter().enumerate() {
                let ctx = format!("added_tokens[{i}]");
                let obj = t
                    .as_object()
                    .ok_or_else(|| tok_err(&path, format!("{ctx}: expected an object")))?;
                let id = obj
                    .get("id")
                    .and_then(Json::as_u64)
                    .and_then(|i| u32::try_from(i).ok())
                    .ok_or_else(|| tok_err(&path, format!("{ctx}.id: expected a token id")))?;
                let content = obj
                    .get("content")
                    .and_then(Json::as_str)
                    .ok_or_else(|| tok_err(&path, format!("{ctx}.content: expected a string")))?
                    .to_string();
                added.push(AddedToken {
                    id,
                    content,
                    special: bool_field(obj, "special", false, &path, &ctx)?,
                    lstrip: bool_field(obj, "lstrip", false, &path, &ctx)?,
                    rstrip: bool_field(obj, "rstrip", false, &path, &ctx)?,
                    normalized: bool_field(obj, "normalized", true, &path, &ctx)?,
                    single_word: bool_field(obj, "single_word", false, &path, &ctx)?,
                });
            }
        }
        let nfc = match root.get("normalizer") {
            None | Some(Json::Null) => false,
            Some(n) if n.get("type").and_then(Json::as_str) == Some("NFC") => true,
            Some(n) => {
                return Err(tok_err(
                    &path,
                    format!("normalizer {n} is not supported (only none or NFC)"),
                ))
            }
        };
        let (add_prefix_space, use_regex) = match root.get("pre_tokenizer") {
            Some(Json::Object(p)) if p.get("type").and_then(Json::as_str) == Some("ByteLevel") => (
                bool_field(p, "add_prefix_space", true, &path, "pre_tokenizer")?,
                bool_field(p, "use_regex", true, &path, "pre_tokenizer")?,
            ),
            other => {
                let found = other.map_or("nothing".to_string(), |v| v.to_string());
                return Err(tok_err(
                    &path,
                    format!(
                        "pre_tokenizer must be ByteLevel (a GPT-2 style tokenizer), found {found}"
                    ),
                ));
            }
        };
        let config = parse_json_object(&dir.join("tokenizer_config.json"), &files.config?)?;
        let model_config = match files.model_config? {
            Some(bytes) => Some(parse_json_object(&dir.join("config.json"), &bytes)?),
            None => None,
        };
        let tok = LayaTokenizer {
            dir: dir.to_path_buf(),
            json: text,
            vocab,
            merges,
            added,
            nfc,
            add_prefix_space,
            use_regex,
            ignore_merges,
            config,
            model_config,
            post_processor: root.get("post_processor").cloned(),
        };
        for key in ["cls_token", "sep_token", "mask_token"] {
            tok.special_text(key)?;
        }
        // The tokenizer the engine builds (`ask DIR`, and from a converted file's keys):
        // refused here too, so no file is written with merges naming unknown tokens, an empty
        // merge result or a vocab id used twice.
        tok.tokenizer()?;
        Ok(tok)
    }

    /// The text of a special token named in tokenizer_config.json (`cls_token` ...),
    /// which must be an added token.
    pub fn special_text(&self, key: &str) -> Result<String> {
        let path = self.dir.join("tokenizer_config.json");
        let text = config_token(&self.config, key).ok_or_else(|| {
            LayaError::key(&path, key, "missing (the systemone template needs it)")
        })?;
        if !self.added.iter().any(|a| a.content == text) {
            return Err(LayaError::key(
                &path,
                key,
                format!("{text:?} is not an added token of tokenizer.json"),
            ));
        }
        Ok(text)
    }

    /// The id of an added token by text.
    pub fn added_id(&self, content: &str) -> Option<u32> {
        self.added
            .iter()
            .find(|a| a.content == content)
            .map(|a| a.id)
    }

    /// Parse tokenizer.json with sky-tokenizer.
    pub fn tokenizer(&self) -> Result<sky_tokenizer::Tokenizer> {
        sky_tokenizer::Tokenizer::from_json(&self.json)
            .map_err(|e| tok_err(&self.dir.join("tokenizer.json"), e.to_string()))
    }

    /// `tokenizer.ggml.tokens` and `tokenizer.ggml.token_type` for `vocab_size` ids, as
    /// llama.cpp's `get_vocab_base`: ids the tokenizer lacks become `[PAD{id}]` (UNUSED),
    /// added tokens are CONTROL when special or special-looking, else USER_DEFINED.
    pub fn gguf_tokens(&self, vocab_size: usize) -> Result<(Vec<String>, Vec<i32>)> {
        let mut tokens: Vec<Option<String>> = vec![None; vocab_size];
        let path = self.dir.join("tokenizer.json");
        let mut put = |id: u32, text: &str| -> Result<()> {
            let slot = tokens.get_mut(id as usize).ok_or_else(|| {
                tok_err(
                    &path,
                    format!(
                        "token {text:?} has id {id}, outside the model's vocab_size {vocab_size}"
                    ),
                )
            })?;
            *slot = Some(text.to_string());
            Ok(())
        };
        for (t, id) in &self.vocab {
            put(*id, t)?;
        }
        for a in &self.added {
            put(a.id, &a.content)?;
        }
        let mut types = Vec::with_capacity(vocab_size);
        let mut out = Vec::with_capacity(vocab_size);
        for (i, t) in tokens.into_iter().enumerate() {
            match t {
                None => {
                    out.push(format!("[PAD{i}]"));
                    types.push(token_type::UNUSED);
                }
                Some(text) => match self.added.iter().find(|a| a.id as usize == i) {
                    Some(a) if a.special || looks_special(&text) => {
                        out.push(text);
                        types.push(token_type::CONTROL);
                    }
                    Some(_) => {
                        out.push(text.replace('\u{2581}', " "));
                        types.push(token_type::USER_DEFINED);
                    }
                    None => {
                        out.push(text);
                        types.push(token_type::NORMAL);
                    }
                },
            }
        }
        Ok((out, types))
    }

    /// Merges as GGUF stores them: `"a b"`, a space inside a part written as U+0120.
    pub fn gguf_merges(&self) -> Vec<String> {
        let enc = |s: &str| s.replace(' ', "\u{120}");
        self.merges
            .iter()
            .map(|(a, b)| format!("{} {}", enc(a), enc(b)))
            .collect()
    }

    /// Special ids and add-flags as gguf-py's `SpecialVocab` (0.19) finds them.
    pub fn special_vocab(&self, n_vocab: usize) -> Result<SpecialVocab> {
        special_vocab(self, n_vocab)
    }

    /// The `systemone` chat template (spec 4.1), built from the cls/sep/mask texts.
    pub fn systemone_template(&self, julia: bool) -> Result<String> {
        Ok(systemone_template(
            &self.special_text("cls_token")?,
            &self.special_text("sep_token")?,
            &self.special_text("mask_token")?,
            julia,
        ))
    }
}

/// llama.cpp's `does_token_look_special`.
fn looks_special(t: &str) -> bool {
    matches!(t, "<pad>" | "<mask>" | "<2mass>" | "[@BOS@]")
        || (t.starts_with("<|") && t.ends_with("|>"))
        || (t.starts_with("<\u{ff5c}") && t.ends_with("\u{ff5c}>"))
        || (t.starts_with("<unused") && t.ends_with('>'))
}

/// Special ids and add-flags of a tokenizer, in the order gguf-py writes them.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SpecialVocab {
    /// (type, id) in insertion order (`bos`, `eos`, `unk`, `sep`, `pad`, `cls`, `mask`, ...).
    pub ids: Vec<(String, u32)>,
    /// (type, add flag) in insertion order.
    pub add: Vec<(String, bool)>,
}

impl SpecialVocab {
    fn set_add(&mut self, typ: &str, v: bool) {
        match self.add.iter_mut().find(|(t, _)| t == typ) {
            Some(e) => e.1 = v,
            None => self.add.push((typ.to_string(), v)),
        }
    }

    fn set_id(&mut self, typ: &str, id: Option<i64>, n_vocab: usize, path: &Path) -> Result<()> {
        let Some(id) = id else { return Ok(()) };
        if id < 0 {
            return Err(tok_err(
                path,
                format!("invalid id {id} for special token type {typ}"),
            ));
        }
        if (id as u64) < n_vocab as u64 && !self.ids.iter().any(|(t, _)| t == typ) {
            self.ids.push((typ.to_string(), id as u32));
        }
        Ok(())
    }

    /// The id of a special token type.
    pub fn id(&self, typ: &str) -> Option<u32> {
        self.ids.iter().find(|(t, _)| t == typ).map(|(_, i)| *i)
    }
}

fn sp_id(v: &Json) -> Option<&str> {
    v.get("SpecialToken")?.get("id")?.as_str()
}

fn seq_id(v: &Json) -> Option<&str> {
    v.get("Sequence")?.get("id")?.as_str()
}

/// Port of gguf-py 0.19 `SpecialVocab._try_load_from_tokenizer_json` and
/// `_try_load_from_config_json` (the post-processor heuristics included).
fn special_vocab(tok: &LayaTokenizer, n_vocab: usize) -> Result<SpecialVocab> {
    let path = tok.dir.join("tokenizer_config.json");
    let mut sv = SpecialVocab::default();
    let mut types: Vec<&str> = vec!["bos", "eos", "unk", "sep", "pad", "cls", "mask"];
    let mut cfg = tok.config.clone();
    let has_cfg = !cfg.is_empty();
    let mut bos = config_token(&cfg, "bos_token");
    let mut cls = config_token(&cfg, "cls_token");
    let mut eos = config_token(&cfg, "eos_token");
    let mut sep = config_token(&cfg, "sep_token");
    if bos.is_none() && cls.is_some() && has_cfg {
        bos = cls.clone();
        cfg.insert("bos_token".into(), json!(bos));
    }
    if eos.is_none() && sep.is_some() && has_cfg {
        eos = sep.clone();
        cfg.insert("eos_token".into(), json!(eos));
    }
    if let Some(pp) = &tok.post_processor {
        let processors: Vec<&Json> = match pp.get("processors").and_then(Json::as_array) {
            Some(list) => list.iter().collect(),
            None => vec![pp],
        };
        for p in processors {
            match p.get("type").and_then(Json::as_str) {
                Some("RobertaProcessing") => {
                    for t in ["bos", "eos", "sep"] {
                        sv.set_add(t, true);
                    }
                    if cls.is_none() && has_cfg {
                        cls = p
                            .get("cls")
                            .and_then(|c| c.get(0))
                            .and_then(Json::as_str)
                            .map(str::to_string)
                            .or(bos.clone());
                        cfg.insert("cls_token".into(), json!(cls));
                    }
                    if sep.is_none() && has_cfg {
                        sep = p
                            .get("sep")
                            .and_then(|c| c.get(0))
                            .and_then(Json::as_str)
                            .map(str::to_string)
                            .or(eos.clone());
                        cfg.insert("sep_token".into(), json!(sep));
                    }
                }
                Some("TemplateProcessing") => {
                    let single: Vec<Json> = p
                        .get("single")
                        .and_then(Json::as_array)
                        .cloned()
                        .unwrap_or_default();
                    let pair: Vec<Json> = p
                        .get("pair")
                        .and_then(Json::as_array)
                        .cloned()
                        .unwrap_or_default();
                    let mut first: Option<String> = None;
                    let mut last: Option<String> = None;
                    if single.len() > 1 {
                        first = sp_id(&single[0]).map(str::to_string);
                        if let Some(f) = &first {
                            if !has_cfg {
                                bos = Some(f.clone());
                            }
                            sv.set_add("bos", Some(f) == bos.as_ref() || Some(f) == cls.as_ref());
                        }
                        last = single.last().and_then(sp_id).map(str::to_string);
                        if let Some(l) = &last {
                            if !has_cfg {
                                eos = Some(l.clone());
                            } else if Some(l) != eos.as_ref() {
                                if !types.contains(&"eot") {
                                    types.push("eot");
                                    cfg.insert("eot_token".into(), json!(eos));
                                } else if !types.contains(&"eom") {
                                    types.push("eom");
                                    cfg.insert("eom_token".into(), json!(eos));
                                }
                                eos = Some(l.clone());
                                cfg.insert("eos_token".into(), json!(eos));
                            }
                            sv.set_add("eos", Some(l) == eos.as_ref());
                        }
                    }
                    if !pair.is_empty() {
                        let start = usize::from(
                            first.is_some() && pair.first().and_then(sp_id) == first.as_deref(),
                        );
                        let stop_trim = usize::from(
                            last.is_some() && pair.last().and_then(sp_id) == last.as_deref(),
                        );
                        let end = pair.len().saturating_sub(stop_trim);
                        let mid: &[Json] = if start < end { &pair[start..end] } else { &[] };
                        if !mid.is_empty() {
                            let a = seq_id(&mid[0]);
                            let b = seq_id(&mid[mid.len() - 1]);
                            if a == Some("A") && b == Some("B") && mid.len() > 2 {
                                let inner = &mid[1..mid.len() - 1];
                                let is_sep = |s: Option<&str>| {
                                    s.is_some() && (s == sep.as_deref() || s == eos.as_deref())
                                };
                                let mut add_sep = false;
                                let e0 = sp_id(&inner[0]);
                                if e0.is_some() && is_sep(e0) && last.is_none() {
                                    add_sep = true;
                                }
                                if inner.len() == 2 {
                                    let e1 = sp_id(&inner[1]);
                                    if e1.is_some() && is_sep(e1) {
                                        add_sep = true;
                                    }
                                }
                                sv.set_add("sep", add_sep);
                                if add_sep && sep.is_none() && has_cfg {
                                    cfg.insert("sep_token".into(), json!(eos));
                                }
                            }
                        }
                    }
                }
                _ => {}
            }
        }
    }
    if has_cfg {
        for typ in &types {
            if let Some(Json::Bool(b)) = cfg.get(&format!("add_{typ}_token")) {
                sv.set_add(typ, *b);
            }
            if let Some(text) = config_token(&cfg, &format!("{typ}_token")) {
                let id = tok
                    .added
                    .iter()
                    .find(|a| a.content == text)
                    .map(|a| i64::from(a.id));
                sv.set_id(typ, id, n_vocab, &path)?;
            }
        }
    }
    if let Some(mc) = &tok.model_config {
        let mpath = tok.dir.join("config.json");
        for typ in &types {
            let v = mc.get(&format!("{typ}_token_id")).or_else(|| {
                mc.get("text_config")
                    .and_then(|t| t.get(format!("{typ}_token_id")))
            });
            sv.set_id(typ, v.and_then(Json::as_i64), n_vocab, &mpath)?;
        }
    }
    Ok(sv)
}

/// GGUF key of a special token id (gguf-py `Keys.Tokenizer`), `None` for types gguf-py has
/// no key for (`cls`).
pub fn special_id_key(typ: &str) -> Option<&'static str> {
    Some(match typ {
        "bos" => "tokenizer.ggml.bos_token_id",
        "eos" => "tokenizer.ggml.eos_token_id",
        "unk" => "tokenizer.ggml.unknown_token_id",
        "sep" => "tokenizer.ggml.seperator_token_id",
        "pad" => "tokenizer.ggml.padding_token_id",
        "mask" => "tokenizer.ggml.mask_token_id",
        "eot" => "tokenizer.ggml.eot_token_id",
        "eom" => "tokenizer.ggml.eom_token_id",
        _ => return None,
    })
}

/// The `systemone` chat template (spec 4.1) for the given special token texts.
pub fn systemone_template(cls: &str, sep: &str, mask: &str, julia: bool) -> String {
    let j = |x: &str| format!("{{{{ {x} if {x} is string else {x} | tojson }}}}");
    let option = if julia {
        format!(
            "{{% if o.description %}}{}{{% else %}}{{{{ o.key }}}}{{% endif %}}",
            j("o.description")
        )
    } else {
        format!(
            "{{% if type == 'choice' %}}{{{{ o.key }}}}{{% if o.description %}}: {d}{{% endif %}}\
             {{% elif type == 'score' %}}level {{{{ o.key }}}}: {d}\
             {{% else %}}{{{{ o.key }}}}: {{% if o.description %}}{d}{{% elif o.key == 'true' %}}yes, the statement holds\
             {{% else %}}no, the statement does not hold{{% endif %}}{{% endif %}}",
            d = j("o.description")
        )
    };
    format!(
        "{cls}{{{{ type }}}} question: {ins}{sep}{{% for o in options %}}{mask} {option}{{% endfor %}}{sep}{state}{sep}",
        ins = j("instructions"),
        state = j("state"),
    )
}

/// Key prefix of the tokenizer details llama.cpp does not store.
pub const SKYCMD_PREFIX: &str = "skycmd.tokenizer.";

#[cfg_attr(not(feature = "fs"), allow(dead_code))] // used by the file-system part
fn bool_array(items: impl IntoIterator<Item = bool>) -> Value {
    Value::Array(sky_gguf::Array {
        elem_type: ValueType::Bool,
        items: items.into_iter().map(Value::Bool).collect(),
    })
}

/// Write every tokenizer key, in llama.cpp's order, then the `skycmd.tokenizer.*` keys.
#[cfg_attr(not(feature = "fs"), allow(dead_code))] // used by the file-system part
pub(crate) fn write_tokenizer_keys(
    w: &mut GgufWriter,
    tok: &LayaTokenizer,
    vocab_size: usize,
    pre: &str,
    julia: bool,
) -> Result<()> {
    for t in ["bos", "eos", "sep"] {
        w.add_kv(format!("tokenizer.ggml.add_{t}_token"), true);
    }
    w.add_kv("tokenizer.ggml.model", "gpt2");
    w.add_kv("tokenizer.ggml.pre", pre);
    let (tokens, types) = tok.gguf_tokens(vocab_size)?;
    w.add_kv("tokenizer.ggml.tokens", Value::string_array(tokens));
    w.add_kv("tokenizer.ggml.token_type", Value::i32_array(types));
    w.add_kv(
        "tokenizer.ggml.merges",
        Value::string_array(tok.gguf_merges()),
    );
    let sv = tok.special_vocab(vocab_size)?;
    for (typ, id) in &sv.ids {
        if let Some(key) = special_id_key(typ) {
            w.add_kv(key, *id);
        }
    }
    for (typ, v) in &sv.add {
        if matches!(typ.as_str(), "bos" | "eos" | "sep") {
            w.add_kv(format!("tokenizer.ggml.add_{typ}_token"), *v);
        }
    }
    if let Some(Json::String(t)) = tok.config.get("chat_template") {
        w.add_kv("tokenizer.chat_template", t.as_str());
    }
    w.add_kv("tokenizer.ggml.token_type_count", 3u32);
    w.add_kv(
        "tokenizer.chat_template.systemone",
        tok.systemone_template(julia)?,
    );
    w.add_kv(
        "tokenizer.chat_templates",
        Value::string_array(["systemone"]),
    );

    let k = |s: &str| format!("{SKYCMD_PREFIX}{s}");
    w.add_kv(k("nfc"), tok.nfc);
    w.add_kv(k("add_prefix_space"), tok.add_prefix_space);
    w.add_kv(k("use_regex"), tok.use_regex);
    w.add_kv(k("ignore_merges"), tok.ignore_merges);
    let vocab_names: std::collections::HashSet<&str> =
        tok.vocab.iter().map(|(t, _)| t.as_str()).collect();
    let a = &tok.added;
    w.add_kv(k("added.ids"), Value::u32_array(a.iter().map(|t| t.id)));
    w.add_kv(
        k("added.contents"),
        Value::string_array(a.iter().map(|t| t.content.clone())),
    );
    w.add_kv(k("added.special"), bool_array(a.iter().map(|t| t.special)));
    w.add_kv(k("added.lstrip"), bool_array(a.iter().map(|t| t.lstrip)));
    w.add_kv(k("added.rstrip"), bool_array(a.iter().map(|t| t.rstrip)));
    w.add_kv(
        k("added.normalized"),
        bool_array(a.iter().map(|t| t.normalized)),
    );
    w.add_kv(
        k("added.single_word"),
        bool_array(a.iter().map(|t| t.single_word)),
    );
    w.add_kv(
        k("added.in_vocab"),
        bool_array(a.iter().map(|t| vocab_names.contains(t.content.as_str()))),
    );
    Ok(())
}

/// Where a GGUF file came from, for messages.
fn gguf_path() -> PathBuf {
    PathBuf::from("<gguf>")
}

fn get<'a>(f: &'a GgufFile<'_>, key: &str) -> Result<&'a Value> {
    f.get(key)
        .ok_or_else(|| tok_err(&gguf_path(), format!("key {key} is missing")))
}

fn get_bool(f: &GgufFile<'_>, key: &str) -> Result<bool> {
    get(f, key)?
        .as_bool()
        .ok_or_else(|| tok_err(&gguf_path(), format!("key {key} is not a bool")))
}

fn get_items<'a>(f: &'a GgufFile<'_>, key: &str) -> Result<&'a [Value]> {
    get(f, key)?
        .as_array()
        .map(|a| a.items.as_slice())
        .ok_or_else(|| tok_err(&gguf_path(), format!("key {key} is not an array")))
}

fn strings(f: &GgufFile<'_>, key: &str) -> Result<Vec<String>> {
    get_items(f, key)?
        .iter()
        .enumerate()
        .map(|(i, v)| {
            v.as_str()
                .map(str::to_string)
                .ok_or_else(|| tok_err(&gguf_path(), format!("{key}[{i}] is not a string")))
        })
        .collect()
}

fn bools(f: &GgufFile<'_>, key: &str, n: usize) -> Result<Vec<bool>> {
    let items = get_items(f, key)?;
    if items.len() != n {
        return Err(tok_err(
            &gguf_path(),
            format!("{key} has {} items, expected {n}", items.len()),
        ));
    }
    items
        .iter()
        .enumerate()
        .map(|(i, v)| {
            v.as_bool()
                .ok_or_else(|| tok_err(&gguf_path(), format!("{key}[{i}] is not a bool")))
        })
        .collect()
}

/// Rebuild a Hugging Face `tokenizer.json` (as a string) from the tokenizer keys of a GGUF
/// file written by [`crate::convert`]: vocab and merges from `tokenizer.ggml.*`, the rest
/// from `skycmd.tokenizer.*`. Encodes like the original (post-processor and decoder are not
/// kept: encoding never adds special tokens here).
pub fn tokenizer_json_from_gguf(f: &GgufFile<'_>) -> Result<String> {
    let p = |s: &str| format!("{SKYCMD_PREFIX}{s}");
    let model = get(f, "tokenizer.ggml.model")?.as_str().unwrap_or("");
    if model != "gpt2" {
        return Err(tok_err(
            &gguf_path(),
            format!("tokenizer.ggml.model is {model:?}, only \"gpt2\" (byte-level BPE) is rebuilt"),
        ));
    }
    let tokens = strings(f, "tokenizer.ggml.tokens")?;
    let types = get_items(f, "tokenizer.ggml.token_type")?;
    if types.len() != tokens.len() {
        return Err(tok_err(
            &gguf_path(),
            "tokenizer.ggml.token_type and tokenizer.ggml.tokens differ in length",
        ));
    }
    let ids: Vec<u32> = get_items(f, &p("added.ids"))?
        .iter()
        .enumerate()
        .map(|(i, v)| {
            v.as_u32().ok_or_else(|| {
                tok_err(
                    &gguf_path(),
                    format!("{}[{i}] is not a u32", p("added.ids")),
                )
            })
        })
        .collect::<Result<_>>()?;
    let n = ids.len();
    let contents = strings(f, &p("added.contents"))?;
    if contents.len() != n {
        return Err(tok_err(
            &gguf_path(),
            format!(
                "{} has {} items, expected {n}",
                p("added.contents"),
                contents.len()
            ),
        ));
    }
    let special = bools(f, &p("added.special"), n)?;
    let lstrip = bools(f, &p("added.lstrip"), n)?;
    let rstrip = bools(f, &p("added.rstrip"), n)?;
    let normalized = bools(f, &p("added.normalized"), n)?;
    let single_word = bools(f, &p("added.single_word"), n)?;
    let in_vocab = bools(f, &p("added.in_vocab"), n)?;
    let added_ids: std::collections::HashSet<u32> = ids.iter().copied().collect();
    let mut vocab = Map::new();
    for (i, (t, ty)) in tokens.iter().zip(types).enumerate() {
        let ty = ty.as_i64().unwrap_or(0);
        let id = i as u32;
        if ty == i64::from(token_type::UNUSED) || added_ids.contains(&id) {
            continue;
        }
        vocab.insert(t.clone(), json!(id));
    }
    let mut added = Vec::with_capacity(n);
    for i in 0..n {
        if in_vocab[i] {
            vocab.insert(contents[i].clone(), json!(ids[i]));
        }
        added.push(json!({
            "id": ids[i], "content": contents[i], "single_word": single_word[i], "lstrip": lstrip[i],
            "rstrip": rstrip[i], "normalized": normalized[i], "special": special[i],
        }));
    }
    // HF orders the vocab by id when it serializes; do the same for readability.
    let mut entries: Vec<(String, Json)> = vocab.into_iter().collect();
    entries.sort_by_key(|(_, id)| id.as_u64());
    let vocab: Map<String, Json> = entries.into_iter().collect();
    let merges: Vec<Json> = strings(f, "tokenizer.ggml.merges")?
        .iter()
        .enumerate()
        .map(|(i, m)| {
            m.split_once(' ')
                .map(|(a, b)| json!([a, b]))
                .ok_or_else(|| {
                    tok_err(
                        &gguf_path(),
                        format!("tokenizer.ggml.merges[{i}] has no space"),
                    )
                })
        })
        .collect::<Result<_>>()?;
    let normalizer = if get_bool(f, &p("nfc"))? {
        json!({"type": "NFC"})
    } else {
        Json::Null
    };
    let doc = json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added,
        "normalizer": normalizer,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": get_bool(f, &p("add_prefix_space"))?,
                          "trim_offsets": true, "use_regex": get_bool(f, &p("use_regex"))?},
        "post_processor": null,
        "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
        "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
                  "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false,
                  "ignore_merges": get_bool(f, &p("ignore_merges"))?, "vocab": vocab, "merges": merges},
    });
    serde_json::to_string(&doc).map_err(|e| tok_err(&gguf_path(), e.to_string()))
}

/// Rebuild the sky-tokenizer [`sky_tokenizer::Tokenizer`] of a converted GGUF file from its
/// keys alone (see [`tokenizer_json_from_gguf`]).
pub fn tokenizer_from_gguf(f: &GgufFile<'_>) -> Result<sky_tokenizer::Tokenizer> {
    let json = tokenizer_json_from_gguf(f)?;
    sky_tokenizer::Tokenizer::from_json(&json).map_err(|e| tok_err(&gguf_path(), e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn template_matches_the_julia_reference_string() {
        let t = systemone_template("<bos>", "<eos>", "<mask>", true);
        let expected = "<bos>{{ type }} question: {{ instructions if instructions is string else instructions | tojson }}<eos>{% for o in options %}<mask> {% if o.description %}{{ o.description if o.description is string else o.description | tojson }}{% else %}{{ o.key }}{% endif %}{% endfor %}<eos>{{ state if state is string else state | tojson }}<eos>";
        assert_eq!(t, expected);
    }

    #[test]
    fn laya_option_template() {
        let t = systemone_template("[CLS]", "[SEP]", "[MASK]", false);
        let d = "{{ o.description if o.description is string else o.description | tojson }}";
        let opt = format!(
            "{{% if type == 'choice' %}}{{{{ o.key }}}}{{% if o.description %}}: {d}{{% endif %}}{{% elif type == 'score' %}}level {{{{ o.key }}}}: {d}{{% else %}}{{{{ o.key }}}}: {{% if o.description %}}{d}{{% elif o.key == 'true' %}}yes, the statement holds{{% else %}}no, the statement does not hold{{% endif %}}{{% endif %}}"
        );
        assert!(t.starts_with("[CLS]{{ type }} question: {{ instructions if"));
        assert!(t.contains(&format!(
            "{{% for o in options %}}[MASK] {opt}{{% endfor %}}[SEP]"
        )));
        assert!(t.ends_with("[SEP]{{ state if state is string else state | tojson }}[SEP]"));
    }

    #[test]
    fn special_looking_tokens() {
        assert!(looks_special("<|endoftext|>"));
        assert!(looks_special("<mask>"));
        assert!(looks_special("<unused12>"));
        assert!(!looks_special("[CLS]"));
    }

    fn tiny(dir: &Path, added: &str, post: &str, config: &str) -> LayaTokenizer {
        let json = format!(
            r#"{{"added_tokens": {added}, "normalizer": null,
                "pre_tokenizer": {{"type": "ByteLevel", "add_prefix_space": true}},
                "post_processor": {post},
                "model": {{"type": "BPE", "vocab": {{"a": 2, "b": 3, "ab": 4}}, "merges": ["a b"]}}}}"#
        );
        std::fs::write(dir.join("tokenizer.json"), json).unwrap();
        std::fs::write(dir.join("tokenizer_config.json"), config).unwrap();
        LayaTokenizer::load(dir).unwrap()
    }

    #[test]
    fn tokens_types_and_special_ids() {
        let d = tempfile::tempdir().unwrap();
        let added = r#"[{"id": 0, "content": "<s>", "special": true}, {"id": 1, "content": "</s>", "special": true},
                        {"id": 5, "content": "<mask>", "special": false}, {"id": 6, "content": "\u2581word", "special": false}]"#;
        let roberta = r#"{"type": "RobertaProcessing", "sep": ["</s>", 1], "cls": ["<s>", 0]}"#;
        let cfg = r#"{"cls_token": "<s>", "sep_token": "</s>", "mask_token": "<mask>", "bos_token": "<s>"}"#;
        let t = tiny(d.path(), added, roberta, cfg);
        let (tokens, types) = t.gguf_tokens(9).unwrap();
        assert_eq!(
            tokens,
            ["<s>", "</s>", "a", "b", "ab", "<mask>", " word", "[PAD7]", "[PAD8]"]
        );
        assert_eq!(types, [3, 3, 1, 1, 1, 3, 4, 5, 5]);
        assert_eq!(t.gguf_merges(), ["a b"]);
        assert!(t.add_prefix_space && !t.nfc);
        let sv = t.special_vocab(9).unwrap();
        // gguf-py: eos falls back to sep, cls is recorded (no GGUF key), Roberta adds all three
        assert_eq!(
            sv.ids,
            [
                ("bos".into(), 0),
                ("eos".into(), 1),
                ("sep".into(), 1),
                ("cls".into(), 0),
                ("mask".into(), 5)
            ]
        );
        assert_eq!(
            sv.add,
            [
                ("bos".into(), true),
                ("eos".into(), true),
                ("sep".into(), true)
            ]
        );
        assert_eq!(special_id_key("cls"), None);
        assert!(t
            .gguf_tokens(4)
            .unwrap_err()
            .to_string()
            .contains("outside the model's vocab_size 4"));
    }

    #[test]
    fn special_names_must_be_added_tokens() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("tokenizer.json"), r#"{"added_tokens": [], "pre_tokenizer": {"type": "ByteLevel"}, "model": {"type": "BPE", "vocab": {}, "merges": []}}"#).unwrap();
        std::fs::write(
            d.path().join("tokenizer_config.json"),
            r#"{"cls_token": "[CLS]", "sep_token": "[SEP]", "mask_token": "[MASK]"}"#,
        )
        .unwrap();
        let e = LayaTokenizer::load(d.path()).unwrap_err().to_string();
        assert!(
            e.contains("cls_token") && e.contains("not an added token"),
            "{e}"
        );
    }
}
