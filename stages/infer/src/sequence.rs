//! Building the token sequence exactly as the Python Laya runtime does (`build_sequence`,
//! `render_options`, `Agent._check_question` / `_to_internal` / `_encode_state`):
//!
//! `[CLS] tok("{type} question: {ins}")[:Q] [SEP] ([MASK] tok(" " + option)[:48])* [SEP]
//! state [SEP]`, the option and question budgets from `head_max_len`, `[MASK]` text replaced by
//! a space in the instructions, every option and the serialised state (object keys included),
//! and the whole sequence cut to `max_len` (list states keep their newest tokens).

use crate::config::QType;
use crate::error::{bad_request, Result};
use crate::pyjson::{dumps, py_str};
use serde_json::Value;

/// Text to token ids, as Hugging Face `encode(text, add_special_tokens=False)`.
pub trait TextEncoder: Send + Sync {
    /// Token ids of `text`; literal special-token text becomes the special ids.
    fn encode(&self, text: &str) -> Vec<u32>;
}

impl TextEncoder for sky_tokenizer::Tokenizer {
    fn encode(&self, text: &str) -> Vec<u32> {
        sky_tokenizer::Tokenizer::encode(self, text)
    }
}

/// The special tokens the layout needs.
#[derive(Debug, Clone, PartialEq)]
pub struct SpecialTokens {
    /// `[CLS]` id.
    pub cls: u32,
    /// `[SEP]` id.
    pub sep: u32,
    /// `[MASK]` id.
    pub mask: u32,
    /// `[MASK]` text, scrubbed from every text.
    pub mask_text: String,
}

/// Laya's per-option text cap (tokens after the marker).
pub const OPTION_TOKENS: usize = 48;

/// One validated question in the runtime's internal form.
#[derive(Debug, Clone, PartialEq)]
pub struct Question {
    /// Question type.
    pub qtype: QType,
    /// Instructions as text (non-strings are `json.dumps`-ed, as Laya does).
    pub instructions: String,
    /// Answer keys in option order (choice: labels; score: "0".."n-1"; noul: false, true).
    pub keys: Vec<String>,
    /// Rendered option texts (before `[MASK]` scrubbing).
    pub options: Vec<String>,
    /// Score legend: the level descriptions as given.
    pub legend: Vec<Value>,
}

/// At most [`SHOWN_CHARS`] characters of a user's text for a message (`…` where cut): the
/// path names the value, the message need not repeat all of it.
fn shown(text: &str) -> String {
    match text.char_indices().nth(SHOWN_CHARS) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_string(),
    }
}

/// How many characters of a user's text a message repeats.
const SHOWN_CHARS: usize = 48;

/// Render a criterion value: strings as is, anything else compact JSON.
fn render_criterion(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => dumps(other),
    }
}

fn is_none_or_empty(v: Option<&Value>) -> bool {
    matches!(v, None | Some(Value::Null)) || v.and_then(Value::as_str) == Some("")
}

