//! Golden tolerances fitted to the error measured on a checkpoint: the one rule `skyctl init`
//! and `skyctl golden record --set-tolerance` both use ([`fit`]), the measurement itself
//! ([`measure`]) and the edit of `pipeline.toml` that writes the result ([`set_tolerances`]).
//!
//! A suite's error is measured exactly as its build node will see it: the model file of the
//! suite's variant is made by the pipeline's own nodes (convert, calibrate, quantize, with the
//! manifest's policy and settings) in a scratch folder, and the suite's own node runs on it
//! with its compute path. Nothing is written to the project, the build folder or the store.

use std::collections::BTreeSet;
use std::ops::Range;
use std::path::Path;

use anyhow::{bail, Context};
use serde_json::Value;
use sky_dag::graph::Input;
use sky_dag::{StageCtx, StageInput};

use super::schema::GoldenKind;
use super::Pipeline;

/// How much room a fitted tolerance leaves above the measured error (another CPU's SIMD
/// order, another build of the engine): a factor.
pub const MARGIN: f64 = 2.0;
/// The smallest fitted tolerance: f32 rounding differences between CPUs stay below it.
pub const FLOOR: f64 = 1e-4;
/// The largest: a probability error is at most 1.
pub const CAP: f64 = 1.0;
/// The rule, in words, for what commands print and the README says.
pub const RULE: &str =
    "2x the measured max |dp|, rounded up to one significant digit, at least 1e-4, at most 1";

/// A fitted tolerance: the value and how `pipeline.toml` writes it (`3e-3`).
#[derive(Debug, Clone, PartialEq)]
pub struct Fitted {
    /// The tolerance.
    pub value: f64,
    /// Its TOML text.
    pub text: String,
}

/// The tolerance for a suite whose measured max |dp| is `measured` ([`RULE`]).
pub fn fit(measured: f64) -> Fitted {
    let want = measured * MARGIN;
    if want >= CAP {
        return Fitted {
            value: CAP,
            text: "1.0".into(),
        };
    }
    // NaN falls here too: the caller refuses a NaN measurement before asking.
    if want.is_nan() || want <= FLOOR {
        return Fitted {
            value: FLOOR,
            text: "1e-4".into(),
        };
    }
    let mut exp = want.log10().floor() as i32;
    let lead = want / 10f64.powi(exp);
    // Round up, but not past a lead digit that is exact up to float noise (2e-3 stays 2e-3).
    let mut digit = (lead * (1.0 - 1e-9)).ceil().clamp(1.0, 10.0) as u32;
    if digit >= 10 {
        digit = 1;
        exp += 1;
    }
    let text = format!("{digit}e{exp}");
    match text.parse::<f64>() {
        Ok(value) if value < CAP => Fitted { value, text },
        _ => fit(CAP),
    }
}

/// One suite measured.
#[derive(Debug, Clone)]
pub struct Measured {
    /// The suite name.
    pub suite: String,
    /// Its model and variant (`s1-pico`, `q8_0`).
    pub model: String,
    /// The variant.
    pub variant: String,
    /// The compute path (`f32`, `q8`, `q8-fast`).
    pub path: String,
    /// Cases run.
    pub cases: u64,
    /// The largest |p - p_expected|.
    pub max_abs_err: f64,
    /// The case it was found on.
    pub worst_case: String,
    /// The tolerance the manifest gives now.
    pub tolerance: Option<f64>,
    /// The tolerance [`fit`] gives.
    pub fitted: Fitted,
}

impl Measured {
    /// One line: suite, path, measured error, the manifest's and the fitted tolerance.
    pub fn line(&self) -> String {
        let now = match self.tolerance {
            Some(t) if self.max_abs_err <= t => format!("tolerance {t:e}: within"),
            Some(t) => format!("tolerance {t:e}: EXCEEDED"),
            None => "no tolerance".to_string(),
        };
        format!(
            "{} ({} {}, {} path): max |dp| {:.3e} on {} cases (worst {}); {now}; fitted {}",
            self.suite,
            self.model,
            self.variant,
            self.path,
            self.max_abs_err,
            self.cases,
            self.worst_case,
            self.fitted.text
        )
    }
}

