//! The PNGOLDEN1 golden-vector file format.
//!
//! Specification: the golden README (`shared/seeds/002_47a935cf701aeeb0.txt`, "File format")
//! and `spec/kernel-goldens.md` §2. A file is one ASCII header line followed by the payload:
//!
//! ```text
//! PNGOLDEN1 <name> <dtype> <count> seed=0x9E3779B9\n
//! <count> little-endian <dtype> values (f32: IEEE-754 binary32, i32: two's complement, u8)
//! ```
//!
//! The reader is strict: single-space separators, exactly five fields, a decimal count
//! without sign or leading zeros, `seed=0x` followed by exactly eight hex digits, and a payload
//! of exactly `count × sizeof(dtype)` bytes (nothing missing, nothing trailing). Each error
//! names the file and the byte offset of the offending field. The writer is deterministic and
//! writes atomically (temp file in the target directory, then rename).

use std::path::{Path, PathBuf};

pub use crate::dtype::Dtype;
use crate::error::{Error, Result};

/// The magic first field of every header.
pub const MAGIC: &str = "PNGOLDEN1";
/// The seed every golden file records (the xorshift32 seed of the generator).
pub const SEED: u32 = 0x9E37_79B9;
/// Longest header line accepted, newline included. The longest real header is about 60
/// bytes; the limit keeps a binary file without a newline from being scanned whole.
pub const MAX_HEADER_LEN: usize = 256;
/// File extension of golden files (`<name>.bin`).
pub const EXTENSION: &str = "bin";

/// The decoded values of a golden file.
#[derive(Debug, Clone, PartialEq)]
pub enum Payload {
    /// `f32` values.
    F32(Vec<f32>),
    /// `i32` values.
    I32(Vec<i32>),
    /// `u8` values.
    U8(Vec<u8>),
}

impl Payload {
    /// The element type.
    pub fn dtype(&self) -> Dtype {
        match self {
            Payload::F32(_) => Dtype::F32,
            Payload::I32(_) => Dtype::I32,
            Payload::U8(_) => Dtype::U8,
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            Payload::F32(v) => v.len(),
            Payload::I32(v) => v.len(),
            Payload::U8(v) => v.len(),
        }
    }

    /// True when there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One golden file: its name (the file is `<name>.bin`), recorded seed and values.
#[derive(Debug, Clone, PartialEq)]
pub struct GoldenFile {
    /// The name in the header, equal to the file stem.
    pub name: String,
    /// The seed recorded in the header.
    pub seed: u32,
    /// The values.
    pub payload: Payload,
}

impl GoldenFile {
    /// A file carrying [`SEED`].
    pub fn new(name: impl Into<String>, payload: Payload) -> Self {
        GoldenFile {
            name: name.into(),
            seed: SEED,
            payload,
        }
    }

    /// The header line, newline included.
    pub fn header(&self) -> String {
        format!(
            "{MAGIC} {} {} {} seed=0x{:08X}\n",
            self.name,
            self.payload.dtype(),
            self.payload.len(),
            self.seed
        )
    }

    /// The complete file bytes: header then little-endian payload.
    pub fn to_bytes(&self) -> Vec<u8> {
        let header = self.header();
        let mut out = Vec::with_capacity(header.len() + self.payload.len() * 4);
        out.extend_from_slice(header.as_bytes());
        match &self.payload {
            Payload::F32(v) => v
                .iter()
                .for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
            Payload::I32(v) => v
                .iter()
                .for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
            Payload::U8(v) => out.extend_from_slice(v),
        }
        out
    }

