//! Digests, the stable-hash writer, and node keys.
//!
//! A node key is blake3 over (kind, the kind's implementation version, canonical parameters, the
//! ordered `(path, digest)` list of every input). Everything goes through [`StableHasher`], which
//! writes a length before every variable-size item and a tag before every variant, and only
//! walks ordered collections (JSON objects are hashed with their keys sorted), so the byte
//! stream is the same on any machine and any folder. Absolute paths, mtimes, hostnames and
//! undeclared environment never enter a key.
//!
//! Changing anything in this file changes every key: bump [`KEY_FORMAT`] and update the pinned
//! value in `tests::pinned_key_value`.

use std::fmt;

/// Domain-separation prefix of the key format. Bump when the hashed byte stream changes.
pub const KEY_FORMAT: &str = "skyctl-key-v1";

/// A blake3 digest (of a blob, a tree listing, or a node key).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Digest(pub [u8; 32]);

impl Digest {
    /// Digest of a byte string.
    pub fn of(bytes: &[u8]) -> Digest {
        Digest(*blake3::hash(bytes).as_bytes())
    }

    /// Lower-case hex, 64 characters.
    pub fn hex(&self) -> String {
        let mut v = Vec::with_capacity(64);
        self.write_hex(&mut v);
        // ASCII digits and letters by construction.
        String::from_utf8(v).unwrap_or_default()
    }

    /// Append [`Digest::hex`] to `out`.
    pub fn write_hex(&self, out: &mut Vec<u8>) {
        // Whole, then one copy: a push per character checks the capacity 64 times (a build
        // record writes a key per node).
        let mut hex = [0u8; 64];
        for (pair, b) in hex.chunks_exact_mut(2).zip(self.0) {
            pair[0] = HEX[(b >> 4) as usize];
            pair[1] = HEX[(b & 15) as usize];
        }
        out.extend_from_slice(&hex);
    }

    /// Parse 64 hex characters.
    pub fn from_hex(s: &str) -> Option<Digest> {
        let b = s.as_bytes();
        if b.len() != 64 {
            return None;
        }
        let mut out = [0u8; 32];
        for (i, o) in out.iter_mut().enumerate() {
            let hi = hex_val(b[2 * i])?;
            let lo = hex_val(b[2 * i + 1])?;
            *o = (hi << 4) | lo;
        }
        Some(Digest(out))
    }

    /// First 12 hex characters, for humans.
    pub fn short(&self) -> String {
        self.hex()[..12].to_string()
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

fn hex_val(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Digest({})", self.short())
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.hex())
    }
}

impl serde::Serialize for Digest {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.hex())
    }
}

impl<'de> serde::Deserialize<'de> for Digest {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        Digest::from_hex(&s).ok_or_else(|| serde::de::Error::custom("expected 64 hex characters"))
    }
}

/// A writer of an unambiguous, platform-independent byte stream into blake3.
///
/// Writes gather in a one-chunk buffer before blake3 sees them: a node key is a dozen writes
/// of a few bytes each, and blake3's incremental update costs more per call than copying
/// them; a stream that fits the buffer is hashed in one call at the end. The digest is the
/// stream's blake3 however it was cut.
pub struct StableHasher {
    /// What was written and not handed to `hasher` yet.
    pending: [u8; STABLE_BUFFER],
    len: usize,
    /// Everything before `pending`; `None` while the stream fits the buffer.
    hasher: Option<Box<blake3::Hasher>>,
}

/// One blake3 chunk.
const STABLE_BUFFER: usize = 1024;

impl StableHasher {
    /// A hasher whose stream starts with the domain string `domain`.
    pub fn new(domain: &str) -> Self {
        let mut h = StableHasher {
            pending: [0; STABLE_BUFFER],
            len: 0,
            hasher: None,
        };
        h.str(domain);
        h
    }

