//! `pipeline.toml`: the schema, parsing with located errors, and the checks that need only the
//! manifest itself (names, references between sections, enum values).
//!
//! Checks that need the whole graph (cycles, two nodes writing one output, paths leading out of
//! the workspace) live in [`sky_dag::graph`]; the expansion into node specs in
//! [`super::expand`]. The schema is documented for users in
//! docs/reference/pipeline-toml.md (`skyctl/tests/docs.rs` checks every key) and in the example
//! that `skyctl init` writes ([`EXAMPLE`]); keep the three in step.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;
use std::path::Path;

use serde::Deserialize;
use toml::Spanned;

use sky_dag::source::did_you_mean;
use sky_dag::{DagError, Result, Source};

use crate::ops::compute::Compute;
use crate::ops::kernels::Generator;
pub use crate::ops::policy::{Policy, PolicyRule, TensorType};

/// The node id of `[site]`.
pub const SITE_NODE: &str = "site";

/// The commented example `skyctl init` writes. It parses (a test checks).
pub const EXAMPLE: &str = include_str!("pipeline.example.toml");

/// A parsed and locally validated `pipeline.toml`.
#[derive(Debug)]
pub struct Manifest {
    /// The file it was read from (as given, for messages) and its text.
    pub source: Source,
    /// `[project]`.
    pub project: Project,
    /// `[policy.<name>]`, by name.
    pub policy: BTreeMap<String, Policy>,
    /// `[calibration.<name>]`, by name.
    pub calibration: BTreeMap<String, Calibration>,
    /// `[[model]]`, in file order.
    pub model: Vec<Model>,
    /// `[[golden]]`, in file order.
    pub golden: Vec<Golden>,
    /// `[[command]]`, in file order.
    pub command: Vec<Command>,
    /// `[release]`.
    pub release: Release,
    /// `[cache]`.
    pub cache: Cache,
    /// `[execute]`.
    pub execute: Execute,
    /// `[site]`, when the release carries the site (its span: the section, for messages).
    pub site: Option<Spanned<Site>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawManifest {
    #[serde(default)]
    project: Project,
    #[serde(default)]
    policy: BTreeMap<String, Policy>,
    #[serde(default)]
    calibration: BTreeMap<String, Calibration>,
    #[serde(default)]
    model: Vec<Model>,
    #[serde(default)]
    golden: Vec<Golden>,
    #[serde(default)]
    command: Vec<Command>,
    #[serde(default)]
    release: Release,
    #[serde(default)]
    cache: Cache,
    #[serde(default)]
    execute: Execute,
    #[serde(default)]
    site: Option<Spanned<Site>>,
}

/// `[project]`: where things go.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Project {
    /// The release tree, replaced atomically at the end of a successful build.
    #[serde(default = "default_release_dir")]
    pub release_dir: Spanned<String>,
    /// The content store (overridden by `--store` / `SKYCTL_STORE`).
    #[serde(default = "default_store_dir")]
    pub store_dir: Spanned<String>,
    /// Where built-in model stages write their outputs (`build/<model>/...`).
    #[serde(default = "default_build_dir")]
    pub build_dir: Spanned<String>,
}

impl Default for Project {
    fn default() -> Self {
        Project {
            release_dir: default_release_dir(),
            store_dir: default_store_dir(),
            build_dir: default_build_dir(),
        }
    }
}

fn default_release_dir() -> Spanned<String> {
    Spanned::new(0..0, "site/public".into())
}
fn default_store_dir() -> Spanned<String> {
    Spanned::new(0..0, ".skyctl".into())
}
fn default_build_dir() -> Spanned<String> {
    Spanned::new(0..0, "build".into())
}

/// `[calibration.<name>]`: a prompt set for int8 calibration.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Calibration {
    /// `"builtin"` or a workspace path to a JSONL file of prompts.
    pub prompts: Spanned<String>,
}

pub use crate::ops::names::Variant;

/// `[[model]]`: one model and its chain.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Model {
    /// Model name: node ids are `<name>/<stage>`, files `build/<name>/<name>.<variant>.gguf`.
    pub name: Spanned<String>,
    /// A Laya checkpoint directory in the workspace.
    pub source: Option<Spanned<String>>,
    /// Or: the name of a command node whose (single, directory) output is the checkpoint.
    pub export: Option<Spanned<String>>,
    /// The `[policy.<name>]` for the f16 conversion.
    #[serde(default = "default_ref")]
    pub policy: Spanned<String>,
    /// Variants to build.
    #[serde(default = "default_variants")]
    pub variants: Vec<Variant>,
    /// Settings of the q8_0 variant.
    #[serde(default)]
    pub quantize: QuantizeSettings,
    /// How the `tuned` variant is searched for.
    pub tune: Option<TuneSettings>,
    /// Benchmark settings; absent means no bench node.
    pub bench: Option<BenchSettings>,
    /// Variants copied into the release tree as `models/<name>.<variant>.gguf`.
    #[serde(default)]
    pub publish: Vec<Spanned<Variant>>,
}

fn default_ref() -> Spanned<String> {
    Spanned::new(0..0, "default".into())
}
fn default_variants() -> Vec<Variant> {
    vec![Variant::F16]
}

/// `quantize = { ... }` of a model.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QuantizeSettings {
    /// The `[calibration.<name>]` to use.
    #[serde(default = "default_calibration")]
    pub calibration: Spanned<String>,
    /// A channel is an outlier when its max |x| exceeds this ratio times the median.
    #[serde(default = "default_outlier_ratio")]
    pub outlier_ratio: f64,
}

fn default_calibration() -> Spanned<String> {
    Spanned::new(0..0, "default".into())
}
fn default_outlier_ratio() -> f64 {
    3.0
}

impl Default for QuantizeSettings {
    fn default() -> Self {
        QuantizeSettings {
            calibration: default_calibration(),
            outlier_ratio: default_outlier_ratio(),
        }
    }
}

/// `tune = { ... }` of a model: the search for its `tuned` variant.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TuneSettings {
    /// The cases to tune on (JSONL, a workspace path).
    pub cases: Spanned<String>,
    /// Largest allowed |p - p_f32| over every option of every case.
    pub tolerance: Spanned<f64>,
    /// Fraction of the tolerance held back for cases the search has not seen.
    #[serde(default = "default_margin")]
    pub margin: Spanned<f64>,
    /// Largest allowed file size in bytes.
    pub budget: Option<u64>,
    /// Held-out cases whose error is reported.
    pub holdout: Option<Spanned<String>>,
}