impl Question {
    /// Validate and normalise one question definition (`type`, `instructions`, `criteria`);
    /// `path` names it in errors (e.g. `questions.route`).
    pub fn parse(path: &str, def: &Value) -> Result<Question> {
        let obj = def.as_object().ok_or_else(|| {
            bad_request(
                path,
                "a question must be an object with type, instructions and criteria",
            )
        })?;
        let tname = obj.get("type").ok_or_else(|| {
            bad_request(
                format!("{path}.type"),
                "missing; use one of choice, score, noul",
            )
        })?;
        let qtype = tname.as_str().and_then(QType::parse).ok_or_else(|| {
            bad_request(
                format!("{path}.type"),
                format!("unknown question type {tname}; use one of choice, score, noul"),
            )
        })?;
        let ins = match obj.get("instructions") {
            None => {
                return Err(bad_request(
                    format!("{path}.instructions"),
                    "missing; add the text the model should answer",
                ))
            }
            Some(Value::Null) => {
                return Err(bad_request(
                    format!("{path}.instructions"),
                    "must not be null",
                ))
            }
            Some(Value::String(s)) => s.clone(),
            Some(other) => dumps(other),
        };
        let crit = obj.get("criteria").unwrap_or(&Value::Null);
        let cpath = format!("{path}.criteria");
        let (keys, options, legend) = match qtype {
            QType::Choice => {
                let pairs: Vec<(String, Value)> = match crit {
                    Value::Object(map) => map.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
                    Value::Array(items) => {
                        let mut pairs: Vec<(String, Value)> = Vec::new();
                        for (i, item) in items.iter().enumerate() {
                            if item.is_array() || item.is_object() {
                                return Err(bad_request(format!("{cpath}[{i}]"), "a choice label must be a string or number"));
                            }
                            let key = py_str(item);
                            // Laya would merge a repeated label silently (a dict keeps one);
                            // two options that read the same are a mistake worth naming.
                            if let Some(first) = pairs.iter().position(|(k, _)| *k == key) {
                                return Err(bad_request(
                                    format!("{cpath}[{i}]"),
                                    format!("the label {:?} is given twice (also {cpath}[{first}])", shown(&key)),
                                ));
                            }
                            pairs.push((key, Value::Null));
                        }
                        pairs
                    }
                    _ => {
                        return Err(bad_request(
                            cpath,
                            "a choice question takes criteria as an object of label -> description, or a list of labels",
                        ))
                    }
                };
                if pairs.len() < 2 {
                    // One option would be answered with probability 1: no question at all.
                    return Err(bad_request(
                        cpath,
                        format!(
                            "a choice question needs at least two options, found {}",
                            pairs.len()
                        ),
                    ));
                }
                let options = pairs
                    .iter()
                    .map(|(k, v)| {
                        if is_none_or_empty(Some(v)) {
                            k.clone()
                        } else {
                            format!("{k}: {}", render_criterion(v))
                        }
                    })
                    .collect();
                (
                    pairs.into_iter().map(|(k, _)| k).collect(),
                    options,
                    Vec::new(),
                )
            }
            QType::Score => {
                let items = crit
                    .as_array()
                    .ok_or_else(|| bad_request(&cpath, "a score question takes criteria as a list of level descriptions, level 0 first"))?;
                if items.len() < 2 {
                    return Err(bad_request(
                        cpath,
                        format!(
                            "a score question needs at least two levels, found {}",
                            items.len()
                        ),
                    ));
                }
                if let Some(i) = items.iter().position(Value::is_null) {
                    return Err(bad_request(
                        format!("{cpath}[{i}]"),
                        "a score level must have a description",
                    ));
                }
                let options = items
                    .iter()
                    .enumerate()
                    .map(|(i, c)| format!("level {i}: {}", render_criterion(c)))
                    .collect();
                (
                    (0..items.len()).map(|i| i.to_string()).collect(),
                    options,
                    items.clone(),
                )
            }
            QType::Noul => {
                let mut f_desc = None;
                let mut t_desc = None;
                match crit {
                    Value::Null => {}
                    Value::Object(map) => {
                        for (k, v) in map {
                            match k.to_lowercase().as_str() {
                                "false" => f_desc = Some(v),
                                "true" => t_desc = Some(v),
                                _ => {
                                    return Err(bad_request(
                                        format!("{cpath}.{k}"),
                                        "a noul question takes criteria keyed only 'true' / 'false'",
                                    ))
                                }
                            }
                        }
                    }
                    _ => {
                        return Err(bad_request(
                            cpath,
                            "a noul question takes criteria as an object with optional 'true' / 'false' descriptions, or omits it",
                        ))
                    }
                }
                let render = |label: &str, d: Option<&Value>, default: &str| {
                    if is_none_or_empty(d) {
                        format!("{label}: {default}")
                    } else {
                        format!("{label}: {}", render_criterion(d.unwrap_or(&Value::Null)))
                    }
                };
                let options = vec![
                    render("false", f_desc, "no, the statement does not hold"),
                    render("true", t_desc, "yes, the statement holds"),
                ];
                (vec!["false".into(), "true".into()], options, Vec::new())
            }
        };
        Ok(Question {
            qtype,
            instructions: ins,
            keys,
            options,
            legend,
        })
    }
}

/// The state as Laya serialises it (strings as is, anything else `json.dumps`).
pub fn state_text(state: &Value) -> String {
    match state {
        Value::String(s) => s.clone(),
        other => dumps(other),
    }
}

/// A built sequence and what the budgets did.
#[derive(Debug, Clone, PartialEq)]
pub struct Sequence {
    /// Token ids (at most `max_len`).
    pub ids: Vec<u32>,
    /// Marker ([MASK]) positions, one per option.
    pub markers: Vec<usize>,
    /// State tokens before truncation.
    pub state_tokens: usize,
    /// State tokens kept.
    pub state_tokens_used: usize,
    /// The per-option cap applied by the head budget, if any.
    pub tokens_per_option: Option<usize>,
    /// Options whose (cut) token spans are distinct.
    pub options_distinct: usize,
    /// The first option that Laya's layout cut short, if any (the `--requests` and golden
    /// paths keep the runtime's cut; `ask` refuses it, see [`OptionCut`]).
    pub option_cut: Option<OptionCut>,
}

/// An option whose text does not fit: Laya keeps at most [`OPTION_TOKENS`] tokens of each
/// option, and fewer when all options together overflow the head window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OptionCut {
    /// Index of the option (criteria order).
    pub option: usize,
    /// Its text's tokens.
    pub tokens: usize,
    /// The tokens of its text that the layout keeps.
    pub kept: usize,
}

