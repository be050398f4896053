//! The golden-suite table `skyctl verify` prints after its build: one row per suite (suite,
//! compute path, cases or files checked, max abs error, worst case or file, result), read from
//! the JSON reports the `golden_model` and `golden_kernels` nodes write. With `--json`, the
//! reports themselves, one `{"golden": report}` line each.
//!
//! Reports are read from the workspace, not the store: a failing suite fails its node, and
//! the engine keeps no record of failed nodes, but the node writes its report before failing.
//! [`Recorder`] watches the build's events so that a suite that did not run (or failed before
//! writing anything) is shown as such, never with a stale report.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::{json, Value};

use sky_dag::report::{Event, NodeStatus, Reporter};

/// One row of the table.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// Suite name.
    pub suite: String,
    /// Compute path (`f32`, `q8`, ...) or kernel harness (`cpu`, `harness`).
    pub path: String,
    /// What was checked (`41 cases`, `19 files`).
    pub checked: String,
    /// Largest absolute error (`None`: not measured; infinite for NaN).
    pub max_abs_err: Option<f64>,
    /// Worst case id, or worst file and element index.
    pub worst: String,
    /// `pass`, `FAIL ...`, or why there is no report.
    pub result: String,
    /// The report, when there is one.
    pub report: Option<Value>,
}

impl Row {
    /// The row of a suite report (either kind).
    pub fn from_report(v: &Value) -> Row {
        let passed = v["passed"].as_bool() == Some(true);
        let s = |k: &str| v[k].as_str().unwrap_or("-").to_string();
        let n = |k: &str| v[k].as_u64().unwrap_or(0);
        let (checked, worst, fail) = match v["kind"].as_str() {
            Some("kernels") => (
                format!("{} files", n("files")),
                s("worst"),
                format!("FAIL ({} of {} files)", n("files_failed"), n("files")),
            ),
            _ => {
                let count = |k: &str| v[k].as_array().map_or(0, Vec::len);
                let mut why = Vec::new();
                match count("unrecorded_ids") {
                    0 => {}
                    n => why.push(format!("{n} not recorded")),
                }
                match count("mismatched_ids") {
                    0 => {}
                    n => why.push(format!("{n} mismatched")),
                }
                let fail = if why.is_empty() {
                    "FAIL".to_string()
                } else {
                    format!("FAIL ({})", why.join(", "))
                };
                (format!("{} cases", n("cases")), s("worst_case"), fail)
            }
        };
        // JSON has no infinity: serde writes a NaN/inf error as null next to a worst case.
        let max_abs_err = v["max_abs_err"]
            .as_f64()
            .or_else(|| (v["max_abs_err"].is_null() && worst != "-").then_some(f64::INFINITY));
        Row {
            suite: s("suite"),
            path: s("path"),
            checked,
            max_abs_err,
            worst,
            result: if passed { "pass".into() } else { fail },
            report: Some(v.clone()),
        }
    }

    /// A suite without a report (not run, or failed before judging anything).
    pub fn missing(suite: &str, why: &str) -> Row {
        Row {
            suite: suite.into(),
            path: "-".into(),
            checked: "-".into(),
            max_abs_err: None,
            worst: "-".into(),
            result: why.into(),
            report: None,
        }
    }

    /// Whether the suite passed.
    pub fn passed(&self) -> bool {
        self.result == "pass"
    }

    /// The `--json` line of this row.
    pub fn json_line(&self) -> String {
        let v = match &self.report {
            Some(r) => json!({ "golden": r }),
            None => {
                json!({ "golden": { "suite": self.suite, "passed": false, "error": self.result } })
            }
        };
        v.to_string()
    }
}