fn default_margin() -> Spanned<f64> {
    Spanned::new(0..0, 0.5)
}

/// `bench = { ... }` of a model.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BenchSettings {
    /// Engine modes to measure (`f32`, `q8` (alias `int8`), `q8-fast`, `q8_0`; empty: all),
    /// checked in [`super::expand`].
    #[serde(default)]
    pub modes: Vec<Spanned<String>>,
    /// Number of decision questions.
    #[serde(default = "default_questions")]
    pub questions: Spanned<u32>,
    /// Iterations per question per round.
    #[serde(default = "default_iters")]
    pub iters: Spanned<u32>,
    /// Rounds (the median round is reported).
    #[serde(default = "default_rounds")]
    pub rounds: Spanned<u32>,
    /// Threads of one question's forward pass (1 to 16; default 1).
    #[serde(default = "default_threads")]
    pub threads: Spanned<u32>,
}

fn default_threads() -> Spanned<u32> {
    Spanned::new(0..0, 1)
}

fn default_questions() -> Spanned<u32> {
    Spanned::new(0..0, 32)
}
fn default_iters() -> Spanned<u32> {
    Spanned::new(0..0, 10)
}
fn default_rounds() -> Spanned<u32> {
    Spanned::new(0..0, 3)
}

/// What a `[[golden]]` suite checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GoldenKind {
    /// A model's outputs against reference probabilities.
    Model,
    /// Kernel implementations against PNGOLDEN1 vectors.
    Kernels,
}

/// `[[golden]]`: a golden suite `skyctl verify` runs.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Golden {
    /// Suite name; its node id is `golden/<name>`.
    pub name: Spanned<String>,
    /// Model or kernel goldens.
    pub kind: GoldenKind,
    /// (model) the `[[model]]` checked.
    pub model: Option<Spanned<String>>,
    /// (model) the variant checked.
    pub variant: Option<Spanned<Variant>>,
    /// (model) cases: JSONL of inputs.
    pub cases: Option<Spanned<String>>,
    /// (model) expected outputs: JSONL.
    pub expected: Option<Spanned<String>>,
    /// (model) max absolute probability error (its span: where `--set-tolerance` writes).
    pub tolerance: Option<Spanned<f64>>,
    /// (model) compute path: `f32` (default), `q8` (int8, Q8x2 activations) or `q8-fast`.
    pub compute: Option<Spanned<String>>,
    /// (kernels) directory of PNGOLDEN1 files.
    pub path: Option<Spanned<String>>,
    /// (kernels) the shell command that runs the kernels under test (e.g. on a GPU host),
    /// with placeholders `{inputs}`, `{outputs}`, `{input_paths}`, `{input_files}`,
    /// `{output_files}`, `{skyctl}`; absent: the built-in CPU harness.
    pub harness: Option<Spanned<String>>,
    /// (kernels) the golden generator (default `qwen35moe`) when `path` is not given.
    pub generator: Option<Spanned<String>>,
    /// (kernels) source files of the kernels under test.
    #[serde(default)]
    pub sources: Vec<Spanned<String>>,
    /// (kernels, with `harness`) environment variables passed to the harness besides PATH and
    /// HOME (e.g. `LD_LIBRARY_PATH` where it is how a GPU host finds its driver); their values
    /// enter the key.
    #[serde(default)]
    pub env: Vec<Spanned<String>>,
    /// Built only when named (`skyctl build NAME`, `skyctl verify NAME`): a plain build or
    /// verify leaves it out and releases without it (e.g. a harness that needs a GPU).
    #[serde(default)]
    pub on_request: bool,
    /// What the node needs of the machine it runs on (`[execute] engine = "slurm"`).
    #[serde(default)]
    pub resources: Option<Spanned<Resources>>,
}

/// `[[command]]`: an external program as a node.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Command {
    /// Node id.
    pub name: Spanned<String>,
    /// An argv array, or one string run with `sh -c`.
    pub run: Spanned<toml::Value>,
    /// Working directory, relative to the workspace root.
    #[serde(default)]
    pub cwd: Option<Spanned<String>>,
    /// Files, directories, globs, or `node:<name>` (all outputs of that node); a glob that may
    /// match nothing as `{ glob = "...", allow_empty = true }`.
    #[serde(default)]
    pub inputs: Vec<Spanned<InputDecl>>,
    /// Files, or directories when the path ends in `/`.
    #[serde(default)]
    pub outputs: Vec<Spanned<String>>,
    /// Environment variables passed through (besides PATH and HOME); their values enter the key.
    #[serde(default)]
    pub env: Vec<Spanned<String>>,
    /// Run alone (nothing else runs meanwhile).
    #[serde(default)]
    pub exclusive: bool,
    /// Not reproducible: cached, but re-run by `--rerun`.
    #[serde(default)]
    pub volatile: bool,
    /// Built only when a target names it or a node that needs it.
    #[serde(default)]
    pub on_request: bool,
    /// What the node needs of the machine it runs on (`[execute] engine = "slurm"`).
    #[serde(default)]
    pub resources: Option<Spanned<Resources>>,
}

/// One entry of a command's `inputs`: a string (a path, a glob or `node:<name>`), or a table
/// `{ glob = "...", allow_empty = true }` for a glob that may match no file (a glob that matches
/// nothing is an error otherwise).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InputDecl {
    /// The path, glob or `node:<name>` as written.
    pub path: String,
    /// (a glob) matching no file is not an error.
    pub allow_empty: bool,
}

impl<'de> Deserialize<'de> for InputDecl {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        d.deserialize_any(InputDeclVisitor)
    }
}

struct InputDeclVisitor;

