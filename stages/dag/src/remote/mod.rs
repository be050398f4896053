//! A shared remote cache in the Bazel HTTP remote-cache layout: `<base>/cas/<blake3 hex>` for
//! content (output blobs, tree listings, captured logs) and `<base>/ac/<key hex>` for action
//! records ([`record`] has their format and signature). Any server that stores what is `PUT`
//! and serves it back works: nginx with WebDAV, bazel-remote, a bucket behind a proxy.
//!
//! # Semantics
//!
//! - A node whose key misses locally asks the remote ([`RemoteCache::fetch`], on a worker
//!   thread): the action record first, then every blob it names, each streamed to a temp file
//!   in the store's tmp dir, verified against its digest and only then placed in the store;
//!   then the record goes into the local action log and the node is materialized like a local
//!   hit. The record must name exactly the node's declared outputs (paths come from the
//!   network: nothing else is ever written).
//! - After a node runs, [`RemoteCache::upload`] queues its result for a small pool of upload
//!   threads (a bounded queue; the build goes on): each blob is `HEAD`ed and `PUT` when the
//!   server lacks it, and the action record goes last, so no reader sees a record whose blobs
//!   are missing. [`RemoteCache::finish`] waits for the queue at the end of the build.
//! - The cache never fails a build. A 404 is a miss. A read that fails (no connection,
//!   timeout, a status other than 2xx/404) costs one warning and turns the remote off for the
//!   rest of the build; a failed write costs one warning and turns writes off, reads go on. A
//!   body whose digest does not match, or a record that does not check, is one warning for
//!   that object and a miss; its blob is re-uploaded (overwritten) when the node has run.
//! - Nothing is sent for a node that is a local hit, so a no-op build sends no request.
//!
//! The auth header and the signing key are never printed, logged or part of a key; the URL is
//! shown without any `user:password@`.

mod http;
pub mod record;

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use serde::Serialize;

use crate::key::Digest;
use crate::store::{ActionRecord, OutputRecord, Store};

use http::{Client, Failure};

