//! `command`: the engine's kind ([`sky_dag::command`]), planned here from each `[[command]]`:
//! its `run` (a string is run by `sh -c`), `cwd`, declared environment variables (their values
//! enter the key), inputs and outputs.

use sky_dag::command::{Command, Params};
use sky_dag::{NodeSpec, Result};

use super::PipelineKind;
use crate::pipeline::plan::{Plan, Planned, Planner};

impl PipelineKind for Command {
    const PLANNER: Option<Planner> = Some(Planner::Pipeline(plan));
}

/// One node per `[[command]]`, in file order.
fn plan(cx: &Plan<'_>, out: &mut Planned) -> Result<()> {
    for c in &cx.m.command {
        // The manifest check has made sure an array holds only strings.
        let run = match c.run.get_ref() {
            toml::Value::String(s) => vec!["sh".into(), "-c".into(), s.clone()],
            toml::Value::Array(a) => a
                .iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect(),
            _ => Vec::new(),
        };
        let cwd = match &c.cwd {
            Some(cwd) => {
                let p = sky_dag::graph::clean_rel(cwd.get_ref())
                    .map_err(|e| cx.m.error_at(cwd.span(), format!("cwd: {e}")))?;
                if p.is_empty() {
                    ".".to_string()
                } else {
                    p
                }
            }
            None => ".".to_string(),
        };
        let params = Params {
            run,
            cwd,
            env: crate::pipeline::plan::declared_env(cx.m, cx.env, &c.env)?,
            outputs: c.outputs.iter().map(|o| o.get_ref().clone()).collect(),
        };
        let mut node = NodeSpec::new::<Command>(c.name.get_ref(), &params, c.name.span())?;
        node.exclusive = c.exclusive;
        node.volatile = c.volatile;
        node.on_request = c.on_request;
        for i in &c.inputs {
            let decl = i.get_ref();
            node = if decl.allow_empty {
                node.input_may_be_empty(&decl.path, i.span())
            } else {
                node.input(&decl.path, i.span())
            };
        }
        for o in &c.outputs {
            node = node.output(o.get_ref(), o.span());
        }
        out.node(node);
    }
    Ok(())
}