impl<'de> serde::de::Visitor<'de> for InputDeclVisitor {
    type Value = InputDecl;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(
            "a path, a glob or `node:<name>`, or a table `{ glob = \"...\", allow_empty = true }`",
        )
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> std::result::Result<InputDecl, E> {
        Ok(InputDecl {
            path: v.to_string(),
            allow_empty: false,
        })
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(
        self,
        mut map: A,
    ) -> std::result::Result<InputDecl, A::Error> {
        use serde::de::Error;
        const KEYS: &[&str] = &["glob", "allow_empty"];
        let (mut glob, mut allow_empty) = (None, None);
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "glob" if glob.is_none() => glob = Some(map.next_value::<String>()?),
                "allow_empty" if allow_empty.is_none() => {
                    allow_empty = Some(map.next_value::<bool>()?)
                }
                "glob" | "allow_empty" => {
                    return Err(A::Error::custom(format!("duplicate key `{key}`")))
                }
                other => return Err(A::Error::unknown_field(other, KEYS)),
            }
        }
        Ok(InputDecl {
            path: glob
                .ok_or_else(|| A::Error::custom("an input table needs `glob = \"<pattern>\"`"))?,
            allow_empty: allow_empty.unwrap_or(false),
        })
    }
}

/// `[cache]`: the shared remote cache (docs/guide/sharing-the-cache.md). Not part of any key.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cache {
    /// Base URL of a Bazel-layout HTTP cache (`--remote-cache` and `SKYCTL_REMOTE_CACHE` win).
    #[serde(default)]
    pub remote: Option<Spanned<String>>,
}

/// `[execute]`: where nodes that must run are run (docs/guide/cluster.md). Not part
/// of any key: a node built on a cluster is a cache hit for a local build.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Execute {
    /// `local` (the default) or `slurm` (`skyctl build --execute` wins).
    #[serde(default)]
    pub engine: Option<Spanned<String>>,
    /// `[execute.slurm]`: what the site's cluster needs.
    #[serde(default)]
    pub slurm: Option<SlurmSection>,
}

/// `[execute.slurm]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SlurmSection {
    /// `--partition` of every job.
    #[serde(default)]
    pub partition: Option<Spanned<String>>,
    /// `--account` of every job.
    #[serde(default)]
    pub account: Option<Spanned<String>>,
    /// More `srun` arguments, each one word (`--qos=high`, `--time=30`).
    #[serde(default)]
    pub args: Vec<Spanned<String>>,
    /// Jobs submitted at once (default: 16).
    #[serde(default)]
    pub max_jobs: Option<Spanned<i64>>,
    /// The skyctl a job runs on the cluster's nodes (default: this skyctl's own path).
    #[serde(default)]
    pub worker: Option<Spanned<String>>,
    /// How many times a job whose machine was lost is submitted again (default: 1).
    #[serde(default)]
    pub retries: Option<Spanned<i64>>,
}

/// `resources = { ... }` of a `[[command]]` or `[[golden]]`: what its job asks of the cluster.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Resources {
    /// CPUs (`--cpus-per-task`).
    #[serde(default)]
    pub cpus: Option<Spanned<i64>>,
    /// GPUs (`--gres=gpu:N`); the node's commands get the GPU variables Slurm sets.
    #[serde(default)]
    pub gpus: Option<Spanned<i64>>,
    /// A node feature expression (`--constraint`), e.g. `k80`.
    #[serde(default)]
    pub constraint: Option<Spanned<String>>,
    /// The whole machine (`--exclusive`); bench nodes have it by default.
    #[serde(default)]
    pub exclusive: Option<Spanned<bool>>,
    /// Memory (`--mem`): a number with an optional K, M, G or T suffix.
    #[serde(default)]
    pub mem: Option<Spanned<String>>,
    /// Always run on the machine that started the build, whatever the engine.
    #[serde(default)]
    pub local: Option<Spanned<bool>>,
    /// Programs the node runs that are not among its inputs (names found on PATH, or absolute
    /// paths): a worker without one refuses the job, naming it.
    #[serde(default)]
    pub tools: Vec<Spanned<String>>,
}

/// `[site]`: the demo page (`index.html`), the Bench page (`bench.html`), their scripts and the
/// browser engine's two modules in the release tree, for the models the pipeline publishes.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Site {
    /// The engine modules from files of this pipeline (declared outputs of a node) instead of
    /// the ones skyctl carries.
    #[serde(default)]
    pub modules: Option<SiteModules>,
}

/// `[site] modules = { simd = "...", scalar = "..." }`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SiteModules {
    /// The module built with SIMD128.
    pub simd: Spanned<String>,
    /// The module built without it.
    pub scalar: Spanned<String>,
}

/// `[release]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Release {
    /// Explicit files of the release tree.
    #[serde(default)]
    pub publish: Vec<Publish>,
}

/// One `[[release.publish]]`: a declared output copied into the release tree.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Publish {
    /// A declared output path of some node.
    pub from: Spanned<String>,
    /// Path inside the release directory; ending in `/` means "into this directory".
    pub to: Spanned<String>,
}

impl Manifest {
    /// Read and parse `path`.
    pub fn load(path: &Path) -> Result<Manifest> {
        let source = sky_fs::read_to_string(path, sky_fs::PIPELINE)
            .map_err(|e| DagError::io("read", path, e.into()))?;
        Manifest::parse(&source, path)
    }

    /// Parse manifest text; `file` is only used in messages.
    pub fn parse(source: &str, file: &Path) -> Result<Manifest> {
        let raw: RawManifest = toml::from_str(source).map_err(|e| {
            let src = Source::new(file, source);
            let span = e.span().unwrap_or(0..0);
            let message = explain_toml_error(e.message());
            src.error_at(span.clone(), name_the_key(source, span, message))
        })?;
        let m = Manifest {
            source: Source::new(file, source),
            project: raw.project,
            policy: raw.policy,
            calibration: raw.calibration,
            model: raw.model,
            golden: raw.golden,
            command: raw.command,
            release: raw.release,
            cache: raw.cache,
            execute: raw.execute,
            site: raw.site,
        };
        m.validate()?;
        Ok(m)
    }

    /// An error located at a span of this manifest.
    pub fn error_at(&self, span: Range<usize>, message: impl Into<String>) -> DagError {
        self.source.error_at(span, message)
    }

    /// The policy a model refers to; `default` exists even when not written.
    pub fn policy_for(&self, name: &str) -> Option<Policy> {
        match self.policy.get(name) {
            Some(p) => Some(Policy {
                default_type: p.default_type,
                head_type: p.head_type,
                rule: p
                    .rule
                    .iter()
                    .map(|r| PolicyRule {
                        pattern: r.pattern.clone(),
                        tensor_type: r.tensor_type,
                    })
                    .collect(),
            }),
            None if name == "default" => Some(Policy::default()),
            None => None,
        }
    }

