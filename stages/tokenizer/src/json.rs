//! Reading `tokenizer.json` into [`TokenizerParts`], refusing what the encoder does not model.

use serde_json::{Map, Value};

use crate::{AddedToken, Error, TokenizerParts};

fn field_err(path: &str, reason: impl Into<String>) -> Error {
    Error::Field {
        path: path.to_string(),
        reason: reason.into(),
    }
}

fn get_obj<'a>(
    obj: &'a Map<String, Value>,
    key: &str,
    path: &str,
) -> Result<&'a Map<String, Value>, Error> {
    match obj.get(key) {
        Some(Value::Object(m)) => Ok(m),
        Some(_) => Err(field_err(path, "expected an object")),
        None => Err(field_err(path, "missing")),
    }
}

fn get_str<'a>(obj: &'a Map<String, Value>, key: &str, path: &str) -> Result<&'a str, Error> {
    match obj.get(key) {
        Some(Value::String(s)) => Ok(s),
        Some(_) => Err(field_err(path, "expected a string")),
        None => Err(field_err(path, "missing")),
    }
}

/// A boolean that defaults when absent (HF's serde defaults).
fn opt_bool(obj: &Map<String, Value>, key: &str, path: &str, default: bool) -> Result<bool, Error> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(default),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(field_err(path, "expected true or false")),
    }
}

fn type_of<'a>(obj: &'a Map<String, Value>, path: &str) -> Result<&'a str, Error> {
    get_str(obj, "type", &format!("{path}.type"))
}

fn unsupported(what: String) -> Error {
    Error::Unsupported(what)
}

/// Normalizer: null, NFC, or a Sequence of those.
fn read_normalizer(v: Option<&Value>, path: &str) -> Result<bool, Error> {
    let obj = match v {
        None | Some(Value::Null) => return Ok(false),
        Some(Value::Object(o)) => o,
        Some(_) => return Err(field_err(path, "expected an object or null")),
    };
    match type_of(obj, path)? {
        "NFC" => Ok(true),
        "Sequence" => {
            let list = match obj.get("normalizers") {
                Some(Value::Array(a)) => a,
                _ => {
                    return Err(field_err(
                        &format!("{path}.normalizers"),
                        "expected an array",
                    ))
                }
            };
            let mut nfc = false;
            for (i, n) in list.iter().enumerate() {
                nfc |= read_normalizer(Some(n), &format!("{path}.normalizers[{i}]"))?;
            }
            Ok(nfc)
        }
        other => Err(unsupported(format!(
            "normalizer type `{other}` at `{path}` is not supported; expected NFC or none"
        ))),
    }
}

/// Pre-tokenizer settings: (add_prefix_space, use_regex).
fn read_pre_tokenizer(v: Option<&Value>, path: &str) -> Result<(bool, bool), Error> {
    let obj = match v {
        Some(Value::Object(o)) => o,
        None | Some(Value::Null) => {
            return Err(unsupported(format!(
                "`{path}` is null; expected a ByteLevel pre-tokenizer (byte-level BPE)"
            )))
        }
        Some(_) => return Err(field_err(path, "expected an object")),
    };
    match type_of(obj, path)? {
        "ByteLevel" => Ok((
            opt_bool(
                obj,
                "add_prefix_space",
                &format!("{path}.add_prefix_space"),
                true,
            )?,
            opt_bool(obj, "use_regex", &format!("{path}.use_regex"), true)?,
        )),
        "Sequence" => match obj.get("pretokenizers") {
            Some(Value::Array(a)) if a.len() == 1 => {
                read_pre_tokenizer(a.first(), &format!("{path}.pretokenizers[0]"))
            }
            Some(Value::Array(_)) => Err(unsupported(format!(
                "`{path}`: a Sequence pre-tokenizer is supported only as a single ByteLevel"
            ))),
            _ => Err(field_err(
                &format!("{path}.pretokenizers"),
                "expected an array",
            )),
        },
        other => Err(unsupported(format!(
            "pre_tokenizer type `{other}` at `{path}` is not supported; expected ByteLevel"
        ))),
    }
}

