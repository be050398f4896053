//! sky-remote: the HTTP side of sky-dag's remote cache, kept out of the engine so that users
//! of sky-dag link no HTTP, TLS or crypto crate.
//!
//! [`RemoteConfig`] is what the user gives (a base URL, read-only, an auth header, a signing
//! key, a timeout, CA certificates); [`RemoteConfig::open`] turns it into a
//! [`sky_dag::remote::RemoteCache`] whose [`Transport`] is an HTTP client ([`http`], one
//! keep-alive `ureq` agent, made on the first request) and whose [`Signer`] is
//! [`HmacSigner`] (HMAC-SHA256). What a hit, a miss or a failure means for a build is decided
//! in sky-dag ([`sky_dag::remote`]), not here.
//!
//! ```
//! let config = sky_remote::RemoteConfig::new("https://cache.example/skyctl/").unwrap();
//! let cache = config.open();
//! assert_eq!(cache.shown_url(), "https://cache.example/skyctl");
//! ```

pub mod http;

use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
use sky_dag::key::Digest;
use sky_dag::remote::{Failure, Found, RemoteCache, RemoteSettings, Signer, Transport};

/// Default per-phase timeout (connect, send, first byte, each read and write).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a [`RemoteConfig`] setting was refused. The messages never hold a password, a header
/// value or a key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// The URL does not start with `http://` or `https://` (shown without credentials).
    #[error("remote cache URL `{0}` must start with http:// or https://")]
    Scheme(String),
    /// The URL has no host name.
    #[error("remote cache URL `{0}` has no host name")]
    NoHost(String),
    /// The URL has a query, a fragment or white space.
    #[error("remote cache URL `{0}` must be a plain base URL (no query, fragment or spaces)")]
    NotPlain(String),
    /// The header line is not `Name: value` with a valid name and a non-empty value.
    #[error(
        "SKYCTL_REMOTE_CACHE_HEADER must look like `Name: value` \
         (for example `Authorization: Bearer TOKEN`)"
    )]
    Header,
    /// The signing key is shorter than [`MIN_SIGNING_KEY`] bytes.
    #[error("SKYCTL_REMOTE_CACHE_SIGNING_KEY must be at least {MIN_SIGNING_KEY} bytes, not {0}")]
    ShortSigningKey(usize),
    /// The CA file is not PEM.
    #[error("not a PEM certificate file: {0}")]
    Pem(String),
    /// The CA file holds no certificate.
    #[error("no PEM certificate in it")]
    NoCertificate,
}

/// The shortest signing key accepted, in bytes.
pub const MIN_SIGNING_KEY: usize = 16;

/// How to reach the remote cache.
#[derive(Clone)]
pub struct RemoteConfig {
    /// Base URL, `http://` or `https://`, without a trailing slash.
    pub url: String,
    /// Never `PUT` (pull-request builds).
    pub read_only: bool,
    /// A header sent with every request (`Authorization: Bearer ...`); never shown.
    header: Option<(ureq::http::HeaderName, ureq::http::HeaderValue)>,
    /// Action records are signed with this and unsigned or badly signed ones ignored.
    signing_key: Option<Vec<u8>>,
    /// Per-phase timeout.
    pub timeout: Duration,
    /// For `https://`: trust these CA certificates instead of the built-in (Mozilla) roots.
    roots: Option<Vec<ureq::tls::Certificate<'static>>>,
}

impl std::fmt::Debug for RemoteConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteConfig")
            .field("url", &redact(&self.url))
            .field("read_only", &self.read_only)
            .field("header", &self.header.as_ref().map(|(n, _)| n.as_str()))
            .field("signed", &self.signing_key.is_some())
            .field("timeout", &self.timeout)
            .field("custom_roots", &self.roots.as_ref().map(Vec::len))
            .finish()
    }
}

impl RemoteConfig {
    /// Check a base URL: `http://` or `https://` with a host. `Err` is a message for the user.
    pub fn new(url: &str) -> Result<RemoteConfig, ConfigError> {
        let trimmed = url.trim().trim_end_matches('/');
        let rest = trimmed
            .strip_prefix("http://")
            .or_else(|| trimmed.strip_prefix("https://"))
            .ok_or_else(|| ConfigError::Scheme(redact(url)))?;
        let host = rest.split('/').next().unwrap_or("");
        let host = host.rsplit('@').next().unwrap_or("");
        if host.is_empty() || host.starts_with(':') {
            return Err(ConfigError::NoHost(redact(url)));
        }
        if trimmed.contains(['?', '#']) || trimmed.chars().any(|c| c.is_whitespace()) {
            return Err(ConfigError::NotPlain(redact(url)));
        }
        Ok(RemoteConfig {
            url: trimmed.to_string(),
            read_only: false,
            header: None,
            signing_key: None,
            timeout: DEFAULT_TIMEOUT,
            roots: None,
        })
    }