    fn validate(&self) -> Result<()> {
        if let Some(url) = &self.cache.remote {
            sky_remote::RemoteConfig::new(url.get_ref())
                .map_err(|e| self.error_at(url.span(), e.to_string()))?;
        }
        // Names: unique across models, commands and goldens (they share the node namespace).
        let mut names: BTreeMap<&str, &'static str> = BTreeMap::new();
        let all = self
            .model
            .iter()
            .map(|m| (&m.name, "model"))
            .chain(self.command.iter().map(|c| (&c.name, "command")))
            .chain(self.golden.iter().map(|g| (&g.name, "golden")));
        for (name, what) in all {
            check_name(self, name)?;
            if let Some(prev) = names.insert(name.get_ref(), what) {
                return Err(self.error_at(
                    name.span(),
                    format!(
                        "duplicate name `{}` (already used by a {prev})",
                        name.get_ref()
                    ),
                ));
            }
        }
        for (pname, p) in &self.policy {
            for r in &p.rule {
                sky_dag::glob::Glob::new(r.pattern.get_ref()).map_err(|e| {
                    self.error_at(r.pattern.span(), format!("policy `{pname}`: {e}"))
                })?;
            }
        }
        let model_names: BTreeSet<&str> = self
            .model
            .iter()
            .map(|m| m.name.get_ref().as_str())
            .collect();
        let command_names: Vec<&str> = self
            .command
            .iter()
            .map(|c| c.name.get_ref().as_str())
            .collect();
        for m in &self.model {
            self.validate_model(m, &command_names)?;
        }
        for g in &self.golden {
            self.validate_golden(g, &model_names, &command_names)?;
        }
        for c in &self.command {
            validate_run(self, c)?;
            self.check_env_names(&c.env)?;
            if let Some(r) = &c.resources {
                self.validate_resources(r)?;
            }
        }
        for g in &self.golden {
            if let Some(r) = &g.resources {
                self.validate_resources(r)?;
            }
        }
        self.validate_execute()?;
        for p in &self.release.publish {
            validate_publish_to(self, p)?;
        }
        if let Some(site) = &self.site {
            self.validate_site(site, &names)?;
        }
        Ok(())
    }

    /// `[execute]`: a known engine, and `[execute.slurm]` values Slurm takes.
    fn validate_execute(&self) -> Result<()> {
        if let Some(e) = &self.execute.engine {
            if !crate::pipeline::execute::ENGINES.contains(&e.get_ref().as_str()) {
                return Err(self.error_at(
                    e.span(),
                    format!(
                        "unknown engine `{}` (expected one of: {})",
                        e.get_ref(),
                        crate::pipeline::execute::ENGINES.join(", ")
                    ),
                ));
            }
        }
        let Some(s) = &self.execute.slurm else {
            return Ok(());
        };
        for (what, v) in [("partition", &s.partition), ("account", &s.account)] {
            if let Some(v) = v {
                if !slurm_word(v.get_ref(), ",") {
                    return Err(self.error_at(
                        v.span(),
                        format!("`{what}` must be a Slurm name (letters, digits, `_`, `-`, `.`; a partition list with `,`), not `{}`", v.get_ref()),
                    ));
                }
            }
        }
        for a in &s.args {
            let v = a.get_ref();
            if !v.starts_with('-') || v.chars().any(|c| c.is_whitespace() || c.is_control()) {
                return Err(self.error_at(
                    a.span(),
                    format!("each of `args` must be one srun option starting with `-`, without spaces (`--qos=high`), not `{v}`"),
                ));
            }
        }
        if let Some(n) = &s.max_jobs {
            in_range(self, n, "max_jobs", 1, 10_000)?;
        }
        if let Some(n) = &s.retries {
            in_range(self, n, "retries", 0, 10)?;
        }
        if let Some(w) = &s.worker {
            if w.get_ref().trim().is_empty() || w.get_ref().contains(['\n', '\0']) {
                return Err(
                    self.error_at(w.span(), "`worker` must be the path of a skyctl executable")
                );
            }
        }
        Ok(())
    }

    /// `resources = { ... }`: values Slurm takes.
    fn validate_resources(&self, r: &Spanned<Resources>) -> Result<()> {
        let r = r.get_ref();
        if let Some(n) = &r.cpus {
            in_range(self, n, "cpus", 1, 4096)?;
        }
        if let Some(n) = &r.gpus {
            in_range(self, n, "gpus", 0, 64)?;
        }
        if let Some(c) = &r.constraint {
            let ok = !c.get_ref().is_empty()
                && c.get_ref()
                    .chars()
                    .all(|ch| ch.is_ascii_alphanumeric() || "_-.|&*![]():".contains(ch));
            if !ok {
                return Err(self.error_at(
                    c.span(),
                    format!("`constraint` must be a Slurm feature expression (names with `&`, `|`, `[]`, `*`), not `{}`", c.get_ref()),
                ));
            }
        }
        for t in &r.tools {
            let v = t.get_ref();
            if v.is_empty() || v.chars().any(|c| c.is_whitespace() || c.is_control()) {
                return Err(self.error_at(
                    t.span(),
                    format!(
                        "each of `tools` must be a program name or an absolute path, not `{v}`"
                    ),
                ));
            }
        }
        if let Some(m) = &r.mem {
            let v = m.get_ref();
            let digits = v.trim_end_matches(['K', 'M', 'G', 'T']);
            let ok = !digits.is_empty()
                && digits.len() + 1 >= v.len()
                && digits.bytes().all(|b| b.is_ascii_digit())
                && digits.len() <= 12;
            if !ok {
                return Err(self.error_at(
                    m.span(),
                    format!("`mem` must be a size such as `4G` or `512M` (a number, then K, M, G or T), not `{v}`"),
                ));
            }
        }
        Ok(())
    }

