//! The HTTP calls of the remote cache: `GET`, `HEAD` and `PUT` on `<base>/cas/<digest>` and
//! `<base>/ac/<key>`, through one keep-alive [`ureq::Agent`].
//!
//! Every answer other than 2xx or 404 is a [`Failure::Status`]; a refused connection, a
//! timeout or a broken body is a [`Failure::Transport`]. Nothing here prints or decides what a
//! failure means for the build: that is [`sky_dag::remote::RemoteCache`]'s job. The auth
//! header is sent with every request and never appears in an error (ureq's errors name no
//! header).

use std::io::{Read, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use ureq::http::{HeaderName, HeaderValue};

use sky_dag::key::Digest;
use sky_dag::remote::{Failure, Found, Transport};
use sky_env::Secret;

/// The slowest transfer rate accepted, in bytes per second: a transfer of `n` bytes may take
/// the timeout plus `n / MIN_RATE` seconds in all ([`Client::budget`]), so a server that
/// answers and then trickles (one byte a second, each read within the per-read timeout) is cut
/// off instead of stalling the build.
pub const MIN_RATE: u64 = 1 << 20;

/// One keep-alive client for one base URL.
pub struct Client {
    agent: ureq::Agent,
    base: String,
    /// Sent with every request (the auth header, the URL's credentials); never shown.
    headers: Vec<(HeaderName, Secret<HeaderValue>)>,
    timeout: Duration,
}

impl Client {
    /// A client for `base` (no trailing slash) with per-phase timeouts of `timeout`; `roots`
    /// replace the built-in CA roots for `https://`.
    pub fn new(
        base: &str,
        headers: Vec<(HeaderName, Secret<HeaderValue>)>,
        timeout: Duration,
        roots: Option<&[ureq::tls::Certificate<'static>]>,
    ) -> Self {
        let mut tls = ureq::tls::TlsConfig::builder();
        if let Some(certs) = roots {
            tls = tls.root_certs(ureq::tls::RootCerts::new_with_certs(certs));
        }
        let config = ureq::Agent::config_builder()
            .tls_config(tls.build())
            .http_status_as_error(false)
            // A redirect could carry the auth header to another host: not followed.
            .max_redirects(0)
            .timeout_connect(Some(timeout))
            .timeout_resolve(Some(timeout))
            .timeout_send_request(Some(timeout))
            .timeout_recv_response(Some(timeout))
            .timeout_per_read(Some(timeout))
            .timeout_per_write(Some(timeout))
            .max_idle_connections_per_host(8)
            .user_agent(concat!("skyctl/", env!("CARGO_PKG_VERSION")))
            .build();
        Client {
            agent: ureq::Agent::new_with_config(config),
            base: base.to_string(),
            headers,
            timeout,
        }
    }

    /// The most a whole exchange moving `bytes` bytes may take: the timeout plus `bytes` at
    /// [`MIN_RATE`].
    pub fn budget(&self, bytes: u64) -> Duration {
        self.timeout + Duration::from_secs_f64(bytes as f64 / MIN_RATE as f64)
    }

    /// A request whose whole exchange (connect, send, answer, body) is bounded by
    /// [`Client::budget`] of `bytes`.
    fn bounded<B>(&self, req: ureq::RequestBuilder<B>, bytes: u64) -> ureq::RequestBuilder<B> {
        self.with_header(req)
            .config()
            .timeout_global(Some(self.budget(bytes)))
            .build()
    }

    fn url(&self, path: &str) -> String {
        format!("{}/{path}", self.base)
    }

    fn with_header<B>(&self, mut req: ureq::RequestBuilder<B>) -> ureq::RequestBuilder<B> {
        for (name, value) in &self.headers {
            req = req.header(name.clone(), value.expose().clone());
        }
        req
    }

    /// `GET` `path`: the response when the server has it (None on 404), refused when it
    /// announces more than `limit` bytes.
    fn get(&self, path: &str, limit: u64) -> Found<ureq::http::Response<ureq::Body>> {
        let resp = self
            .bounded(self.agent.get(self.url(path)), limit)
            .call()
            .map_err(transport)?;
        let Some(resp) = status(resp)? else {
            return Ok(None);
        };
        if resp.body().content_length().is_some_and(|n| n > limit) {
            return Err(Failure::Content(format!("larger than {limit} bytes")));
        }
        Ok(Some(resp))
    }
}

impl Transport for Client {
    /// `GET` a small object (an action record) into memory, at most `limit` bytes.
    fn get_small(&self, path: &str, limit: u64) -> Found<Vec<u8>> {
        let Some(mut resp) = self.get(path, limit)? else {
            return Ok(None);
        };
        let mut reader = resp.body_mut().with_config().limit(limit).reader();
        let mut body = Vec::new();
        let mut buf = [0u8; 8192];
        loop {
            let n = read_some(&mut reader, &mut buf, limit, || {
                Failure::Transport("timed out".into())
            })?;
            if n == 0 {
                break;
            }
            body.extend_from_slice(&buf[..n]);
        }
        Ok(Some(body))
    }

    /// `GET` a blob into the new file `dest`, hashing as it streams (bounded memory); the
    /// content must hash to `want` and be no larger than `limit` bytes. Returns the size.
    /// `dest` is left behind on error: the caller removes it.
    fn get_blob(&self, path: &str, dest: &Path, want: &Digest, limit: u64) -> Found<u64> {
        let start = Instant::now();
        let Some(mut resp) = self.get(path, limit)? else {
            return Ok(None);
        };
        // The whole body within the budget of its announced size (ureq's global timeout,
        // set from `limit`, is the backstop; this is the tighter bound when the size is known).
        let size = resp.body().content_length().unwrap_or(limit);
        let budget = self.budget(size);
        let mut reader = resp.body_mut().with_config().limit(limit).reader();
        let mut out = std::fs::File::create(dest)
            .map_err(|e| Failure::Transport(format!("cannot create a temp file: {e}")))?;
        let mut hasher = blake3::Hasher::new();
        let mut buf = vec![0u8; 256 * 1024];
        let mut total = 0u64;
        loop {
            let n = read_some(&mut reader, &mut buf, limit, || {
                Failure::Transport(too_slow(total, size, budget))
            })?;
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
            out.write_all(&buf[..n])
                .map_err(|e| Failure::Transport(format!("cannot write a temp file: {e}")))?;
            total += n as u64;
            if start.elapsed() > budget {
                return Err(Failure::Transport(too_slow(total, size, budget)));
            }
        }
        let got = Digest(*hasher.finalize().as_bytes());
        if got != *want {
            return Err(Failure::Content(format!(
                "content does not match its digest (hashes to {})",
                got.short()
            )));
        }
        Ok(Some(total))
    }

    /// `HEAD`: whether the server has `path`.
    fn head(&self, path: &str) -> Result<bool, Failure> {
        let resp = self
            .bounded(self.agent.head(self.url(path)), 0)
            .call()
            .map_err(transport)?;
        Ok(status(resp)?.is_some())
    }

    /// `PUT` a file (streamed, with its length).
    fn put_file(&self, path: &str, file: &Path) -> Result<u64, Failure> {
        let f = sky_fs::open(file, sky_fs::CONTENT)
            .map_err(|e| Failure::Transport(format!("cannot read {e}")))?;
        let len = f.metadata().map(|m| m.len()).unwrap_or(0);
        let resp = self
            .bounded(self.agent.put(self.url(path)), len)
            .send(f)
            .map_err(transport)?;
        put_status(resp)?;
        Ok(len)
    }

    /// `PUT` bytes.
    fn put_bytes(&self, path: &str, bytes: &[u8]) -> Result<u64, Failure> {
        let resp = self
            .bounded(self.agent.put(self.url(path)), bytes.len() as u64)
            .send(bytes)
            .map_err(transport)?;
        put_status(resp)?;
        Ok(bytes.len() as u64)
    }
}

/// 2xx: the response; 404: `None`; anything else: a failure.
fn status(
    resp: ureq::http::Response<ureq::Body>,
) -> Result<Option<ureq::http::Response<ureq::Body>>, Failure> {
    let s = resp.status().as_u16();
    match s {
        200..=299 => Ok(Some(resp)),
        404 => Ok(None),
        _ => Err(Failure::Status(s)),
    }
}

fn put_status(resp: ureq::http::Response<ureq::Body>) -> Result<(), Failure> {
    let s = resp.status().as_u16();
    if (200..=299).contains(&s) {
        Ok(())
    } else {
        Err(Failure::Status(s))
    }
}

/// The message for a transfer cut off for being slower than [`MIN_RATE`].
fn too_slow(got: u64, size: u64, budget: Duration) -> String {
    format!(
        "timed out: {got} of {size} bytes in {:.0} s (a transfer may take the timeout plus 1 s per MiB)",
        budget.as_secs_f64()
    )
}

fn transport(e: ureq::Error) -> Failure {
    Failure::Transport(match e {
        ureq::Error::Timeout(_) => "timed out".to_string(),
        ureq::Error::HostNotFound => "host not found".to_string(),
        ureq::Error::ConnectionFailed => "connection failed".to_string(),
        ureq::Error::Io(e) => e.to_string(),
        e => e.to_string(),
    })
}

/// One read of a response body: the bytes read (0 at the end), or why the transfer ends: a
/// body over `limit`, a timeout (`timed_out` words it), a broken connection, or a build told
/// to stop (SIGINT, SIGTERM; asked before every read, so a trickling server cannot hold a
/// stopping build for longer than one read).
fn read_some(
    reader: &mut impl Read,
    buf: &mut [u8],
    limit: u64,
    timed_out: impl Fn() -> Failure,
) -> Result<usize, Failure> {
    loop {
        if let Some(sig) = sky_dag::interrupt::requested() {
            return Err(Failure::Transport(format!("interrupted by signal {sig}")));
        }
        return match reader.read(buf) {
            Ok(n) => Ok(n),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                // The body reader reports ureq's errors wrapped in an io::Error.
                let inner = e.get_ref().and_then(|i| i.downcast_ref::<ureq::Error>());
                if let Some(ureq::Error::BodyExceedsLimit(_)) = inner {
                    return Err(Failure::Content(format!("larger than {limit} bytes")));
                }
                if let Some(ureq::Error::Timeout(_)) = inner {
                    return Err(timed_out());
                }
                Err(Failure::Transport(e.to_string()))
            }
        };
    }
}
