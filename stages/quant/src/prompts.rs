//! Calibration prompt sets: the twelve built-in decision requests and JSONL prompt files.
//!
//! A prompt is a Laya decision request, `{"id", "type", "instructions", "criteria", "state"}`,
//! exactly the shape of `fixtures/laya-ref/cases.jsonl`: `type` is `choice`, `score` or
//! `noul`; `criteria` is a list or an object of options (`null` allowed for `noul`);
//! `instructions` and `state` are any JSON (text, objects, chat transcripts, lists).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{Error, Result};

/// The twelve built-in calibration prompts, one JSON decision request each: game states,
/// English and French prose, JSON states, spread over the three question types so that every
/// input channel sees realistic magnitudes.
pub const CALIBRATION_PROMPTS: [&str; 12] = [
    r#"{"id": "cal_chess_move", "type": "choice", "instructions": "White to move. Which plan is best?", "criteria": {"attack": "push the kingside pawns and open lines", "defend": "consolidate the king and trade pieces", "develop": "bring the last minor piece into play"}, "state": {"fen": "r1bq1rk1/pp2bppp/2n1pn2/3p4/2PP4/2N1PN2/PP3PPP/R2QKB1R w KQ - 2 9", "clock": {"white_s": 412, "black_s": 388}, "last_moves": ["Nf3", "O-O", "e3", "c5"], "material": 0}}"#,
    r#"{"id": "cal_grid_game", "type": "score", "instructions": "How dangerous is the position for the player (O)?", "criteria": ["safe", "uncomfortable", "losing", "lost"], "state": {"board": [["X", "O", "X"], [".", "X", "."], ["O", ".", "."]], "to_move": "O", "turn": 6, "rules": "three in a row wins"}}"#,
    r#"{"id": "cal_strategy_turn", "type": "choice", "instructions": "The AI commander must pick its next order.", "criteria": {"expand": "found a new town near the river", "fortify": "build walls and station archers", "raid": "send cavalry at the enemy supply line", "trade": null}, "state": {"turn": 47, "gold": 1250, "food": -12, "units": [{"type": "archer", "hp": 0.8, "count": 14}, {"type": "cavalry", "hp": 1.0, "count": 6}], "enemy_seen": {"distance_tiles": 5, "strength": 2.35}, "weather": "rain"}}"#,
    r#"{"id": "cal_poker_fold", "type": "noul", "instructions": "Should the bot fold this hand?", "criteria": {"true": "fold now", "false": "call or raise"}, "state": "Texas hold'em, 6 players. Hole cards: 7♣ 2♦. Board: K♠ K♥ 9♣. Pot 340 chips, to call 120, stack 910. Two players already called."}"#,
    r#"{"id": "cal_support_email", "type": "choice", "instructions": "Route this email to the right queue.", "criteria": {"billing": "invoices, refunds, double charges", "delivery": "late, lost or damaged parcels", "account": "login, password, personal data", "other": null}, "state": "Hello, I moved to a new flat in March and updated my address, but the last two orders still went to the old one. The courier says they were delivered and the neighbour never saw them. Could you resend them or refund me? Order numbers 88213 and 88540. Thanks, Priya"}"#,
    r#"{"id": "cal_news_tone", "type": "score", "instructions": "How optimistic is this paragraph?", "criteria": ["bleak", "worried", "neutral", "hopeful", "enthusiastic"], "state": "The harbour town lost its last cannery in 1998, and for twenty years the quays stood empty. This spring a cooperative of fishers and engineers reopened the old hall as a seaweed farm; it now employs forty people, and the mayor says the waiting list for apprenticeships is longer than the list of vacancies."}"#,
    r#"{"id": "cal_story_sad", "type": "noul", "instructions": "Is the passage sad?", "criteria": null, "state": "She kept his bicycle in the hallway long after the funeral, tyres flat, the bell still bright. Every morning she lifted the mail from its basket as if he might come down the stairs and ask whether the post had come."}"#,
    r#"{"id": "cal_fr_reclamation", "type": "choice", "instructions": "Quelle suite donner à ce courrier ?", "criteria": {"rembourser": "le client a droit à un remboursement", "remplacer": "envoyer un article neuf", "expliquer": "répondre sans geste commercial"}, "state": "Madame, Monsieur, j'ai reçu le 12 octobre une cafetière dont le réservoir fuit dès le premier usage. J'ai suivi la notice à la lettre. Je souhaiterais un échange rapide, car c'était un cadeau d'anniversaire. Veuillez agréer mes salutations distinguées. Élodie Marchand"}"#,
    r#"{"id": "cal_fr_avis", "type": "score", "instructions": "Note de satisfaction de cet avis de restaurant ?", "criteria": ["très déçu", "déçu", "mitigé", "satisfait", "enchanté"], "state": "Accueil chaleureux et terrasse agréable, mais nous avons attendu presque une heure pour des plats tièdes. Le dessert, une tarte aux poires, rattrapait un peu la soirée. Prix corrects pour le quartier."}"#,
    r#"{"id": "cal_fr_rdv", "type": "noul", "instructions": "Le message demande-t-il un rendez-vous ?", "criteria": {"true": "une date ou une rencontre est proposée", "false": "aucune demande de rencontre"}, "state": [{"role": "user", "content": "Bonjour, est-ce que le garage serait disponible jeudi matin pour la révision ?"}, {"role": "assistant", "content": "Bonjour ! Nous avons un créneau à 9 h ou à 11 h 30."}, {"role": "user", "content": "9 h me convient, merci."}]}"#,
    r#"{"id": "cal_json_metrics", "type": "choice", "instructions": "What should the on-call engineer do about this alert?", "criteria": {"ignore": "transient, no action", "watch": "keep an eye on it for an hour", "page": "wake someone up now"}, "state": {"service": "checkout-api", "region": "eu-west-1", "p99_latency_ms": 2840.5, "error_rate": 0.073, "cpu": [0.91, 0.95, 0.97], "deploy": {"sha": "4f9c2e1", "minutes_ago": 6}, "healthy_pods": 3, "desired_pods": 8, "alerts_last_24h": null}}"#,
    r#"{"id": "cal_json_order", "type": "score", "instructions": "How likely is this order to be fraudulent?", "criteria": ["very unlikely", "unlikely", "possible", "likely"], "state": {"order_id": "A-2026-110734", "amount_eur": 1899.0, "items": [{"sku": "LAPTOP-15-PRO", "qty": 2}, {"sku": "GIFT-CARD-100", "qty": 5}], "billing_country": "DE", "shipping_country": "NG", "account_age_days": 1, "email_verified": false, "ip_risk": 0.82, "previous_orders": 0}}"#,
];