    /// The variables an `env` list passes: names, and not PATH or HOME (always passed).
    fn check_env_names(&self, env: &[Spanned<String>]) -> Result<()> {
        for e in env {
            let v = e.get_ref();
            if v.is_empty() || v.contains('=') || v == "PATH" || v == "HOME" {
                return Err(self.error_at(
                    e.span(),
                    format!(
                        "`{v}` is not a variable name to pass (PATH and HOME are always passed)"
                    ),
                ));
            }
            // A declared variable's value enters the node's key, `explain`, the state files:
            // never a secret's.
            if sky_remote::SECRET_VARS.contains(&v.as_str()) {
                return Err(self.error_at(
                    e.span(),
                    format!(
                        "`{v}` holds a secret of the remote cache: it cannot be passed to a node \
                         (its value would enter the node's key and `skyctl explain`)"
                    ),
                ));
            }
        }
        Ok(())
    }

    /// `[site]` takes the node id `site` and shows published models: a pipeline that
    /// publishes none would ship pages with nothing to load.
    fn validate_site(
        &self,
        site: &Spanned<Site>,
        names: &BTreeMap<&str, &'static str>,
    ) -> Result<()> {
        if let Some(what) = names.get(SITE_NODE) {
            let span = self
                .model
                .iter()
                .map(|m| &m.name)
                .chain(self.command.iter().map(|c| &c.name))
                .chain(self.golden.iter().map(|g| &g.name))
                .find(|n| n.get_ref() == SITE_NODE)
                .map_or(site.span(), |n| n.span());
            return Err(self.error_at(
                span,
                format!("a {what} named `{SITE_NODE}`: that name is the node of [site]; rename the {what}"),
            ));
        }
        if !self.model.iter().any(|m| !m.publish.is_empty()) {
            return Err(self.error_at(
                site.span(),
                "[site]: no [[model]] publishes a variant, so the pages would have no model to load; add `publish = [\"f16\"]` to a model (or remove [site])",
            ));
        }
        if let Some(m) = &site.get_ref().modules {
            for p in [&m.simd, &m.scalar] {
                sky_dag::graph::clean_rel(p.get_ref())
                    .map_err(|e| self.error_at(p.span(), format!("[site] modules: {e}")))?;
            }
        }
        Ok(())
    }

    /// Every rule of a model's policy must match a tensor of its checkpoint: checked here, at
    /// the rule, against the tensor names of the safetensors header, so that a typo is a
    /// located error before anything runs (the convert nodes check again, for exported models
    /// and checkpoints changed since). A source that cannot be opened is left to the build,
    /// which reports it as a missing or broken input.
    fn check_rules_match(&self, m: &Model) -> Result<()> {
        let (Some(src), Some(raw)) = (&m.source, self.policy.get(m.policy.get_ref())) else {
            return Ok(());
        };
        if raw.rule.is_empty() {
            return Ok(());
        }
        let root = self.source.file.parent().unwrap_or(Path::new(""));
        let Ok(ckpt) = sky_laya::LayaCheckpoint::open(root.join(src.get_ref())) else {
            return Ok(());
        };
        let names = ckpt.tensors().iter().map(|t| t.gguf_name.as_str());
        let rules: Vec<(&str, &str)> = raw
            .rule
            .iter()
            .map(|r| (r.pattern.get_ref().as_str(), r.tensor_type.name()))
            .collect();
        match crate::ops::policy::resolve_rules(&rules, names) {
            Ok(_) => Ok(()),
            Err(e) => {
                let span = raw
                    .rule
                    .get(e.rule)
                    .map_or(m.policy.span(), |r| r.pattern.span());
                Err(self.error_at(span, format!("model `{}`: {}", m.name.get_ref(), e.message)))
            }
        }
    }

    fn validate_model(&self, m: &Model, command_names: &[&str]) -> Result<()> {
        let name = m.name.get_ref();
        match (&m.source, &m.export) {
            (Some(_), Some(e)) => {
                return Err(self.error_at(
                    e.span(),
                    format!("model `{name}`: give either `source` or `export`, not both"),
                ))
            }
            (None, None) => {
                return Err(self.error_at(
                    m.name.span(),
                    format!("model `{name}`: expected `source = \"<Laya checkpoint dir>\"` or `export = \"<command name>\"`"),
                ))
            }
            (None, Some(e)) if !command_names.contains(&e.get_ref().as_str()) => {
                return Err(self.error_at(
                    e.span(),
                    format!(
                        "model `{name}`: export refers to no [[command]] named `{}`{}",
                        e.get_ref(),
                        did_you_mean(e.get_ref(), command_names.iter().copied())
                    ),
                ))
            }
            _ => {}
        }
        if self.policy_for(m.policy.get_ref()).is_none() {
            return Err(self.error_at(
                m.policy.span(),
                format!(
                    "model `{name}`: no [policy.{}]{}",
                    m.policy.get_ref(),
                    did_you_mean(m.policy.get_ref(), self.policy.keys().map(String::as_str))
                ),
            ));
        }
        if m.variants.is_empty() {
            return Err(self.error_at(
                m.name.span(),
                format!("model `{name}`: `variants` is empty"),
            ));
        }
        self.check_rules_match(m)?;
        match (&m.tune, m.variants.contains(&Variant::Tuned)) {
            (None, true) => {
                return Err(self.error_at(
                    m.name.span(),
                    format!(
                        "model `{name}`: variant `tuned` needs `tune = {{ cases = \"CASES.jsonl\", tolerance = T }}`"
                    ),
                ))
            }
            (Some(t), false) => {
                return Err(self.error_at(
                    t.cases.span(),
                    format!("model `{name}`: `tune` is set but `variants` does not build `tuned`"),
                ))
            }
            (Some(t), true) => {
                let tol = *t.tolerance.get_ref();
                if !(tol.is_finite() && tol >= 0.0) {
                    return Err(self.error_at(
                        t.tolerance.span(),
                        format!("model `{name}`: tune.tolerance must be a number >= 0"),
                    ));
                }
                if !(0.0..1.0).contains(t.margin.get_ref()) {
                    return Err(self.error_at(
                        t.margin.span(),
                        format!("model `{name}`: tune.margin must be a fraction in [0, 1)"),
                    ));
                }
            }
            (None, false) => {}
        }
        if m.variants.contains(&Variant::Q8_0) || m.variants.contains(&Variant::Tuned) {
            let c = &m.quantize.calibration;
            if !self.calibration.contains_key(c.get_ref()) && c.get_ref() != "default" {
                return Err(self.error_at(
                    c.span(),
                    format!(
                        "model `{name}`: no [calibration.{}]{}",
                        c.get_ref(),
                        did_you_mean(c.get_ref(), self.calibration.keys().map(String::as_str))
                    ),
                ));
            }
            // Checked in the type it is used in: the quantizer takes the ratio as f32, so a
            // ratio finite as f64 (1e308) but infinite as f32 is refused here, before convert
            // and calibrate run, not in the quantizer after them.
            let ratio = m.quantize.outlier_ratio;
            let as_used = ratio as f32;
            if !(as_used.is_finite() && as_used > 1.0) {
                return Err(self.error_at(
                    m.name.span(),
                    format!(
                        "model `{name}`: quantize.outlier_ratio must be a number > 1 and finite as f32 (the quantizer's type), found {ratio:e}"
                    ),
                ));
            }
        }
        if let Some(b) = &m.bench {
            for (key, v) in [
                ("questions", &b.questions),
                ("iters", &b.iters),
                ("rounds", &b.rounds),
                ("threads", &b.threads),
            ] {
                if *v.get_ref() == 0 {
                    return Err(self.error_at(
                        v.span(),
                        format!("model `{name}`: bench.{key} must be at least 1"),
                    ));
                }
            }
            if *b.threads.get_ref() > sky_infer::threads::MAX_THREADS as u32 {
                return Err(self.error_at(
                    b.threads.span(),
                    format!(
                        "model `{name}`: bench.threads must be at most {}",
                        sky_infer::threads::MAX_THREADS
                    ),
                ));
            }
        }
        for p in &m.publish {
            if !m.variants.contains(p.get_ref()) {
                return Err(self.error_at(
                    p.span(),
                    format!(
                        "model `{name}`: publishes `{}` but `variants` does not build it",
                        p.get_ref().name()
                    ),
                ));
            }
        }
        Ok(())
    }

