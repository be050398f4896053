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
use sky_env::Secret;

/// Default per-phase timeout (connect, send, first byte, each read and write).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// The variables whose values are secrets (a URL may carry a password): never a node's
/// declared `env`, so they never enter a key, `explain` or a state file.
pub const SECRET_VARS: [&str; 3] = [
    "SKYCTL_REMOTE_CACHE",
    "SKYCTL_REMOTE_CACHE_HEADER",
    "SKYCTL_REMOTE_CACHE_SIGNING_KEY",
];

/// Headers that frame the request or the connection: never the auth header (one would
/// change how the server reads the request, not who sends it).
pub const FRAMING_HEADERS: [&str; 11] = [
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "proxy-connection",
    "upgrade",
    "te",
    "trailer",
    "expect",
    "content-type",
];

/// Why a [`RemoteConfig`] setting was refused. The messages never hold a password, a query,
/// a header value or a key: URLs are shown through [`redact`].
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
    /// An `@` after the first `/`: a password holding a `/` (base64 tokens do), or an `@` in
    /// the path. Either reading could be meant, so neither is guessed.
    #[error(
        "remote cache URL `{0}` has an `@` after a `/`: percent-encode a `/` in its password \
         as %2F (or an `@` in its path as %40)"
    )]
    Ambiguous(String),
    /// The header line is not `Name: value` with a valid name and a non-empty value.
    #[error(
        "SKYCTL_REMOTE_CACHE_HEADER must look like `Name: value` \
         (for example `Authorization: Bearer TOKEN`)"
    )]
    Header,
    /// The header is one that frames the request ([`FRAMING_HEADERS`]).
    #[error(
        "SKYCTL_REMOTE_CACHE_HEADER names `{0}`, which frames the request: it cannot be the \
         auth header (for example `Authorization: Bearer TOKEN`)"
    )]
    FramingHeader(String),
    /// The URL carries credentials and the header is `Authorization` too.
    #[error(
        "the remote cache URL carries credentials and SKYCTL_REMOTE_CACHE_HEADER is an \
         `Authorization` header: give only one of them"
    )]
    TwoAuthorizations,
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

/// A header sent with every request, its value a secret.
pub type SecretHeader = (ureq::http::HeaderName, Secret<ureq::http::HeaderValue>);

/// How to reach the remote cache.
#[derive(Clone)]
pub struct RemoteConfig {
    /// Base URL, `http://` or `https://`, without credentials and without a trailing slash.
    url: String,
    /// Never `PUT` (pull-request builds).
    pub read_only: bool,
    /// The URL's credentials (`user:password@`), as the `Authorization: Basic` header they
    /// stand for; never shown.
    credentials: Option<Secret<ureq::http::HeaderValue>>,
    /// A header sent with every request (`Authorization: Bearer ...`); never shown.
    header: Option<SecretHeader>,
    /// Action records are signed with this and unsigned or badly signed ones ignored.
    signing_key: Option<Secret<Vec<u8>>>,
    /// Per-phase timeout.
    pub timeout: Duration,
    /// For `https://`: trust these CA certificates instead of the built-in (Mozilla) roots.
    roots: Option<Vec<ureq::tls::Certificate<'static>>>,
}

impl std::fmt::Debug for RemoteConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteConfig")
            .field("url", &self.shown_url())
            .field("read_only", &self.read_only)
            .field("header", &self.header.as_ref().map(|(n, _)| n.as_str()))
            .field("signed", &self.signing_key.is_some())
            .field("timeout", &self.timeout)
            .field("custom_roots", &self.roots.as_ref().map(Vec::len))
            .finish()
    }
}

impl RemoteConfig {
    /// Check a base URL: `http://` or `https://` with a host, credentials (if any) parsed out
    /// of it. `Err` is a message for the user, showing the URL only through [`redact`].
    pub fn new(url: &str) -> Result<RemoteConfig, ConfigError> {
        let (base, userinfo) = parse_url(url)?;
        let credentials = userinfo.map(|u| {
            let value = format!("Basic {}", base64(&percent_decode(u.expose())));
            // Base64 text is always a valid header value.
            let mut value = ureq::http::HeaderValue::from_str(&value)
                .unwrap_or_else(|_| ureq::http::HeaderValue::from_static("Basic"));
            value.set_sensitive(true);
            Secret::new(value)
        });
        Ok(RemoteConfig {
            url: base,
            read_only: false,
            credentials,
            header: None,
            signing_key: None,
            timeout: DEFAULT_TIMEOUT,
            roots: None,
        })
    }

