//! Directory contents as one digest: a tree listing.
//!
//! Format (all integers little-endian u64): `SKYTREE1`, entry count, then per entry sorted by
//! path: path length, path bytes (`/`-separated, relative to the directory), 32-byte blake3 of
//! the file, size, and one byte 1/0 for the executable bit. A directory's digest is the blake3
//! of these bytes, so a directory input hashed from the workspace and the same directory stored
//! as a node output have the same digest. Only regular files count; empty directories do not.

use std::path::Path;

use crate::key::Digest;

const MAGIC: &[u8; 8] = b"SKYTREE1";

/// One file of a tree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TreeEntry {
    /// Path relative to the tree root.
    pub path: String,
    /// blake3 of the content.
    pub digest: Digest,
    /// Size in bytes.
    pub size: u64,
    /// Executable bit.
    pub exec: bool,
}

/// A directory listing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tree {
    /// Entries sorted by path.
    pub entries: Vec<TreeEntry>,
}

impl Tree {
    /// Canonical bytes (sorts first).
    pub fn encode(&mut self) -> Vec<u8> {
        self.entries.sort_by(|a, b| a.path.cmp(&b.path));
        let mut out = Vec::with_capacity(16 + self.entries.len() * 64);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&(self.entries.len() as u64).to_le_bytes());
        for e in &self.entries {
            out.extend_from_slice(&(e.path.len() as u64).to_le_bytes());
            out.extend_from_slice(e.path.as_bytes());
            out.extend_from_slice(&e.digest.0);
            out.extend_from_slice(&e.size.to_le_bytes());
            out.push(e.exec as u8);
        }
        out
    }

    /// Parse bytes written by [`Tree::encode`]; `None` when malformed.
    pub fn decode(bytes: &[u8]) -> Option<Tree> {
        let mut r = bytes.strip_prefix(MAGIC.as_slice())?;
        let u64_ = |r: &mut &[u8]| -> Option<u64> {
            let (h, t) = r.split_first_chunk::<8>()?;
            *r = t;
            Some(u64::from_le_bytes(*h))
        };
        let n = u64_(&mut r)?;
        // Each entry takes at least 49 bytes: refuse counts the remaining bytes cannot hold.
        if n > (r.len() / 49) as u64 {
            return None;
        }
        let mut entries = Vec::with_capacity(n as usize);
        for _ in 0..n {
            let len = u64_(&mut r)? as usize;
            if len > r.len() {
                return None;
            }
            let (p, t) = r.split_at(len);
            let path = std::str::from_utf8(p).ok()?.to_string();
            r = t;
            let (d, t) = r.split_first_chunk::<32>()?;
            r = t;
            let size = u64_(&mut r)?;
            let (&x, t) = r.split_first()?;
            r = t;
            if path.is_empty()
                || path.starts_with('/')
                || path.split('/').any(|c| c == ".." || c.is_empty())
            {
                return None;
            }
            entries.push(TreeEntry {
                path,
                digest: Digest(*d),
                size,
                exec: x == 1,
            });
        }
        if !r.is_empty() {
            return None;
        }
        Some(Tree { entries })
    }
}

/// Relative paths (sorted) of the regular files under `dir`, following no symlinks.
/// A symlink or special file inside is an error (it would not survive the store).
pub fn list_files(dir: &Path) -> std::io::Result<Vec<String>> {
    let mut out = Vec::new();
    for entry in walkdir::WalkDir::new(dir)
        .follow_links(false)
        .sort_by_file_name()
    {
        let entry = entry.map_err(std::io::Error::other)?;
        let ft = entry.file_type();
        if ft.is_dir() {
            continue;
        }
        let rel = entry
            .path()
            .strip_prefix(dir)
            .map_err(std::io::Error::other)?;
        let rel = rel
            .to_str()
            .ok_or_else(|| std::io::Error::other(format!("`{}` is not UTF-8", rel.display())))?
            .to_string();
        if !ft.is_file() {
            return Err(std::io::Error::other(format!(
                "`{rel}` in `{}` is a symlink or special file; only regular files can be hashed",
                dir.display()
            )));
        }
        out.push(rel);
    }
    out.sort();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_rejects_garbage() {
        let mut t = Tree {
            entries: vec![
                TreeEntry {
                    path: "b".into(),
                    digest: Digest::of(b"b"),
                    size: 1,
                    exec: true,
                },
                TreeEntry {
                    path: "a/x".into(),
                    digest: Digest::of(b"x"),
                    size: 1,
                    exec: false,
                },
            ],
        };
        let bytes = t.encode();
        let back = Tree::decode(&bytes).unwrap();
        assert_eq!(back.entries[0].path, "a/x");
        assert_eq!(back, t);
        assert!(Tree::decode(&bytes[..bytes.len() - 1]).is_none());
        let mut huge = bytes.clone();
        huge[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(Tree::decode(&huge).is_none());
    }
}
