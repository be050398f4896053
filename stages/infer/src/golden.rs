//! Model golden suites: run every case of a suite and compare with the reference outputs of
//! the Python Laya runtime. Token ids and markers must match exactly; probabilities within a
//! tolerance (the seed's table: 1e-3 for f32 from safetensors and for F32/F16 GGUF).

use crate::engine::Engine;
use crate::error::{bad_request, Result};
use crate::forward::Workspace;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Tolerance of the f32 paths (f32 from safetensors, F32 or F16 GGUF), max |Δp|.
pub const F32_TOLERANCE: f64 = 1e-3;

/// One expected record (the fields of a `fixtures/laya-ref/goldens/*.jsonl` line this check
/// uses; others are ignored).
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct Expected {
    /// Case id.
    pub id: String,
    /// Token ids.
    pub input_ids: Vec<u32>,
    /// Marker positions.
    pub markers: Vec<usize>,
    /// Probabilities in option order.
    pub probabilities: Vec<f64>,
    /// Raw scores (informative).
    #[serde(default)]
    pub scores: Vec<f64>,
}

/// The outcome of one suite.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct GoldenReport {
    /// Cases run.
    pub cases: usize,
    /// Largest |p - p_expected| over every option of every case whose ids matched.
    pub max_abs_err: f64,
    /// The case where that happened.
    pub worst_case: Option<String>,
    /// Cases whose token ids or markers differ (or that failed to run).
    pub mismatched_ids: Vec<String>,
    /// Cases with no expected record (new cases: the expected file needs recording again).
    pub unrecorded_ids: Vec<String>,
    /// Why each mismatched case failed.
    pub failures: Vec<String>,
    /// The tolerance applied.
    pub tolerance: f64,
    /// Every id/marker matched and max_abs_err <= tolerance.
    pub passed: bool,
}

fn jsonl<T: for<'de> Deserialize<'de>>(text: &str, what: &str) -> Result<Vec<T>> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str(l)
                .map_err(|e| bad_request(format!("{what}:{}", i + 1), e.to_string()))
        })
        .collect()
}

/// Parse a cases file (one `{"id", "type", "instructions", "criteria", "state"}` per line).
pub fn parse_cases(text: &str) -> Result<Vec<Value>> {
    jsonl(text, "cases")
}

/// Parse an expected-outputs file (one [`Expected`] per line).
pub fn parse_expected(text: &str) -> Result<Vec<Expected>> {
    jsonl(text, "expected")
}

/// What the engine produced for each case, in case order (`Err` = the case failed to run).
pub type CaseOutputs = Vec<(String, Result<crate::engine::CaseResult>)>;

/// Run every case on `engine` (one workspace for all). A case cancelled by
/// [`Engine::stop`] ends the list (its entry is the last, [`crate::error::InferError::Cancelled`]).
pub fn run_cases(engine: &Engine, cases: &[Value]) -> CaseOutputs {
    let mut ws = Workspace::new();
    let mut outputs = Vec::with_capacity(cases.len());
    for (i, case) in cases.iter().enumerate() {
        let id = case
            .get("id")
            .and_then(Value::as_str)
            .map_or_else(|| format!("#{}", i + 1), str::to_string);
        let r = engine.run_case(&mut ws, case).map(|(_, r)| r);
        let cancelled = matches!(r, Err(crate::error::InferError::Cancelled));
        outputs.push((id, r));
        if cancelled {
            break;
        }
    }
    outputs
}

/// The expected-outputs lines of `cases` as this engine answers them (a blessed snapshot that
/// a later suite run compares against): one [`Expected`] record per case, plus its
/// `temperature`, in case order. Fails on the first case that does not run, naming it.
pub fn record(engine: &Engine, cases: &[Value]) -> Result<Vec<Value>> {
    let mut lines = Vec::with_capacity(cases.len());
    for (id, r) in run_cases(engine, cases) {
        let r = r.map_err(|e| bad_request(format!("case {id:?}"), e.to_string()))?;
        lines.push(serde_json::json!({
            "id": id,
            "input_ids": r.ids,
            "markers": r.markers,
            "scores": r.scores,
            "temperature": r.temperature,
            "probabilities": r.probabilities,
        }));
    }
    Ok(lines)
}

