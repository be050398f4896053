//! The remote-cache flags shared by `build`, `verify` and `status`, and their environment
//! variables: which cache, read-only or not, the auth header, the signing key, the timeout, a
//! CA file for `https://`.

use std::time::Duration;

use anyhow::Context;
use sky_dag::remote::RemoteCache;
use sky_remote::RemoteConfig;

use crate::pipeline::Manifest;

/// `--remote-cache URL` and `--remote-cache-read-only`.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct RemoteArgs {
    /// A shared cache in the Bazel HTTP layout (nginx WebDAV, bazel-remote): asked for what
    /// is missing locally; builds upload what they run (default: SKYCTL_REMOTE_CACHE, else
    /// [cache] remote; `off`: none).
    #[arg(long, value_name = "URL")]
    pub remote_cache: Option<String>,
    /// Never upload to the remote cache, only read (default: SKYCTL_REMOTE_CACHE_READ_ONLY=1).
    #[arg(long)]
    pub remote_cache_read_only: bool,
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

impl RemoteArgs {
    /// The remote cache these flags, the environment and `[cache]` name; `None` for none.
    pub fn open(&self, manifest: &Manifest) -> anyhow::Result<Option<RemoteCache>> {
        self.open_with(manifest.cache.remote.as_ref().map(|u| u.get_ref().as_str()))
    }

    /// [`RemoteArgs::open`] with the URL `[cache] remote` gives (if any).
    pub fn open_with(&self, configured: Option<&str>) -> anyhow::Result<Option<RemoteCache>> {
        let url = self
            .remote_cache
            .clone()
            .filter(|u| !u.trim().is_empty())
            .or_else(|| env("SKYCTL_REMOTE_CACHE"))
            .or_else(|| configured.map(str::to_string));
        // `off` (flag or variable) turns a configured cache off for this run.
        let Some(url) = url.filter(|u| u.trim() != "off") else {
            return Ok(None);
        };
        let mut config = RemoteConfig::new(&url).map_err(anyhow::Error::msg)?;
        config.read_only = self.remote_cache_read_only
            || match env("SKYCTL_REMOTE_CACHE_READ_ONLY")
                .as_deref()
                .map(str::trim)
            {
                None | Some("0" | "false" | "no" | "off") => false,
                Some("1" | "true" | "yes" | "on") => true,
                Some(other) => {
                    anyhow::bail!("SKYCTL_REMOTE_CACHE_READ_ONLY must be 1 or 0, not `{other}`")
                }
            };
        if let Some(t) = env("SKYCTL_REMOTE_CACHE_TIMEOUT") {
            let secs: f64 = t
                .trim()
                .parse()
                .ok()
                .filter(|s: &f64| s.is_finite() && *s > 0.0 && *s <= 3600.0)
                .with_context(|| {
                    format!(
                        "SKYCTL_REMOTE_CACHE_TIMEOUT must be seconds between 0 and 3600, not `{t}`"
                    )
                })?;
            config.timeout = Duration::from_secs_f64(secs);
        }
        if let Some(h) = env("SKYCTL_REMOTE_CACHE_HEADER") {
            config = config.with_header(&h).map_err(anyhow::Error::msg)?;
        }
        if let Some(file) = env("SKYCTL_REMOTE_CACHE_CA") {
            let pem = sky_fs::read(std::path::Path::new(&file), sky_fs::CA_BUNDLE)
                .context("SKYCTL_REMOTE_CACHE_CA")?;
            config = config
                .with_ca_pem(&pem)
                .map_err(|e| anyhow::anyhow!("SKYCTL_REMOTE_CACHE_CA `{file}`: {e}"))?;
        }
        if let Some(k) = env("SKYCTL_REMOTE_CACHE_SIGNING_KEY") {
            config = config
                .with_signing_key(k.as_bytes())
                .map_err(anyhow::Error::msg)?;
        }
        Ok(Some(config.open()))
    }
}
