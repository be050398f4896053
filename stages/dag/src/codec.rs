//! The binary encoding of the engine's own cache and state files (the compiled graph, the
//! last build): little-endian integers, length-prefixed strings, and a frame around each file
//! that names its format and checks its length and content.
//!
//! Frame: 8 magic bytes (the format and its version), the body length (u64), the blake3 of
//! the body (32 bytes), then the body. [`unframe`] refuses anything else: another format, a
//! truncated or extended file, a flipped bit. Readers never trust a count before checking it
//! against the bytes that are left ([`Reader::count`]), so a damaged file cannot size an
//! allocation.

use crate::key::Digest;

/// How deeply a decoded JSON value (a node's parameters) may nest.
pub const MAX_DEPTH: usize = 128;

/// The bytes of one of the engine's own state files: mapped when large (no copy, and the page
/// cache's pages are mapped many at a time instead of faulted in one by one into a fresh
/// buffer), read otherwise.
pub enum FileBytes {
    /// Mapped read-only.
    Mapped(memmap2::Mmap),
    /// Read (or made in memory).
    Owned(Vec<u8>),
}

impl FileBytes {
    /// The bytes of `path`. Only for files the engine replaces by rename or appends to, and
    /// never cuts or rewrites in place (see the SAFETY note).
    pub fn read(path: &std::path::Path) -> std::io::Result<FileBytes> {
        // Only a regular file: a FIFO in a state file's place must not block the open.
        let f = crate::fsutil::open_regular(path)?;
        let len = f.metadata()?.len();
        if len < 256 * 1024 {
            let mut buf = Vec::with_capacity(len as usize);
            std::io::Read::read_to_end(&mut &f, &mut buf)?;
            return Ok(FileBytes::Owned(buf));
        }
        // SAFETY: the map is read-only and private, of the length the file had when opened.
        // The files read this way are only ever replaced by renaming a complete file over
        // them (`sky_fs::write_cache`), appended to (the store's action logs; bytes past the
        // mapped length are not seen), or removed whole, all of which leave the mapped pages
        // as they were; nothing in skyctl truncates or rewrites one in place. A process
        // outside skyctl truncating the file while it is mapped would make a later read of the
        // cut pages fault (SIGBUS), never return wrong bytes; everything read this way is also
        // checked (a frame's length and blake3, an action line's checksum) before it is
        // trusted.
        let map = unsafe { memmap2::MmapOptions::new().populate().map(&f)? };
        Ok(FileBytes::Mapped(map))
    }
}

impl std::ops::Deref for FileBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            FileBytes::Mapped(m) => m,
            FileBytes::Owned(v) => v,
        }
    }
}

impl std::fmt::Debug for FileBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "FileBytes({} bytes)", self.len())
    }
}

/// Bytes before the body: magic, length, digest.
pub const FRAME_HEADER: usize = 8 + 8 + 32;

/// `magic`, the length and digest of `body`, then `body`.
pub fn frame(magic: &[u8; 8], body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(FRAME_HEADER + body.len());
    out.extend_from_slice(magic);
    out.extend_from_slice(&(body.len() as u64).to_le_bytes());
    out.extend_from_slice(blake3::hash(body).as_bytes());
    out.extend_from_slice(body);
    out
}

/// [`frame`] in place: `buf` holds [`FRAME_HEADER`] bytes of room, then the body (a large
/// body is not copied).
pub fn frame_in_place(magic: &[u8; 8], buf: &mut [u8]) {
    if buf.len() < FRAME_HEADER {
        return;
    }
    let (head, body) = buf.split_at_mut(FRAME_HEADER);
    head[..8].copy_from_slice(magic);
    head[8..16].copy_from_slice(&(body.len() as u64).to_le_bytes());
    head[16..].copy_from_slice(blake3::hash(body).as_bytes());
}

/// The body of a file written by [`frame`] with the same `magic`, its digest not checked yet
/// (a reader that may find out sooner from the body that it has no use for it); `None` when
/// the magic or the length do not match. [`unframe`] before trusting an answer.
pub fn frame_body<'a>(magic: &[u8; 8], bytes: &'a [u8]) -> Option<&'a [u8]> {
    let rest = bytes.strip_prefix(magic.as_slice())?;
    let (len, rest) = rest.split_first_chunk::<8>()?;
    let (_, body) = rest.split_first_chunk::<32>()?;
    (u64::from_le_bytes(*len) == body.len() as u64).then_some(body)
}