/// Limits of the layout.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Budget {
    /// Whole sequence cap (Laya `max_len`).
    pub max_len: usize,
    /// Question + options cap (`head_max_len`).
    pub max_head_tokens: usize,
}

impl Budget {
    /// The most options a question may have: every option keeps at least its marker and 3
    /// text tokens inside `max_head_tokens - 16` ((M - 16) / 4, as newer llama.cpp).
    pub fn max_options(&self) -> usize {
        (self.max_head_tokens.saturating_sub(16) / 4).max(1)
    }
}

/// Python floor division (the budget can go negative).
fn floor_div(a: i64, b: i64) -> i64 {
    a.div_euclid(b)
}

/// `build_sequence` for one question over a state whose ids are `state_ids`
/// (`truncate_left`: keep the newest tokens, Laya's rule for list states).
pub fn build_sequence(
    enc: &dyn TextEncoder,
    special: &SpecialTokens,
    budget: Budget,
    q: &Question,
    state_ids: &[u32],
    truncate_left: bool,
    path: &str,
) -> Result<Sequence> {
    let n = q.options.len();
    if n > budget.max_options() {
        return Err(bad_request(
            format!("{path}.criteria"),
            format!(
                "{n} options do not fit the head window of {} tokens: at most {} options per question",
                budget.max_head_tokens,
                budget.max_options()
            ),
        ));
    }
    let scrub = |s: &str| s.replace(&special.mask_text, " ");
    let head_ids = enc.encode(&format!(
        "{} question: {}",
        q.qtype.name(),
        scrub(&q.instructions)
    ));
    let mut text_tokens = Vec::with_capacity(n);
    let mut opt_ids: Vec<Vec<u32>> = q
        .options
        .iter()
        .map(|o| {
            let mut ids = vec![special.mask];
            let text = enc.encode(&format!(" {}", scrub(o)));
            text_tokens.push(text.len());
            ids.extend_from_slice(&text[..text.len().min(OPTION_TOKENS)]);
            ids
        })
        .collect();
    let m = budget.max_head_tokens as i64;
    let total = |o: &Vec<Vec<u32>>| o.iter().map(Vec::len).sum::<usize>() as i64;
    let mut opt_budget = m - total(&opt_ids);
    let mut tokens_per_option = None;
    if opt_budget < 16 {
        let per = floor_div(m - 16, n.max(1) as i64).max(4) as usize;
        tokens_per_option = Some(per);
        for o in &mut opt_ids {
            o.truncate(per);
        }
        opt_budget = m - total(&opt_ids);
    }
    let q_len = opt_budget.max(8) as usize;
    let mut ids = Vec::with_capacity(budget.max_len);
    ids.push(special.cls);
    ids.extend_from_slice(&head_ids[..head_ids.len().min(q_len)]);
    ids.push(special.sep);
    let mut markers = Vec::with_capacity(n);
    for o in &opt_ids {
        markers.push(ids.len());
        ids.extend_from_slice(o);
    }
    ids.push(special.sep);
    let room = budget.max_len.saturating_sub(ids.len() + 1);
    let st = if truncate_left {
        &state_ids[state_ids.len().saturating_sub(room)..]
    } else {
        &state_ids[..state_ids.len().min(room)]
    };
    let used = st.len();
    ids.extend_from_slice(st);
    ids.push(special.sep);
    ids.truncate(budget.max_len);
    markers.retain(|&p| p < budget.max_len);
    if markers.len() != n {
        return Err(bad_request(
            format!("{path}.criteria"),
            format!(
                "only {} of {n} options fit in max_len = {} tokens; shorten the question or use fewer options",
                markers.len(),
                budget.max_len
            ),
        ));
    }
    let option_cut = opt_ids
        .iter()
        .zip(&text_tokens)
        .enumerate()
        .find(|(_, (ids, &tokens))| ids.len() - 1 < tokens)
        .map(|(option, (ids, &tokens))| OptionCut {
            option,
            tokens,
            kept: ids.len() - 1,
        });
    let mut distinct: Vec<&Vec<u32>> = opt_ids.iter().collect();
    distinct.sort();
    distinct.dedup();
    Ok(Sequence {
        ids,
        markers,
        state_tokens: state_ids.len(),
        state_tokens_used: used,
        tokens_per_option,
        options_distinct: distinct.len(),
        option_cut,
    })
}