/// One decision request used as a calibration prompt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PromptRequest {
    /// Identifier (defaults to `line-N` for JSONL lines without one).
    pub id: String,
    /// Question type: `choice`, `score` or `noul`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The question (usually text; Laya accepts any JSON).
    pub instructions: Value,
    /// The options: a list, an object (option -> description or null), or null for `noul`.
    pub criteria: Value,
    /// The state the decision is about: text or any JSON value.
    pub state: Value,
}

impl PromptRequest {
    /// The request as one JSON line (keys in the order id, type, instructions, criteria,
    /// state), for engines that parse decision requests themselves.
    pub fn to_json_line(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// The built-in prompts ([`CALIBRATION_PROMPTS`]), parsed.
pub fn calibration_prompts() -> Vec<PromptRequest> {
    // The constants are checked by a unit test, so this cannot fail in a released build;
    // an entry that did fail would be skipped rather than panic.
    CALIBRATION_PROMPTS
        .iter()
        .enumerate()
        .filter_map(|(i, line)| parse_prompt_line(line, i + 1).ok())
        .collect()
}

/// Parses a JSONL prompt set: one decision request per line; blank lines are skipped.
/// Unknown keys (for example expected answers) are ignored.
///
/// Errors: [`Error::PromptLine`] with the 1-based line number for a line that is not a JSON
/// object, lacks `type` or `state`, has an unknown `type`, or has unusable `criteria`;
/// [`Error::NoPrompts`] when no line holds a prompt.
pub fn parse_prompt_set(text: &str) -> Result<Vec<PromptRequest>> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        out.push(parse_prompt_line(line, i + 1)?);
    }
    if out.is_empty() {
        return Err(Error::NoPrompts);
    }
    Ok(out)
}