    /// Parse a whole file. `label` names the file in error messages.
    pub fn parse(bytes: &[u8], label: &str) -> Result<Self> {
        let header = Header::parse(&bytes[..bytes.len().min(MAX_HEADER_LEN)], label)?;
        header.check_size(bytes.len() as u64, label)?;
        let offset = header.offset;
        Ok(header.decode(&bytes[offset..]))
    }
}

/// A parsed header line: what the payload after it must be.
#[derive(Debug, Clone, PartialEq)]
struct Header {
    name: String,
    dtype: Dtype,
    count: u64,
    seed: u32,
    /// Where the payload starts (the byte after the newline).
    offset: usize,
}

impl Header {
    /// Parse the header line at the start of `window`, the first [`MAX_HEADER_LEN`] bytes of
    /// the file (all of them when it is shorter).
    fn parse(window: &[u8], label: &str) -> Result<Header> {
        let bad = |offset: usize, reason: String| Error::BadHeader {
            file: label.to_string(),
            offset,
            reason,
        };
        let Some(newline) = window.iter().position(|&b| b == b'\n') else {
            let reason = if window.len() < MAX_HEADER_LEN {
                format!(
                    "no newline in the {} bytes of the file (the header line must end with \\n)",
                    window.len()
                )
            } else {
                format!("no newline in the first {MAX_HEADER_LEN} bytes (the header line must end with \\n)")
            };
            return Err(bad(window.len(), reason));
        };
        let line = &window[..newline];
        if let Some(pos) = line.iter().position(|&b| !(0x20..0x7f).contains(&b)) {
            return Err(bad(
                pos,
                format!("byte 0x{:02x} is not printable ASCII", line[pos]),
            ));
        }
        // Checked above: every byte is printable ASCII, so this cannot fail.
        let line =
            std::str::from_utf8(line).map_err(|e| bad(e.valid_up_to(), "not ASCII".into()))?;

        let mut fields = Vec::with_capacity(5);
        let mut start = 0;
        for (i, c) in line.char_indices() {
            if c == ' ' {
                fields.push((start, &line[start..i]));
                start = i + 1;
            }
        }
        fields.push((start, &line[start..]));
        if let Some(&(offset, _)) = fields.iter().find(|(_, f)| f.is_empty()) {
            return Err(bad(
                offset,
                "empty field (fields are separated by exactly one space)".into(),
            ));
        }
        if fields.len() != 5 {
            return Err(bad(
                0,
                format!(
                    "{} fields, expected 5: \"{MAGIC} <name> <dtype> <count> seed=0x<8 hex digits>\"",
                    fields.len()
                ),
            ));
        }
        let (o_magic, magic) = fields[0];
        if magic != MAGIC {
            return Err(bad(
                o_magic,
                format!("magic is {magic:?}, expected {MAGIC:?}"),
            ));
        }
        let (o_name, name) = fields[1];
        if let Some(c) = name
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')))
        {
            return Err(bad(
                o_name,
                format!("name {name:?} contains {c:?} (allowed: A-Z a-z 0-9 _ - .)"),
            ));
        }
        let (o_dtype, dtype_s) = fields[2];
        let dtype = Dtype::parse(dtype_s).ok_or_else(|| {
            bad(
                o_dtype,
                format!("dtype {dtype_s:?} is not one of f32, i32, u8"),
            )
        })?;
        let (o_count, count_s) = fields[3];
        let count_ok = count_s.bytes().all(|b| b.is_ascii_digit())
            && (count_s == "0" || !count_s.starts_with('0'));
        let count: u64 = match count_ok.then(|| count_s.parse::<u64>().ok()).flatten() {
            Some(c) => c,
            None => {
                return Err(bad(
                    o_count,
                    format!("count {count_s:?} is not a decimal integer without sign or leading zeros that fits in 64 bits"),
                ))
            }
        };
        let (o_seed, seed_s) = fields[4];
        let seed = seed_s
            .strip_prefix("seed=0x")
            // Upper-case hex only, as the generator writes it: one spelling per seed.
            .filter(|h| {
                h.len() == 8
                    && h.bytes().all(|b| b.is_ascii_digit() || (b'A'..=b'F').contains(&b))
            })
            .and_then(|h| u32::from_str_radix(h, 16).ok())
            .ok_or_else(|| {
                bad(
                    o_seed,
                    format!("seed field {seed_s:?} is not \"seed=0x\" followed by 8 upper-case hex digits"),
                )
            })?;

        Ok(Header {
            name: name.to_string(),
            dtype,
            count,
            seed,
            offset: newline + 1,
        })
    }

    /// The payload's size in bytes, when it fits in 64 bits.
    fn payload_len(&self) -> Option<u64> {
        self.count.checked_mul(self.dtype.size())
    }