/// The body of a file written by [`frame`] with the same `magic`; `None` when the magic, the
/// length or the digest do not match.
pub fn unframe<'a>(magic: &[u8; 8], bytes: &'a [u8]) -> Option<&'a [u8]> {
    let rest = bytes.strip_prefix(magic.as_slice())?;
    let (len, rest) = rest.split_first_chunk::<8>()?;
    let (digest, body) = rest.split_first_chunk::<32>()?;
    if u64::from_le_bytes(*len) != body.len() as u64 || blake3::hash(body).as_bytes() != digest {
        return None;
    }
    Some(body)
}

/// Appends encoded values to a buffer.
#[derive(Debug, Default)]
pub struct Writer {
    /// What was written.
    pub buf: Vec<u8>,
}

impl Writer {
    /// One byte.
    pub fn u8(&mut self, v: u8) {
        self.buf.push(v);
    }
    /// A bool as one byte.
    pub fn bool(&mut self, v: bool) {
        self.buf.push(v as u8);
    }
    /// Little-endian u32.
    pub fn u32(&mut self, v: u32) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    /// Little-endian u64.
    pub fn u64(&mut self, v: u64) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    /// A count or index (u32; the callers' collections are far smaller).
    pub fn len(&mut self, v: usize) {
        self.u32(u32::try_from(v).unwrap_or(u32::MAX));
    }
    /// Length-prefixed bytes.
    pub fn bytes(&mut self, b: &[u8]) {
        self.len(b.len());
        self.buf.extend_from_slice(b);
    }
    /// Length-prefixed UTF-8.
    pub fn str(&mut self, s: &str) {
        self.bytes(s.as_bytes());
    }
    /// `None` as 0, `Some(s)` as 1 and the string.
    pub fn opt_str(&mut self, s: Option<&str>) {
        match s {
            None => self.u8(0),
            Some(s) => {
                self.u8(1);
                self.str(s);
            }
        }
    }
    /// 32 bytes.
    pub fn digest(&mut self, d: &Digest) {
        self.buf.extend_from_slice(&d.0);
    }
    /// A byte range as two u32.
    pub fn span(&mut self, r: &std::ops::Range<usize>) {
        self.len(r.start);
        self.len(r.end);
    }
    /// A JSON value, exactly (floats as their bits, object keys in their order).
    pub fn json(&mut self, v: &serde_json::Value) {
        use serde_json::Value;
        match v {
            Value::Null => self.u8(0),
            Value::Bool(false) => self.u8(1),
            Value::Bool(true) => self.u8(2),
            Value::Number(n) => {
                if let Some(u) = n.as_u64() {
                    self.u8(3);
                    self.u64(u);
                } else if let Some(i) = n.as_i64() {
                    self.u8(4);
                    self.u64(i as u64);
                } else {
                    self.u8(5);
                    self.u64(n.as_f64().unwrap_or(0.0).to_bits());
                }
            }
            Value::String(s) => {
                self.u8(6);
                self.str(s);
            }
            Value::Array(a) => {
                self.u8(7);
                self.len(a.len());
                for x in a {
                    self.json(x);
                }
            }
            Value::Object(o) => {
                self.u8(8);
                self.len(o.len());
                for (k, x) in o {
                    self.str(k);
                    self.json(x);
                }
            }
        }
    }
}

