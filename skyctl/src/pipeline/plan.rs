//! The seam between the expansion and the kinds: a kind plans its own nodes from the part of
//! `pipeline.toml` it is declared by, through a [`Planner`] registered beside it
//! ([`crate::kinds`] lists them; this module names no kind). [`super::expand`] walks the
//! manifest and hands each planner its context: [`Plan`] (the whole pipeline), [`ModelPlan`]
//! (one `[[model]]`) or [`GoldenPlan`] (one `[[golden]]` suite). The file names every planner
//! shares are here, so one place decides where a node writes.

use std::collections::BTreeMap;
use std::ops::Range;

use sky_dag::{NodeSpec, ReleaseSpec, Result};
use toml::Spanned;

use super::schema::{Golden, Manifest, Model, Variant};

/// How a kind's nodes come from `pipeline.toml`. Planners run in the order they are
/// registered; a run of consecutive model (golden) planners runs for each `[[model]]`
/// (`[[golden]]`) in file order, so one model's (suite's) nodes stay together.
#[derive(Debug, Clone, Copy)]
pub enum Planner {
    /// Nodes of the whole pipeline (`[[command]]`, the release manifest, `[site]`).
    Pipeline(fn(&Plan<'_>, &mut Planned) -> Result<()>),
    /// Nodes of one `[[model]]`.
    Model(fn(&ModelPlan<'_>, &mut Planned) -> Result<()>),
    /// Nodes of one `[[golden]]` suite (each planner picks the suites of its kind).
    Golden(fn(&GoldenPlan<'_>, &mut Planned) -> Result<()>),
}

/// What the planners have added so far: the nodes and the release entries, in order.
#[derive(Debug, Default)]
pub struct Planned {
    /// The node specs.
    pub nodes: Vec<NodeSpec>,
    /// The release entries.
    pub release: Vec<ReleaseSpec>,
}

impl Planned {
    /// Add a node.
    pub fn node(&mut self, node: NodeSpec) {
        self.nodes.push(node);
    }

    /// Publish workspace file `from` as `to` in the release tree.
    pub fn publish(&mut self, to: impl Into<String>, from: impl Into<String>, span: Range<usize>) {
        self.release.push(ReleaseSpec {
            to: to.into(),
            from: from.into(),
            span,
        });
    }
}

/// Reads a declared environment variable: `Ok(None)` when unset, an error when it is set but
/// not UTF-8 ([`sky_env::Var::text`]).
pub type EnvReader<'m> =
    dyn Fn(&str) -> std::result::Result<Option<String>, sky_env::EnvError> + 'm;

/// The values of the variables an `env` list declares (None: unset), read with `env`; one set
/// but not UTF-8 is refused where the list names it.
pub fn declared_env(
    m: &Manifest,
    env: &EnvReader<'_>,
    names: &[Spanned<String>],
) -> Result<BTreeMap<String, Option<String>>> {
    names
        .iter()
        .map(|e| {
            let name = e.get_ref();
            let value = env(name).map_err(|err| m.error_at(e.span(), format!("env: {err}")))?;
            Ok((name.clone(), value))
        })
        .collect()
}

/// The whole pipeline, for [`Planner::Pipeline`].
pub struct Plan<'m> {
    /// The manifest.
    pub m: &'m Manifest,
    /// Reads the values of declared environment variables (they enter command keys).
    pub env: &'m EnvReader<'m>,
}

/// One `[[model]]` with a checkpoint, for [`Planner::Model`].
pub struct ModelPlan<'m> {
    /// The manifest.
    pub m: &'m Manifest,
    /// The model.
    pub model: &'m Model,
    /// Its name (every node is grouped under it).
    pub name: &'m str,
    /// Where it is declared: its `name`.
    pub span: Range<usize>,
    /// Its checkpoint: a source directory, or `node:<export>`, and where it is named.
    pub checkpoint: (String, Range<usize>),
}

impl ModelPlan<'_> {
    /// Whether the model builds `v`.
    pub fn wants(&self, v: Variant) -> bool {
        self.model.variants.contains(&v)
    }

    /// The id of the model's node `stage`: `<model>/<stage>`.
    pub fn id(&self, stage: &str) -> String {
        format!("{}/{stage}", self.name)
    }

    /// The file of variant `v`.
    pub fn file(&self, v: Variant) -> String {
        model_file(self.m, self.name, v)
    }

    /// The calibration the model's `calibrate` node writes.
    pub fn calibration_file(&self) -> String {
        format!("{}/{}/calibration.json", build_dir(self.m), self.name)
    }

    /// The record the model's `bench` node writes.
    pub fn bench_file(&self) -> String {
        bench_file(self.m, self.name)
    }

    /// The policy file the model's `tune` node writes.
    pub fn tuned_policy_file(&self) -> String {
        let name = self.name;
        format!("{}/{name}/{name}.tuned.policy.toml", build_dir(self.m))
    }

    /// The search report the model's `tune` node writes.
    pub fn tune_report_file(&self) -> String {
        tune_report_file(self.m, self.name)
    }
}

/// One `[[golden]]` suite, for [`Planner::Golden`].
pub struct GoldenPlan<'m> {
    /// The manifest.
    pub m: &'m Manifest,
    /// The suite.
    pub golden: &'m Golden,
    /// Its name.
    pub name: &'m str,
    /// Its node id (the check's, which writes [`GoldenPlan::report`]): `golden/<name>`.
    pub id: String,
    /// Where it is declared: its `name`.
    pub span: Range<usize>,
    /// Reads the values of declared environment variables (they enter harness keys).
    pub env: &'m EnvReader<'m>,
}

impl GoldenPlan<'_> {
    /// The report the suite's check node writes.
    pub fn report(&self) -> String {
        format!("{}/golden/{}.json", build_dir(self.m), self.name)
    }

    /// The folder of the suite's other nodes' outputs.
    pub fn dir(&self) -> String {
        format!("{}/golden/{}", build_dir(self.m), self.name)
    }
}

/// `[project] build_dir`.
pub fn build_dir(m: &Manifest) -> &str {
    m.project.build_dir.get_ref()
}

/// The file of variant `variant` of model `model`.
pub fn model_file(m: &Manifest, model: &str, variant: Variant) -> String {
    format!(
        "{}/{model}/{model}.{}.gguf",
        build_dir(m),
        file_label(m, model, variant)
    )
}

/// What a variant's file name says it holds: the variant's name, except for the policy
/// variant (`f16`) of a model whose policy gives the encoder BF16: `bf16`, so neither the
/// file nor anything named after it calls BF16 tensors F16.
pub fn file_label(m: &Manifest, model: &str, variant: Variant) -> &'static str {
    let bf16 = || {
        m.model
            .iter()
            .find(|x| x.name.get_ref() == model)
            .and_then(|x| m.policy_for(x.policy.get_ref()))
            .is_some_and(|p| p.default_type == crate::ops::policy::TensorType::BF16)
    };
    match variant {
        Variant::F16 if bf16() => "bf16",
        v => v.name(),
    }
}

/// The record model `model`'s `bench` node writes.
pub fn bench_file(m: &Manifest, model: &str) -> String {
    format!("{}/{model}/bench.json", build_dir(m))
}

/// The search report model `model`'s `tune` node writes.
pub fn tune_report_file(m: &Manifest, model: &str) -> String {
    format!("{}/{model}/tune.json", build_dir(m))
}

/// Where a published variant goes in the release tree: the F16 file, the one the site ships,
/// as `models/<name>.gguf`; any other variant as `models/<name>.<variant>.gguf`.
pub fn release_model_path(model: &str, variant: Variant) -> String {
    match variant {
        Variant::F16 => format!("models/{model}.gguf"),
        v => format!("models/{model}.{}.gguf", v.name()),
    }
}