    /// Send `Name: value` with every request. `Err` (a message that never contains the
    /// value) when it is not a valid header line.
    pub fn with_header(mut self, line: &str) -> Result<RemoteConfig, ConfigError> {
        let bad = || ConfigError::Header;
        let (name, value) = line.split_once(':').ok_or_else(bad)?;
        let name = ureq::http::HeaderName::from_bytes(name.trim().as_bytes()).map_err(|_| bad())?;
        let mut value = ureq::http::HeaderValue::from_str(value.trim()).map_err(|_| bad())?;
        if value.is_empty() {
            return Err(bad());
        }
        value.set_sensitive(true);
        self.header = Some((name, value));
        Ok(self)
    }

    /// Sign action records with `key` and accept only records signed with it.
    pub fn with_signing_key(mut self, key: &[u8]) -> Result<RemoteConfig, ConfigError> {
        if key.len() < MIN_SIGNING_KEY {
            return Err(ConfigError::ShortSigningKey(key.len()));
        }
        self.signing_key = Some(key.to_vec());
        Ok(self)
    }

    /// Trust the CA certificates of this PEM text (for a cache behind a private CA).
    pub fn with_ca_pem(mut self, pem: &[u8]) -> Result<RemoteConfig, ConfigError> {
        let mut certs = Vec::new();
        for item in ureq::tls::parse_pem(pem) {
            match item {
                Ok(ureq::tls::PemItem::Certificate(c)) => certs.push(c),
                Ok(_) => {}
                Err(e) => return Err(ConfigError::Pem(e.to_string())),
            }
        }
        if certs.is_empty() {
            return Err(ConfigError::NoCertificate);
        }
        self.roots = Some(certs);
        Ok(self)
    }

    /// The URL as shown to people (no credentials).
    pub fn shown_url(&self) -> String {
        redact(&self.url)
    }

    /// The engine's cache over HTTP for this configuration (no request is sent, and no agent
    /// or TLS configuration is built, until it is used).
    pub fn open(self) -> RemoteCache {
        let settings = RemoteSettings {
            shown_url: self.shown_url(),
            read_only: self.read_only,
            signer: self
                .signing_key
                .clone()
                .map(|k| Arc::new(HmacSigner(k)) as Arc<dyn Signer>),
        };
        let transport = Lazy {
            config: self,
            client: OnceLock::new(),
        };
        RemoteCache::new(Arc::new(transport), settings)
    }
}

/// `scheme://user:pass@host/...` without the `user:pass@`.
fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let (authority, path) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    match authority.rsplit_once('@') {
        Some((_, host)) => format!("{scheme}://***@{host}{path}"),
        None => url.to_string(),
    }
}

/// The HTTP client, made on the first request: a no-op build never builds the agent or its
/// TLS configuration.
struct Lazy {
    config: RemoteConfig,
    client: OnceLock<http::Client>,
}

impl Lazy {
    fn client(&self) -> &http::Client {
        let c = &self.config;
        self.client.get_or_init(|| {
            http::Client::new(&c.url, c.header.clone(), c.timeout, c.roots.as_deref())
        })
    }
}

impl Transport for Lazy {
    fn head(&self, path: &str) -> Result<bool, Failure> {
        self.client().head(path)
    }
    fn get_small(&self, path: &str, limit: u64) -> Found<Vec<u8>> {
        self.client().get_small(path, limit)
    }
    fn get_blob(&self, path: &str, dest: &Path, want: &Digest, limit: u64) -> Found<u64> {
        self.client().get_blob(path, dest, want, limit)
    }
    fn put_file(&self, path: &str, file: &Path) -> Result<u64, Failure> {
        self.client().put_file(path, file)
    }
    fn put_bytes(&self, path: &str, bytes: &[u8]) -> Result<u64, Failure> {
        self.client().put_bytes(path, bytes)
    }
}

/// HMAC-SHA256 with the signing key. HMAC-SHA256 and not blake3's keyed mode: it is what other
/// caches (Turborepo) use for the same purpose, and anyone can check or produce a signature
/// with standard tools (`openssl dgst -sha256 -hmac`).
pub struct HmacSigner(Vec<u8>);

impl HmacSigner {
    fn mac(&self, message: &[u8]) -> Option<Hmac<Sha256>> {
        let mut m = <Hmac<Sha256> as KeyInit>::new_from_slice(&self.0).ok()?;
        m.update(message);
        Some(m)
    }
}

impl Signer for HmacSigner {
    fn sign(&self, message: &[u8]) -> Vec<u8> {
        self.mac(message)
            .map(|m| m.finalize().into_bytes().to_vec())
            .unwrap_or_default()
    }