    /// The base URL requests go to (never with credentials).
    pub fn base_url(&self) -> &str {
        &self.url
    }

    /// Send `Name: value` with every request. `Err` (a message that never contains the
    /// value) when it is not a valid header line, or names a header that frames the request
    /// ([`FRAMING_HEADERS`]).
    pub fn with_header(mut self, line: &Secret<String>) -> Result<RemoteConfig, ConfigError> {
        let bad = || ConfigError::Header;
        let (name, value) = line.expose().split_once(':').ok_or_else(bad)?;
        let name = ureq::http::HeaderName::from_bytes(name.trim().as_bytes()).map_err(|_| bad())?;
        if FRAMING_HEADERS.contains(&name.as_str()) {
            return Err(ConfigError::FramingHeader(name.as_str().to_string()));
        }
        if name == ureq::http::header::AUTHORIZATION && self.credentials.is_some() {
            return Err(ConfigError::TwoAuthorizations);
        }
        let mut value = ureq::http::HeaderValue::from_str(value.trim()).map_err(|_| bad())?;
        if value.is_empty() {
            return Err(bad());
        }
        value.set_sensitive(true);
        self.header = Some((name, Secret::new(value)));
        Ok(self)
    }

    /// Sign action records with `key` and accept only records signed with it.
    pub fn with_signing_key(mut self, key: Secret<Vec<u8>>) -> Result<RemoteConfig, ConfigError> {
        if key.expose().len() < MIN_SIGNING_KEY {
            return Err(ConfigError::ShortSigningKey(key.expose().len()));
        }
        self.signing_key = Some(key);
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

    /// The URL as shown to people: `***@` where it had credentials.
    pub fn shown_url(&self) -> String {
        match (&self.credentials, self.url.split_once("://")) {
            (Some(_), Some((scheme, rest))) => format!("{scheme}://***@{rest}"),
            _ => self.url.clone(),
        }
    }

    /// The headers every request carries: the URL's credentials, then the auth header.
    fn headers(&self) -> Vec<SecretHeader> {
        let basic = self
            .credentials
            .clone()
            .map(|v| (ureq::http::header::AUTHORIZATION, v));
        basic.into_iter().chain(self.header.clone()).collect()
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

/// A URL as it may be shown, whatever it holds: everything between the scheme and the last
/// `@` (credentials, even ones holding a `/`, `?` or `#`) becomes `***`, and what follows a
/// `?` or `#` (a query token) becomes `***`. It hides too much rather than too little.
pub fn redact(url: &str) -> String {
    let (scheme, rest) = match url.find("://") {
        Some(i) => url.split_at(i + 3),
        None => ("", url),
    };
    let rest = match rest.rfind('@') {
        Some(i) => format!("***{}", &rest[i..]),
        None => rest.to_string(),
    };
    let rest = match rest.find(['?', '#']) {
        Some(i) => format!("{}***", &rest[..=i]),
        None => rest,
    };
    format!("{scheme}{rest}")
}

/// `scheme://[userinfo@]host[:port][/path]`, parsed as RFC 3986 reads it: the authority ends
/// at the first `/`, and the userinfo is what comes before its last `@`. An `@` after the
/// first `/` is refused ([`ConfigError::Ambiguous`]) rather than guessed at. Returns the base
/// URL without the userinfo (and without a trailing `/`), and the userinfo.
fn parse_url(url: &str) -> Result<(String, Option<Secret<String>>), ConfigError> {
    let trimmed = url.trim().trim_end_matches('/');
    let (scheme, rest) = ["http://", "https://"]
        .into_iter()
        .find_map(|s| trimmed.strip_prefix(s).map(|r| (s, r)))
        .ok_or_else(|| ConfigError::Scheme(redact(url)))?;
    if trimmed.contains(['?', '#']) || trimmed.chars().any(char::is_whitespace) {
        return Err(ConfigError::NotPlain(redact(url)));
    }
    let (authority, path) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    if path.contains('@') {
        return Err(ConfigError::Ambiguous(redact(url)));
    }
    let (userinfo, host) = match authority.rsplit_once('@') {
        Some((u, h)) => (Some(Secret::new(u.to_string())), h),
        None => (None, authority),
    };
    if host.is_empty() || host.starts_with(':') {
        return Err(ConfigError::NoHost(redact(url)));
    }
    Ok((format!("{scheme}{host}{path}"), userinfo))
}

/// `%XX` sequences decoded (a `%` not followed by two hex digits is kept as it is).
fn percent_decode(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let hex = |i: usize| b.get(i).and_then(|&c| (c as char).to_digit(16));
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            if let (Some(h), Some(l)) = (hex(i + 1), hex(i + 2)) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    out
}

/// Standard base64 with padding (RFC 4648), for `Authorization: Basic`.
fn base64(bytes: &[u8]) -> String {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let byte = |k: usize| u32::from(chunk.get(k).copied().unwrap_or(0));
        let v = (byte(0) << 16) | (byte(1) << 8) | byte(2);
        for k in 0..4 {
            if k <= chunk.len() {
                out.push(ABC[((v >> (18 - 6 * k)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
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
        self.client
            .get_or_init(|| http::Client::new(&c.url, c.headers(), c.timeout, c.roots.as_deref()))
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
pub struct HmacSigner(Secret<Vec<u8>>);

impl HmacSigner {
    fn mac(&self, message: &[u8]) -> Option<Hmac<Sha256>> {
        let mut m = <Hmac<Sha256> as KeyInit>::new_from_slice(self.0.expose()).ok()?;
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
        assert_eq!(c.base_url(), "https://cache.example/base");
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
        let cache = RemoteConfig::new("https://u:secret@cache.example/base/")
            .unwrap()
            .open();
        assert!(!format!("{cache:?}").contains("secret"));
        assert_eq!(cache.shown_url(), "https://***@cache.example/base");
    }

    /// Issue 32 class 4: a base64 password (`a/b+c==`) holds a `/`; the URL is refused, and
    /// no part of the password is shown.
    #[test]
    fn a_password_with_a_slash_is_never_shown() {
        for url in [
            "http://user:a/b+c==@cache.example:8080/skyctl",
            "https://:a/b+c==@cache.example/",
            "user:a/b+c==@cache.example/x",
        ] {
            let e = RemoteConfig::new(url).unwrap_err();
            let shown = e.to_string();
            assert!(!shown.contains("b+c") && !shown.contains("a/b"), "{shown}");
            assert!(!format!("{e:?}").contains("b+c"), "{e:?}");
            assert!(shown.contains("***@cache.example"), "{shown}");
        }
        assert!(matches!(
            RemoteConfig::new("http://user:a/b+c==@cache.example/skyctl"),
            Err(ConfigError::Ambiguous(_))
        ));
        // Percent-encoded, it is a password like any other: sent as Basic credentials.
        let c = RemoteConfig::new("http://user:a%2Fb+c==@cache.example/skyctl").unwrap();
        assert_eq!(c.base_url(), "http://cache.example/skyctl");
        assert_eq!(c.shown_url(), "http://***@cache.example/skyctl");
        let h = c.headers();
        assert_eq!(h.len(), 1);
        assert_eq!(h[0].0, ureq::http::header::AUTHORIZATION);
        assert_eq!(
            h[0].1.expose().to_str().unwrap(),
            format!("Basic {}", base64(b"user:a/b+c=="))
        );
        // The last `@` of the authority ends the userinfo.
        let c = RemoteConfig::new("http://me@corp:p@ss@cache.example/x").unwrap();
        assert_eq!(c.base_url(), "http://cache.example/x");
    }

    /// Issue 32 class 4: a query token is never echoed.
    #[test]
    fn a_query_token_is_never_shown() {
        for url in [
            "http://h/x?token=hunter2",
            "http://h/x#token=hunter2",
            "http://u:hunter2?x@h/x?token=hunter2",
        ] {
            let e = RemoteConfig::new(url).unwrap_err();
            assert!(!e.to_string().contains("hunter2"), "{e}");
        }
        assert_eq!(
            RemoteConfig::new("http://h/x?y=1").unwrap_err(),
            ConfigError::NotPlain("http://h/x?***".into())
        );
        assert_eq!(redact("https://h/p?a=1#f"), "https://h/p?***");
        assert_eq!(redact("http://h/p"), "http://h/p");
    }

    #[test]
    fn base64_and_percent_decoding() {
        assert_eq!(base64(b"martin:secret"), "bWFydGluOnNlY3JldA==");
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(&[0xfb, 0xff]), "+/8=");
        assert_eq!(percent_decode("a%2Fb%40%zz%4"), b"a/b@%zz%4");
    }

    fn secret(s: &str) -> Secret<String> {
        Secret::new(s.to_string())
    }

    #[test]
    fn the_header_is_checked_and_never_shown() {
        let c = RemoteConfig::new("http://h")
            .unwrap()
            .with_header(&secret("Authorization: Bearer hunter2"))
            .unwrap();
        let shown = format!("{c:?}");
        assert!(
            shown.contains("authorization") && !shown.contains("hunter2"),
            "{shown}"
        );
        let e = RemoteConfig::new("http://h")
            .unwrap()
            .with_header(&secret("Bearer hunter2"))
            .unwrap_err();
        assert_eq!(e, ConfigError::Header);
        let shown = e.to_string();
        assert!(shown.contains("`Name: value`"), "{shown}");
        for line in ["Bad Name: x", "Name:", "Name:  "] {
            let got = RemoteConfig::new("http://h")
                .unwrap()
                .with_header(&secret(line));
            assert_eq!(got.err(), Some(ConfigError::Header), "{line:?}");
        }
    }

    /// Issue 32 class 4: a header that frames the request is never the auth header.
    #[test]
    fn framing_headers_are_refused() {
        for line in [
            "Host: evil.example",
            "Content-Length: 0",
            "Transfer-Encoding: chunked",
            "connection: close",
            "Upgrade: h2c",
            "TE: trailers",
        ] {
            let e = RemoteConfig::new("http://h")
                .unwrap()
                .with_header(&secret(line))
                .unwrap_err();
            assert!(matches!(e, ConfigError::FramingHeader(_)), "{line}: {e}");
            assert!(e.to_string().contains("frames the request"), "{e}");
        }
        let e = RemoteConfig::new("http://u:p@h")
            .unwrap()
            .with_header(&secret("Authorization: Bearer x"))
            .unwrap_err();
        assert_eq!(e, ConfigError::TwoAuthorizations);
        assert!(RemoteConfig::new("http://h")
            .unwrap()
            .with_header(&secret("X-Cache-Token: x"))
            .is_ok());
    }

    #[test]
    fn short_keys_and_files_without_certificates_are_refused() {
        let c = || RemoteConfig::new("http://h").unwrap();
        let key = |n: usize| Secret::new(vec![7; n]);
        let e = c().with_signing_key(key(MIN_SIGNING_KEY - 1)).err();
        assert_eq!(e, Some(ConfigError::ShortSigningKey(MIN_SIGNING_KEY - 1)));
        assert_eq!(
            e.map(|e| e.to_string()).as_deref(),
            Some("SKYCTL_REMOTE_CACHE_SIGNING_KEY must be at least 16 bytes, not 15")
        );
        assert!(c().with_signing_key(key(MIN_SIGNING_KEY)).is_ok());
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
        let s = HmacSigner(Secret::new(b"key".to_vec()));
        let msg = record::signed_message(&Digest([7; 32]), br#"{"a":1}"#);
        let tag = s.sign(&msg);
        assert_eq!(
            record::hex(&tag),
            "e453797bcc7ce47deb31b177cf022b09bd67aeede800041a6986652c81999159"
        );
        assert!(s.verify(&msg, &tag));
        assert!(!HmacSigner(Secret::new(b"other".to_vec())).verify(&msg, &tag));
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