    /// Appends `b` to the stream (inlined: most writes are of a fixed 8 or 32 bytes, then a
    /// plain copy).
    #[inline(always)]
    fn write(&mut self, b: &[u8]) {
        if b.len() <= STABLE_BUFFER - self.len {
            self.pending[self.len..self.len + b.len()].copy_from_slice(b);
            self.len += b.len();
            return;
        }
        self.spill(b);
    }

    /// [`StableHasher::write`] of what does not fit the buffer.
    #[cold]
    fn spill(&mut self, b: &[u8]) {
        let hasher = self.hasher.get_or_insert_with(Default::default);
        hasher.update(&self.pending[..self.len]);
        self.len = 0;
        if b.len() < STABLE_BUFFER {
            self.pending[..b.len()].copy_from_slice(b);
            self.len = b.len();
        } else {
            hasher.update(b);
        }
    }

    /// A one-byte tag (enum variant, Option presence).
    #[inline]
    pub fn tag(&mut self, t: u8) {
        self.write(&[t]);
    }

    /// A fixed-width little-endian integer.
    #[inline]
    pub fn u64(&mut self, v: u64) {
        self.write(&v.to_le_bytes());
    }

    /// Length-prefixed bytes.
    #[inline]
    pub fn bytes(&mut self, b: &[u8]) {
        self.u64(b.len() as u64);
        self.write(b);
    }

    /// Length-prefixed UTF-8.
    #[inline]
    pub fn str(&mut self, s: &str) {
        self.bytes(s.as_bytes());
    }

    /// A digest (fixed 32 bytes).
    #[inline]
    pub fn digest(&mut self, d: &Digest) {
        self.write(&d.0);
    }

    /// A JSON value, objects with sorted keys, numbers in their JSON text form (the bytes of
    /// [`canonical_json`]).
    pub fn json(&mut self, v: &serde_json::Value) {
        self.write(&canonical_json(v));
    }

    /// Bytes already in the stream's form (from [`canonical_json`]), without a length.
    #[inline]
    pub fn raw(&mut self, b: &[u8]) {
        self.write(b);
    }

    /// The digest of everything written.
    pub fn finish(&self) -> Digest {
        let tail = &self.pending[..self.len];
        let digest = match &self.hasher {
            None => blake3::hash(tail),
            Some(h) => {
                let mut h = h.clone();
                h.update(tail);
                h.finalize()
            }
        };
        Digest(*digest.as_bytes())
    }
}

/// The bytes [`StableHasher::json`] hashes for `v`: a tag per value, lengths before strings,
/// arrays and objects, object keys sorted, numbers in their JSON text form. A node computes
/// them once for its parameters ([`crate::graph::NodeParams`]); every key of the node hashes
/// them again without walking the value.
pub fn canonical_json(v: &serde_json::Value) -> Vec<u8> {
    let mut out = Vec::new();
    write_canonical(&mut out, v);
    out
}

fn write_canonical(out: &mut Vec<u8>, v: &serde_json::Value) {
    use serde_json::Value;
    let str_ = |out: &mut Vec<u8>, s: &str| {
        out.extend_from_slice(&(s.len() as u64).to_le_bytes());
        out.extend_from_slice(s.as_bytes());
    };
    match v {
        Value::Null => out.push(0),
        Value::Bool(b) => out.extend_from_slice(&[1, *b as u8]),
        Value::Number(n) => {
            out.push(2);
            str_(out, &n.to_string());
        }
        Value::String(s) => {
            out.push(3);
            str_(out, s);
        }
        Value::Array(a) => {
            out.push(4);
            out.extend_from_slice(&(a.len() as u64).to_le_bytes());
            for x in a {
                write_canonical(out, x);
            }
        }
        Value::Object(o) => {
            out.push(5);
            let mut keys: Vec<&String> = o.keys().collect();
            keys.sort();
            out.extend_from_slice(&(keys.len() as u64).to_le_bytes());
            for k in keys {
                str_(out, k);
                write_canonical(out, &o[k]);
            }
        }
    }
}

