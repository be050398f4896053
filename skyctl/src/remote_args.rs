//! The remote-cache flags shared by `build`, `verify` and `status`, and their environment
//! variables: which cache, read-only or not, the auth header, the signing key, the timeout, a
//! CA file for `https://`.

use std::time::Duration;

use anyhow::Context;
use sky_dag::remote::RemoteCache;
use sky_env::{Secret, Var};
use sky_remote::RemoteConfig;

use crate::pipeline::Manifest;

/// `--remote-cache URL` and `--remote-cache-read-only`.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct RemoteArgs {
    /// A shared cache in the Bazel HTTP layout (nginx WebDAV, bazel-remote): asked for what
    /// is missing locally; builds upload what they run (default: SKYCTL_REMOTE_CACHE, else
    /// [cache] remote; `off`: none).
    #[arg(long, value_name = "URL", value_parser = secret_url)]
    pub remote_cache: Option<Secret<String>>,
    /// Never upload to the remote cache, only read (default: SKYCTL_REMOTE_CACHE_READ_ONLY=1).
    #[arg(long)]
    pub remote_cache_read_only: bool,
}

/// `--remote-cache URL`, held as a secret: a URL may carry a password, and the parsed
/// arguments derive `Debug`.
fn secret_url(url: &str) -> Result<Secret<String>, std::convert::Infallible> {
    Ok(Secret::new(url.to_string()))
}

/// The remote-cache variables, each read once through [`sky_env::Var`]: a variable that is
/// set but unusable (not UTF-8, blank, not a value it takes) is an error naming it (exit 2),
/// never read as unset, so a signing key or read-only mode is never silently dropped. Read
/// whether or not a cache is in use, so a bad one is reported every time.
struct RemoteEnv {
    url: Option<String>,
    read_only: Option<bool>,
    timeout: Option<f64>,
    header: Option<Secret<String>>,
    ca: Option<std::path::PathBuf>,
    signing_key: Option<Secret<String>>,
}

impl RemoteEnv {
    fn read() -> anyhow::Result<RemoteEnv> {
        // A URL may carry a password: read as a secret, shown only through `redact`.
        let url = Var::get("SKYCTL_REMOTE_CACHE")
            .secret("a base URL (http:// or https://) or `off`")?
            .map(|u| u.expose().trim().to_string());
        Ok(RemoteEnv {
            url,
            read_only: Var::get("SKYCTL_REMOTE_CACHE_READ_ONLY").flag()?,
            timeout: Var::get("SKYCTL_REMOTE_CACHE_TIMEOUT").parse(
                "seconds between 0 and 3600",
                |t| {
                    t.parse::<f64>()
                        .ok()
                        .filter(|s| s.is_finite() && *s > 0.0 && *s <= 3600.0)
                },
            )?,
            header: Var::get("SKYCTL_REMOTE_CACHE_HEADER").secret(
                "a header line `Name: value` (for example `Authorization: Bearer TOKEN`)",
            )?,
            ca: Var::get("SKYCTL_REMOTE_CACHE_CA").path("a PEM file of CA certificates")?,
            signing_key: Var::get("SKYCTL_REMOTE_CACHE_SIGNING_KEY").secret(&format!(
                "a key of {} bytes or more",
                sky_remote::MIN_SIGNING_KEY
            ))?,
        })
    }
}

impl RemoteArgs {
    /// The remote cache these flags, the environment and `[cache]` name; `None` for none.
    pub fn open(&self, manifest: &Manifest) -> anyhow::Result<Option<RemoteCache>> {
        self.open_with(manifest.cache.remote.as_ref().map(|u| u.get_ref().as_str()))
    }

    /// The cache URL as given (flag, variable, then `[cache] remote`), credentials and all:
    /// for a job's environment only, never shown. `None` for none.
    pub fn url_with(&self, configured: Option<&str>) -> anyhow::Result<Option<Secret<String>>> {
        let env = RemoteEnv::read()?;
        Ok(self.pick_url(env.url, configured).map(Secret::new))
    }

    fn pick_url(&self, env_url: Option<String>, configured: Option<&str>) -> Option<String> {
        self.remote_cache
            .as_ref()
            .map(|u| u.expose().trim().to_string())
            .filter(|u| !u.is_empty())
            .or(env_url)
            .or_else(|| configured.map(str::to_string))
            .filter(|u| u.trim() != "off")
    }

    /// [`RemoteArgs::open`] with the URL `[cache] remote` gives (if any).
    pub fn open_with(&self, configured: Option<&str>) -> anyhow::Result<Option<RemoteCache>> {
        let env = RemoteEnv::read()?;
        let url = self
            .remote_cache
            .as_ref()
            .map(|u| u.expose().trim().to_string())
            .filter(|u| !u.is_empty())
            .or(env.url)
            .or_else(|| configured.map(str::to_string));
        // `off` (flag or variable) turns a configured cache off for this run.
        let Some(url) = url.filter(|u| u.trim() != "off") else {
            return Ok(None);
        };
        let mut config = RemoteConfig::new(&url).map_err(anyhow::Error::msg)?;
        config.read_only = self.remote_cache_read_only || env.read_only == Some(true);
        if let Some(secs) = env.timeout {
            config.timeout = Duration::from_secs_f64(secs);
        }
        if let Some(h) = &env.header {
            config = config.with_header(h).map_err(anyhow::Error::msg)?;
        }
        if let Some(file) = env.ca {
            let shown = file.display();
            let pem = sky_fs::read(&file, sky_fs::CA_BUNDLE).context("SKYCTL_REMOTE_CACHE_CA")?;
            config = config
                .with_ca_pem(&pem)
                .map_err(|e| anyhow::anyhow!("SKYCTL_REMOTE_CACHE_CA `{shown}`: {e}"))?;
        }
        if let Some(k) = env.signing_key {
            config = config
                .with_signing_key(k.map(String::into_bytes))
                .map_err(anyhow::Error::msg)?;
        }
        Ok(Some(config.open()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(clap::Parser, Debug)]
    struct Cli {
        #[command(flatten)]
        remote: RemoteArgs,
    }

    #[test]
    fn the_url_flag_is_never_shown_by_debug() {
        let cli = Cli::try_parse_from(["t", "--remote-cache", "https://u:hunter2@h/x"]).unwrap();
        let shown = format!("{cli:?}");
        assert!(
            !shown.contains("hunter2") && shown.contains("[redacted]"),
            "{shown}"
        );
        let url = cli
            .remote
            .remote_cache
            .as_ref()
            .map(|u| u.expose().as_str());
        assert_eq!(url, Some("https://u:hunter2@h/x"));
    }
}