/// The table, header first, columns aligned.
pub fn render(rows: &[Row]) -> String {
    let header = ["suite", "path", "checked", "max abs err", "worst", "result"];
    let cells: Vec<[String; 6]> = rows
        .iter()
        .map(|r| {
            let err = match r.max_abs_err {
                Some(e) if e.is_infinite() => "inf".to_string(),
                Some(e) => format!("{e:.3e}"),
                None => "-".to_string(),
            };
            [
                r.suite.clone(),
                r.path.clone(),
                r.checked.clone(),
                err,
                r.worst.clone(),
                r.result.clone(),
            ]
        })
        .collect();
    let mut width = header.map(str::len);
    for c in &cells {
        for (w, x) in width.iter_mut().zip(c) {
            *w = (*w).max(x.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |c: [&str; 6]| {
        let mut l = String::new();
        for (i, (x, w)) in c.iter().zip(width).enumerate() {
            if i == 5 {
                l.push_str(x);
            } else if i == 3 {
                let _ = write!(l, "{x:>w$}  ");
            } else {
                let _ = write!(l, "{x:<w$}  ");
            }
        }
        out.push_str(l.trim_end());
        out.push('\n');
    };
    line(header);
    for c in &cells {
        line([&c[0], &c[1], &c[2], &c[3], &c[4], &c[5]]);
    }
    out
}

/// One line saying why a suite report does not pass (the node's error message).
pub fn failure_summary(v: &Value) -> String {
    let suite = v["suite"].as_str().unwrap_or("?");
    let mut parts = Vec::new();
    if v["kind"] == "kernels" {
        let failing: Vec<&str> = v["failing"]
            .as_array()
            .map_or(Vec::new(), |a| a.iter().filter_map(Value::as_str).collect());
        parts.push(format!(
            "{} of {} output files failed: {}",
            v["files_failed"].as_u64().unwrap_or(0),
            v["files"].as_u64().unwrap_or(0),
            failing.join(", ")
        ));
        if let Some(w) = v["worst"].as_str() {
            parts.push(format!("worst {w}"));
        }
    } else {
        let row = Row::from_report(v);
        let tol = v["tolerance"].as_f64().unwrap_or(0.0);
        if let Some(e) = row.max_abs_err.filter(|&e| e > tol) {
            parts.push(format!(
                "max |dp| {e:.3e} > tolerance {tol:e} (worst case {})",
                row.worst
            ));
        }
        for (key, what) in [
            ("unrecorded_ids", "have no expected record"),
            ("mismatched_ids", "mismatched"),
        ] {
            let ids: Vec<&str> = v[key]
                .as_array()
                .map_or(Vec::new(), |a| a.iter().filter_map(Value::as_str).collect());
            if ids.is_empty() {
                continue;
            }
            let shown: Vec<&str> = ids.iter().take(5).copied().collect();
            let more = if ids.len() > shown.len() {
                format!(" (+{} more)", ids.len() - shown.len())
            } else {
                String::new()
            };
            parts.push(format!(
                "{} of {} cases {what}: {}{more}",
                ids.len(),
                v["cases"].as_u64().unwrap_or(0),
                shown.join(", ")
            ));
        }
        if v["cases"].as_u64() == Some(0) {
            parts.push("no cases".into());
        }
        // The way out, when the report knows it: record the expected file again (from the
        // suite's model) and refit the tolerances, once the new answers are checked.
        if let Some(fix) = v["fix"].as_str() {
            let lead = if v["unrecorded_ids"]
                .as_array()
                .is_some_and(|a| !a.is_empty())
            {
                "to record the new cases"
            } else {
                "if the new answers are right, record them"
            };
            parts.push(format!("{lead}: {fix}"));
        }
    }
    format!("golden `{suite}` failed: {}", parts.join("; "))
}

/// A reporter that forwards every event and remembers how each node ended.
pub struct Recorder<'a> {
    inner: &'a mut dyn Reporter,
    /// Node id -> final status and error.
    pub finished: BTreeMap<String, (NodeStatus, Option<String>)>,
}

impl<'a> Recorder<'a> {
    /// Wrap `inner`.
    pub fn new(inner: &'a mut dyn Reporter) -> Recorder<'a> {
        Recorder {
            inner,
            finished: BTreeMap::new(),
        }
    }
}

impl Reporter for Recorder<'_> {
    fn event(&mut self, e: &Event) {
        if let Event::Finished {
            node,
            status,
            error,
            ..
        } = e
        {
            self.finished.insert(node.clone(), (*status, error.clone()));
        }
        self.inner.event(e);
    }

    fn tick(&mut self) {
        self.inner.tick();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(passed: bool, err: Value, mismatched: Value) -> Value {
        json!({"suite": "pico", "kind": "model", "path": "f32", "cases": 41, "max_abs_err": err,
               "worst_case": "c3_route", "mismatched_ids": mismatched, "tolerance": 1e-3, "passed": passed})
    }

    #[test]
    fn model_rows_and_summaries() {
        let r = Row::from_report(&model(true, json!(5.1e-6), json!([])));
        assert_eq!(
            (r.checked.as_str(), r.worst.as_str(), r.result.as_str()),
            ("41 cases", "c3_route", "pass")
        );
        let t = render(&[r, Row::missing("other", "not run")]);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(
            lines[0].starts_with("suite  path  checked   max abs err  worst"),
            "{t}"
        );
        assert!(
            lines[1].contains("5.100e-6") && lines[1].ends_with("pass"),
            "{t}"
        );
        assert!(
            lines[2].starts_with("other") && lines[2].ends_with("not run"),
            "{t}"
        );

        let bad = model(false, json!(2e-3), json!(["c1", "c2"]));
        assert_eq!(Row::from_report(&bad).result, "FAIL (2 mismatched)");
        let s = failure_summary(&bad);
        assert_eq!(s, "golden `pico` failed: max |dp| 2.000e-3 > tolerance 1e-3 (worst case c3_route); 2 of 41 cases mismatched: c1, c2");
        // A case with no expected record says so, and the fix the report carries is named.
        let mut new = model(false, json!(1e-4), json!([]));
        new["unrecorded_ids"] = json!(["c9"]);
        new["fix"] = json!("skyctl golden record m --cases c --out e --set-tolerance");
        assert_eq!(Row::from_report(&new).result, "FAIL (1 not recorded)");
        assert_eq!(failure_summary(&new), "golden `pico` failed: 1 of 41 cases have no expected record: c9; to record the new cases: skyctl golden record m --cases c --out e --set-tolerance");
        // NaN probabilities: the report holds null, the row says inf.
        let nan = model(false, Value::Null, json!([]));
        assert_eq!(Row::from_report(&nan).max_abs_err, Some(f64::INFINITY));
        assert!(failure_summary(&nan).contains("max |dp| inf > tolerance"));
    }

    #[test]
    fn kernel_rows_and_summaries() {
        let v = json!({"suite": "k", "kind": "kernels", "path": "harness", "files": 19, "files_failed": 1,
                       "max_abs_err": 0.5, "worst": "ssm_recur_y[7]", "failing": ["ssm_recur_y"], "passed": false});
        let r = Row::from_report(&v);
        assert_eq!(
            (r.checked.as_str(), r.worst.as_str(), r.result.as_str()),
            ("19 files", "ssm_recur_y[7]", "FAIL (1 of 19 files)")
        );
        assert_eq!(
            failure_summary(&v),
            "golden `k` failed: 1 of 19 output files failed: ssm_recur_y; worst ssm_recur_y[7]"
        );
        assert_eq!(r.json_line(), json!({"golden": v}).to_string());
        assert_eq!(
            Row::missing("k", "not run").json_line(),
            r#"{"golden":{"suite":"k","passed":false,"error":"not run"}}"#
        );
    }
}
