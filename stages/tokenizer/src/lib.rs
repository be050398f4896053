//! sky-tokenizer: Hugging Face byte-level BPE (GPT-2 / ModernBERT style), producing exactly the
//! ids of HF `tokenizers`' `encode(text, add_special_tokens=False)`.
//!
//! Pipeline, as HF runs it:
//! 1. added tokens with `normalized: false` are cut out of the raw text (leftmost-longest,
//!    honouring `lstrip`/`rstrip`/`single_word`);
//! 2. each remaining piece is NFC-normalized (when the file says so), then added tokens with
//!    `normalized: true` are cut out;
//! 3. each remaining piece is split by the GPT-2 regex (ByteLevel pre-tokenizer), optionally
//!    after prefixing a space;
//! 4. each word's bytes become byte-level symbols, merged by BPE rank (or looked up whole with
//!    `ignore_merges`).
//!
//! The core is pure computation: no filesystem, no threads, no interior mutability, so it
//! builds for WASM and a [`Tokenizer`] is `Send + Sync`. Build one from a `tokenizer.json`
//! text ([`Tokenizer::from_json`]) or from plain parts ([`Tokenizer::from_parts`], e.g. out of
//! GGUF metadata); [`Tokenizer::parts`] gives the parts back for a converter to write.

mod added;
mod bpe;
mod json;
mod nfc;
mod pretok;
mod unicode_tables;

use std::borrow::Cow;
use std::collections::HashMap;

/// Everything that can go wrong building a tokenizer. Encoding itself cannot fail.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The text is not JSON.
    #[error("tokenizer.json: invalid JSON: {0}")]
    Json(String),
    /// A field is missing or has the wrong shape.
    #[error("tokenizer.json: `{path}`: {reason}")]
    Field {
        /// Where in the document, e.g. `model.merges[12]`.
        path: String,
        /// What is wrong there.
        reason: String,
    },
    /// The file asks for a feature this tokenizer does not implement.
    #[error("tokenizer.json: {0}")]
    Unsupported(String),
    /// [`TokenizerParts`] that do not fit together.
    #[error("tokenizer parts: {0}")]
    Parts(String),
}

/// A token matched on the text before BPE (HF "added token"), e.g. `[CLS]` or `[MASK]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AddedToken {
    /// Its id (also its index in [`TokenizerParts::vocab`]).
    pub id: u32,
    /// The literal text matched in the input.
    pub content: String,
    /// Special tokens are skipped by [`Tokenizer::decode`].
    pub special: bool,
    /// A match also takes the whitespace before it.
    pub lstrip: bool,
    /// A match also takes the whitespace after it.
    pub rstrip: bool,
    /// Matched on the normalized (NFC) text rather than the raw text.
    pub normalized: bool,
    /// Matched only when not inside a word.
    pub single_word: bool,
}

/// The plain data a [`Tokenizer`] is built from; what a GGUF file stores.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenizerParts {
    /// Token strings, index = id, byte-level encoded as in `tokenizer.json` (`Ġthe`); added
    /// tokens appear at their ids with their literal content.
    pub vocab: Vec<String>,
    /// BPE merges, highest priority first.
    pub merges: Vec<(String, String)>,
    /// Added tokens (their ids index `vocab`).
    pub added: Vec<AddedToken>,
    /// Apply NFC before splitting.
    pub nfc: bool,
    /// ByteLevel `add_prefix_space`: prefix a space to each piece not starting with one.
    pub add_prefix_space: bool,
    /// BPE `ignore_merges`: a word found whole in the vocab is one token.
    pub ignore_merges: bool,
    /// ByteLevel `use_regex`: split pieces by the GPT-2 regex (else each piece is one word).
    pub use_regex: bool,
    /// BPE `unk_token` id: bytes missing from the vocab become it (else they are dropped).
    pub unk_id: Option<u32>,
    /// BPE `fuse_unk`: consecutive unknowns become one `unk_id`.
    pub fuse_unk: bool,
}