/// Token ids of a state (serialised, `[MASK]` text scrubbed) and whether Laya truncates it
/// from the left (list states).
pub fn encode_state(
    enc: &dyn TextEncoder,
    special: &SpecialTokens,
    state: &Value,
) -> (Vec<u32>, bool) {
    let text = state_text(state).replace(&special.mask_text, " ");
    (enc.encode(&text), state.is_array())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// One id per character: enough to test the layout rules without a real tokenizer.
    struct CharEncoder;
    impl TextEncoder for CharEncoder {
        fn encode(&self, text: &str) -> Vec<u32> {
            text.chars().map(|c| 10 + (c as u32 % 1000)).collect()
        }
    }

    fn special() -> SpecialTokens {
        SpecialTokens {
            cls: 2,
            sep: 3,
            mask: 4,
            mask_text: "[MASK]".into(),
        }
    }

    #[test]
    fn a_long_text_is_cut_in_messages() {
        let long = "word ".repeat(60);
        let s = shown(&long);
        assert_eq!(s.chars().count(), SHOWN_CHARS + 1);
        assert!(s.ends_with('…'));
        assert_eq!(shown("short"), "short");
    }

    #[test]
    fn rendering_follows_laya() {
        let q = Question::parse(
            "q",
            &json!({"type": "choice", "instructions": "x",
            "criteria": {"ok": null, "warn": "", "zero": 0, "no": false, "r": {"a": 1}}}),
        )
        .unwrap();
        assert_eq!(
            q.options,
            ["ok", "warn", "zero: 0", "no: false", "r: {\"a\": 1}"]
        );
        let q = Question::parse("q", &json!({"type": "noul", "instructions": "x", "criteria": {"True": "yes!", "FALSE": ""}})).unwrap();
        assert_eq!(
            q.options,
            ["false: no, the statement does not hold", "true: yes!"]
        );
        let q = Question::parse(
            "q",
            &json!({"type": "score", "instructions": {"a": "é"}, "criteria": ["lo", 7]}),
        )
        .unwrap();
        assert_eq!(q.options, ["level 0: lo", "level 1: 7"]);
        assert_eq!(q.instructions, "{\"a\": \"é\"}");
    }

    #[test]
    fn bad_questions_name_the_field() {
        let err = |v: Value| Question::parse("questions.a", &v).unwrap_err().to_string();
        assert!(err(json!({"type": "pick", "instructions": "x"})).contains("questions.a.type"));
        assert!(
            err(json!({"type": "choice", "criteria": ["a"]})).contains("questions.a.instructions")
        );
        assert!(
            err(json!({"type": "choice", "instructions": "x", "criteria": {}}))
                .contains("at least two options, found 0")
        );
        assert_eq!(
            err(json!({"type": "choice", "instructions": "x", "criteria": ["yes"]})),
            "questions.a.criteria: a choice question needs at least two options, found 1"
        );
        assert_eq!(
            err(json!({"type": "choice", "instructions": "x", "criteria": ["a", "b", "a"]})),
            "questions.a.criteria[2]: the label \"a\" is given twice (also questions.a.criteria[0])"
        );
        assert_eq!(
            err(json!({"type": "score", "instructions": "x", "criteria": ["only"]})),
            "questions.a.criteria: a score question needs at least two levels, found 1"
        );
        assert!(
            err(json!({"type": "score", "instructions": "x", "criteria": ["a", null]}))
                .contains("criteria[1]")
        );
        assert!(
            err(json!({"type": "noul", "instructions": "x", "criteria": {"maybe": "x"}}))
                .contains("criteria.maybe")
        );
        assert!(err(json!("nope")).contains("questions.a"));
    }

    #[test]
    fn layout_budgets_and_truncation() {
        let q = Question::parse(
            "q",
            &json!({"type": "choice", "instructions": "ab", "criteria": ["x", "y"]}),
        )
        .unwrap();
        let budget = Budget {
            max_len: 40,
            max_head_tokens: 96,
        };
        let state: Vec<u32> = (100..160).collect();
        let s = build_sequence(&CharEncoder, &special(), budget, &q, &state, false, "q").unwrap();
        assert_eq!(s.ids.len(), 40);
        assert_eq!(s.ids[0], 2);
        assert_eq!(*s.ids.last().unwrap(), 3);
        assert_eq!(s.markers.len(), 2);
        assert_eq!(s.ids[s.markers[0]], 4);
        assert_eq!(s.ids[s.markers[0] - 1], 3);
        // Left truncation keeps the newest state tokens.
        let l = build_sequence(&CharEncoder, &special(), budget, &q, &state, true, "q").unwrap();
        assert_eq!(l.ids[l.ids.len() - 2], 159);
        // Too many options for the head window.
        let many: Vec<String> = (0..30).map(|i| format!("o{i}")).collect();
        let q = Question::parse(
            "q",
            &json!({"type": "choice", "instructions": "x", "criteria": many}),
        )
        .unwrap();
        let e =
            build_sequence(&CharEncoder, &special(), budget, &q, &state, false, "q").unwrap_err();
        assert!(e.to_string().contains("at most 20 options"), "{e}");
    }
}
