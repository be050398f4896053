//! Blobs arriving from elsewhere (the remote cache): written to a temp file in the store's tmp
//! dir by the caller, which hashed them as they streamed in, then placed like any blob.

use super::*;

impl Store {
    /// A fresh temp path in the store's tmp dir for one incoming blob.
    pub fn incoming_path(&self) -> PathBuf {
        self.tmp("incoming")
    }

    /// Make the complete temp file `tmp` (from [`Store::incoming_path`]) the blob `d`. The
    /// caller has checked that its content hashes to `d`; the file is made read-only first.
    pub fn adopt_verified(&self, tmp: &Path, d: &Digest, exec: bool) -> Result<()> {
        self.place_tmp(tmp, d, exec)
    }
}
