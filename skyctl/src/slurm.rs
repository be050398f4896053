//! The Slurm engine (`[execute] engine = "slurm"`, `skyctl build --execute slurm`): each node
//! that misses both caches runs as one Slurm job whose command is `skyctl worker run DIGEST`
//! ([`crate::commands::worker`]). Data moves through the remote cache, never a shared file
//! system: the coordinator uploads the inputs the cache lacks and a
//! [`NodeDescription`]; the worker fetches and checks them by digest, runs the node with the
//! kind's own code, uploads outputs and log, and writes the action record last; the
//! coordinator then takes the result as a remote-cache hit.
//!
//! Jobs are submitted with `sbatch --wait`, not `srun`: sbatch needs only the controller to be
//! reachable (srun's compute node connects back to the submitting host, which login and CI
//! machines often do not allow), prints the job id at once (so a stopping build can `scancel`
//! it), and ends with the job's exit status. Secrets (the cache URL, its auth header, the
//! signing key) reach the job through its environment (`--export=ALL`, the default), never
//! its command line or script. The job's own output (the worker's message when it fails) goes
//! to a file in the workspace state, read back when the cluster's nodes share that path; the
//! message always carries Slurm's state and reason.

use std::collections::BTreeMap;
use std::io::{BufRead, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use sky_dag::executor::{Executed, Executor, NodeDescription, Task, DESCRIPTION_FORMAT};
use sky_dag::key::Digest;
use sky_dag::remote::RemoteCache;
use sky_dag::store::OutputRecord;
use sky_dag::tree::{Tree, TreeEntry};
use sky_dag::NodeFailure;
use sky_env::Secret;

use crate::execute::{NodeResources, SlurmConfig};

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
    /// Jobs submitted and not known to have ended (cancelled on a signal).
    live: Mutex<Vec<String>>,
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
            live: Mutex::new(Vec::new()),
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
        };
        let bytes = serde_json::to_vec(&desc).map_err(|e| lost(e.to_string()))?;
        let d = Digest::of(&bytes);
        self.remote.ensure_bytes(&d, &bytes).map_err(lost)?;
        Ok(d)
    }

    /// The sbatch arguments for a node with resources `r` (`kind`: bench nodes are exclusive
    /// by default, as they need a quiet machine).
    fn sbatch_args(&self, node: &str, kind: &str, r: &NodeResources, out: &Path) -> Vec<String> {
        let mut a = vec![
            "--wait".to_string(),
            "--parsable".to_string(),
            format!("--job-name=skyctl:{node}"),
            format!("--output={}", out.display()),
            "--export=ALL".to_string(),
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

    /// Submit one job for `desc` and wait for it.
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
        let out = self.out_dir.join(format!("{}-%j.out", desc.short()));
        let args = self.sbatch_args(node, &task.node.kind, r, &out);
        let script = format!(
            "#!/bin/sh\nexec {} worker run {}\n",
            shell_quote(&self.worker),
            desc.hex()
        );
        let mut cmd = std::process::Command::new("sbatch");
        cmd.args(&args)
            .env("SKYCTL_REMOTE_CACHE", self.url.expose())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        // A group of its own: a terminal's Ctrl-C reaches skyctl, which cancels the job.
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        let mut child = cmd.spawn().map_err(|e| {
            failed(format!(
                "node `{node}`: cannot run `sbatch` ({e}); is the Slurm client installed and on PATH?"
            ))
        })?;
        if let Some(mut stdin) = child.stdin.take() {
            let _ = stdin.write_all(script.as_bytes());
        }
        let mut stderr = child.stderr.take();
        let mut first = String::new();
        if let Some(stdout) = child.stdout.take() {
            let _ = std::io::BufReader::new(stdout).read_line(&mut first);
        }
        // `--parsable` prints `id` or `id;cluster`.
        let id = first
            .trim()
            .split(';')
            .next()
            .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
            .map(str::to_string);
        if let Some(id) = &id {
            lock(&self.live).push(id.clone());
        }
        let status = loop {
            if let Some(sig) = sky_dag::interrupt::requested() {
                if let Some(id) = &id {
                    scancel(id);
                }
                let _ = child.kill();
                let _ = child.wait();
                self.forget(id.as_deref());
                return Err(JobEnd::Failed(NodeFailure::Cancelled {
                    message: format!(
                        "interrupted by signal {sig}; Slurm job {} cancelled",
                        id.as_deref().unwrap_or("(not submitted)")
                    ),
                }));
            }
            match child.try_wait() {
                Ok(Some(s)) => break s,
                Ok(None) => std::thread::sleep(Duration::from_millis(50)),
                Err(e) => return Err(failed(format!("node `{node}`: waiting for sbatch: {e}"))),
            }
        };
        self.forget(id.as_deref());
        let mut err = Vec::new();
        if let Some(s) = stderr.as_mut() {
            let _ = s.read_to_end(&mut err);
        }
        let err = String::from_utf8_lossy(&err);
        if status.success() {
            return Ok(());
        }
        let Some(id) = id else {
            let said = err.trim();
            return Err(failed(format!(
                "Slurm refused the job for node `{node}`: {}",
                if said.is_empty() {
                    "sbatch failed without a message"
                } else {
                    said
                }
            )));
        };
        let (state, reason, exit) = job_state(&id);
        let out = self.out_dir.join(format!("{}-{id}.out", desc.short()));
        let printed = sky_fs::read_to_string(&out, JOB_OUTPUT)
            .ok()
            .map(|t| tail(&t, 2000))
            .filter(|t| !t.is_empty())
            .map(|t| format!("; the job printed:\n{t}"))
            .unwrap_or_default();
        let message = format!(
            "Slurm job {id} for node `{node}` ended {state} (exit code {exit}, reason {reason}){printed}"
        );
        match state.as_str() {
            "NODE_FAIL" | "BOOT_FAIL" | "PREEMPTED" | "REQUEUED" => Err(JobEnd::Lost(message)),
            _ => Err(failed(message)),
        }
    }

    fn forget(&self, id: Option<&str>) {
        if let Some(id) = id {
            lock(&self.live).retain(|j| j != id);
        }
    }
}

