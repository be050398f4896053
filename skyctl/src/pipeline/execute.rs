//! Where `skyctl build` runs the nodes that must run: `[execute]` of pipeline.toml, the
//! `resources` of each `[[command]]` and `[[golden]]`, and `--execute local|slurm`. The
//! engines themselves are [`sky_dag::executor::Executor`]s: [`sky_dag::executor::Local`] and
//! [`crate::slurm::Slurm`].

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::schema::{Manifest, Resources};

/// The engines `[execute] engine` and `--execute` take.
pub const ENGINES: [&str; 2] = ["local", "slurm"];

/// Jobs submitted at once when `[execute.slurm] max_jobs` is not set.
pub const DEFAULT_MAX_JOBS: usize = 16;

/// `[execute]` and every node's resources, as plain values (saved with the compiled graph).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ExecuteConfig {
    /// `[execute] engine` (`None`: local).
    pub engine: Option<String>,
    /// `[execute.slurm]`.
    pub slurm: SlurmConfig,
    /// `resources` by node id.
    pub resources: BTreeMap<String, NodeResources>,
}

/// `[execute.slurm]`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SlurmConfig {
    /// `--partition`.
    pub partition: Option<String>,
    /// `--account`.
    pub account: Option<String>,
    /// More srun arguments.
    pub args: Vec<String>,
    /// Jobs at once.
    pub max_jobs: Option<usize>,
    /// The skyctl the jobs run.
    pub worker: Option<String>,
    /// Submissions again after a lost machine.
    pub retries: Option<u32>,
}

/// What one node asks of the machine it runs on.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeResources {
    /// CPUs.
    pub cpus: Option<u32>,
    /// GPUs.
    pub gpus: Option<u32>,
    /// Feature expression.
    pub constraint: Option<String>,
    /// The whole machine.
    pub exclusive: Option<bool>,
    /// Memory, as Slurm writes it.
    pub mem: Option<String>,
    /// Run where the build runs.
    pub local: bool,
    /// Programs the node needs that are not among its inputs.
    #[serde(default)]
    pub tools: Vec<String>,
}

impl NodeResources {
    fn from_decl(r: &Resources) -> NodeResources {
        let n = |v: &Option<toml::Spanned<i64>>| v.as_ref().map(|v| *v.get_ref() as u32);
        NodeResources {
            cpus: n(&r.cpus),
            gpus: n(&r.gpus),
            constraint: r.constraint.as_ref().map(|c| c.get_ref().clone()),
            exclusive: r.exclusive.as_ref().map(|e| *e.get_ref()),
            mem: r.mem.as_ref().map(|m| m.get_ref().clone()),
            local: r.local.as_ref().is_some_and(|l| *l.get_ref()),
            tools: r.tools.iter().map(|t| t.get_ref().clone()).collect(),
        }
    }
}

impl ExecuteConfig {
    /// From a parsed (and checked) manifest.
    pub fn from_manifest(m: &Manifest) -> ExecuteConfig {
        let mut resources = BTreeMap::new();
        for c in &m.command {
            if let Some(r) = &c.resources {
                resources.insert(
                    c.name.get_ref().clone(),
                    NodeResources::from_decl(r.get_ref()),
                );
            }
        }
        for g in &m.golden {
            if let Some(r) = &g.resources {
                // A kernels suite's work (the GPU, with the cuda harness) is its `run` node;
                // the generator and the check stay wherever nodes go by default.
                let id = match g.kind {
                    super::schema::GoldenKind::Kernels => {
                        format!("golden/{}/run", g.name.get_ref())
                    }
                    _ => format!("golden/{}", g.name.get_ref()),
                };
                resources.insert(id, NodeResources::from_decl(r.get_ref()));
            }
        }
        let s = m.execute.slurm.as_ref();
        let slurm = SlurmConfig {
            partition: s
                .and_then(|s| s.partition.as_ref())
                .map(|v| v.get_ref().clone()),
            account: s
                .and_then(|s| s.account.as_ref())
                .map(|v| v.get_ref().clone()),
            args: s
                .map(|s| s.args.iter().map(|a| a.get_ref().clone()).collect())
                .unwrap_or_default(),
            max_jobs: s
                .and_then(|s| s.max_jobs.as_ref())
                .map(|v| *v.get_ref() as usize),
            worker: s
                .and_then(|s| s.worker.as_ref())
                .map(|v| v.get_ref().clone()),
            retries: s
                .and_then(|s| s.retries.as_ref())
                .map(|v| *v.get_ref() as u32),
        };
        ExecuteConfig {
            engine: m.execute.engine.as_ref().map(|e| e.get_ref().clone()),
            slurm,
            resources,
        }
    }

    /// As saved with the compiled graph.
    pub fn encode(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Back from [`ExecuteConfig::encode`]; `None` when damaged.
    pub fn decode(s: &str) -> Option<ExecuteConfig> {
        serde_json::from_str(s).ok()
    }

    /// The engine for this run: `--execute` wins over `[execute] engine`; local by default.
    pub fn engine<'a>(&'a self, flag: Option<&'a str>) -> &'a str {
        flag.or(self.engine.as_deref()).unwrap_or("local")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resources_go_to_the_node_that_does_the_work() {
        let m = Manifest::parse(
            r#"
[[golden]]
name = "k80"
kind = "kernels"
harness = "run-it {inputs} {outputs}"
resources = { gpus = 1, constraint = "k80" }

[[command]]
name = "c"
run = "true"
resources = { cpus = 2, local = true }
"#,
            std::path::Path::new("pipeline.toml"),
        )
        .expect("parses");
        let cfg = ExecuteConfig::from_manifest(&m);
        let ids: Vec<&str> = cfg.resources.keys().map(String::as_str).collect();
        assert_eq!(ids, ["c", "golden/k80/run"]);
        assert_eq!(cfg.resources["golden/k80/run"].gpus, Some(1));
        assert!(cfg.resources["c"].local);
        assert_eq!(ExecuteConfig::decode(&cfg.encode()), Some(cfg));
    }
}
