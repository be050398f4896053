//! The Slurm engine (`[execute] engine = "slurm"`, `skyctl build --execute slurm`): each node
//! that misses both caches runs as one Slurm job whose command is `skyctl worker run DIGEST`
//! ([`crate::commands::worker`]). Data moves through the remote cache, never a shared file
//! system: the coordinator uploads the inputs the cache lacks and a
//! [`NodeDescription`]; the worker fetches and checks them by digest, runs the node with the
//! kind's own code, uploads outputs and log, and writes the action record last; the
//! coordinator then takes the result as a remote-cache hit.
//!
//! Each job is one `srun` (not `sbatch --wait`): srun starts a job on a free node in about
//! 0.1 s where `sbatch --wait` takes 2 s or more, as it polls the controller for the job's end
//! every few seconds (bench/slurm_overhead.sh: what matters for graphs of many small nodes);
//! and it brings the job's output (the worker's message when it fails, Slurm's own lines
//! when it was refused, killed, out of memory or time) back to this machine without a shared
//! file system. The price: the compute nodes must reach the submitting machine (as for any
//! interactive job). Every job is named after this build and its node description, so a
//! signal cancels each one with `scancel --name` whether it is pending or running. Secrets
//! (the cache URL, its auth header, the signing key) reach the job through its environment
//! (`--export=ALL`, the default), never its command line.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use sky_dag::executor::{Executed, Executor, NodeDescription, RemoteJob, Task, DESCRIPTION_FORMAT};
use sky_dag::key::Digest;
use sky_dag::remote::RemoteCache;
use sky_dag::report::JobState;
use sky_dag::store::OutputRecord;
use sky_dag::tree::{Tree, TreeEntry};
use sky_dag::NodeFailure;
use sky_env::Secret;

use crate::pipeline::execute::{NodeResources, SlurmConfig};

/// A job's output file, read back for its message.
const JOB_OUTPUT: sky_fs::Limit = sky_fs::Limit::new("a Slurm job's output", 16 << 20);

/// The Slurm executor of one build.
pub struct Slurm {
    remote: RemoteCache,
    /// The cache URL as given (it may carry a password): only ever put in a job's environment.
    url: Secret<String>,
    config: SlurmConfig,
    resources: BTreeMap<String, NodeResources>,
    /// The skyctl the jobs run.
    worker: String,
    /// Where the jobs' output files go.
    out_dir: PathBuf,
    /// This build, in job names: the coordinator's pid and start time.
    build_id: String,
    /// The jobs submitted and not known to have ended, by job name, with their node id
    /// (cancelled on a signal; shown queued or running).
    live: Mutex<BTreeMap<String, String>>,
}

/// How a job ended badly.
enum JobEnd {
    /// The machine was lost (or the job was requeued away): worth submitting again.
    Lost(String),
    /// Anything else.
    Failed(NodeFailure),
}