/// Reads what a [`Writer`] wrote; every method returns `None` past the end or on a value that
/// is not of its type.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    /// A reader over `buf`.
    pub fn new(buf: &'a [u8]) -> Reader<'a> {
        Reader { buf }
    }
    /// Whether everything was read.
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }
    /// Bytes left.
    pub fn remaining(&self) -> usize {
        self.buf.len()
    }
    /// The next `n` bytes.
    pub fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if n > self.buf.len() {
            return None;
        }
        let (h, t) = self.buf.split_at(n);
        self.buf = t;
        Some(h)
    }
    /// One byte.
    pub fn u8(&mut self) -> Option<u8> {
        let (&b, t) = self.buf.split_first()?;
        self.buf = t;
        Some(b)
    }
    /// A bool (0 or 1).
    pub fn bool(&mut self) -> Option<bool> {
        match self.u8()? {
            0 => Some(false),
            1 => Some(true),
            _ => None,
        }
    }
    /// Little-endian u32.
    pub fn u32(&mut self) -> Option<u32> {
        let (h, t) = self.buf.split_first_chunk::<4>()?;
        self.buf = t;
        Some(u32::from_le_bytes(*h))
    }
    /// Little-endian u64.
    pub fn u64(&mut self) -> Option<u64> {
        let (h, t) = self.buf.split_first_chunk::<8>()?;
        self.buf = t;
        Some(u64::from_le_bytes(*h))
    }
    /// An index or length written by [`Writer::len`].
    pub fn index(&mut self) -> Option<usize> {
        self.u32().map(|v| v as usize)
    }
    /// A count of items that take at least `min_size` bytes each: refused when the bytes left
    /// could not hold that many, so it can size an allocation.
    pub fn count(&mut self, min_size: usize) -> Option<usize> {
        let n = self.index()?;
        (n.checked_mul(min_size.max(1))? <= self.buf.len()).then_some(n)
    }
    /// Length-prefixed bytes.
    pub fn bytes(&mut self) -> Option<&'a [u8]> {
        let n = self.index()?;
        self.take(n)
    }
    /// Length-prefixed UTF-8.
    pub fn str(&mut self) -> Option<&'a str> {
        std::str::from_utf8(self.bytes()?).ok()
    }
    /// What [`Writer::opt_str`] wrote.
    pub fn opt_str(&mut self) -> Option<Option<&'a str>> {
        match self.u8()? {
            0 => Some(None),
            1 => Some(Some(self.str()?)),
            _ => None,
        }
    }
    /// 32 bytes.
    pub fn digest(&mut self) -> Option<Digest> {
        let (h, t) = self.buf.split_first_chunk::<32>()?;
        self.buf = t;
        Some(Digest(*h))
    }
    /// A byte range (start <= end).
    pub fn span(&mut self) -> Option<std::ops::Range<usize>> {
        let (a, b) = (self.index()?, self.index()?);
        (a <= b).then_some(a..b)
    }
    /// A JSON value written by [`Writer::json`], nested at most `depth` levels.
    pub fn json(&mut self, depth: usize) -> Option<serde_json::Value> {
        use serde_json::Value;
        let depth = depth.checked_sub(1)?;
        Some(match self.u8()? {
            0 => Value::Null,
            1 => Value::Bool(false),
            2 => Value::Bool(true),
            3 => Value::from(self.u64()?),
            4 => Value::from(self.u64()? as i64),
            5 => Value::Number(serde_json::Number::from_f64(f64::from_bits(self.u64()?))?),
            6 => Value::String(self.str()?.to_string()),
            7 => {
                let n = self.count(1)?;
                let mut a = Vec::with_capacity(n);
                for _ in 0..n {
                    a.push(self.json(depth)?);
                }
                Value::Array(a)
            }
            8 => {
                let n = self.count(5)?;
                let mut o = serde_json::Map::with_capacity(n);
                for _ in 0..n {
                    let k = self.str()?.to_string();
                    let v = self.json(depth)?;
                    o.insert(k, v);
                }
                Value::Object(o)
            }
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_round_trip_exactly() {
        let v = serde_json::json!({
            "z": [1, -2, 0.1, 2.5e-300, true, false, null, "s\u{e9}", {"b": [], "a": {}}],
            "a": 18446744073709551615u64, "n": -9223372036854775808i64
        });
        let mut w = Writer::default();
        w.json(&v);
        w.str("tail");
        let mut r = Reader::new(&w.buf);
        let back = r.json(64).unwrap();
        assert_eq!(back, v);
        // Same key order, same float bits.
        assert_eq!(back.to_string(), v.to_string());
        assert_eq!(r.str(), Some("tail"));
        assert!(r.is_empty());
        // Too deep, truncated: refused.
        assert_eq!(Reader::new(&w.buf).json(2), None);
        assert_eq!(
            Reader::new(&w.buf[..w.buf.len() - 8]).json(64),
            Some(v.clone())
        );
        assert_eq!(Reader::new(&w.buf[..20]).json(64), None);
    }

    #[test]
    fn frames_refuse_other_formats_truncation_and_bit_flips() {
        let f = frame(b"TESTFMT1", b"hello body");
        assert_eq!(unframe(b"TESTFMT1", &f), Some(&b"hello body"[..]));
        assert_eq!(unframe(b"TESTFMT2", &f), None);
        assert_eq!(unframe(b"TESTFMT1", &f[..f.len() - 1]), None);
        let mut longer = f.clone();
        longer.push(0);
        assert_eq!(unframe(b"TESTFMT1", &longer), None);
        for i in 0..f.len() {
            let mut g = f.clone();
            g[i] ^= 0x10;
            assert_eq!(unframe(b"TESTFMT1", &g), None, "byte {i}");
        }
        assert_eq!(unframe(b"TESTFMT1", b""), None);
    }

    #[test]
    fn counts_are_checked_against_what_is_left() {
        let mut w = Writer::default();
        w.u32(u32::MAX);
        assert_eq!(Reader::new(&w.buf).count(1), None);
        let mut w = Writer::default();
        w.u32(3);
        w.buf.extend_from_slice(&[0; 6]);
        assert_eq!(Reader::new(&w.buf).count(2), Some(3));
        assert_eq!(Reader::new(&w.buf).count(3), None);
    }
}
