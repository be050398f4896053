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
//!
//! # Seams
//!
//! The wire is a [`Transport`] and the record signature a [`Signer`] ([`transport`]): the HTTP
//! client and HMAC-SHA256 live in the `sky-remote` crate, so this engine links no HTTP, TLS or
//! crypto crate, and its tests run against [`MemoryRemote`].

pub mod memory;
pub mod record;
pub mod transport;

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use serde::Serialize;

use crate::key::Digest;
use crate::store::{ActionRecord, OutputRecord, Store};

pub use memory::MemoryRemote;
pub use transport::{Failure, Found, Signer, Transport};

/// Upload threads: enough to hide one round trip per blob, few enough for a small server.
const UPLOAD_THREADS: usize = 4;
/// Queued uploads (each a record and its digests: small) before a worker waits.
const UPLOAD_QUEUE: usize = 256;
/// The largest captured log taken from the remote (its size is not in the record).
const MAX_LOG_BLOB: u64 = 256 << 20;
/// The largest tree listing taken from the remote (it is read into memory to be checked; at
/// about 100 bytes an entry, this is some 600,000 files).
const MAX_TREE_BLOB: u64 = 64 << 20;

/// How the engine uses a remote cache: what to call it in messages, whether it may write,
/// and how its action records are signed.
#[derive(Clone, Default)]
pub struct RemoteSettings {
    /// The cache as shown to people (a URL without credentials).
    pub shown_url: String,
    /// Never write (pull-request builds).
    pub read_only: bool,
    /// Action records are signed with this, and unsigned or badly signed ones ignored.
    pub signer: Option<Arc<dyn Signer>>,
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
        let s = &self.inner.settings;
        f.debug_struct("RemoteCache")
            .field("url", &s.shown_url)
            .field("read_only", &s.read_only)
            .field("signed", &s.signer.is_some())
            .finish()
    }
}