impl Slurm {
    /// A Slurm executor writing through `remote`, whose full URL is `url`.
    pub fn new(
        remote: RemoteCache,
        url: Secret<String>,
        config: SlurmConfig,
        resources: BTreeMap<String, NodeResources>,
        out_dir: PathBuf,
    ) -> anyhow::Result<Slurm> {
        let worker = match &config.worker {
            Some(w) => w.clone(),
            None => std::env::current_exe()
                .map_err(|e| anyhow::anyhow!("locating the running skyctl for the jobs: {e}"))?
                .display()
                .to_string(),
        };
        Ok(Slurm {
            remote,
            url,
            config,
            resources,
            worker,
            out_dir,
            build_id: format!(
                "{}-{}",
                std::process::id(),
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_millis())
                    .unwrap_or(0)
            ),
            live: Mutex::new(BTreeMap::new()),
        })
    }

    /// Upload what the node reads that the cache lacks, then its description: the digest the
    /// job's command names.
    fn ship(&self, task: &Task<'_>) -> Result<Digest, NodeFailure> {
        let lost = |m: String| NodeFailure::RemoteFailed {
            message: format!(
                "node `{}`: cannot ship its inputs to the remote cache `{}`: {m}",
                task.node.id,
                self.remote.shown_url()
            ),
        };
        let mut inputs = Vec::with_capacity(task.material.inputs.len());
        for i in &task.material.inputs {
            let abs = task.root.join(&i.path);
            let md = std::fs::metadata(&abs).map_err(|e| lost(format!("`{}`: {e}", i.path)))?;
            let rec = if md.is_dir() {
                let (tree, bytes) =
                    tree_of(&abs).map_err(|e| lost(format!("`{}`: {e}", i.path)))?;
                let d = Digest::of(&bytes);
                if d != i.digest {
                    return Err(lost(format!(
                        "`{}` changed since its key was computed",
                        i.path
                    )));
                }
                for e in &tree.entries {
                    self.remote
                        .ensure_blob(&e.digest, &abs.join(&e.path))
                        .map_err(lost)?;
                }
                self.remote.ensure_bytes(&d, &bytes).map_err(lost)?;
                OutputRecord {
                    path: i.path.clone(),
                    digest: d,
                    size: tree.entries.iter().map(|e| e.size).sum(),
                    dir: true,
                    exec: false,
                }
            } else {
                let d = sky_dag::statcache::hash_file(&abs)
                    .map_err(|e| lost(format!("`{}`: {e}", i.path)))?;
                if d != i.digest {
                    return Err(lost(format!(
                        "`{}` changed since its key was computed",
                        i.path
                    )));
                }
                self.remote.ensure_blob(&d, &abs).map_err(lost)?;
                OutputRecord {
                    path: i.path.clone(),
                    digest: d,
                    size: md.len(),
                    dir: false,
                    exec: std::os::unix::fs::PermissionsExt::mode(&md.permissions()) & 0o111 != 0,
                }
            };
            inputs.push(rec);
        }
        let desc = NodeDescription {
            format: DESCRIPTION_FORMAT,
            version: env!("CARGO_PKG_VERSION").to_string(),
            node: task.node.id.clone(),
            key: task.key,
            material: task.material.clone(),
            inputs,
            roles: task.roles.to_vec(),
            outputs: task
                .node
                .outputs
                .iter()
                .map(|o| (o.path.clone(), o.dir))
                .collect(),
            volatile: task.volatile,
            tools: self
                .resources
                .get(&task.node.id)
                .map(|r| r.tools.clone())
                .unwrap_or_default(),
        };
        let bytes = serde_json::to_vec(&desc).map_err(|e| lost(e.to_string()))?;
        let d = Digest::of(&bytes);
        self.remote.ensure_bytes(&d, &bytes).map_err(lost)?;
        Ok(d)
    }

    /// The srun arguments for a node with resources `r` (`kind`: bench nodes are exclusive
    /// by default, as they need a quiet machine).
    fn srun_args(&self, name: &str, kind: &str, r: &NodeResources) -> Vec<String> {
        let mut a = vec![
            format!("--job-name={name}"),
            "--ntasks=1".to_string(),
            "--input=none".to_string(),
            "--export=ALL".to_string(),
            "--quiet".to_string(),
        ];
        if let Some(p) = &self.config.partition {
            a.push(format!("--partition={p}"));
        }
        if let Some(acc) = &self.config.account {
            a.push(format!("--account={acc}"));
        }
        if let Some(n) = r.cpus {
            a.push(format!("--cpus-per-task={n}"));
        }
        if let Some(n) = r.gpus.filter(|n| *n > 0) {
            a.push(format!("--gres=gpu:{n}"));
        }
        if let Some(c) = &r.constraint {
            a.push(format!("--constraint={c}"));
        }
        if r.exclusive.unwrap_or(kind == "bench") {
            a.push("--exclusive".to_string());
        }
        if let Some(m) = &r.mem {
            a.push(format!("--mem={m}"));
        }
        a.extend(self.config.args.iter().cloned());
        a
    }

    /// Run one job for `desc` and wait for it.
    fn submit_and_wait(
        &self,
        task: &Task<'_>,
        r: &NodeResources,
        desc: &Digest,
    ) -> Result<(), JobEnd> {
        let node = &task.node.id;
        let failed = |message: String| JobEnd::Failed(NodeFailure::RemoteFailed { message });
        std::fs::create_dir_all(&self.out_dir)
            .map_err(|e| failed(format!("cannot create `{}`: {e}", self.out_dir.display())))?;
        // The job's name is this build's and this node's: what a signal cancels, pending or
        // running, without waiting for a job id.
        let name = format!("skyctl-{}-{}", self.build_id, desc.short());
        let out_path = self.out_dir.join(format!("{name}.out"));
        let out = std::fs::File::create(&out_path)
            .map_err(|e| failed(format!("cannot create `{}`: {e}", out_path.display())))?;
        let err = out
            .try_clone()
            .map_err(|e| failed(format!("`{}`: {e}", out_path.display())))?;
        let mut cmd = std::process::Command::new("srun");
        cmd.args(self.srun_args(&name, &task.node.kind, r))
            .arg(&self.worker)
            .args(["worker", "run", &desc.hex()])
            .env("SKYCTL_REMOTE_CACHE", self.url.expose())
            .stdin(std::process::Stdio::null())
            .stdout(out)
            .stderr(err);
        // A group of its own: a terminal's Ctrl-C reaches skyctl, which cancels the job.
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        let mut child = cmd.spawn().map_err(|e| {
            failed(format!(
                "node `{node}`: cannot run `srun` ({e}); is the Slurm client installed and on PATH?"
            ))
        })?;
        lock(&self.live).insert(name.clone(), node.clone());
        let status = loop {
            if let Some(sig) = sky_dag::interrupt::requested() {
                scancel(&name);
                let _ = child.wait();
                self.forget(&name);
                return Err(JobEnd::Failed(NodeFailure::Cancelled {
                    message: format!("interrupted by signal {sig}; its Slurm job was cancelled"),
                }));
            }
            match child.try_wait() {
                Ok(Some(s)) => break s,
                Ok(None) => std::thread::sleep(Duration::from_millis(20)),
                Err(e) => return Err(failed(format!("node `{node}`: waiting for srun: {e}"))),
            }
        };
        self.forget(&name);
        let printed = sky_fs::read_to_string(&out_path, JOB_OUTPUT).unwrap_or_default();
        let _ = std::fs::remove_file(&out_path);
        if status.success() {
            return Ok(());
        }
        let said = tail(&printed, 3000);
        let said = if said.is_empty() {
            format!("srun {}", describe(status))
        } else {
            said
        };
        // Slurm says so when it never started the job (a feature or GPU no node has, a
        // partition or account it refuses).
        if said.contains("Unable to allocate resources") || said.contains("Invalid ") {
            let line = said
                .lines()
                .find(|l| l.contains("srun: error:"))
                .unwrap_or(&said);
            return Err(failed(format!(
                "Slurm refused the job for node `{node}`: {}",
                line.trim()
            )));
        }
        let message = format!("the Slurm job for node `{node}` failed:\n{said}");
        if said.contains("Node failure") || said.contains("NODE_FAIL") {
            return Err(JobEnd::Lost(message));
        }
        Err(failed(message))
    }

    fn forget(&self, name: &str) {
        lock(&self.live).remove(name);
    }
}