    fn validate_golden(
        &self,
        g: &Golden,
        models: &BTreeSet<&str>,
        commands: &[&str],
    ) -> Result<()> {
        let name = g.name.get_ref();
        let need = |field: Option<&Spanned<String>>, key: &str| -> Result<()> {
            match field {
                Some(_) => Ok(()),
                None => Err(self.error_at(
                    g.name.span(),
                    format!(
                        "golden `{name}`: kind = \"{}\" needs `{key}`",
                        kind_name(g.kind)
                    ),
                )),
            }
        };
        let forbid = |present: bool, key: &str| -> Result<()> {
            if present {
                Err(self.error_at(
                    g.name.span(),
                    format!(
                        "golden `{name}`: `{key}` is not a key of kind = \"{}\"",
                        kind_name(g.kind)
                    ),
                ))
            } else {
                Ok(())
            }
        };
        match g.kind {
            GoldenKind::Model => {
                need(g.model.as_ref(), "model")?;
                need(g.cases.as_ref(), "cases")?;
                need(g.expected.as_ref(), "expected")?;
                forbid(g.path.is_some(), "path")?;
                forbid(g.harness.is_some(), "harness")?;
                forbid(!g.sources.is_empty(), "sources")?;
                forbid(!g.env.is_empty(), "env")?;
                forbid(g.generator.is_some(), "generator")?;
                if let Some(c) = &g.compute {
                    if let Err(e) = Compute::parse(c.get_ref()) {
                        return Err(self.error_at(c.span(), format!("golden `{name}`: {e}")));
                    }
                }
                if let Some(m) = &g.model {
                    if !models.contains(m.get_ref().as_str()) {
                        return Err(self.error_at(
                            m.span(),
                            format!(
                                "golden `{name}`: no [[model]] named `{}`{}",
                                m.get_ref(),
                                did_you_mean(m.get_ref(), models.iter().copied())
                            ),
                        ));
                    }
                    let model = self.model.iter().find(|x| x.name.get_ref() == m.get_ref());
                    let variant = g
                        .variant
                        .as_ref()
                        .map(|v| *v.get_ref())
                        .unwrap_or(Variant::F16);
                    if let Some(model) = model {
                        if !model.variants.contains(&variant) {
                            let span = g
                                .variant
                                .as_ref()
                                .map(|v| v.span())
                                .unwrap_or(g.name.span());
                            return Err(self.error_at(
                                span,
                                format!(
                                    "golden `{name}`: model `{}` does not build variant `{}`",
                                    m.get_ref(),
                                    variant.name()
                                ),
                            ));
                        }
                    }
                }
                if let Some(t) = &g.tolerance {
                    let t_span = t.span();
                    let t = *t.get_ref();
                    if !(t.is_finite() && t >= 0.0) {
                        return Err(self.error_at(
                            t_span,
                            format!("golden `{name}`: tolerance must be a number >= 0"),
                        ));
                    }
                }
            }
            GoldenKind::Kernels => {
                forbid(g.compute.is_some(), "compute")?;
                forbid(g.model.is_some(), "model")?;
                forbid(g.variant.is_some(), "variant")?;
                forbid(g.cases.is_some(), "cases")?;
                forbid(g.expected.is_some(), "expected")?;
                if let (Some(_), Some(gen)) = (&g.path, &g.generator) {
                    return Err(self.error_at(
                        gen.span(),
                        format!("golden `{name}`: give either `path` (committed goldens) or `generator`, not both"),
                    ));
                }
                if let Some(gen) = g
                    .generator
                    .as_ref()
                    .filter(|x| Generator::parse(x.get_ref()).is_none())
                {
                    let generators: Vec<&str> = Generator::ALL.iter().map(|g| g.name()).collect();
                    return Err(self.error_at(
                        gen.span(),
                        format!(
                            "golden `{name}`: unknown generator `{}`; expected one of {}",
                            gen.get_ref(),
                            generators.join(", ")
                        ),
                    ));
                }
                if let (None, Some(e)) = (&g.harness, g.env.first()) {
                    return Err(self.error_at(
                        e.span(),
                        format!(
                            "golden `{name}`: `env` is passed to the `harness` command; the built-in CPU \
                             harness runs inside skyctl and takes none"
                        ),
                    ));
                }
                self.check_env_names(&g.env)?;
                if let Some(h) = &g.harness {
                    let h_str = h.get_ref().trim();
                    if h_str.is_empty() || commands.contains(&h_str) {
                        return Err(self.error_at(
                            h.span(),
                            format!(
                                "golden `{name}`: `harness` is the shell command that runs the kernels, e.g. \
                                 \"{{skyctl}} kernels run --impl cpu {{inputs}} {{outputs}}\" (leave it out for the \
                                 built-in CPU harness), not a [[command]] name"
                            ),
                        ));
                    }
                }
            }
        }
        Ok(())
    }
}