fn read_added(v: Option<&Value>) -> Result<Vec<AddedToken>, Error> {
    let list = match v {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(a)) => a,
        Some(_) => return Err(field_err("added_tokens", "expected an array")),
    };
    let mut out = Vec::with_capacity(list.len());
    for (i, t) in list.iter().enumerate() {
        let path = format!("added_tokens[{i}]");
        let Value::Object(t) = t else {
            return Err(field_err(&path, "expected an object"));
        };
        let id = match t.get("id") {
            Some(Value::Number(n)) => n
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| field_err(&format!("{path}.id"), "expected an id below 2^32"))?,
            Some(_) => return Err(field_err(&format!("{path}.id"), "expected a number")),
            None => return Err(field_err(&format!("{path}.id"), "missing")),
        };
        let special = opt_bool(t, "special", &format!("{path}.special"), false)?;
        out.push(AddedToken {
            id,
            content: get_str(t, "content", &format!("{path}.content"))?.to_string(),
            special,
            lstrip: opt_bool(t, "lstrip", &format!("{path}.lstrip"), false)?,
            rstrip: opt_bool(t, "rstrip", &format!("{path}.rstrip"), false)?,
            // HF's default: special tokens are matched on the raw text, others after normalizing.
            normalized: opt_bool(t, "normalized", &format!("{path}.normalized"), !special)?,
            single_word: opt_bool(t, "single_word", &format!("{path}.single_word"), false)?,
        });
    }
    Ok(out)
}

fn read_merges(model: &Map<String, Value>) -> Result<Vec<(String, String)>, Error> {
    let list = match model.get("merges") {
        Some(Value::Array(a)) => a,
        Some(_) => return Err(field_err("model.merges", "expected an array")),
        None => return Err(field_err("model.merges", "missing")),
    };
    let mut out = Vec::with_capacity(list.len());
    for (i, m) in list.iter().enumerate() {
        let pair = match m {
            // Older files: "a b".
            Value::String(s) => s
                .split_once(' ')
                .filter(|(_, b)| !b.contains(' '))
                .map(|(a, b)| (a.to_string(), b.to_string())),
            // Newer files: ["a", "b"].
            Value::Array(a) => match a.as_slice() {
                [Value::String(x), Value::String(y)] => Some((x.clone(), y.clone())),
                _ => None,
            },
            _ => None,
        };
        out.push(pair.ok_or_else(|| {
            field_err(
                &format!("model.merges[{i}]"),
                "expected \"left right\" or [\"left\", \"right\"]",
            )
        })?);
    }
    Ok(out)
}