impl Executor for Slurm {
    fn name(&self) -> &str {
        "slurm"
    }

    /// One `squeue` for every live job of this build. A controller that does not answer
    /// leaves the progress as it was: the jobs themselves are followed through srun.
    fn jobs(&self) -> Vec<RemoteJob> {
        let live = lock(&self.live).clone();
        if live.is_empty() {
            return Vec::new();
        }
        let names: Vec<&str> = live.keys().map(String::as_str).collect();
        let out = std::process::Command::new("squeue")
            .args(["--me", "--noheader", "--format=%j|%i|%T|%R", "--name"])
            .arg(names.join(","))
            .stdin(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .output();
        match out {
            Ok(o) if o.status.success() => parse_squeue(&String::from_utf8_lossy(&o.stdout), &live),
            _ => Vec::new(),
        }
    }

    fn execute(
        &self,
        task: &Task<'_>,
        here: &mut dyn FnMut() -> Result<Vec<OutputRecord>, NodeFailure>,
    ) -> Result<Executed, NodeFailure> {
        let r = self
            .resources
            .get(&task.node.id)
            .cloned()
            .unwrap_or_default();
        if r.local {
            return here().map(Executed::Here);
        }
        let desc = self.ship(task)?;
        let retries = self.config.retries.unwrap_or(1);
        let mut tries = 0;
        loop {
            match self.submit_and_wait(task, &r, &desc) {
                Ok(()) => return Ok(Executed::InRemoteCache),
                Err(JobEnd::Lost(_)) if tries < retries => tries += 1,
                Err(JobEnd::Lost(message)) => return Err(NodeFailure::RemoteLost { message }),
                Err(JobEnd::Failed(f)) => return Err(f),
            }
        }
    }
}

/// The states `squeue` gives a job that has not ended.
fn job_state(slurm: &str) -> Option<JobState> {
    match slurm {
        "PENDING" | "REQUEUED" | "REQUEUE_HOLD" | "REQUEUE_FED" | "RESV_DEL_HOLD" => {
            Some(JobState::Queued)
        }
        "RUNNING" | "CONFIGURING" | "COMPLETING" | "SUSPENDED" | "SIGNALING" | "STAGE_OUT"
        | "RESIZING" => Some(JobState::Running),
        _ => None,
    }
}

/// `squeue`'s lines (`NAME|ID|STATE|REASON-OR-NODES`) for the jobs in `live` (job name to
/// node id); a line for another job, or one that does not parse, is left out.
fn parse_squeue(out: &str, live: &BTreeMap<String, String>) -> Vec<RemoteJob> {
    let mut jobs = Vec::new();
    for line in out.lines() {
        let mut f = line.splitn(4, '|');
        let (Some(name), Some(id), Some(state), Some(where_)) =
            (f.next(), f.next(), f.next(), f.next())
        else {
            continue;
        };
        let (Some(node), Some(state)) = (live.get(name.trim()), job_state(state.trim())) else {
            continue;
        };
        // %R is `(Reason)` for a pending job, the node list for a running one.
        let detail = where_.trim().trim_start_matches('(').trim_end_matches(')');
        jobs.push(RemoteJob {
            node: node.clone(),
            job: id.trim().to_string(),
            state,
            detail: (!detail.is_empty() && detail != "None").then(|| detail.to_string()),
        });
    }
    jobs
}

impl Drop for Slurm {
    /// Nothing this build submitted outlives it.
    fn drop(&mut self) {
        for name in std::mem::take(&mut *lock(&self.live)).into_keys() {
            scancel(&name);
        }
    }
}

/// A directory's tree listing, as the engine hashes a directory input.
fn tree_of(abs: &Path) -> std::io::Result<(Tree, Vec<u8>)> {
    let mut tree = Tree::default();
    for f in sky_dag::tree::list_files(abs)? {
        let p = abs.join(&f);
        let md = std::fs::metadata(&p)?;
        tree.entries.push(TreeEntry {
            digest: sky_dag::statcache::hash_file(&p)?,
            size: md.len(),
            exec: std::os::unix::fs::PermissionsExt::mode(&md.permissions()) & 0o111 != 0,
            path: f,
        });
    }
    let bytes = tree.encode();
    Ok((tree, bytes))
}

/// `scancel --name NAME` (this user's jobs of that name), waited for.
fn scancel(name: &str) {
    let _ = std::process::Command::new("scancel")
        .args(["--me", "--name", name])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status();
}

/// How a process ended, in words.
fn describe(status: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => format!("exited with status {c}"),
        (None, Some(s)) => format!("was killed by signal {s}"),
        _ => "ended".to_string(),
    }
}