/// Compare engine outputs with `expected` (matched by id).
pub fn compare(outputs: &CaseOutputs, expected: &[Expected], tolerance: f64) -> GoldenReport {
    let mut report = GoldenReport {
        cases: outputs.len(),
        max_abs_err: 0.0,
        worst_case: None,
        mismatched_ids: Vec::new(),
        unrecorded_ids: Vec::new(),
        failures: Vec::new(),
        tolerance,
        passed: false,
    };
    for (id, got) in outputs {
        let mut fail = |why: String| {
            report.mismatched_ids.push(id.clone());
            report.failures.push(format!("{id}: {why}"));
        };
        let Some(want) = expected.iter().find(|e| e.id == *id) else {
            report.unrecorded_ids.push(id.clone());
            report.failures.push(format!("{id}: no expected record"));
            continue;
        };
        let got = match got {
            Ok(r) => r,
            Err(e) => {
                fail(e.to_string());
                continue;
            }
        };
        if got.ids != want.input_ids || got.markers != want.markers {
            // Where the sequences part, in words; the usual cause is a cases file edited after
            // its expected file was recorded.
            let at = got
                .ids
                .iter()
                .zip(&want.input_ids)
                .position(|(a, b)| a != b);
            let (n, m) = (got.ids.len(), want.input_ids.len());
            let place = match at {
                Some(i) => format!(
                    "token {i} is {} here and {} in the expected file",
                    got.ids[i], want.input_ids[i]
                ),
                None if n != m => format!(
                    "{n} tokens here, {m} in the expected file (the same up to token {})",
                    n.min(m)
                ),
                None => format!(
                    "the same tokens, but option markers at {:?} here and {:?} in the expected file",
                    got.markers, want.markers
                ),
            };
            fail(format!(
                "the question's tokens differ from the expected file's: {place}. If the cases file changed, record the expected file again (skyctl golden record)"
            ));
            continue;
        }
        if got.probabilities.len() != want.probabilities.len() {
            fail(format!(
                "{} probabilities, expected {}",
                got.probabilities.len(),
                want.probabilities.len()
            ));
            continue;
        }
        for (p, q) in got.probabilities.iter().zip(&want.probabilities) {
            let err = (*p as f64 - q).abs();
            // NaN counts as the worst possible error.
            let err = if err.is_nan() { f64::INFINITY } else { err };
            if report.worst_case.is_none() || err > report.max_abs_err {
                report.max_abs_err = err;
                report.worst_case = Some(id.clone());
            }
        }
    }
    report.passed = report.mismatched_ids.is_empty()
        && report.unrecorded_ids.is_empty()
        && report.max_abs_err <= tolerance
        && report.cases > 0;
    report
}

/// Run one suite: every case on `engine`, compared with `expected` (matched by id).
/// This is the function a `skyctl verify` node calls.
pub fn check_golden(
    engine: &Engine,
    cases: &[Value],
    expected: &[Expected],
    tolerance: f64,
) -> GoldenReport {
    compare(&run_cases(engine, cases), expected, tolerance)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::CaseResult;

    fn result(ids: Vec<u32>, markers: Vec<usize>) -> CaseResult {
        CaseResult {
            ids,
            markers,
            scores: vec![0.0, 0.0],
            temperature_bucket: String::new(),
            temperature: 1.0,
            probabilities: vec![0.5, 0.5],
            answer: Value::Null,
        }
    }

    /// A token mismatch says which token differs, in words, and what to do about it.
    #[test]
    fn a_token_mismatch_names_the_token_and_the_fix() {
        let want = vec![Expected {
            id: "c1".into(),
            input_ids: vec![1, 2, 3, 4],
            markers: vec![1, 2],
            probabilities: vec![0.5, 0.5],
            scores: Vec::new(),
        }];
        let cases = [
            (
                vec![1, 2, 9, 4],
                vec![1, 2],
                "token 2 is 9 here and 3 in the expected file",
            ),
            (
                vec![1, 2, 3],
                vec![1, 2],
                "3 tokens here, 4 in the expected file (the same up to token 3)",
            ),
            (
                vec![1, 2, 3, 4],
                vec![1, 3],
                "option markers at [1, 3] here and [1, 2] in the expected file",
            ),
        ];
        for (ids, markers, place) in cases {
            let outputs: CaseOutputs = vec![("c1".into(), Ok(result(ids, markers)))];
            let r = compare(&outputs, &want, 0.1);
            assert!(!r.passed);
            assert_eq!(r.mismatched_ids, vec!["c1".to_string()]);
            let text = format!("{:?}", r.failures);
            assert!(text.contains(place), "{text}");
            assert!(
                text.contains("record the expected file again (skyctl golden record)"),
                "{text}"
            );
            assert!(!text.contains("Some("), "{text}");
        }
    }
}