impl TokenizerParts {
    /// Parts with the settings of the shipped tokenizers (NFC, no prefix space, regex split).
    pub fn new(vocab: Vec<String>, merges: Vec<(String, String)>, added: Vec<AddedToken>) -> Self {
        TokenizerParts {
            vocab,
            merges,
            added,
            nfc: true,
            add_prefix_space: false,
            ignore_merges: false,
            use_regex: true,
            unk_id: None,
            fuse_unk: false,
        }
    }

    /// Parts from GGUF tokenizer metadata: `tokenizer.ggml.tokens`, `tokenizer.ggml.token_type`
    /// and `tokenizer.ggml.merges` (`"left right"` strings). Control tokens (type 3) become
    /// special added tokens matched on the raw text, user-defined ones (4) plain added tokens
    /// matched after NFC (HF's defaults for each); the other settings are those of
    /// [`TokenizerParts::new`]. GGUF does not store `lstrip`/`rstrip`: set them on `added`
    /// afterwards if the model needs them (ModernBERT's `[MASK]`).
    pub fn from_gguf(
        tokens: Vec<String>,
        token_types: &[i32],
        merges: &[String],
    ) -> Result<TokenizerParts, Error> {
        if token_types.len() != tokens.len() {
            return Err(Error::Parts(format!(
                "{} token types for {} tokens",
                token_types.len(),
                tokens.len()
            )));
        }
        let mut added = Vec::new();
        for (id, (content, &ty)) in tokens.iter().zip(token_types).enumerate() {
            if ty == 3 || ty == 4 {
                let id = u32::try_from(id)
                    .map_err(|_| Error::Parts(format!("token id {id} does not fit u32")))?;
                added.push(AddedToken {
                    id,
                    content: content.clone(),
                    special: ty == 3,
                    lstrip: false,
                    rstrip: false,
                    normalized: ty == 4,
                    single_word: false,
                });
            }
        }
        let merges = merges
            .iter()
            .enumerate()
            .map(|(i, m)| match m.split_once(' ') {
                Some((a, b)) if !a.is_empty() && !b.is_empty() && !b.contains(' ') => {
                    Ok((a.to_string(), b.to_string()))
                }
                _ => Err(Error::Parts(format!(
                    "merge #{i} {m:?} is not \"left right\""
                ))),
            })
            .collect::<Result<Vec<_>, Error>>()?;
        Ok(TokenizerParts::new(tokens, merges, added))
    }

    /// GGUF `tokenizer.ggml.token_type` values as the upstream converter assigns them
    /// (laya-gguf spec 7): 1 normal, 3 control (special added tokens, or added tokens that
    /// look special: `<|..|>`, `<｜..｜>`, `<unused..>`, `<pad>`, `<mask>`, `<2mass>`,
    /// `[@BOS@]`), 4 user-defined (other added tokens).
    pub fn token_types(&self) -> Vec<i32> {
        let looks_special = |t: &str| {
            matches!(t, "<pad>" | "<mask>" | "<2mass>" | "[@BOS@]")
                || (t.starts_with("<|") && t.ends_with("|>"))
                || (t.starts_with("<\u{ff5c}") && t.ends_with("\u{ff5c}>"))
                || (t.starts_with("<unused") && t.ends_with('>'))
        };
        let mut types = vec![1; self.vocab.len()];
        for t in &self.added {
            if let Some(slot) = types.get_mut(t.id as usize) {
                *slot = if t.special || looks_special(&t.content) {
                    3
                } else {
                    4
                };
            }
        }
        types
    }
}

/// A ready-to-use byte-level BPE tokenizer.
#[derive(Clone, Debug)]
pub struct Tokenizer {
    parts: TokenizerParts,
    token_ids: HashMap<String, u32>,
    merges: bpe::MergeMap,
    /// Id of each byte's single-char token, if the vocab has it.
    byte_ids: [Option<u32>; 256],
    raw_added: added::Matcher,
    normalized_added: added::Matcher,
    /// Per id: skip it in `decode`.
    special: Vec<bool>,
    /// Decoded text of normalized added tokens: HF decodes them in their NFC form.
    normalized_content: HashMap<u32, String>,
}

impl Tokenizer {
    /// Builds a tokenizer from the text of a Hugging Face `tokenizer.json`.
    pub fn from_json(json: &str) -> Result<Tokenizer, Error> {
        Tokenizer::from_parts(json::parse(json)?)
    }