    /// `Err` unless a file of `file_len` bytes holds exactly the payload the header declares.
    fn check_size(&self, file_len: u64, label: &str) -> Result<()> {
        let found = file_len.saturating_sub(self.offset as u64);
        let expected = self.payload_len();
        if expected == Some(found) {
            return Ok(());
        }
        let hint = match expected {
            Some(e) if found > e => " (trailing bytes)",
            _ => " (truncated)",
        };
        Err(Error::PayloadSize {
            file: label.to_string(),
            offset: self.offset,
            count: self.count,
            dtype: self.dtype,
            expected: expected.map_or_else(|| "more than 2^64".to_string(), |e| e.to_string()),
            found,
            hint,
        })
    }

    /// The file of this header and `payload` (of the size [`Header::check_size`] accepted).
    fn decode(self, payload: &[u8]) -> GoldenFile {
        let payload = match self.dtype {
            Dtype::F32 => Payload::F32(
                payload
                    .chunks_exact(4)
                    .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .collect(),
            ),
            Dtype::I32 => Payload::I32(
                payload
                    .chunks_exact(4)
                    .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .collect(),
            ),
            Dtype::U8 => Payload::U8(payload.to_vec()),
        };
        GoldenFile {
            name: self.name,
            seed: self.seed,
            payload,
        }
    }
}

impl GoldenFile {
    /// Read and parse `<dir>/<name>.bin`, requiring the header name to equal `name`.
    pub fn read(dir: &Path, name: &str) -> Result<Self> {
        let path = file_path(dir, name);
        let label = path.display().to_string();
        let file = GoldenFile::read_file(&path, &label)?;
        if file.name != name {
            return Err(Error::Mismatch {
                file: label,
                field: "header name",
                expected: name.to_string(),
                found: file.name,
            });
        }
        Ok(file)
    }

    /// Read and parse the golden file at `path` as far as its header declares: the header line
    /// (at most [`MAX_HEADER_LEN`] bytes), then, once the file's length is the header's plus
    /// the payload it declares, exactly that payload. A file of the wrong size is refused
    /// unread; a FIFO or a device is refused unopened ([`sky_fs::open`]).
    pub fn read_file(path: &Path, label: &str) -> Result<Self> {
        use std::io::Read as _;
        let io = |e: std::io::Error| Error::io(path, e);
        let mut file = sky_fs::open(path, sky_fs::GOLDEN).map_err(|e| io(e.into()))?;
        let len = file.metadata().map_err(io)?.len();
        let mut window = Vec::with_capacity(MAX_HEADER_LEN);
        (&mut file)
            .take(MAX_HEADER_LEN as u64)
            .read_to_end(&mut window)
            .map_err(io)?;
        let header = Header::parse(&window, label)?;
        header.check_size(len, label)?;
        let mut payload = window.split_off(header.offset.min(window.len()));
        let want = (len - header.offset as u64) as usize;
        if payload.len() < want {
            payload.reserve_exact(want - payload.len());
            (&mut file)
                .take((want - payload.len()) as u64)
                .read_to_end(&mut payload)
                .map_err(io)?;
        }
        // The file changed size under us: the same error as a file of that size.
        header.check_size(header.offset as u64 + payload.len() as u64, label)?;
        Ok(header.decode(&payload))
    }

