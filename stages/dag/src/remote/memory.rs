//! [`MemoryRemote`]: a [`Transport`] over a map in memory, so the engine's tests of remote
//! behaviour (hit, miss, upload, a failing or lying server) need no server and no network.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use super::transport::{Failure, Found, Transport};
use crate::key::Digest;

/// An in-memory remote cache. Every call is logged as `"GET cas/…"`, `"HEAD ac/…"`, `"PUT …"`;
/// [`MemoryRemote::fail_with`] makes every later call fail as a down server would.
#[derive(Default)]
pub struct MemoryRemote {
    objects: Mutex<BTreeMap<String, Vec<u8>>>,
    calls: Mutex<Vec<String>>,
    down: Mutex<Option<Failure>>,
    /// Answer `PUT`s with 403 (reads still work).
    refuse_writes: AtomicBool,
}

impl MemoryRemote {
    /// An empty remote.
    pub fn new() -> MemoryRemote {
        MemoryRemote::default()
    }

    /// Every later call fails with `failure`.
    pub fn fail_with(&self, failure: Failure) {
        *lock(&self.down) = Some(failure);
    }

    /// Every later `PUT` is refused with 403.
    pub fn refuse_writes(&self) {
        self.refuse_writes.store(true, Ordering::Relaxed);
    }

    /// The object stored under `path` (`ac/<hex>` or `cas/<hex>`).
    pub fn get(&self, path: &str) -> Option<Vec<u8>> {
        lock(&self.objects).get(path).cloned()
    }

    /// Store `bytes` under `path` as another client would (not logged).
    pub fn insert(&self, path: &str, bytes: Vec<u8>) {
        lock(&self.objects).insert(path.to_string(), bytes);
    }

    /// The stored paths, in order.
    pub fn paths(&self) -> Vec<String> {
        lock(&self.objects).keys().cloned().collect()
    }

    /// The calls so far, in order.
    pub fn calls(&self) -> Vec<String> {
        lock(&self.calls).clone()
    }

    fn call(&self, method: &str, path: &str) -> std::result::Result<(), Failure> {
        lock(&self.calls).push(format!("{method} {path}"));
        match &*lock(&self.down) {
            Some(f) => Err(f.clone()),
            None => Ok(()),
        }
    }

    fn put(&self, path: &str, bytes: Vec<u8>) -> std::result::Result<u64, Failure> {
        self.call("PUT", path)?;
        if self.refuse_writes.load(Ordering::Relaxed) {
            return Err(Failure::Status(403));
        }
        let n = bytes.len() as u64;
        self.insert(path, bytes);
        Ok(n)
    }
}

impl Transport for MemoryRemote {
    fn head(&self, path: &str) -> std::result::Result<bool, Failure> {
        self.call("HEAD", path)?;
        Ok(lock(&self.objects).contains_key(path))
    }

    fn get_small(&self, path: &str, limit: u64) -> Found<Vec<u8>> {
        self.call("GET", path)?;
        match self.get(path) {
            Some(b) if b.len() as u64 > limit => {
                Err(Failure::Content(format!("larger than {limit} bytes")))
            }
            found => Ok(found),
        }
    }

    fn get_blob(&self, path: &str, dest: &Path, want: &Digest, limit: u64) -> Found<u64> {
        let Some(bytes) = self.get_small(path, limit)? else {
            return Ok(None);
        };
        let got = Digest::of(&bytes);
        if got != *want {
            return Err(Failure::Content(format!(
                "content does not match its digest (hashes to {})",
                got.short()
            )));
        }
        std::fs::write(dest, &bytes)
            .map_err(|e| Failure::Transport(format!("cannot write a temp file: {e}")))?;
        Ok(Some(bytes.len() as u64))
    }

    fn put_file(&self, path: &str, file: &Path) -> std::result::Result<u64, Failure> {
        let bytes = sky_fs::read(file, sky_fs::CONTENT)
            .map_err(|e| Failure::Transport(format!("cannot read {e}")))?;
        self.put(path, bytes)
    }

    fn put_bytes(&self, path: &str, bytes: &[u8]) -> std::result::Result<u64, Failure> {
        self.put(path, bytes.to_vec())
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}