struct Inner {
    settings: RemoteSettings,
    /// The wire (HTTP, or memory in tests).
    transport: Arc<dyn Transport>,
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
    /// A cache over `transport` (no request is sent until it is used).
    pub fn new(transport: Arc<dyn Transport>, settings: RemoteSettings) -> RemoteCache {
        let writes = !settings.read_only;
        RemoteCache {
            inner: Arc::new(Inner {
                settings,
                transport,
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

    /// Whether it never writes.
    pub fn read_only(&self) -> bool {
        self.inner.settings.read_only
    }

    /// The cache as shown to people (no credentials).
    pub fn shown_url(&self) -> &str {
        &self.inner.settings.shown_url
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
            self.inner.settings.shown_url
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

    fn client(&self) -> &dyn Transport {
        &*self.inner.transport
    }

    fn signer(&self) -> Option<&dyn Signer> {
        self.inner.settings.signer.as_deref()
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
        let mut rec = match record::decode(key, &body, self.signer()) {
            Ok(r) => r,
            Err(m) => {
                // Signature problems come in batches (another team's key, an unsigned
                // cache): one warning for all of them.
                if !m.is_signature() || !self.inner.sig_warned.swap(true, Ordering::Relaxed) {
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

    /// Make sure the remote holds blob `d`, whose content is the file `file` (`HEAD`, then
    /// `PUT` when missing): for an executor that runs nodes elsewhere and must ship their
    /// inputs. Errors are returned (the node cannot run elsewhere without it), not turned into
    /// warnings. `Ok(true)`: it was sent.
    pub fn ensure_blob(&self, d: &Digest, file: &std::path::Path) -> Result<bool, String> {
        self.ensure(d, |path| self.client().put_file(path, file))
    }

    /// [`RemoteCache::ensure_blob`] for bytes in memory.
    pub fn ensure_bytes(&self, d: &Digest, bytes: &[u8]) -> Result<bool, String> {
        self.ensure(d, |path| self.client().put_bytes(path, bytes))
    }

    fn ensure(
        &self,
        d: &Digest,
        put: impl FnOnce(&str) -> std::result::Result<u64, Failure>,
    ) -> Result<bool, String> {
        if self.read_only() {
            return Err(format!("remote cache {} is read-only", self.shown_url()));
        }
        let path = format!("cas/{}", d.hex());
        self.count();
        match self.client().head(&path) {
            Ok(true) => return Ok(false),
            Ok(false) => {}
            Err(f) => return Err(format!("HEAD {path}: {}", describe(&f))),
        }
        self.count();
        let n = put(&path).map_err(|f| format!("PUT {path}: {}", describe(&f)))?;
        self.inner.up.fetch_add(n, Ordering::Relaxed);
        Ok(true)
    }

    /// Fetch the blobs of `o` (a file, or a tree listing and its files) into `store`, each
    /// verified against its digest: how a worker elsewhere gets a node's inputs.
    pub fn fetch_blobs_of(&self, store: &Store, o: &OutputRecord) -> bool {
        self.fetch_output(store, o)
    }

    /// Fetch one blob of at most `limit` bytes into `store`, verified.
    pub fn fetch_blob_into(&self, store: &Store, d: &Digest, limit: u64) -> bool {
        store.has_blob(d) || self.fetch_blob(store, d, false, Some(limit))
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
        // Waits only when the queue is full: back-pressure on a slow server, bounded by its
        // timeouts (a timed-out write turns writes off and the queue drains at once), and
        // given up when the build is told to stop.
        let mut job = Upload {
            store: store.clone(),
            key,
            record,
        };
        loop {
            match tx.try_send(job) {
                Err(std::sync::mpsc::TrySendError::Full(back))
                    if crate::interrupt::requested().is_none() =>
                {
                    job = back;
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                _ => return,
            }
        }
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

    /// Wait until every queued upload is done (each bounded by the timeouts), or until the
    /// build is told to stop (SIGINT, SIGTERM, SIGHUP): then the uploads still in flight are
    /// abandoned (a `PUT` cut short is never stored by the server: its body is shorter than
    /// its length) and end with the process. A server that accepts a `PUT` and never reads
    /// its body would otherwise hold a stopping build for the whole write timeout.
    pub fn finish(&self) {
        let pool = lock(&self.inner.uploads).take();
        if let Some(Pool { tx, threads }) = pool {
            drop(tx);
            while threads.iter().any(|t| !t.is_finished()) {
                if crate::interrupt::requested().is_some() {
                    return;
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
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
            if !self.writing() || crate::interrupt::requested().is_some() {
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
            // What goes to the cache is checked: a local blob that no longer hashes to its
            // digest (emptied, truncated, edited) is never uploaded, nor the record that
            // needs it.
            let file = u.store.blob_path(&d);
            match crate::fsutil::hash_regular(&file) {
                Ok(actual) if actual == d => {}
                found => {
                    let what = match found {
                        Ok(actual) => format!("hashes to {}", actual.short()),
                        Err(e) => format!("cannot be read ({e})"),
                    };
                    return self.warn(format!(
                        "not uploading node `{}`: its local blob {} {what}, not {}; \
                         run `skyctl store check`, then `skyctl gc` and a build to repair it",
                        u.record.node,
                        file.display(),
                        d.short()
                    ));
                }
            }
            self.count();
            match self.client().put_file(&path, &file) {
                Ok(n) => {
                    self.inner.up.fetch_add(n, Ordering::Relaxed);
                }
                Err(f) => return self.write_failed(&format!("PUT {path}"), &f),
            }
        }
        if !self.writing() || crate::interrupt::requested().is_some() {
            return;
        }
        let path = format!("ac/{}", u.key.hex());
        let body = record::encode(&u.key, &u.record, self.signer());
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
        Failure::Status(code) => format!("answered {code} {}", transport::reason(*code))
            .trim_end()
            .to_string(),
        Failure::Transport(m) => m.clone(),
        Failure::Content(m) => m.clone(),
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}