/// The start of a node key: kind, version, the canonical parameters ([`canonical_json`]) and
/// the number of inputs; each input follows with [`key_input`], then [`StableHasher::finish`].
/// [`KeyMaterial::key`] is this over its own fields.
pub fn key_head(kind: &str, version: u32, canonical_params: &[u8], inputs: usize) -> StableHasher {
    let mut h = StableHasher::new(KEY_FORMAT);
    h.str(kind);
    h.u64(u64::from(version));
    h.raw(canonical_params);
    h.u64(inputs as u64);
    h
}

/// One input of a node key (see [`key_head`]).
pub fn key_input(h: &mut StableHasher, path: &str, digest: &Digest) {
    h.str(path);
    h.digest(digest);
}

/// One input of a node as it enters the key: a workspace-relative path and its content digest
/// (a file's blake3, or a directory's tree digest).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct KeyInput {
    /// Workspace-relative path with `/` separators.
    pub path: String,
    /// Content digest.
    pub digest: Digest,
    /// For a source directory: its files (path inside it, digest), so a change can be named
    /// by file. Not part of the key: the directory's digest already covers them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<(String, Digest)>,
}

/// Everything a node key is computed from, kept so `skyctl explain` can show it and diff it.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct KeyMaterial {
    /// Stage kind name.
    pub kind: String,
    /// The kind's implementation version.
    pub version: u32,
    /// Canonical parameters.
    pub params: std::sync::Arc<serde_json::Value>,
    /// Inputs in the node's declared order (globs and directories expanded in sorted order).
    pub inputs: Vec<KeyInput>,
}