/// Measure the model suites of `pipe` whose names `keep` accepts, in manifest order.
/// `registry`: the kinds the pipeline's nodes run with (the caller's, so that this module
/// does not name the kinds, which use it).
pub fn measure(
    pipe: &Pipeline,
    registry: &sky_dag::kind::Registry,
    keep: &dyn Fn(&str) -> bool,
) -> anyhow::Result<Vec<Measured>> {
    let graph = pipe.graph()?;
    let suites: Vec<_> = pipe
        .manifest
        .golden
        .iter()
        .filter(|g| g.kind == GoldenKind::Model && keep(g.name.get_ref()))
        .collect();
    let ids: Vec<usize> = suites
        .iter()
        .map(|g| {
            let id = format!("golden/{}", g.name.get_ref());
            graph
                .by_id
                .get(&id)
                .copied()
                .with_context(|| format!("no node `{id}` in the graph"))
        })
        .collect::<anyhow::Result<_>>()?;
    // Every node a suite needs, made in the scratch folder in graph order.
    let mut needed = BTreeSet::new();
    let mut stack: Vec<usize> = ids.iter().flat_map(|&n| graph.deps[n].clone()).collect();
    while let Some(n) = stack.pop() {
        if needed.insert(n) {
            stack.extend(graph.deps[n].iter().copied());
        }
    }
    let scratch = tempfile::tempdir().context("creating a scratch folder")?;
    let root = &pipe.ws.root;
    let run = |n: usize, params: &Value| -> anyhow::Result<()> {
        let node = &graph.nodes[n];
        let Some(kind) = registry.get(&node.kind) else {
            bail!("node `{}`: unknown kind `{}`", node.id, node.kind);
        };
        if node.kind == "command" {
            bail!(
                "node `{}` is a command; a suite that needs one is measured after `skyctl build`",
                node.id
            );
        }
        let mut inputs = Vec::new();
        for (i, input) in node.inputs.iter().enumerate() {
            let (rel, path) = match input {
                Input::Source(rel) => (rel.clone(), root.join(rel)),
                Input::Output { node: from, output } => {
                    let rel = graph.nodes[*from].outputs[*output].path.clone();
                    let path = scratch.path().join(&rel);
                    (rel, path)
                }
                _ => bail!("node `{}`: a glob input is not measured here", node.id),
            };
            inputs.push(StageInput {
                dir: path.is_dir(),
                role: node.input_roles.get(i).cloned().unwrap_or_default(),
                rel,
                path,
            });
        }
        let mut outputs = Vec::new();
        for o in &node.outputs {
            let path = scratch.path().join(&o.path);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)
                    .with_context(|| format!("creating `{}`", parent.display()))?;
            }
            outputs.push(path);
        }
        let mut log = Vec::new();
        let mut ctx = StageCtx {
            node: &node.id,
            workspace: root,
            inputs,
            outputs,
            log: &mut log,
        };
        kind.run(params, &mut ctx)
    };
    for &n in &graph.order {
        if needed.contains(&n) {
            run(n, graph.nodes[n].params.value())?;
        }
    }
    let mut out = Vec::new();
    for (g, &n) in suites.iter().zip(&ids) {
        let node = &graph.nodes[n];
        let mut params = (**node.params.value()).clone();
        // Every error passes at the cap: the run measures, it does not judge.
        params["tolerance"] = CAP.into();
        let ran = run(n, &params);
        let report: Option<Value> = node
            .outputs
            .first()
            .and_then(|o| sky_fs::read(&scratch.path().join(&o.path), sky_fs::REPORT).ok())
            .and_then(|b| serde_json::from_slice(&b).ok());
        let suite = g.name.get_ref().clone();
        let Some(report) = report else {
            ran?;
            bail!("suite `{suite}` wrote no report");
        };
        let missing: Vec<&str> = ["unrecorded_ids", "mismatched_ids"]
            .iter()
            .filter_map(|k| report[*k].as_array())
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        if !missing.is_empty() {
            bail!(
                "suite `{suite}`: {} of {} cases have no matching expected record ({}); record \
                 the expected file first",
                missing.len(),
                report["cases"].as_u64().unwrap_or(0),
                missing.join(", ")
            );
        }
        ran.with_context(|| format!("suite `{suite}`"))?;
        let Some(err) = report["max_abs_err"].as_f64().filter(|e| e.is_finite()) else {
            bail!("suite `{suite}`: the model's answers are not finite numbers");
        };
        out.push(Measured {
            model: g
                .model
                .as_ref()
                .map(|m| m.get_ref().clone())
                .unwrap_or_default(),
            variant: g
                .variant
                .as_ref()
                .map_or("f16", |v| v.get_ref().name())
                .to_string(),
            path: report["path"].as_str().unwrap_or("f32").to_string(),
            cases: report["cases"].as_u64().unwrap_or(0),
            worst_case: report["worst_case"].as_str().unwrap_or("-").to_string(),
            tolerance: g.tolerance.as_ref().map(|t| *t.get_ref()),
            max_abs_err: err,
            fitted: fit(err),
            suite,
        });
    }
    Ok(out)
}