fn kind_name(k: GoldenKind) -> &'static str {
    match k {
        GoldenKind::Model => "model",
        GoldenKind::Kernels => "kernels",
    }
}

fn check_name(m: &Manifest, name: &Spanned<String>) -> Result<()> {
    let n = name.get_ref();
    let ok = !n.is_empty()
        && n.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'/'))
        && n.split('/')
            .all(|part| !part.is_empty() && !part.starts_with('.'))
        && !n.starts_with("node:");
    if ok {
        Ok(())
    } else {
        Err(m.error_at(
            name.span(),
            format!("name `{n}`: expected letters, digits, `-`, `_`, `.` and `/` (no empty part, no part starting with `.`)"),
        ))
    }
}

/// A `[[release.publish]]` `to` must name a file of the release tree: a path inside it, or a
/// folder ending in `/` (the file keeps its name). Empty, `.` or a path ending in `/.` name a
/// folder without saying where the file goes (the release directory itself, for `.`).
fn validate_publish_to(m: &Manifest, p: &Publish) -> Result<()> {
    let raw = p.to.get_ref();
    let hint = "give the file's path in the release tree (`x.txt`), or a folder ending in `/` (`models/`) to keep its name";
    if raw.is_empty() {
        return Err(m.error_at(p.to.span(), format!("publish `to` is empty; {hint}")));
    }
    sky_dag::graph::clean_rel(raw)
        .map_err(|e| m.error_at(p.to.span(), format!("publish `to = \"{raw}\"`: {e}")))?;
    let names_folder = !raw.ends_with('/') && raw.rsplit('/').next() == Some(".");
    if names_folder {
        return Err(m.error_at(
            p.to.span(),
            format!("publish `to = \"{raw}\"` names a folder, not a file; {hint}"),
        ));
    }
    Ok(())
}

