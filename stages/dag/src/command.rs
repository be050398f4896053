//! `command`: run an external program.
//!
//! Params: `run` (argv; a shell string is already `["sh", "-c", s]`), `cwd`
//! (workspace-relative), `env` (declared variables and their values, null when unset),
//! `outputs` (as written). The child runs through [`crate::process::Child`]. A front end may
//! name a program that means the running executable itself ([`Command::with_self_name`]), so a
//! pipeline can call the binary's own tools without depending on PATH.

use std::collections::BTreeMap;

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};

use crate::kind::{Kind, StageCtx};
use crate::process::{describe_failure, resolve, set_vars, Child};

/// The `command` kind.
#[derive(Default)]
pub struct Command {
    self_name: Option<&'static str>,
}

/// Parameters of a `command` node.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Params {
    /// argv.
    pub run: Vec<String>,
    /// Working directory, workspace-relative (`.` for the root).
    pub cwd: String,
    /// Declared environment variables and their values (None: unset).
    pub env: BTreeMap<String, Option<String>>,
    /// The outputs as written (they enter the key).
    pub outputs: Vec<String>,
}

impl Command {
    /// A command kind where argv[0] `name` runs the current executable.
    pub fn with_self_name(name: &'static str) -> Command {
        Command {
            self_name: Some(name),
        }
    }
}

impl Kind for Command {
    const NAME: &'static str = "command";
    const VERSION: u32 = 1;
    type Params = Params;

    fn run(&self, p: Params, ctx: &mut StageCtx<'_>) -> anyhow::Result<()> {
        let Some((prog, args)) = p.run.split_first() else {
            bail!("node `{}`: empty command", ctx.node);
        };
        let cwd = ctx.workspace.join(&p.cwd);
        let program = if Some(prog.as_str()) == self.self_name {
            std::env::current_exe().context("locating the running executable")?
        } else {
            resolve(prog, sky_env::Var::get("PATH").os().as_deref(), &cwd)
        };
        let env = set_vars(&p.env);
        let child = Child {
            program: &program,
            arg0: prog,
            args,
            cwd: &cwd,
            env: &env,
        };
        let status = child
            .run(ctx.log)
            .with_context(|| format!("node `{}`", ctx.node))?;
        if !status.success() {
            bail!("`{}` {}", p.run.join(" "), describe_failure(status));
        }
        Ok(())
    }
}