    /// Builds a tokenizer from parts, checking that they fit together.
    pub fn from_parts(parts: TokenizerParts) -> Result<Tokenizer, Error> {
        let n = parts.vocab.len();
        if n == 0 {
            return Err(Error::Parts("the vocab is empty".into()));
        }
        if u32::try_from(n).is_err() {
            return Err(Error::Parts(format!("{n} tokens do not fit u32 ids")));
        }
        let mut token_ids = HashMap::with_capacity(n);
        for (id, t) in parts.vocab.iter().enumerate() {
            if let Some(prev) = token_ids.insert(t.clone(), id as u32) {
                return Err(Error::Parts(format!(
                    "token {t:?} appears twice (ids {prev} and {id})"
                )));
            }
        }
        let mut merges = bpe::MergeMap::default();
        merges.reserve(parts.merges.len());
        for (rank, (a, b)) in parts.merges.iter().enumerate() {
            let lookup = |t: &str| {
                token_ids.get(t).copied().ok_or_else(|| {
                    Error::Parts(format!(
                        "merge #{rank} ({a:?}, {b:?}): {t:?} is not in the vocab"
                    ))
                })
            };
            let (ia, ib, merged) = (lookup(a)?, lookup(b)?, lookup(&format!("{a}{b}"))?);
            // A repeated pair keeps its last rank: HF collects the merges into a map the same way.
            merges.insert(bpe::pair_key(ia, ib), (rank as u32, merged));
        }
        let mut byte_ids = [None; 256];
        for (b, slot) in byte_ids.iter_mut().enumerate() {
            *slot = token_ids.get(&pretok::BYTE_TO_CHAR[b].to_string()).copied();
        }
        let mut special = vec![false; n];
        let (mut raw, mut normalized) = (Vec::new(), Vec::new());
        let mut normalized_content = HashMap::new();
        for t in &parts.added {
            match parts.vocab.get(t.id as usize) {
                Some(v) if *v == t.content => {}
                Some(v) => {
                    return Err(Error::Parts(format!(
                        "added token {:?} has id {} but the vocab has {v:?} there",
                        t.content, t.id
                    )))
                }
                None => {
                    return Err(Error::Parts(format!(
                        "added token {:?} has id {} beyond the vocab ({n} tokens)",
                        t.content, t.id
                    )))
                }
            }
            special[t.id as usize] = t.special;
            // Normalized tokens are matched on NFC text, so their pattern is NFC too.
            let content = if t.normalized && parts.nfc {
                nfc::nfc(&t.content).into_owned()
            } else {
                t.content.clone()
            };
            let pattern = added::Pattern {
                content,
                id: t.id,
                lstrip: t.lstrip,
                rstrip: t.rstrip,
                single_word: t.single_word,
            };
            if t.normalized {
                if pattern.content != t.content {
                    normalized_content.insert(t.id, pattern.content.clone());
                }
                normalized.push(pattern);
            } else {
                raw.push(pattern);
            }
        }
        if let Some(unk) = parts.unk_id {
            if unk as usize >= n {
                return Err(Error::Parts(format!(
                    "unk id {unk} is beyond the vocab ({n} tokens)"
                )));
            }
        }
        Ok(Tokenizer {
            token_ids,
            merges,
            byte_ids,
            raw_added: added::Matcher::new(raw),
            normalized_added: added::Matcher::new(normalized),
            special,
            normalized_content,
            parts,
        })
    }

    /// The parts this tokenizer was built from.
    pub fn parts(&self) -> &TokenizerParts {
        &self.parts
    }

    /// Number of ids (model vocab plus added tokens).
    pub fn vocab_size(&self) -> usize {
        self.parts.vocab.len()
    }

