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
        let mut s = String::with_capacity(64);
        for b in self.0 {
            s.push(HEX[(b >> 4) as usize] as char);
            s.push(HEX[(b & 15) as usize] as char);
        }
        s
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
pub struct StableHasher(blake3::Hasher);

impl StableHasher {
    /// A hasher whose stream starts with the domain string `domain`.
    pub fn new(domain: &str) -> Self {
        let mut h = StableHasher(blake3::Hasher::new());
        h.str(domain);
        h
    }

    /// A one-byte tag (enum variant, Option presence).
    pub fn tag(&mut self, t: u8) {
        self.0.update(&[t]);
    }

    /// A fixed-width little-endian integer.
    pub fn u64(&mut self, v: u64) {
        self.0.update(&v.to_le_bytes());
    }

    /// Length-prefixed bytes.
    pub fn bytes(&mut self, b: &[u8]) {
        self.u64(b.len() as u64);
        self.0.update(b);
    }

    /// Length-prefixed UTF-8.
    pub fn str(&mut self, s: &str) {
        self.bytes(s.as_bytes());
    }

    /// A digest (fixed 32 bytes).
    pub fn digest(&mut self, d: &Digest) {
        self.0.update(&d.0);
    }

    /// A JSON value, objects with sorted keys, numbers in their JSON text form.
    pub fn json(&mut self, v: &serde_json::Value) {
        use serde_json::Value;
        match v {
            Value::Null => self.tag(0),
            Value::Bool(b) => {
                self.tag(1);
                self.tag(*b as u8);
            }
            Value::Number(n) => {
                self.tag(2);
                self.str(&n.to_string());
            }
            Value::String(s) => {
                self.tag(3);
                self.str(s);
            }
            Value::Array(a) => {
                self.tag(4);
                self.u64(a.len() as u64);
                for x in a {
                    self.json(x);
                }
            }
            Value::Object(o) => {
                self.tag(5);
                let mut keys: Vec<&String> = o.keys().collect();
                keys.sort();
                self.u64(keys.len() as u64);
                for k in keys {
                    self.str(k);
                    self.json(&o[k]);
                }
            }
        }
    }

    /// The digest of everything written.
    pub fn finish(&self) -> Digest {
        Digest(*self.0.finalize().as_bytes())
    }
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
        let mut h = StableHasher::new(KEY_FORMAT);
        h.str(&self.kind);
        h.u64(u64::from(self.version));
        h.json(&self.params);
        h.u64(self.inputs.len() as u64);
        for i in &self.inputs {
            h.str(&i.path);
            h.digest(&i.digest);
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

    #[test]
    fn hex_round_trip() {
        let d = Digest::of(b"x");
        assert_eq!(Digest::from_hex(&d.hex()), Some(d));
        assert_eq!(Digest::from_hex("zz"), None);
    }
}
