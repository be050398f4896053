//! `skyctl worker run DIGEST`: what a Slurm job runs ([`crate::slurm`]). It fetches the node
//! description `cas/DIGEST` from the remote cache named by the job's environment
//! (`SKYCTL_REMOTE_CACHE` and its header and signing-key variables), refuses it when it was
//! written by another skyctl version, fetches and checks every input by digest into a fresh
//! folder, runs the node with the kind's own code ([`sky_dag::executor::run_described`]),
//! and uploads the outputs, the log and, last, the action record. Nothing is uploaded for a
//! node that failed or a job that was refused.

use anyhow::{anyhow, bail, Context};
use sky_dag::executor::{run_described, NodeDescription};
use sky_dag::key::Digest;
use sky_dag::store::Store;

use crate::kinds::registry;
use crate::outcome::Outcome;
use crate::remote_args::RemoteArgs;

/// The largest node description taken from the cache.
const MAX_DESCRIPTION: u64 = 64 << 20;

/// The variables Slurm (and other engines) set for the GPUs a job was given: every command
/// of the node gets them, whatever its `env` list says.
const GPU_VARS: [&str; 5] = [
    "CUDA_VISIBLE_DEVICES",
    "GPU_DEVICE_ORDINAL",
    "ROCR_VISIBLE_DEVICES",
    "SLURM_JOB_GPUS",
    "SLURM_STEP_GPUS",
];

/// Arguments of `skyctl worker`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(subcommand)]
    pub command: Sub,
}

/// `skyctl worker` subcommands.
#[derive(clap::Subcommand, Debug)]
pub enum Sub {
    /// Run the node described by the blob DIGEST of the remote cache (a job's command).
    Run {
        /// The description's digest (64 hex characters).
        digest: String,
    },
}

/// Run `skyctl worker`.
pub fn run(args: Args) -> anyhow::Result<Outcome> {
    let Sub::Run { digest } = args.command;
    let Some(d) = Digest::from_hex(&digest) else {
        bail!("`{digest}` is not a node description digest (64 hex characters)");
    };
    sky_dag::interrupt::install()?;
    let remote = RemoteArgs::default().open_with(None)?.ok_or_else(|| {
        anyhow!(
            "skyctl worker needs the remote cache in SKYCTL_REMOTE_CACHE (the job's environment)"
        )
    })?;
    let dir = tempfile::Builder::new()
        .prefix("skyctl-worker-")
        .tempdir()
        .context("creating the worker's folder")?;
    let root = dir.path().join("ws");
    std::fs::create_dir_all(&root).context("creating the worker's workspace")?;
    let store = Store::open(&dir.path().join("store"))?;
    let url = remote.shown_url().to_string();
    let why = |remote: &sky_dag::remote::RemoteCache| remote.take_warnings().join("; ");
    if !remote.fetch_blob_into(&store, &d, MAX_DESCRIPTION) {
        bail!(
            "cannot fetch the node description cas/{} from the remote cache {url}: {}",
            d.hex(),
            why(&remote)
        );
    }
    let bytes = store.get_bytes(&d)?;
    let desc: NodeDescription = serde_json::from_slice(&bytes)
        .with_context(|| format!("cas/{} is not a node description", d.hex()))?;
    desc.check(env!("CARGO_PKG_VERSION"))
        .map_err(|m| anyhow!("refusing the job: {m}"))?;
    if let Some(t) = desc.tools.iter().find(|t| !have_tool(t)) {
        bail!(
            "refusing the job: node `{}` needs the tool `{t}`, which this worker ({}) does not have{}",
            desc.node,
            hostname(),
            if t.contains('/') { "" } else { " on PATH" }
        );
    }
    for i in &desc.inputs {
        if !remote.fetch_blobs_of(&store, i) {
            bail!(
                "node `{}`: cannot fetch its input `{}` ({}) from {url}: {}",
                desc.node,
                i.path,
                i.digest.short(),
                why(&remote)
            );
        }
        let dest = root.join(&i.path);
        if let Some(parent) = dest.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("creating `{}`", parent.display()))?;
        }
        store
            .restore(i, &dest, false)
            .with_context(|| format!("node `{}`: placing its input `{}`", desc.node, i.path))?;
    }
    let gpus: Vec<(String, String)> = GPU_VARS
        .iter()
        .filter_map(|v| {
            let value = sky_env::Var::get(v).os()?.into_string().ok()?;
            Some((v.to_string(), value))
        })
        .collect();
    sky_dag::process::set_engine_vars(gpus);
    let mut log = Vec::new();
    let rec = match run_described(&desc, &registry(), &root, &store, &mut log) {
        Ok(rec) => rec,
        Err(f) => {
            let t = String::from_utf8_lossy(&log[log.len().saturating_sub(4000)..]).into_owned();
            bail!("node `{}` failed: {f}\n{}", desc.node, t.trim_end());
        }
    };
    remote.upload(&store, desc.key, rec);
    remote.finish();
    let warnings = why(&remote);
    if remote.stats().uploaded != 1 || !warnings.is_empty() {
        bail!(
            "node `{}` ran, but its result could not be uploaded to {url}: {warnings}",
            desc.node
        );
    }
    Ok(match sky_dag::interrupt::requested() {
        Some(sig) => Outcome::Interrupted(sig),
        None => Outcome::Success,
    })
}

/// Whether `tool` (a name looked up on PATH, or a path) is an executable file here.
fn have_tool(tool: &str) -> bool {
    let exec = |p: &std::path::Path| {
        std::fs::metadata(p).is_ok_and(|m| {
            m.is_file() && std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o111 != 0
        })
    };
    if tool.contains('/') {
        return exec(std::path::Path::new(tool));
    }
    let path = sky_env::Var::get("PATH").os().unwrap_or_default();
    std::env::split_paths(&path).any(|dir| exec(&dir.join(tool)))
}

/// This machine's name as Slurm knows it, for messages.
fn hostname() -> String {
    sky_env::Var::get("SLURMD_NODENAME")
        .os()
        .and_then(|v| v.into_string().ok())
        .unwrap_or_else(|| "this machine".to_string())
}