/// The last `n` bytes of `t`, on a character boundary, trimmed.
fn tail(t: &str, n: usize) -> String {
    let mut start = t.len().saturating_sub(n);
    while !t.is_char_boundary(start) {
        start += 1;
    }
    t[start..].trim().to_string()
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn squeue_lines_become_the_states_of_this_builds_jobs() {
        let live: BTreeMap<String, String> = [
            ("skyctl-1-a".to_string(), "gpu/one".to_string()),
            ("skyctl-1-b".to_string(), "gpu/two".to_string()),
            ("skyctl-1-c".to_string(), "done".to_string()),
        ]
        .into();
        let out = "skyctl-1-a|41|RUNNING|skynode\n\
                   skyctl-1-b|42|PENDING|(Resources)\n\
                   skyctl-1-c|43|COMPLETED|skynode\n\
                   someone-else|44|RUNNING|skynode\n\
                   garbled line\n\
                   skyctl-1-b|45|PENDING|(None)\n";
        let jobs = parse_squeue(out, &live);
        assert_eq!(jobs.len(), 3, "{jobs:?}");
        assert_eq!(
            jobs[0],
            RemoteJob {
                node: "gpu/one".into(),
                job: "41".into(),
                state: JobState::Running,
                detail: Some("skynode".into())
            }
        );
        assert_eq!(
            jobs[1],
            RemoteJob {
                node: "gpu/two".into(),
                job: "42".into(),
                state: JobState::Queued,
                detail: Some("Resources".into())
            }
        );
        assert_eq!(jobs[2].job, "45");
        assert_eq!(jobs[2].detail, None);
    }

    #[test]
    fn tails_cut_on_character_boundaries() {
        assert_eq!(tail("ééé", 3), "é");
        assert_eq!(tail("abc", 10), "abc");
    }
}