/// Parses a `tokenizer.json` text.
pub(crate) fn parse(json: &str) -> Result<TokenizerParts, Error> {
    let root: Value = serde_json::from_str(json).map_err(|e| Error::Json(e.to_string()))?;
    let Value::Object(root) = root else {
        return Err(field_err("(root)", "expected a JSON object"));
    };
    let model = get_obj(&root, "model", "model")?;
    // HF infers BPE when `type` is absent from a model that has vocab + merges.
    match model.get("type") {
        None => {}
        Some(Value::String(t)) if t == "BPE" => {}
        Some(Value::String(t)) => {
            return Err(unsupported(format!(
                "model type `{t}` is not supported; expected BPE"
            )))
        }
        Some(_) => return Err(field_err("model.type", "expected a string")),
    }
    match model.get("dropout") {
        None | Some(Value::Null) => {}
        Some(Value::Number(n)) if n.as_f64() == Some(0.0) => {}
        Some(_) => {
            return Err(unsupported(
                "model.dropout is set; BPE dropout (random merges) is not supported".into(),
            ))
        }
    }
    for key in ["continuing_subword_prefix", "end_of_word_suffix"] {
        match model.get(key) {
            None | Some(Value::Null) => {}
            Some(Value::String(s)) if s.is_empty() => {}
            Some(_) => {
                return Err(unsupported(format!(
                    "model.{key} is set; only byte-level BPE without it is supported"
                )))
            }
        }
    }
    if opt_bool(model, "byte_fallback", "model.byte_fallback", false)? {
        return Err(unsupported(
            "model.byte_fallback is true; not supported (byte-level BPE never needs it)".into(),
        ));
    }
    let fuse_unk = opt_bool(model, "fuse_unk", "model.fuse_unk", false)?;
    let ignore_merges = opt_bool(model, "ignore_merges", "model.ignore_merges", false)?;
    let unk_token = match model.get("unk_token") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => return Err(field_err("model.unk_token", "expected a string or null")),
    };

    let vocab_obj = get_obj(model, "vocab", "model.vocab")?;
    let added = read_added(root.get("added_tokens"))?;
    // Ids are 0..n without gaps, so none can be past the number of tokens declared: checked
    // before an id sizes the table (a hostile id of 2^31 would otherwise allocate 2^31 slots).
    let declared = vocab_obj.len() + added.len();
    let mut vocab: Vec<Option<String>> = Vec::new();
    for (token, id) in vocab_obj {
        let id = id
            .as_u64()
            .and_then(|n| usize::try_from(n).ok())
            .filter(|&n| n < u32::MAX as usize)
            .ok_or_else(|| {
                field_err(
                    &format!("model.vocab[{token:?}]"),
                    "expected an id (number)",
                )
            })?;
        if id >= declared {
            return Err(field_err(
                &format!("model.vocab[{token:?}]"),
                format!("id {id} is past the {declared} tokens declared (ids must be 0..n without gaps)"),
            ));
        }
        if id >= vocab.len() {
            vocab.resize(id + 1, None);
        }
        if let Some(prev) = &vocab[id] {
            return Err(field_err(
                &format!("model.vocab[{token:?}]"),
                format!("id {id} is also used by {prev:?}"),
            ));
        }
        vocab[id] = Some(token.clone());
    }
    let merges = read_merges(model)?;
    for (i, t) in added.iter().enumerate() {
        let id = t.id as usize;
        if id >= declared {
            return Err(field_err(
                &format!("added_tokens[{i}].id"),
                format!("id {id} is past the {declared} tokens declared (ids must be 0..n without gaps)"),
            ));
        }
        if id >= vocab.len() {
            vocab.resize(id + 1, None);
        }
        match &vocab[id] {
            None => vocab[id] = Some(t.content.clone()),
            Some(existing) if *existing == t.content => {}
            Some(existing) => {
                return Err(field_err(
                    &format!("added_tokens[{i}]"),
                    format!(
                        "id {id} is {:?} here but {existing:?} in model.vocab",
                        t.content
                    ),
                ))
            }
        }
    }
    let vocab = vocab
        .into_iter()
        .enumerate()
        .map(|(id, t)| {
            t.ok_or_else(|| {
                field_err(
                    "model.vocab",
                    format!("no token has id {id} (ids must be 0..n without gaps)"),
                )
            })
        })
        .collect::<Result<Vec<String>, Error>>()?;

    let nfc = read_normalizer(root.get("normalizer"), "normalizer")?;
    let (add_prefix_space, use_regex) =
        read_pre_tokenizer(root.get("pre_tokenizer"), "pre_tokenizer")?;
    // The decoder only matters for decode(), which is byte-level; refuse others so a caller
    // never gets silently wrong text.
    match root.get("decoder") {
        None | Some(Value::Null) => {}
        Some(Value::Object(d)) => match type_of(d, "decoder")? {
            "ByteLevel" => {}
            other => {
                return Err(unsupported(format!(
                    "decoder type `{other}` is not supported; expected ByteLevel"
                )))
            }
        },
        Some(_) => return Err(field_err("decoder", "expected an object or null")),
    }
    let unk_id = match unk_token {
        None => None,
        Some(u) => Some(
            vocab
                .iter()
                .position(|t| *t == u)
                .and_then(|p| u32::try_from(p).ok())
                .ok_or_else(|| {
                    field_err("model.unk_token", format!("{u:?} is not in model.vocab"))
                })?,
        ),
    };
    Ok(TokenizerParts {
        vocab,
        merges,
        added,
        nfc,
        add_prefix_space,
        ignore_merges,
        use_regex,
        unk_id,
        fuse_unk,
    })
}