    fn verify(&self, message: &[u8], tag: &[u8]) -> bool {
        // `verify_slice` compares in constant time.
        self.mac(message)
            .is_some_and(|m| m.verify_slice(tag).is_ok())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sky_dag::remote::record;
    use sky_dag::store::Store;

    #[test]
    fn urls_are_checked_and_shown_without_credentials() {
        let c = RemoteConfig::new("https://u:secret@cache.example/base/").unwrap();
        assert_eq!(c.url, "https://u:secret@cache.example/base");
        assert_eq!(c.shown_url(), "https://***@cache.example/base");
        assert!(!format!("{c:?}").contains("secret"));
        let scheme = RemoteConfig::new("ftp://u:secret@x").unwrap_err();
        assert_eq!(scheme, ConfigError::Scheme("ftp://***@x".into()));
        assert_eq!(
            scheme.to_string(),
            "remote cache URL `ftp://***@x` must start with http:// or https://"
        );
        assert_eq!(
            RemoteConfig::new("http:///x").unwrap_err().to_string(),
            "remote cache URL `http:///x` has no host name"
        );
        assert_eq!(
            RemoteConfig::new("http://h/x?y=1").unwrap_err(),
            ConfigError::NotPlain("http://h/x?y=1".into())
        );
        let cache = RemoteConfig::new("https://u:secret@cache.example/base/")
            .unwrap()
            .open();
        assert!(!format!("{cache:?}").contains("secret"));
        assert_eq!(cache.shown_url(), "https://***@cache.example/base");
    }

    #[test]
    fn the_header_is_checked_and_never_shown() {
        let c = RemoteConfig::new("http://h")
            .unwrap()
            .with_header("Authorization: Bearer hunter2")
            .unwrap();
        let shown = format!("{c:?}");
        assert!(
            shown.contains("authorization") && !shown.contains("hunter2"),
            "{shown}"
        );
        let e = RemoteConfig::new("http://h")
            .unwrap()
            .with_header("Bearer hunter2")
            .unwrap_err();
        assert_eq!(e, ConfigError::Header);
        let shown = e.to_string();
        assert!(shown.contains("`Name: value`"), "{shown}");
        for line in ["Bad Name: x", "Name:", "Name:  "] {
            let got = RemoteConfig::new("http://h").unwrap().with_header(line);
            assert_eq!(got.err(), Some(ConfigError::Header), "{line:?}");
        }
    }

    #[test]
    fn short_keys_and_files_without_certificates_are_refused() {
        let c = || RemoteConfig::new("http://h").unwrap();
        let e = c().with_signing_key(&[7; MIN_SIGNING_KEY - 1]).err();
        assert_eq!(e, Some(ConfigError::ShortSigningKey(MIN_SIGNING_KEY - 1)));
        assert_eq!(
            e.map(|e| e.to_string()).as_deref(),
            Some("SKYCTL_REMOTE_CACHE_SIGNING_KEY must be at least 16 bytes, not 15")
        );
        assert!(c().with_signing_key(&[7; MIN_SIGNING_KEY]).is_ok());
        assert_eq!(
            c().with_ca_pem(b"no certificate here\n").err(),
            Some(ConfigError::NoCertificate)
        );
        let broken = b"-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n";
        assert!(matches!(
            c().with_ca_pem(broken).err(),
            Some(ConfigError::Pem(_))
        ));
    }

    #[test]
    fn pinned_signature() {
        // The value Python's `hmac.new(b"key", msg, hashlib.sha256)` (or `openssl dgst -sha256
        // -hmac key`) gives for msg = "skyctl-action-v1\0" + 32 bytes of 7 + the JSON.
        let s = HmacSigner(b"key".to_vec());
        let msg = record::signed_message(&Digest([7; 32]), br#"{"a":1}"#);
        let tag = s.sign(&msg);
        assert_eq!(
            record::hex(&tag),
            "e453797bcc7ce47deb31b177cf022b09bd67aeede800041a6986652c81999159"
        );
        assert!(s.verify(&msg, &tag));
        assert!(!HmacSigner(b"other".to_vec()).verify(&msg, &tag));
    }

    #[test]
    fn an_unreachable_server_is_one_warning_and_a_miss() {
        // A port nothing listens on: bind, read the port, close.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .unwrap();
        let mut cfg = RemoteConfig::new(&format!("http://127.0.0.1:{port}")).unwrap();
        cfg.timeout = Duration::from_secs(2);
        let remote = cfg.open();
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        assert!(remote.fetch(&store, &Digest::of(b"k"), &[]).is_none());
        assert!(remote.fetch(&store, &Digest::of(b"k2"), &[]).is_none());
        let w = remote.take_warnings();
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].starts_with(&format!(
                "warning: remote cache http://127.0.0.1:{port}: GET ac/"
            )) && w[0].ends_with("; building without the remote cache"),
            "{w:?}"
        );
        let s = remote.stats();
        assert_eq!((s.requests, s.warnings, s.restored), (1, 1, 0));
    }
}