fn parse_prompt_line(line: &str, line_no: usize) -> Result<PromptRequest> {
    let bad = |reason: String| Error::PromptLine {
        line: line_no,
        reason,
    };
    let value: Value =
        serde_json::from_str(line).map_err(|e| bad(format!("not valid JSON: {e}")))?;
    let Value::Object(mut obj) = value else {
        return Err(bad("expected a JSON object (a decision request)".into()));
    };
    let kind = match obj.remove("type") {
        Some(Value::String(s)) if matches!(s.as_str(), "choice" | "score" | "noul") => s,
        Some(other) => {
            return Err(bad(format!(
                "\"type\" must be \"choice\", \"score\" or \"noul\", got {other}"
            )))
        }
        None => return Err(bad("missing \"type\" (choice, score or noul)".into())),
    };
    let state = obj
        .remove("state")
        .ok_or_else(|| bad("missing \"state\"".into()))?;
    let criteria = obj.remove("criteria").unwrap_or(Value::Null);
    let usable = match (&criteria, kind.as_str()) {
        (Value::Null, "noul") => true,
        (Value::Object(_), "noul") => true,
        (Value::Array(a), "choice" | "score") => !a.is_empty(),
        (Value::Object(m), "choice" | "score") => !m.is_empty(),
        _ => false,
    };
    if !usable {
        return Err(bad(format!(
            "\"criteria\" of a {kind} question must be {}, got {criteria}",
            if kind == "noul" {
                "null or an object"
            } else {
                "a non-empty list or object of options"
            }
        )));
    }
    let id = match obj.remove("id") {
        None | Some(Value::Null) => format!("line-{line_no}"),
        Some(Value::String(s)) => s,
        Some(other) => return Err(bad(format!("\"id\" must be a string, got {other}"))),
    };
    Ok(PromptRequest {
        id,
        kind,
        instructions: obj
            .remove("instructions")
            .unwrap_or(Value::String(String::new())),
        criteria,
        state,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_prompts_parse_and_cover_the_mix() {
        let prompts = calibration_prompts();
        assert_eq!(prompts.len(), 12, "a built-in prompt failed to parse");
        for (i, line) in CALIBRATION_PROMPTS.iter().enumerate() {
            parse_prompt_line(line, i + 1).unwrap();
        }
        let mut ids: Vec<&str> = prompts.iter().map(|p| p.id.as_str()).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), 12, "ids must be unique");
        for kind in ["choice", "score", "noul"] {
            assert!(
                prompts.iter().filter(|p| p.kind == kind).count() >= 3,
                "{kind}"
            );
        }
        let json_states = prompts.iter().filter(|p| p.state.is_object()).count();
        let french = prompts
            .iter()
            .filter(|p| {
                p.instructions
                    .as_str()
                    .is_some_and(|s| s.contains("Quel") || s.contains("Le ") || s.contains("Note"))
            })
            .count();
        assert!(
            json_states >= 4 && french >= 3,
            "json {json_states} french {french}"
        );
        // Round trip through to_json_line.
        for p in &prompts {
            assert_eq!(&parse_prompt_set(&p.to_json_line()).unwrap()[0], p);
        }
    }

    #[test]
    fn fixture_cases_parse_as_a_prompt_set() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../fixtures/laya-ref/cases.jsonl"
        );
        let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
        let prompts = parse_prompt_set(&text).unwrap();
        assert_eq!(
            prompts.len(),
            text.lines().filter(|l| !l.trim().is_empty()).count()
        );
        assert_eq!(prompts[0].id, "c2_list_plain");
    }

    #[test]
    fn bad_lines_are_reported_with_their_number() {
        let good = r#"{"type": "noul", "instructions": "Spam?", "state": "hi"}"#;
        let cases = [
            (format!("{good}\n\n{{oops"), "line 3", "not valid JSON"),
            (format!("{good}\n[1, 2]"), "line 2", "JSON object"),
            (
                r#"{"state": "x"}"#.to_string(),
                "line 1",
                "missing \"type\"",
            ),
            (
                r#"{"type": "rank", "state": "x"}"#.to_string(),
                "line 1",
                "\"type\" must be",
            ),
            (
                r#"{"type": "choice", "state": "x"}"#.to_string(),
                "line 1",
                "criteria",
            ),
            (
                r#"{"type": "choice", "criteria": [], "state": "x"}"#.to_string(),
                "line 1",
                "non-empty",
            ),
            (
                r#"{"type": "score", "criteria": ["a"]}"#.to_string(),
                "line 1",
                "missing \"state\"",
            ),
            (
                r#"{"id": 7, "type": "noul", "state": "x"}"#.to_string(),
                "line 1",
                "\"id\"",
            ),
        ];
        for (text, line, needle) in cases {
            let e = parse_prompt_set(&text).unwrap_err().to_string();
            assert!(e.contains(line) && e.contains(needle), "{text}: {e}");
        }
        assert!(matches!(parse_prompt_set(""), Err(Error::NoPrompts)));
        assert!(matches!(
            parse_prompt_set("\n  \n\t\n"),
            Err(Error::NoPrompts)
        ));
        let p = parse_prompt_set(&format!("\u{feff}\n{good}\n")).unwrap();
        assert_eq!(p[0].id, "line-2");
        assert_eq!(p[0].criteria, Value::Null);
    }
}