impl KeyMaterial {
    /// The node key.
    pub fn key(&self) -> Digest {
        let params = canonical_json(&self.params);
        let mut h = key_head(&self.kind, self.version, &params, self.inputs.len());
        for i in &self.inputs {
            key_input(&mut h, &i.path, &i.digest);
        }
        h.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn material() -> KeyMaterial {
        KeyMaterial {
            kind: "command".into(),
            version: 1,
            params: serde_json::json!({"run": ["cp", "a", "b"], "cwd": "."}).into(),
            inputs: vec![KeyInput {
                path: "a".into(),
                digest: Digest::of(b"hello\n"),
                files: Vec::new(),
            }],
        }
    }

    /// Pins the key format: if this fails, the byte stream changed; bump KEY_FORMAT on purpose.
    #[test]
    fn pinned_key_value() {
        assert_eq!(
            material().key().hex(),
            "f2349ebf8dbb5a4ad596f596befe27d665342534564f97dba9d3bcb6e0b454db"
        );
    }

    /// The walk `StableHasher::json` did before it hashed `canonical_json`'s bytes: both must
    /// give the same stream, or every key changes.
    fn walk(h: &mut StableHasher, v: &serde_json::Value) {
        use serde_json::Value;
        match v {
            Value::Null => h.tag(0),
            Value::Bool(b) => {
                h.tag(1);
                h.tag(*b as u8);
            }
            Value::Number(n) => {
                h.tag(2);
                h.str(&n.to_string());
            }
            Value::String(s) => {
                h.tag(3);
                h.str(s);
            }
            Value::Array(a) => {
                h.tag(4);
                h.u64(a.len() as u64);
                for x in a {
                    walk(h, x);
                }
            }
            Value::Object(o) => {
                h.tag(5);
                let mut keys: Vec<&String> = o.keys().collect();
                keys.sort();
                h.u64(keys.len() as u64);
                for k in keys {
                    h.str(k);
                    walk(h, &o[k]);
                }
            }
        }
    }

    #[test]
    fn canonical_bytes_are_the_walked_stream() {
        let v = serde_json::json!({
            "z": [1, -2, 3.5, 1e300, true, false, null, "s", {"b": [], "a": {}}],
            "a": "x", "m": {"k": 18446744073709551615u64}
        });
        let mut a = StableHasher::new("t");
        walk(&mut a, &v);
        let mut b = StableHasher::new("t");
        b.json(&v);
        assert_eq!(a.finish(), b.finish());
        let m = material();
        let mut h = StableHasher::new(KEY_FORMAT);
        h.str(&m.kind);
        h.u64(u64::from(m.version));
        walk(&mut h, &m.params);
        h.u64(m.inputs.len() as u64);
        for i in &m.inputs {
            h.str(&i.path);
            h.digest(&i.digest);
        }
        assert_eq!(h.finish(), m.key());
    }

    #[test]
    fn object_key_order_does_not_matter() {
        let mut a = material();
        a.params = serde_json::json!({"cwd": ".", "run": ["cp", "a", "b"]}).into();
        assert_eq!(a.key(), material().key());
    }

    #[test]
    fn every_field_changes_the_key() {
        let base = material().key();
        let mut m = material();
        m.kind = "convert".into();
        assert_ne!(m.key(), base);
        let mut m = material();
        m.version = 2;
        assert_ne!(m.key(), base);
        let mut m = material();
        m.params = serde_json::json!({"run": ["cp", "a", "c"], "cwd": "."}).into();
        assert_ne!(m.key(), base);
        let mut m = material();
        m.inputs[0].path = "b".into();
        assert_ne!(m.key(), base);
        let mut m = material();
        m.inputs[0].digest = Digest::of(b"hello");
        assert_ne!(m.key(), base);
    }

    #[test]
    fn length_prefixes_prevent_ambiguity() {
        let mut a = StableHasher::new("t");
        a.str("ab");
        a.str("c");
        let mut b = StableHasher::new("t");
        b.str("a");
        b.str("bc");
        assert_ne!(a.finish(), b.finish());
    }

    /// The digest is blake3 of the whole stream however the writes cut it: writes that fill
    /// the buffer exactly, cross it, and exceed it, against the stream built by hand.
    #[test]
    fn stable_hasher_hashes_the_stream_whatever_its_cuts() {
        for sizes in [
            vec![0usize, 5, 1000, 7],
            vec![1024 - 8 - 6],
            vec![1024 - 8 - 6, 1],
            vec![3000],
            vec![200; 40],
            vec![1016, 1016, 2048, 3],
        ] {
            let mut h = StableHasher::new("domain");
            let mut want = Vec::new();
            want.extend_from_slice(&6u64.to_le_bytes());
            want.extend_from_slice(b"domain");
            for (i, &n) in sizes.iter().enumerate() {
                let b: Vec<u8> = (0..n).map(|j| (i * 31 + j) as u8).collect();
                h.bytes(&b);
                want.extend_from_slice(&(n as u64).to_le_bytes());
                want.extend_from_slice(&b);
                h.tag(i as u8);
                want.push(i as u8);
                h.raw(&b);
                want.extend_from_slice(&b);
            }
            assert_eq!(h.finish().0, *blake3::hash(&want).as_bytes(), "{sizes:?}");
            // Finishing reads the state without ending the stream.
            h.tag(9);
            want.push(9);
            assert_eq!(
                h.finish().0,
                *blake3::hash(&want).as_bytes(),
                "{sizes:?} +9"
            );
        }
    }

    #[test]
    fn hex_round_trip() {
        let d = Digest::of(b"x");
        assert_eq!(Digest::from_hex(&d.hex()), Some(d));
        // Lowercase, high nibble first, appended after what the buffer holds.
        let d = Digest([0xa5; 32]);
        let mut out = b"k=".to_vec();
        d.write_hex(&mut out);
        assert_eq!(out, [b"k=".as_slice(), "a5".repeat(32).as_bytes()].concat());
        assert_eq!(d.hex(), "a5".repeat(32));
        assert_eq!(Digest::from_hex("zz"), None);
    }
}