impl Executor for Slurm {
    fn name(&self) -> &str {
        "slurm"
    }

    fn needs_remote(&self) -> bool {
        true
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
                Err(JobEnd::Lost(m)) if tries < retries => {
                    tries += 1;
                    let _ = m;
                }
                Err(JobEnd::Lost(message)) => return Err(NodeFailure::RemoteLost { message }),
                Err(JobEnd::Failed(f)) => return Err(f),
            }
        }
    }
}

impl Drop for Slurm {
    /// Nothing this build submitted outlives it.
    fn drop(&mut self) {
        for id in lock(&self.live).drain(..) {
            scancel(&id);
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

/// `scancel ID`, waited for.
fn scancel(id: &str) {
    let _ = std::process::Command::new("scancel")
        .arg(id)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status();
}

/// A finished job's state, reason and exit code, from `scontrol show job` (`UNKNOWN` when the
/// controller no longer has it).
fn job_state(id: &str) -> (String, String, String) {
    let out = std::process::Command::new("scontrol")
        .args(["show", "job", "-o", id])
        .stdin(std::process::Stdio::null())
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    let field = |name: &str| {
        out.split_whitespace()
            .find_map(|w| w.strip_prefix(name))
            .unwrap_or("unknown")
            .to_string()
    };
    let state = field("JobState=");
    let state = if state == "unknown" {
        "UNKNOWN".to_string()
    } else {
        state
    };
    (state, field("Reason="), field("ExitCode="))
}

/// The last `n` bytes of `t`, on a character boundary, trimmed.
fn tail(t: &str, n: usize) -> String {
    let mut start = t.len().saturating_sub(n);
    while !t.is_char_boundary(start) {
        start += 1;
    }
    t[start..].trim().to_string()
}

/// `s` quoted for `sh`.
fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_quoting_keeps_a_path_one_word() {
        assert_eq!(shell_quote("/a b/it's"), r"'/a b/it'\''s'");
    }

    #[test]
    fn tails_cut_on_character_boundaries() {
        assert_eq!(tail("ééé", 3), "é");
        assert_eq!(tail("abc", 10), "abc");
    }
}