    /// The id of a token string (byte-level form, or an added token's content).
    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        self.token_ids.get(token).copied()
    }

    /// The token string of an id ([`TokenizerParts::vocab`]; for added tokens, their content
    /// as declared).
    pub fn id_to_token(&self, id: u32) -> Option<&str> {
        self.parts.vocab.get(id as usize).map(String::as_str)
    }

    /// Whether `id` is a special added token.
    pub fn is_special(&self, id: u32) -> bool {
        self.special.get(id as usize).copied().unwrap_or(false)
    }

    /// Encodes `text`: HF `tokenizer.encode(text, add_special_tokens=False).ids`.
    pub fn encode(&self, text: &str) -> Vec<u32> {
        let mut out = Vec::with_capacity(text.len() / 3 + 1);
        let mut raw_pieces = Vec::new();
        let mut norm_pieces = Vec::new();
        let mut symbols = Vec::new();
        self.raw_added.split(text, &mut raw_pieces);
        for piece in raw_pieces {
            let (a, b) = match piece {
                added::Piece::Token(id, _, _) => {
                    out.push(id);
                    continue;
                }
                added::Piece::Text(a, b) => (a, b),
            };
            let normalized = self.normalize(&text[a..b]);
            if self.normalized_added.is_empty() {
                self.encode_piece(&normalized, &mut symbols, &mut out);
                continue;
            }
            norm_pieces.clear();
            self.normalized_added.split(&normalized, &mut norm_pieces);
            for p in &norm_pieces {
                match *p {
                    added::Piece::Token(id, _, _) => out.push(id),
                    added::Piece::Text(a, b) => {
                        self.encode_piece(&normalized[a..b], &mut symbols, &mut out)
                    }
                }
            }
        }
        out
    }

    fn normalize<'a>(&self, text: &'a str) -> Cow<'a, str> {
        if self.parts.nfc {
            nfc::nfc(text)
        } else {
            Cow::Borrowed(text)
        }
    }

    /// Pre-tokenizes and BPE-encodes one piece of normalized text without added tokens.
    fn encode_piece(&self, piece: &str, symbols: &mut Vec<u32>, out: &mut Vec<u32>) {
        let prefixed;
        let piece = if self.parts.add_prefix_space && !piece.starts_with(' ') {
            prefixed = format!(" {piece}");
            prefixed.as_str()
        } else {
            piece
        };
        if self.parts.use_regex {
            pretok::split_gpt2(piece, |word| {
                self.encode_word(word.as_bytes(), symbols, out)
            });
        } else if !piece.is_empty() {
            self.encode_word(piece.as_bytes(), symbols, out);
        }
    }

    fn encode_word(&self, word: &[u8], symbols: &mut Vec<u32>, out: &mut Vec<u32>) {
        if self.parts.ignore_merges {
            if let Some(&id) = self.token_ids.get(&pretok::bytes_to_level_string(word)) {
                out.push(id);
                return;
            }
        }
        symbols.clear();
        // Pending unknown run (HF adds it before the next known symbol).
        let mut pending_unk = false;
        for &b in word {
            match self.byte_ids[b as usize] {
                Some(id) => {
                    if pending_unk {
                        symbols.extend(self.parts.unk_id);
                        pending_unk = false;
                    }
                    symbols.push(id);
                }
                None => {
                    if let Some(unk) = self.parts.unk_id {
                        if pending_unk && !self.parts.fuse_unk {
                            symbols.push(unk);
                        }
                        pending_unk = true;
                    }
                }
            }
        }
        if pending_unk {
            symbols.extend(self.parts.unk_id);
        }
        bpe::merge(&self.merges, symbols);
        out.extend_from_slice(symbols);
    }

    /// Decodes ids to text, skipping special tokens: HF `tokenizer.decode(ids)` with the
    /// ByteLevel decoder. Unknown ids are skipped; invalid UTF-8 becomes U+FFFD. Added tokens
    /// with `normalized: true` decode as their NFC form, as in HF.
    pub fn decode(&self, ids: &[u32]) -> String {
        self.decode_impl(ids, true)
    }

    /// Like [`Tokenizer::decode`] but keeps special tokens (`skip_special_tokens=False`).
    pub fn decode_with_special(&self, ids: &[u32]) -> String {
        self.decode_impl(ids, false)
    }

    fn decode_impl(&self, ids: &[u32], skip_special: bool) -> String {
        let mut bytes = Vec::new();
        for &id in ids {
            let Some(token) = self
                .normalized_content
                .get(&id)
                .map(String::as_str)
                .or_else(|| self.id_to_token(id))
            else {
                continue;
            };
            if skip_special && self.is_special(id) {
                continue;
            }
            let start = bytes.len();
            let all_mapped = token.chars().all(|c| match pretok::char_to_byte(c) {
                Some(b) => {
                    bytes.push(b);
                    true
                }
                None => false,
            });
            // A token that is not byte-level text (e.g. an added token "é") is taken as is.
            if !all_mapped {
                bytes.truncate(start);
                bytes.extend_from_slice(token.as_bytes());
            }
        }
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PICO: &str = include_str!("../../../models/s1-pico/tokenizer/tokenizer.json");

    fn pico() -> Tokenizer {
        match Tokenizer::from_json(PICO) {
            Ok(t) => t,
            Err(e) => panic!("pico tokenizer: {e}"),
        }
    }

    #[test]
    fn reads_the_shipped_settings() {
        let t = pico();
        let p = t.parts();
        assert_eq!(t.vocab_size(), 1024);
        assert_eq!(p.merges.len(), 763);
        assert!(p.nfc && !p.add_prefix_space && p.use_regex && !p.ignore_merges);
        assert_eq!(p.added.len(), 5);
        assert_eq!(t.token_to_id("[MASK]"), Some(4));
        assert_eq!(t.id_to_token(2), Some("[CLS]"));
        assert_eq!(t.id_to_token(5000), None);
        assert_eq!(p.token_types()[..6], [3, 3, 3, 3, 3, 1]);
        let mut p = p.clone();
        p.added[0].special = false;
        p.added[1].special = false;
        p.added[1].content = "<|x|>".into();
        assert_eq!(p.token_types()[..3], [4, 3, 3]);
        assert!(t.is_special(0) && !t.is_special(5));
    }

    #[test]
    fn specials_in_text_become_special_ids() {
        let t = pico();
        let ids = t.encode("[CLS] [SEP] [PAD] [UNK] x[MASK]y");
        let sp = t.token_to_id("Ġ").unwrap_or(u32::MAX);
        assert_eq!(ids[..7], [2, sp, 3, sp, 0, sp, 1]);
        assert!(ids.contains(&4));
        assert_eq!(t.encode(""), Vec::<u32>::new());
    }

    #[test]
    fn nfd_input_gives_the_nfc_ids() {
        let t = pico();
        assert_eq!(t.encode("e\u{301}t\u{e9}"), t.encode("\u{e9}t\u{e9}"));
    }

    #[test]
    fn decode_round_trips_text_and_skips_specials() {
        let t = pico();
        let text = "Héllo wörld 😀 {\"a\": [1, 2]}\n\ttabs  ";
        assert_eq!(t.decode(&t.encode(text)), text);
        let ids = t.encode("[CLS] hi");
        assert_eq!(t.decode(&ids), " hi");
        assert_eq!(t.decode_with_special(&ids), "[CLS] hi");
    }

    #[test]
    fn parts_round_trip_encodes_the_same() {
        let t = pico();
        let again = match Tokenizer::from_parts(t.parts().clone()) {
            Ok(t) => t,
            Err(e) => panic!("from_parts: {e}"),
        };
        assert_eq!(again.parts(), t.parts());
        for text in ["The quick brown fox.", "[MASK] déjà vu 👨‍👩‍👧", "  \t\r\n x"] {
            assert_eq!(again.encode(text), t.encode(text));
        }
    }

    #[test]
    fn gguf_metadata_round_trip() {
        let t = pico();
        let p = t.parts();
        let merges: Vec<String> = p.merges.iter().map(|(a, b)| format!("{a} {b}")).collect();
        let back = match TokenizerParts::from_gguf(p.vocab.clone(), &p.token_types(), &merges) {
            Ok(back) => back,
            Err(e) => panic!("from_gguf: {e}"),
        };
        assert_eq!(&back, p);
        let bad = TokenizerParts::from_gguf(p.vocab.clone(), &p.token_types(), &["ab".into()]);
        assert!(matches!(bad, Err(Error::Parts(m)) if m.contains("merge #0")));
        assert!(TokenizerParts::from_gguf(p.vocab.clone(), &[1], &merges).is_err());
    }

    fn err_of(json: &str) -> String {
        match Tokenizer::from_json(json) {
            Ok(_) => panic!("accepted a bad tokenizer.json"),
            Err(e) => e.to_string(),
        }
    }

    fn edited(f: impl FnOnce(&mut serde_json::Value)) -> String {
        let mut v: serde_json::Value = match serde_json::from_str(PICO) {
            Ok(v) => v,
            Err(e) => panic!("{e}"),
        };
        f(&mut v);
        v.to_string()
    }

    #[test]
    fn bad_files_give_clear_errors() {
        assert!(err_of("{not json").starts_with("tokenizer.json: invalid JSON"));
        assert!(err_of("[]").contains("expected a JSON object"));
        assert!(err_of("{}").contains("`model`: missing"));
        let e = err_of(&edited(|v| v["model"]["type"] = "WordPiece".into()));
        assert_eq!(
            e,
            "tokenizer.json: model type `WordPiece` is not supported; expected BPE"
        );
        let e = err_of(&edited(|v| {
            v["normalizer"] = serde_json::json!({"type": "Lowercase"})
        }));
        assert!(e.contains("normalizer type `Lowercase`"), "{e}");
        let e = err_of(&edited(|v| {
            v["pre_tokenizer"] = serde_json::json!({"type": "Whitespace"})
        }));
        assert!(e.contains("pre_tokenizer type `Whitespace`"), "{e}");
        let e = err_of(&edited(|v| v["pre_tokenizer"] = serde_json::Value::Null));
        assert!(e.contains("expected a ByteLevel pre-tokenizer"), "{e}");
        let e = err_of(&edited(|v| {
            v["decoder"] = serde_json::json!({"type": "WordPiece"})
        }));
        assert!(e.contains("decoder type `WordPiece`"), "{e}");
        let e = err_of(&edited(|v| v["model"]["dropout"] = 0.1.into()));
        assert!(e.contains("dropout"), "{e}");
        let e = err_of(&edited(|v| v["model"]["byte_fallback"] = true.into()));
        assert!(e.contains("byte_fallback"), "{e}");
        let e = err_of(&edited(|v| {
            v["model"]["continuing_subword_prefix"] = "##".into()
        }));
        assert!(e.contains("continuing_subword_prefix"), "{e}");
        let e = err_of(&edited(|v| {
            if let Some(m) = v["model"].as_object_mut() {
                m.remove("merges");
            }
        }));
        assert!(e.contains("`model.merges`: missing"), "{e}");
        let e = err_of(&edited(|v| {
            v["model"]["merges"][3] = serde_json::json!([1, 2])
        }));
        assert!(e.contains("`model.merges[3]`"), "{e}");
        let e = err_of(&edited(|v| {
            v["model"]["merges"][0] = serde_json::json!(["Ġ", "zzz"])
        }));
        assert!(e.contains("merge #0") && e.contains("\"zzz\""), "{e}");
        let e = err_of(&edited(|v| v["added_tokens"][0]["id"] = 7.into()));
        assert!(e.contains("added_tokens[0]"), "{e}");
        let e = err_of(&edited(|v| v["model"]["vocab"]["!"] = 5000.into()));
        assert!(
            e.contains("`model.vocab[\"!\"]`: id 5000 is past the 1029 tokens declared"),
            "{e}"
        );
        // An id inside the range but leaving a gap.
        let e = err_of(&edited(|v| v["model"]["vocab"]["!"] = 1028.into()));
        assert!(e.contains("no token has id 5"), "{e}");
        let e = err_of(&edited(|v| v["model"]["unk_token"] = "<nope>".into()));
        assert!(e.contains("model.unk_token"), "{e}");
    }

    #[test]
    fn inconsistent_parts_are_refused() {
        let t = pico();
        let mut p = t.parts().clone();
        p.vocab[10] = p.vocab[11].clone();
        assert!(Tokenizer::from_parts(p).is_err());
        let mut p = t.parts().clone();
        p.added[0].id = 9999;
        assert!(Tokenizer::from_parts(p).is_err());
        let mut p = t.parts().clone();
        p.vocab.clear();
        assert!(Tokenizer::from_parts(p).is_err());
    }

    #[test]
    fn tokenizer_is_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<Tokenizer>();
    }
}