/// Upload threads: enough to hide one round trip per blob, few enough for a small server.
const UPLOAD_THREADS: usize = 4;
/// Queued uploads (each a record and its digests: small) before a worker waits.
const UPLOAD_QUEUE: usize = 256;
/// The largest captured log taken from the remote (its size is not in the record).
const MAX_LOG_BLOB: u64 = 256 << 20;
/// The largest tree listing taken from the remote (it is read into memory to be checked; at
/// about 100 bytes an entry, this is some 600,000 files).
const MAX_TREE_BLOB: u64 = 64 << 20;
/// Default per-phase timeout (connect, send, first byte, each read and write).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

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
    pub fn new(url: &str) -> Result<RemoteConfig, String> {
        let trimmed = url.trim().trim_end_matches('/');
        let rest = trimmed
            .strip_prefix("http://")
            .or_else(|| trimmed.strip_prefix("https://"))
            .ok_or_else(|| {
                format!(
                    "remote cache URL `{}` must start with http:// or https://",
                    redact(url)
                )
            })?;
        let host = rest.split('/').next().unwrap_or("");
        let host = host.rsplit('@').next().unwrap_or("");
        if host.is_empty() || host.starts_with(':') {
            return Err(format!(
                "remote cache URL `{}` has no host name",
                redact(url)
            ));
        }
        if trimmed.contains(['?', '#']) || trimmed.chars().any(|c| c.is_whitespace()) {
            return Err(format!(
                "remote cache URL `{}` must be a plain base URL (no query, fragment or spaces)",
                redact(url)
            ));
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
    pub fn with_header(mut self, line: &str) -> Result<RemoteConfig, String> {
        let bad = || {
            "SKYCTL_REMOTE_CACHE_HEADER must look like `Name: value` \
             (for example `Authorization: Bearer TOKEN`)"
                .to_string()
        };
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
    pub fn with_signing_key(mut self, key: &[u8]) -> Result<RemoteConfig, String> {
        if key.len() < 16 {
            return Err("SKYCTL_REMOTE_CACHE_SIGNING_KEY must be at least 16 bytes".into());
        }
        self.signing_key = Some(key.to_vec());
        Ok(self)
    }

    /// Trust the CA certificates of this PEM text (for a cache behind a private CA).
    pub fn with_ca_pem(mut self, pem: &[u8]) -> Result<RemoteConfig, String> {
        let mut certs = Vec::new();
        for item in ureq::tls::parse_pem(pem) {
            match item {
                Ok(ureq::tls::PemItem::Certificate(c)) => certs.push(c),
                Ok(_) => {}
                Err(e) => return Err(format!("not a PEM certificate file: {e}")),
            }
        }
        if certs.is_empty() {
            return Err("no PEM certificate in it".into());
        }
        self.roots = Some(certs);
        Ok(self)
    }

    /// The URL as shown to people (no credentials).
    pub fn shown_url(&self) -> String {
        redact(&self.url)
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

/// What the remote cache did in one build (the `remote` object of the summary).
#[derive(Debug, Default, Clone, Serialize, PartialEq, Eq)]
pub struct RemoteStats {
    /// Nodes whose result came from the remote.
    pub restored: usize,
    /// Action records uploaded.
    pub uploaded: usize,
    /// Bytes downloaded (blobs and records).
    pub bytes_downloaded: u64,
    /// Bytes uploaded (blobs and records).
    pub bytes_uploaded: u64,
    /// HTTP requests sent.
    pub requests: u64,
    /// Warnings (each also reported as a note).
    pub warnings: usize,
}

impl RemoteStats {
    /// What happened after `before` was taken.
    pub fn since(&self, before: &RemoteStats) -> RemoteStats {
        RemoteStats {
            restored: self.restored.saturating_sub(before.restored),
            uploaded: self.uploaded.saturating_sub(before.uploaded),
            bytes_downloaded: self
                .bytes_downloaded
                .saturating_sub(before.bytes_downloaded),
            bytes_uploaded: self.bytes_uploaded.saturating_sub(before.bytes_uploaded),
            requests: self.requests.saturating_sub(before.requests),
            warnings: self.warnings.saturating_sub(before.warnings),
        }
    }
}

/// A handle on the remote cache, shared by the coordinator, workers and upload threads.
#[derive(Clone)]
pub struct RemoteCache {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for RemoteCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.inner.config.fmt(f)
    }
}

struct Inner {
    config: RemoteConfig,
    /// Made on the first request: a no-op build never builds the agent or its TLS config.
    client: std::sync::OnceLock<Client>,
    /// Reads still on (off after a failed read).
    reads: AtomicBool,
    /// Writes still on (off in read-only mode and after a failed write or read).
    writes: AtomicBool,
    restored: AtomicU64,
    uploaded: AtomicU64,
    down: AtomicU64,
    up: AtomicU64,
    requests: AtomicU64,
    warned: AtomicU64,
    /// A record without a valid signature was reported (the others are not).
    sig_warned: AtomicBool,
    /// Warning lines not yet reported.
    pending: Mutex<Vec<String>>,
    /// Blobs found corrupted on the server in this build: uploaded again even if present.
    corrupt: Mutex<HashSet<Digest>>,
    uploads: Mutex<Option<Pool>>,
}

struct Pool {
    tx: SyncSender<Upload>,
    threads: Vec<JoinHandle<()>>,
}

struct Upload {
    store: Store,
    key: Digest,
    record: ActionRecord,
}

impl RemoteCache {
    /// A cache client for `config` (no request is sent until it is used).
    pub fn new(config: RemoteConfig) -> RemoteCache {
        let writes = !config.read_only;
        RemoteCache {
            inner: Arc::new(Inner {
                config,
                client: std::sync::OnceLock::new(),
                reads: AtomicBool::new(true),
                writes: AtomicBool::new(writes),
                restored: AtomicU64::new(0),
                uploaded: AtomicU64::new(0),
                down: AtomicU64::new(0),
                up: AtomicU64::new(0),
                requests: AtomicU64::new(0),
                warned: AtomicU64::new(0),
                sig_warned: AtomicBool::new(false),
                pending: Mutex::new(Vec::new()),
                corrupt: Mutex::new(HashSet::new()),
                uploads: Mutex::new(None),
            }),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &RemoteConfig {
        &self.inner.config
    }

    /// Counts so far.
    pub fn stats(&self) -> RemoteStats {
        let i = &self.inner;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        RemoteStats {
            restored: get(&i.restored) as usize,
            uploaded: get(&i.uploaded) as usize,
            bytes_downloaded: get(&i.down),
            bytes_uploaded: get(&i.up),
            requests: get(&i.requests),
            warnings: get(&i.warned) as usize,
        }
    }

    /// Warning lines not reported yet (the coordinator turns them into notes).
    pub fn take_warnings(&self) -> Vec<String> {
        std::mem::take(&mut *lock(&self.inner.pending))
    }

    fn warn(&self, message: String) {
        self.inner.warned.fetch_add(1, Ordering::Relaxed);
        lock(&self.inner.pending).push(format!(
            "warning: remote cache {}: {message}",
            self.inner.config.shown_url()
        ));
    }

    fn reading(&self) -> bool {
        self.inner.reads.load(Ordering::Relaxed)
    }

    /// Whether a fetch may be tried now.
    pub fn readable(&self) -> bool {
        self.reading()
    }

    fn writing(&self) -> bool {
        self.inner.writes.load(Ordering::Relaxed)
    }

    /// A failed read: one warning, then no more requests at all in this build.
    fn read_failed(&self, what: &str, f: &Failure) {
        self.inner.writes.store(false, Ordering::Relaxed);
        if self.inner.reads.swap(false, Ordering::Relaxed) {
            self.warn(format!(
                "{what}: {}; building without the remote cache",
                describe(f)
            ));
        }
    }

    /// A failed write: one warning, then no more writes (reads go on).
    fn write_failed(&self, what: &str, f: &Failure) {
        if self.inner.writes.swap(false, Ordering::Relaxed) {
            self.warn(format!(
                "{what}: {}; not uploading to it for the rest of this build",
                describe(f)
            ));
        }
    }

    fn client(&self) -> &Client {
        let c = &self.inner.config;
        self.inner
            .client
            .get_or_init(|| Client::new(&c.url, c.header.clone(), c.timeout, c.roots.as_deref()))
    }

    fn count(&self) {
        self.inner.requests.fetch_add(1, Ordering::Relaxed);
    }

    /// Whether the remote has an action record for `key` (`HEAD ac/<key>`); `false` on any
    /// failure (with a warning). For `status` and dry runs.
    pub fn has_action(&self, key: &Digest) -> bool {
        if !self.reading() {
            return false;
        }
        self.count();
        let path = format!("ac/{}", key.hex());
        match self.client().head(&path) {
            Ok(found) => found,
            Err(f) => {
                self.read_failed(&format!("HEAD {path}"), &f);
                false
            }
        }
    }

    /// Try to get the result of `key` from the remote into `store`: the action record, then
    /// every blob it needs, each verified before it is placed, then the record into the local
    /// action log. `declared` are the node's outputs (path, is a directory), which the record
    /// must match exactly. `None` is a miss (with a warning when something was wrong).
    pub fn fetch(
        &self,
        store: &Store,
        key: &Digest,
        declared: &[(&str, bool)],
    ) -> Option<ActionRecord> {
        if !self.reading() {
            return None;
        }
        let path = format!("ac/{}", key.hex());
        self.count();
        let body = match self.client().get_small(&path, record::MAX_RECORD_BYTES) {
            Ok(Some(b)) => b,
            Ok(None) => return None,
            Err(Failure::Content(m)) => {
                self.warn(format!("{path}: {m}; ignored"));
                return None;
            }
            Err(f) => {
                self.read_failed(&format!("GET {path}"), &f);
                return None;
            }
        };
        self.inner
            .down
            .fetch_add(body.len() as u64, Ordering::Relaxed);
        let mut rec = match record::decode(key, &body, self.inner.config.signing_key.as_deref()) {
            Ok(r) => r,
            Err(m) => {
                // Signature problems come in batches (another team's key, an unsigned
                // cache): one warning for all of them.
                let sig = m.contains("sign");
                if !sig || !self.inner.sig_warned.swap(true, Ordering::Relaxed) {
                    self.warn(format!("{path}: {m}; ignored"));
                }
                return None;
            }
        };
        let matches = rec.outputs.len() == declared.len()
            && rec
                .outputs
                .iter()
                .zip(declared)
                .all(|(o, (p, dir))| o.path == *p && o.dir == *dir);
        if !matches {
            self.warn(format!(
                "{path}: the record's outputs are not the node's declared outputs; ignored"
            ));
            return None;
        }
        for o in &rec.outputs {
            if !self.fetch_output(store, o) {
                return None;
            }
        }
        if let Some(log) = rec.log {
            // The log is only for reading failures: a record without it is still a hit.
            if !store.has_blob(&log) && !self.fetch_blob(store, &log, false, Some(MAX_LOG_BLOB)) {
                if !self.reading() {
                    return None;
                }
                rec.log = None;
            }
        }
        if let Err(e) = store.put_action(key, &rec) {
            self.note_unusable(&rec.node, &format!("recording it locally: {e}"));
            return None;
        }
        Some(rec)
    }

    /// A hit for `node` that could not be used locally (`what` failed): it runs instead.
    pub fn note_unusable(&self, node: &str, what: &str) {
        self.warn(format!("node `{node}`: {what}; it runs here instead"));
    }

    /// A fetched result was materialized in the workspace (counted as restored).
    pub fn note_restored(&self) {
        self.inner.restored.fetch_add(1, Ordering::Relaxed);
    }

    /// The blobs of one output (a file, or a tree listing and its files).
    fn fetch_output(&self, store: &Store, o: &OutputRecord) -> bool {
        if !o.dir {
            return store.has_blob(&o.digest)
                || self.fetch_blob(store, &o.digest, o.exec, Some(o.size));
        }
        if !store.has_blob(&o.digest)
            && !self.fetch_blob(store, &o.digest, false, Some(MAX_TREE_BLOB))
        {
            return false;
        }
        let Ok(tree) = store.get_tree(&o.digest) else {
            self.warn(format!(
                "cas/{}: not a tree listing; ignored",
                o.digest.hex()
            ));
            return false;
        };
        tree.entries.iter().all(|e| {
            store.has_blob(&e.digest) || self.fetch_blob(store, &e.digest, e.exec, Some(e.size))
        })
    }

    /// `GET cas/<d>` into the store's tmp dir, verify, place. `limit`: the most bytes read
    /// (the expected size of an output file, a bound for listings and logs).
    fn fetch_blob(&self, store: &Store, d: &Digest, exec: bool, limit: Option<u64>) -> bool {
        if !self.reading() {
            return false;
        }
        let path = format!("cas/{}", d.hex());
        let tmp = store.incoming_path();
        self.count();
        let res = self
            .client()
            .get_blob(&path, &tmp, d, limit.unwrap_or(MAX_LOG_BLOB));
        let ok = match res {
            Ok(Some(n)) => {
                self.inner.down.fetch_add(n, Ordering::Relaxed);
                match store.adopt_verified(&tmp, d, exec) {
                    Ok(()) => return true,
                    Err(e) => {
                        self.warn(format!("{path}: {e}; ignored"));
                        false
                    }
                }
            }
            Ok(None) => {
                self.warn(format!(
                    "{path} is missing although a record names it; ignored"
                ));
                false
            }
            Err(Failure::Content(m)) => {
                lock(&self.inner.corrupt).insert(*d);
                self.warn(format!("{path}: {m}; ignored"));
                false
            }
            Err(f) => {
                self.read_failed(&format!("GET {path}"), &f);
                false
            }
        };
        let _ = std::fs::remove_file(&tmp);
        ok
    }

    /// Queue the result of a node that ran for upload (a no-op when writes are off).
    pub fn upload(&self, store: &Store, key: Digest, record: ActionRecord) {
        if !self.writing() {
            return;
        }
        let tx = {
            let mut pool = lock(&self.inner.uploads);
            let pool = pool.get_or_insert_with(|| self.spawn_pool());
            pool.tx.clone()
        };
        // Blocks only when the queue is full: back-pressure on a slow server, bounded by its
        // timeouts (a timed-out write turns writes off and the queue drains at once).
        let _ = tx.send(Upload {
            store: store.clone(),
            key,
            record,
        });
    }

    fn spawn_pool(&self) -> Pool {
        let (tx, rx) = sync_channel::<Upload>(UPLOAD_QUEUE);
        let rx = Arc::new(Mutex::new(rx));
        let threads = (0..UPLOAD_THREADS)
            .filter_map(|i| {
                let rx = rx.clone();
                let me = self.clone();
                std::thread::Builder::new()
                    .name(format!("skyctl-upload-{i}"))
                    .spawn(move || loop {
                        let job = lock(&rx).recv();
                        match job {
                            Ok(u) => me.upload_now(&u),
                            Err(_) => break,
                        }
                    })
                    .ok()
            })
            .collect();
        Pool { tx, threads }
    }

    /// Upload the local results of `keys` (those with an action record in `store`), as after
    /// a run: for results that were already in the local store when the remote was added.
    /// Returns how many were queued; waits for them.
    pub fn push(&self, store: &Store, keys: impl IntoIterator<Item = Digest>) -> usize {
        let mut queued = 0;
        for key in keys {
            if let Some(rec) = store.get_action(&key) {
                self.upload(store, key, rec);
                queued += 1;
            }
        }
        self.finish();
        queued
    }

    /// Wait until every queued upload is done (each bounded by the timeouts).
    pub fn finish(&self) {
        let pool = lock(&self.inner.uploads).take();
        if let Some(Pool { tx, threads }) = pool {
            drop(tx);
            for t in threads {
                let _ = t.join();
            }
        }
    }

    /// Blobs first (`HEAD`, then `PUT` when missing), the action record last.
    fn upload_now(&self, u: &Upload) {
        let mut blobs: Vec<Digest> = Vec::new();
        for o in &u.record.outputs {
            blobs.push(o.digest);
            if o.dir {
                match u.store.get_tree(&o.digest) {
                    Ok(t) => blobs.extend(t.entries.iter().map(|e| e.digest)),
                    Err(_) => return,
                }
            }
        }
        blobs.extend(u.record.log);
        let mut seen = HashSet::new();
        for d in blobs {
            if !seen.insert(d) {
                continue;
            }
            if !self.writing() {
                return;
            }
            let path = format!("cas/{}", d.hex());
            let redo = lock(&self.inner.corrupt).contains(&d);
            if !redo {
                self.count();
                match self.client().head(&path) {
                    Ok(true) => continue,
                    Ok(false) => {}
                    Err(f) => return self.write_failed(&format!("HEAD {path}"), &f),
                }
            }
            self.count();
            match self.client().put_file(&path, &u.store.blob_path(&d)) {
                Ok(n) => {
                    self.inner.up.fetch_add(n, Ordering::Relaxed);
                }
                Err(f) => return self.write_failed(&format!("PUT {path}"), &f),
            }
        }
        if !self.writing() {
            return;
        }
        let path = format!("ac/{}", u.key.hex());
        let body = record::encode(&u.key, &u.record, self.inner.config.signing_key.as_deref());
        self.count();
        match self.client().put_bytes(&path, &body) {
            Ok(n) => {
                self.inner.up.fetch_add(n, Ordering::Relaxed);
                self.inner.uploaded.fetch_add(1, Ordering::Relaxed);
            }
            Err(f) => self.write_failed(&format!("PUT {path}"), &f),
        }
    }
}

fn describe(f: &Failure) -> String {
    match f {
        Failure::Status(code) => format!("answered {code} {}", http::reason(*code))
            .trim_end()
            .to_string(),
        Failure::Transport(m) => m.clone(),
        Failure::Content(m) => m.clone(),
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_checked_and_shown_without_credentials() {
        let c = RemoteConfig::new("https://u:secret@cache.example/base/").unwrap();
        assert_eq!(c.url, "https://u:secret@cache.example/base");
        assert_eq!(c.shown_url(), "https://***@cache.example/base");
        assert!(!format!("{c:?}").contains("secret"));
        assert_eq!(
            RemoteConfig::new("ftp://x").unwrap_err(),
            "remote cache URL `ftp://x` must start with http:// or https://"
        );
        assert_eq!(
            RemoteConfig::new("http:///x").unwrap_err(),
            "remote cache URL `http:///x` has no host name"
        );
        assert!(RemoteConfig::new("http://h/x?y=1").is_err());
    }

    #[test]
    fn the_header_is_checked_and_never_shown() {
        let c = RemoteConfig::new("http://h")
            .unwrap()
            .with_header("Authorization: Bearer hunter2")
            .unwrap();
        let shown = format!("{:?}", RemoteCache::new(c));
        assert!(
            shown.contains("authorization") && !shown.contains("hunter2"),
            "{shown}"
        );
        let e = RemoteConfig::new("http://h")
            .unwrap()
            .with_header("Bearer hunter2")
            .unwrap_err();
        assert!(e.contains("`Name: value`") && !e.contains("hunter2"), "{e}");
        assert!(RemoteConfig::new("http://h")
            .unwrap()
            .with_header("Bad Name: x")
            .is_err());
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
        let remote = RemoteCache::new(cfg);
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