/// `text` (the manifest `pipe` was parsed from) with each suite of `fits` given its fitted
/// tolerance: the value replaced where the suite has one, else a line added after its name.
pub fn set_tolerances(pipe: &Pipeline, text: &str, fits: &[Measured]) -> String {
    let mut edits: Vec<(Range<usize>, String)> = Vec::new();
    for m in fits {
        let Some(g) = pipe
            .manifest
            .golden
            .iter()
            .find(|g| g.name.get_ref() == &m.suite)
        else {
            continue;
        };
        match &g.tolerance {
            Some(t) => edits.push((t.span(), m.fitted.text.clone())),
            None => {
                let end = g.name.span().end;
                let eol = text[end..].find('\n').map_or(text.len(), |i| end + i + 1);
                let nl = if eol == text.len() && !text.ends_with('\n') {
                    "\n"
                } else {
                    ""
                };
                edits.push((eol..eol, format!("{nl}tolerance = {}\n", m.fitted.text)));
            }
        }
    }
    edits.sort_by_key(|(r, _)| std::cmp::Reverse(r.start));
    let mut out = text.to_string();
    for (r, with) in edits {
        out.replace_range(r, &with);
    }
    out
}

/// Measure `pipe`'s suites, print one line each, and write the fitted tolerances into its
/// manifest file at `path` (holding `text`) when `write`; the measurements.
pub fn measure_and_set(
    pipe: &Pipeline,
    registry: &sky_dag::kind::Registry,
    path: &Path,
    text: &str,
    keep: &dyn Fn(&str) -> bool,
    write: bool,
) -> anyhow::Result<Vec<Measured>> {
    let fits = measure(pipe, registry, keep)?;
    if write && !fits.is_empty() {
        let new = set_tolerances(pipe, text, &fits);
        // The edit must leave a manifest that parses, with the values asked for.
        super::Manifest::parse(&new, path)?;
        sky_fs::write(path, new.as_bytes())
            .with_context(|| format!("writing `{}`", path.display()))?;
    }
    Ok(fits)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rule_doubles_rounds_up_and_bounds() {
        let t = |m: f64| fit(m).text;
        assert_eq!(t(6.480e-2), "2e-1");
        assert_eq!(t(1.161e-3), "3e-3");
        assert_eq!(t(1e-3), "2e-3");
        assert_eq!(t(4.9e-4), "1e-3");
        assert_eq!(t(5.1e-4), "2e-3");
        assert_eq!(t(0.0), "1e-4");
        assert_eq!(t(3e-5), "1e-4");
        assert_eq!(t(0.45), "9e-1");
        assert_eq!(t(0.46), "1.0");
        assert_eq!(t(0.7), "1.0");
        assert_eq!(fit(0.7).value, 1.0);
        for m in [1.234e-6, 3.3e-5, 7.7e-4, 1.161e-3, 2.5e-2, 0.3] {
            let f = fit(m);
            assert!(
                f.value >= (MARGIN * m).min(CAP) * (1.0 - 1e-9),
                "{m}: {f:?}"
            );
            assert!(f.value <= (10.0 * MARGIN * m).max(FLOOR), "{m}: {f:?}");
            assert_eq!(f.text.parse::<f64>().unwrap(), f.value);
        }
    }
}
