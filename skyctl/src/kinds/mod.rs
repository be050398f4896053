//! The node kinds of skyctl's pipelines, each with its `NAME`, `VERSION`, typed `Params` (see
//! [`sky_dag::kind`] for the contract), the [`Role`]s of its inputs and its [`Planner`]: how
//! its nodes come from `pipeline.toml`. A kind's planner builds the params and binds each
//! input to a role the kind declares ([`InputRole::input_role`]); the kind reads it back by
//! the same role ([`Role::get`]), never by position. [`crate::pipeline::expand`] runs the
//! planners in the order [`kinds`] lists them. The work itself is in [`crate::ops`] and the
//! stage crates.
//!
//! Adding a kind: its file here (the kind, its roles, its planner) and one line in [`kinds`].

pub mod bench;
pub mod calibrate;
pub mod command;
pub mod convert;
pub mod golden_gen;
pub mod golden_kernels;
pub mod golden_model;
pub mod kernel_harness;
pub mod manifest;
pub mod quantize;
pub mod site;
pub mod tune;

use std::collections::BTreeMap;
use std::ops::Range;

use anyhow::Context as _;
use sky_dag::{Kind, NodeSpec, Registry, StageCtx, StageInput};

use crate::pipeline::plan::Planner;

/// One input of a kind, named. The name travels with the node's input (not in its key: the key
/// hashes the inputs in declared order, as it always did).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Role {
    /// The role's name, as the node carries it.
    pub name: &'static str,
    /// What the input is, for messages.
    pub what: &'static str,
}

impl Role {
    /// The input of this role (a copy, so `ctx.log` stays free to write); an error naming the
    /// node and the input when it is missing.
    pub fn get(&self, ctx: &StageCtx<'_>) -> anyhow::Result<StageInput> {
        self.opt(ctx).with_context(|| {
            format!(
                "node `{}`: no {} among its inputs (role `{}`)",
                ctx.node, self.what, self.name
            )
        })
    }

    /// The input of this role, when the node has one.
    pub fn opt(&self, ctx: &StageCtx<'_>) -> Option<StageInput> {
        ctx.input(self.name).cloned()
    }
}

/// The kinds' side of a node declaration: which input roles a kind reads, and how its nodes
/// are planned.
pub trait PipelineKind: Kind {
    /// Every role the kind reads an input by.
    const INPUTS: &'static [Role] = &[];
    /// How `pipeline.toml` declares the kind's nodes; `None` for a kind whose nodes another
    /// kind's planner adds (a step of that kind's chain).
    const PLANNER: Option<Planner> = None;
}

/// [`NodeSpec::input_as`] with a kind's [`Role`].
pub trait InputRole {
    /// Add `path` as the input of `role`.
    fn input_role(self, role: Role, path: impl Into<String>, span: Range<usize>) -> NodeSpec;
}

impl InputRole for NodeSpec {
    fn input_role(self, role: Role, path: impl Into<String>, span: Range<usize>) -> NodeSpec {
        self.input_as(role.name, path, span)
    }
}

/// The kinds with the input roles each declares and their planners.
#[derive(Default)]
pub struct Kinds {
    /// The kinds, for the engine.
    pub registry: Registry,
    /// [`PipelineKind::INPUTS`] by kind name.
    pub inputs: BTreeMap<&'static str, &'static [Role]>,
    /// [`PipelineKind::PLANNER`]s, in the order the kinds were added.
    pub planners: Vec<Planner>,
}

impl Kinds {
    fn add<K: PipelineKind>(&mut self, kind: K) {
        self.inputs.insert(K::NAME, K::INPUTS);
        self.planners.extend(K::PLANNER);
        self.registry.add(kind);
    }
}

/// Every kind this build of skyctl has: one line each, in the order their nodes are planned
/// (the order of the graph's nodes: commands, each model's chain, the release manifest, each
/// golden suite's nodes, the site). In `command` nodes, argv[0] `skyctl` is this binary.
pub fn kinds() -> Kinds {
    let mut k = Kinds::default();
    k.add(sky_dag::command::Command::with_self_name("skyctl"));
    k.add(convert::Convert);
    k.add(calibrate::Calibrate);
    k.add(quantize::Quantize);
    k.add(tune::Tune);
    k.add(bench::Bench);
    k.add(manifest::Manifest);
    k.add(golden_model::GoldenModel);
    k.add(golden_gen::GoldenGen);
    k.add(kernel_harness::KernelHarness);
    k.add(golden_kernels::GoldenKernels);
    k.add(site::Site);
    k
}

/// The engine's registry of [`kinds`].
pub fn registry() -> Registry {
    kinds().registry
}

/// The planners of [`kinds`], in order.
pub fn planners() -> Vec<Planner> {
    kinds().planners
}