    /// Write `<dir>/<name>.bin` atomically; returns the path and the bytes written.
    pub fn write(&self, dir: &Path) -> Result<(PathBuf, Vec<u8>)> {
        let path = file_path(dir, &self.name);
        let bytes = self.to_bytes();
        write_atomic(&path, &bytes)?;
        Ok((path, bytes))
    }
}

/// The path of golden `name` in `dir`: `<dir>/<name>.bin`.
pub fn file_path(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.{EXTENSION}"))
}

/// Write `bytes` to `path` atomically ([`sky_fs::write`]), so a reader never sees a
/// half-written file.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    sky_fs::write(path, bytes).map_err(|e| Error::io(path, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> GoldenFile {
        GoldenFile::new(
            "q3k_matvec_output",
            Payload::F32(vec![1.0, -2.5, f32::MIN_POSITIVE]),
        )
    }

    fn parse_err(bytes: &[u8]) -> String {
        match GoldenFile::parse(bytes, "t.bin") {
            Ok(f) => panic!("parsed {f:?} from bad bytes"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn header_is_the_seed_grammar() {
        assert_eq!(
            sample().header(),
            "PNGOLDEN1 q3k_matvec_output f32 3 seed=0x9E3779B9\n"
        );
        let i = GoldenFile::new("moe_topk_indices", Payload::I32(vec![1, -93]));
        let b = i.to_bytes();
        assert_eq!(&b[b.len() - 8..], &[1, 0, 0, 0, 0xa3, 0xff, 0xff, 0xff]);
    }

    #[test]
    fn round_trips_every_dtype() {
        for f in [
            sample(),
            GoldenFile::new("a", Payload::I32(vec![i32::MIN, 0, 7])),
            GoldenFile::new("b", Payload::U8(vec![0, 255, 3])),
            GoldenFile::new("c", Payload::F32(vec![])),
        ] {
            assert_eq!(GoldenFile::parse(&f.to_bytes(), "x").unwrap(), f);
        }
    }

    #[test]
    fn lowercase_seed_hex_is_refused() {
        // The seed's grammar spells the seed in upper case; one spelling per header keeps
        // parse -> write a byte-exact round trip (found by the pngolden_reader fuzz target).
        let err = GoldenFile::parse(b"PNGOLDEN1 x u8 1 seed=0x9e3779b9\n\x05", "x").unwrap_err();
        assert!(err.to_string().contains("upper-case hex"), "{err}");
        let f = GoldenFile::parse(b"PNGOLDEN1 x u8 1 seed=0x9E3779B9\n\x05", "x").unwrap();
        assert_eq!(f.seed, SEED);
        assert_eq!(f.to_bytes(), b"PNGOLDEN1 x u8 1 seed=0x9E3779B9\n\x05");
    }

    #[test]
    fn rejects_bad_headers_with_offsets() {
        let cases: &[(&[u8], &str)] = &[
            (
                b"PNGOLDEN1 x f32 1 seed=0x9E3779B9",
                "no newline in the 33 bytes",
            ),
            (
                b"PNGOLDEN2 x f32 0 seed=0x9E3779B9\n",
                "byte 0: magic is \"PNGOLDEN2\"",
            ),
            (
                b"PNGOLDEN1 x  f32 0 seed=0x9E3779B9\n",
                "byte 12: empty field",
            ),
            (b"PNGOLDEN1 x f32 0\n", "4 fields, expected 5"),
            (
                b"PNGOLDEN1 x f64 0 seed=0x9E3779B9\n",
                "byte 12: dtype \"f64\"",
            ),
            (
                b"PNGOLDEN1 x f32 01 seed=0x9E3779B9\n",
                "byte 16: count \"01\"",
            ),
            (
                b"PNGOLDEN1 x f32 -1 seed=0x9E3779B9\n",
                "byte 16: count \"-1\"",
            ),
            (
                b"PNGOLDEN1 x f32 99999999999999999999 seed=0x9E3779B9\n",
                "byte 16: count",
            ),
            (b"PNGOLDEN1 x f32 0 seed=9E3779B9\n", "byte 18: seed field"),
            (b"PNGOLDEN1 x f32 0 seed=0x9E3779B\n", "byte 18: seed field"),
            (
                b"PNGOLDEN1 a/b f32 0 seed=0x9E3779B9\n",
                "byte 10: name \"a/b\" contains '/'",
            ),
            (
                b"PNGOLDEN1 x\tf32 0 seed=0x9E3779B9\n",
                "byte 11: byte 0x09",
            ),
        ];
        for (bytes, want) in cases {
            let msg = parse_err(bytes);
            assert!(msg.contains(want), "{msg:?} should contain {want:?}");
            assert!(msg.starts_with("t.bin: "), "{msg:?} should name the file");
        }
    }

    #[test]
    fn rejects_wrong_payload_sizes() {
        let mut b = sample().to_bytes();
        b.push(0);
        let msg = parse_err(&b);
        assert!(
            msg.contains(
                "is 13 bytes, but the header declares 3 × f32 = 12 bytes (trailing bytes)"
            ),
            "{msg}"
        );
        b.truncate(b.len() - 2);
        assert!(parse_err(&b).contains("is 11 bytes") && parse_err(&b).contains("(truncated)"));
        let huge = b"PNGOLDEN1 x f32 18446744073709551615 seed=0x9E3779B9\n";
        assert!(parse_err(huge).contains("more than 2^64"));
    }

    #[test]
    fn reading_a_file_agrees_with_parsing_its_bytes_on_random_files() {
        // The reader looks at the header, then at the file's length, then reads only the
        // payload the header declares: on any file it must decide as parsing the whole file
        // does, with the same error.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.bin");
        let mut rng = crate::rng::XorShift32::new(0x5EED_0001);
        let seeds = [
            sample().to_bytes(),
            GoldenFile::new("i", Payload::I32(vec![5, -7])).to_bytes(),
            GoldenFile::new("u", Payload::U8(vec![1; 300])).to_bytes(),
        ];
        for round in 0..3_000 {
            let mut b = seeds[round % 3].clone();
            for _ in 0..=(rng.next_u32() % 3) {
                let at = rng.next_u32() as usize % (b.len() + 1);
                match rng.next_u32() % 5 {
                    0 if at < b.len() => b[at] ^= 1 << (rng.next_u32() % 8),
                    1 => b.insert(at, rng.byte()),
                    2 if at < b.len() => {
                        b.remove(at);
                    }
                    3 => b.extend((0..rng.next_u32() % 300).map(|_| rng.byte())),
                    _ => b.truncate(at),
                }
            }
            std::fs::write(&path, &b).unwrap();
            let read = GoldenFile::read_file(&path, "m").map_err(|e| e.to_string());
            let parsed = GoldenFile::parse(&b, "m").map_err(|e| e.to_string());
            assert_eq!(
                read,
                parsed,
                "round {round}: {:?}",
                String::from_utf8_lossy(&b)
            );
        }
    }

    #[test]
    fn a_huge_file_is_judged_by_its_header_and_length_unread() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big.bin");
        std::fs::write(&path, sample().header()).unwrap();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(3 << 30)
            .unwrap();
        let e = GoldenFile::read_file(&path, "big").unwrap_err().to_string();
        assert!(e.contains("(trailing bytes)"), "{e}");
    }

    #[test]
    fn random_mutations_never_panic_and_accepted_files_are_exact() {
        // A deterministic stand-in for a fuzzer: flip, insert, delete and truncate bytes of
        // valid files; parsing must return Ok or Err, and Ok must re-encode to the input (up to hex case).
        let mut rng = crate::rng::XorShift32::new(0xC0FF_EE11);
        let seeds = [
            sample().to_bytes(),
            GoldenFile::new("i", Payload::I32(vec![5, -7])).to_bytes(),
        ];
        for round in 0..20_000 {
            let mut b = seeds[round % 2].clone();
            for _ in 0..=(rng.next_u32() % 3) {
                let at = rng.next_u32() as usize % (b.len() + 1);
                match rng.next_u32() % 4 {
                    0 if at < b.len() => b[at] ^= 1 << (rng.next_u32() % 8),
                    1 => b.insert(at, rng.byte()),
                    2 if at < b.len() => {
                        b.remove(at);
                    }
                    _ => b.truncate(at),
                }
            }
            if let Ok(f) = GoldenFile::parse(&b, "m") {
                // Only the seed's hex case may differ between the input and the re-encoding.
                let again = f.to_bytes();
                assert_eq!(again.len(), b.len(), "round {round}");
                assert_eq!(
                    again.to_ascii_lowercase(),
                    b.to_ascii_lowercase(),
                    "round {round}"
                );
            }
        }
    }

    #[test]
    fn no_newline_in_long_binary_is_bounded() {
        let msg = parse_err(&[b'A'; 1000]);
        assert!(msg.contains("first 256 bytes"), "{msg}");
    }

    #[test]
    fn write_is_atomic_and_read_checks_the_name() {
        let dir = tempfile::tempdir().unwrap();
        let f = sample();
        let (path, bytes) = f.write(dir.path()).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), bytes);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o644);
        }
        assert_eq!(
            GoldenFile::read(dir.path(), "q3k_matvec_output").unwrap(),
            f
        );
        std::fs::copy(&path, dir.path().join("other.bin")).unwrap();
        let msg = GoldenFile::read(dir.path(), "other")
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("header name is q3k_matvec_output, expected other"),
            "{msg}"
        );
        let entries = std::fs::read_dir(dir.path()).unwrap().count();
        assert_eq!(entries, 2, "no temp file left behind");
    }
}