fn validate_run(m: &Manifest, c: &Command) -> Result<()> {
    let ok = match c.run.get_ref() {
        toml::Value::String(s) => !s.trim().is_empty(),
        toml::Value::Array(a) => !a.is_empty() && a.iter().all(|v| v.is_str()),
        _ => false,
    };
    if !ok {
        return Err(m.error_at(
            c.run.span(),
            format!(
                "command `{}`: `run` must be a non-empty array of strings (argv) or a shell string",
                c.name.get_ref()
            ),
        ));
    }
    // The build holds this workspace's lock and its store's while a node runs: a node that
    // builds, cleans or collects them would wait for itself.
    if let toml::Value::Array(a) = c.run.get_ref() {
        let word = |i: usize| a.get(i).and_then(toml::Value::as_str);
        if word(0) == Some("skyctl") {
            if let Some(sub) = word(1).filter(|s| WORKSPACE_COMMANDS.contains(s)) {
                return Err(m.error_at(
                    c.run.span(),
                    format!(
                        "command `{}`: `skyctl {sub}` cannot run as a node: the build holds this workspace and its store while its nodes run; run it outside the build (a node may run skyctl's tools: convert, quantize, ask, golden, kernels, ...)",
                        c.name.get_ref()
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// skyctl's subcommands that take the workspace or store lock for writing.
const WORKSPACE_COMMANDS: &[&str] = &["build", "clean", "gc", "verify"];

/// Rewrite serde's "unknown field `x`, expected one of `a`, `b`" with a suggestion first.
/// The key an error at `span` is about: the text before `=` on the span's line (a value's
/// span) or the span's own text (a key's span), when it is a plain or dotted key.
fn key_at(source: &str, span: &Range<usize>) -> Option<String> {
    let start = span.start.min(source.len());
    let line_start = source[..start].rfind('\n').map_or(0, |i| i + 1);
    let line_end = source[start..]
        .find('\n')
        .map_or(source.len(), |i| start + i);
    let line = source.get(line_start..line_end)?;
    let key = match line.split_once('=') {
        Some((k, _)) if start - line_start > k.len() => k,
        _ => source.get(span.clone()).unwrap_or(line).split('=').next()?,
    }
    .trim()
    .trim_matches('"');
    let plain = !key.is_empty()
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
    plain.then(|| key.to_string())
}

/// Names the key in the messages that leave it out (a duplicate key, a value of the wrong
/// type), in words rather than Rust's type names: `tolerance: expected a number, found the
/// string "1e-3"`.
fn name_the_key(source: &str, span: Range<usize>, message: String) -> String {
    let key = key_at(source, &span);
    if message == "duplicate key" {
        return match key {
            Some(k) => format!("duplicate key `{k}`"),
            None => message,
        };
    }
    let Some(rest) = message.strip_prefix("invalid type: ") else {
        return message;
    };
    let Some((found, expected)) = rest.split_once(", expected ") else {
        return message;
    };
    let expected = match expected {
        "f64" | "f32" => "a number",
        "u8" | "u16" | "u32" | "u64" | "usize" | "i32" | "i64" => "a whole number",
        "a sequence" => "a list",
        "a map" => "a table",
        other => other,
    };
    let found = if let Some(v) = found.strip_prefix("string ") {
        format!("the string {v}")
    } else if let Some(v) = found.strip_prefix("integer ") {
        format!("the whole number {}", v.trim_matches('`'))
    } else if let Some(v) = found.strip_prefix("floating point ") {
        format!("the number {}", v.trim_matches('`'))
    } else if let Some(v) = found.strip_prefix("boolean ") {
        format!("the boolean {}", v.trim_matches('`'))
    } else if found == "sequence" {
        "a list".to_string()
    } else if found == "map" {
        "a table".to_string()
    } else {
        found.to_string()
    };
    match key {
        Some(k) => format!("{k}: expected {expected}, found {found}"),
        None => format!("expected {expected}, found {found}"),
    }
}

fn explain_toml_error(msg: &str) -> String {
    let msg = msg.trim_end();
    for prefix in ["unknown field `", "unknown variant `"] {
        if let Some(rest) = msg.strip_prefix(prefix) {
            let Some(end) = rest.find('`') else { break };
            let word = &rest[..end];
            let tail = &rest[end + 1..];
            let candidates: Vec<&str> = tail.split('`').skip(1).step_by(2).collect();
            let what = if prefix.contains("field") {
                "unknown key"
            } else {
                "unknown value"
            };
            return format!(
                "{what} `{word}`{}; expected one of {}",
                did_you_mean(word, candidates.iter().copied()),
                if candidates.is_empty() {
                    "no keys here".to_string()
                } else {
                    candidates
                        .iter()
                        .map(|c| format!("`{c}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                }
            );
        }
    }
    msg.to_string()
}

/// A Slurm name (partition, account): letters, digits, `_`, `-`, `.` and the characters in
/// `more`.
fn slurm_word(v: &str, more: &str) -> bool {
    !v.is_empty()
        && v.chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c) || more.contains(c))
}

/// An integer setting within `lo..=hi`, located.
fn in_range(m: &Manifest, n: &Spanned<i64>, what: &str, lo: i64, hi: i64) -> Result<()> {
    let v = *n.get_ref();
    if v < lo || v > hi {
        return Err(m.error_at(
            n.span(),
            format!("`{what}` must be between {lo} and {hi}, not {v}"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<Manifest> {
        Manifest::parse(s, Path::new("pipeline.toml"))
    }

    fn err(s: &str) -> String {
        parse(s).unwrap_err().to_string()
    }

    #[test]
    fn example_parses() {
        let m = parse(EXAMPLE).unwrap();
        assert!(!m.model.is_empty());
        assert!(!m.command.is_empty());
    }

    #[test]
    fn empty_manifest_has_defaults() {
        let m = parse("").unwrap();
        assert_eq!(m.project.release_dir.get_ref(), "site/public");
        assert_eq!(m.project.store_dir.get_ref(), ".skyctl");
    }

    #[test]
    fn cache_section_is_checked_and_optional() {
        assert!(parse("").unwrap().cache.remote.is_none());
        let m = parse("[cache]\nremote = \"https://cache.example/skyctl/\"\n").unwrap();
        assert_eq!(
            m.cache.remote.as_ref().map(|r| r.get_ref().as_str()),
            Some("https://cache.example/skyctl/")
        );
        let e = err("[cache]\nremot = \"http://x\"\n");
        assert!(
            e.starts_with("pipeline.toml:2:1: unknown key `remot` (did you mean `remote`?)"),
            "{e}"
        );
        assert_eq!(
            err("[cache]\nremote = \"cache.example\"\n"),
            "pipeline.toml:2:10: remote cache URL `cache.example` must start with http:// or https://"
        );
    }

    #[test]
    fn unknown_key_is_located_with_suggestion() {
        let e = err("[[command]]\nname = \"a\"\nrun = \"true\"\noutptus = [\"x\"]\n");
        assert!(
            e.starts_with("pipeline.toml:4:1: unknown key `outptus` (did you mean `outputs`?)"),
            "{e}"
        );
    }

    #[test]
    fn unknown_section_is_rejected() {
        let e = err("[modle]\n");
        assert!(e.contains("unknown key `modle`"), "{e}");
        assert!(e.contains("did you mean `model`?"), "{e}");
    }

    #[test]
    fn bad_enum_value_is_located() {
        let e = err("[policy.default]\ntype = \"q4\"\n");
        assert!(e.starts_with("pipeline.toml:2:"), "{e}");
        assert!(e.contains("unknown value `q4`"), "{e}");
    }

    #[test]
    fn type_errors_and_duplicates_name_the_key_in_words() {
        let e = err("[[golden]]\nname = \"g\"\nkind = \"kernels\"\ntolerance = \"1e-3\"\n");
        assert!(
            e.contains(
                "pipeline.toml:4:13: tolerance: expected a number, found the string \"1e-3\""
            ),
            "{e}"
        );
        let e = err("[project]\nrelease_dir = \"a\"\nrelease_dir = \"b\"\n");
        assert!(
            e.contains("pipeline.toml:3:1: duplicate key `release_dir`"),
            "{e}"
        );
        let e = err("[[command]]\nname = \"a\"\nrun = \"true\"\nexclusive = 1\n");
        assert!(
            e.contains("exclusive: expected a boolean, found the whole number 1"),
            "{e}"
        );
    }

    #[test]
    fn a_node_that_builds_its_own_workspace_is_refused_where_it_is_declared() {
        for sub in WORKSPACE_COMMANDS {
            let e = err(&format!(
                "[[command]]\nname = \"a\"\nrun = [\"skyctl\", \"{sub}\", \"x\"]\n"
            ));
            assert!(e.starts_with("pipeline.toml:3:7:"), "{e}");
            assert!(
                e.contains(&format!("command `a`: `skyctl {sub}` cannot run as a node")),
                "{e}"
            );
        }
    }

    #[test]
    fn wrong_type_names_expectation() {
        let e = err("[[command]]\nname = \"a\"\nrun = 3\n");
        assert!(e.starts_with("pipeline.toml:3:7:"), "{e}");
        assert!(e.contains("array of strings"), "{e}");
    }

    #[test]
    fn missing_reference_suggests() {
        let e = err("[[command]]\nname = \"export-pico\"\nrun = \"true\"\noutputs = [\"o/\"]\n[[model]]\nname = \"m\"\nexport = \"export-pcio\"\n");
        assert!(e.starts_with("pipeline.toml:7:10:"), "{e}");
        assert!(e.contains("did you mean `export-pico`?"), "{e}");
    }

    #[test]
    fn duplicate_names_are_rejected() {
        let e = err("[[command]]\nname = \"a\"\nrun = \"true\"\n[[command]]\nname = \"a\"\nrun = \"true\"\n");
        assert!(
            e.starts_with("pipeline.toml:5:8: duplicate name `a`"),
            "{e}"
        );
    }

    #[test]
    fn unknown_policy_is_rejected() {
        let e = err("[[model]]\nname = \"m\"\nsource = \"models/m\"\npolicy = \"fast\"\n");
        assert!(e.contains("no [policy.fast]"), "{e}");
    }

    #[test]
    fn golden_needs_kind_keys() {
        let e = err("[[golden]]\nname = \"g\"\nkind = \"model\"\n");
        assert!(e.contains("needs `model`"), "{e}");
    }
}
