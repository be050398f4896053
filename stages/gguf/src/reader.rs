//! The GGUF reader: parses a borrowed byte slice, never copies tensor data.

use std::collections::{HashMap, HashSet};
#[cfg(feature = "fs")]
use std::path::{Path, PathBuf};

use crate::dtype;
use crate::error::{Error, Result};
use crate::types::GgmlType;
use crate::value::{Array, Value, ValueType};

/// The GGUF magic, the first four bytes of every file.
pub const MAGIC: [u8; 4] = *b"GGUF";
/// Alignment of tensor data when a file has no `general.alignment` key.
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// Deepest nesting of arrays the reader accepts (a limit so hostile files cannot exhaust
/// the stack; real files nest at most one level).
pub const MAX_ARRAY_DEPTH: usize = 64;
/// ggml's `GGML_MAX_DIMS`: a tensor has at most this many dimensions.
pub const MAX_DIMS: usize = 4;

/// Minimum bytes one metadata pair takes (u64 key length + u32 type id): bounds the key
/// count a file of a given size can claim.
const MIN_KV_BYTES: u64 = 12;
/// Minimum bytes of one tensor descriptor (u64 name length, u32 n_dims, u32 type, u64 offset).
const MIN_TENSOR_INFO_BYTES: u64 = 24;

/// One tensor of a parsed file: its descriptor and a borrowed view of its data.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorInfo<'a> {
    /// Tensor name.
    pub name: String,
    /// Dimensions in ggml order (innermost first, `dims[0]` = ne\[0\]).
    pub dims: Vec<u64>,
    /// Element type.
    pub ty: GgmlType,
    /// Offset of the data, relative to the start of the data section.
    pub offset: u64,
    /// The tensor's bytes (exactly its size, padding excluded), borrowed from the file.
    pub data: &'a [u8],
}

impl TensorInfo<'_> {
    /// Dimensions in PyTorch order (outermost first): `dims` reversed.
    pub fn shape(&self) -> Vec<u64> {
        self.dims.iter().rev().copied().collect()
    }

    /// Number of elements (product of the dimensions).
    pub fn n_elements(&self) -> u64 {
        self.dims.iter().fold(1u64, |a, &d| a.saturating_mul(d))
    }

    /// Size of the tensor's data in bytes.
    pub fn n_bytes(&self) -> u64 {
        self.data.len() as u64
    }

    /// The tensor's values as f32 (F32, F16, BF16 and Q8_0 only).
    pub fn to_f32(&self) -> Result<Vec<f32>> {
        let n = usize::try_from(self.n_elements()).map_err(|_| Error::Overflow {
            what: format!("tensor {:?}", self.name),
        })?;
        dtype::decode(self.ty, self.data, n).map_err(|e| match e {
            Error::NotConvertible { ty, .. } => Error::NotConvertible {
                what: format!("tensor {:?}", self.name),
                ty,
            },
            other => other,
        })
    }
}

/// A parsed GGUF file, borrowing the bytes it was parsed from.
#[derive(Debug, Clone)]
pub struct GgufFile<'a> {
    /// Format version (2 or 3).
    pub version: u32,
    /// Alignment of tensor data (`general.alignment`, default 32).
    pub alignment: u64,
    /// Metadata pairs in file order.
    pub metadata: Vec<(String, Value)>,
    /// Tensors in file order.
    pub tensors: Vec<TensorInfo<'a>>,
    data_offset: u64,
    file_len: u64,
    tensor_index: HashMap<String, usize>,
}

impl<'a> GgufFile<'a> {
    /// Parse a whole GGUF file held in memory. Checks everything: counts against the file
    /// size, UTF-8, duplicate keys and tensor names, alignment, tensor sizes and bounds.
    pub fn parse(bytes: &'a [u8]) -> Result<Self> {
        Parser { buf: bytes, pos: 0 }.file()
    }

    /// The value of a metadata key.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.metadata.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// The tensor of that name.
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo<'a>> {
        match self
            .tensor_index
            .get(name)
            .and_then(|&i| self.tensors.get(i))
        {
            Some(t) if t.name == name => Some(t),
            // The pub fields may have been edited since parsing: fall back to a scan.
            _ => self.tensors.iter().find(|t| t.name == name),
        }
    }

    /// Absolute byte offset of the data section (tensor offsets are relative to it).
    pub fn data_offset(&self) -> u64 {
        self.data_offset
    }

    /// Length of the parsed bytes.
    pub fn file_len(&self) -> u64 {
        self.file_len
    }

    /// Total elements over all tensors.
    pub fn n_parameters(&self) -> u64 {
        self.tensors
            .iter()
            .fold(0u64, |a, t| a.saturating_add(t.n_elements()))
    }

    /// Total bytes of tensor data (padding excluded).
    pub fn tensor_bytes(&self) -> u64 {
        self.tensors
            .iter()
            .fold(0u64, |a, t| a.saturating_add(t.n_bytes()))
    }
}

struct Parser<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Parser<'a> {
    fn remaining(&self) -> u64 {
        (self.buf.len() - self.pos) as u64
    }

    fn take(&mut self, n: u64, what: &dyn Fn() -> String) -> Result<&'a [u8]> {
        if n > self.remaining() {
            return Err(Error::Truncated {
                what: what(),
                offset: self.pos as u64,
                needed: n,
                available: self.remaining(),
            });
        }
        // n <= remaining <= usize::MAX, so the cast is lossless.
        let s = &self.buf[self.pos..self.pos + n as usize];
        self.pos += n as usize;
        Ok(s)
    }

    fn array<const N: usize>(&mut self, what: &dyn Fn() -> String) -> Result<[u8; N]> {
        let s = self.take(N as u64, what)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    fn u32(&mut self, what: &dyn Fn() -> String) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    fn u64(&mut self, what: &dyn Fn() -> String) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    /// Read a count and check that `count * min_item` bytes could follow.
    fn count(&mut self, min_item: u64, what: &dyn Fn() -> String) -> Result<u64> {
        let offset = self.pos as u64;
        let count = self.u64(what)?;
        let available = self.remaining();
        if count.checked_mul(min_item).is_none_or(|b| b > available) {
            return Err(Error::CountTooLarge {
                what: what(),
                offset,
                count,
                available,
            });
        }
        Ok(count)
    }

    fn string(&mut self, what: &dyn Fn() -> String) -> Result<String> {
        // The bytes are checked against the file by `take`, so a huge length is reported
        // as a truncation and never allocated.
        let len = self.u64(&|| format!("length of {}", what()))?;
        let offset = self.pos as u64;
        let bytes = self.take(len, what)?;
        match std::str::from_utf8(bytes) {
            Ok(s) => Ok(s.to_string()),
            Err(e) => Err(Error::BadUtf8 {
                what: what(),
                offset,
                valid_up_to: e.valid_up_to(),
            }),
        }
    }

    fn value_type(&mut self, what: &dyn Fn() -> String) -> Result<ValueType> {
        let offset = self.pos as u64;
        let id = self.u32(what)?;
        ValueType::from_id(id).ok_or_else(|| Error::BadValueType {
            what: what(),
            offset,
            id,
        })
    }

    fn value(&mut self, ty: ValueType, key: &str, depth: usize) -> Result<Value> {
        let what = || format!("value of key {key:?}");
        Ok(match ty {
            ValueType::U8 => Value::U8(self.array::<1>(&what)?[0]),
            ValueType::I8 => Value::I8(i8::from_le_bytes(self.array(&what)?)),
            ValueType::U16 => Value::U16(u16::from_le_bytes(self.array(&what)?)),
            ValueType::I16 => Value::I16(i16::from_le_bytes(self.array(&what)?)),
            ValueType::U32 => Value::U32(u32::from_le_bytes(self.array(&what)?)),
            ValueType::I32 => Value::I32(i32::from_le_bytes(self.array(&what)?)),
            ValueType::F32 => Value::F32(f32::from_le_bytes(self.array(&what)?)),
            ValueType::Bool => Value::Bool(self.array::<1>(&what)?[0] != 0),
            ValueType::String => Value::String(self.string(&what)?),
            ValueType::U64 => Value::U64(u64::from_le_bytes(self.array(&what)?)),
            ValueType::I64 => Value::I64(i64::from_le_bytes(self.array(&what)?)),
            ValueType::F64 => Value::F64(f64::from_le_bytes(self.array(&what)?)),
            ValueType::Array => {
                let header = self.pos as u64;
                let elem_type =
                    self.value_type(&|| format!("array element type of key {key:?}"))?;
                if elem_type == ValueType::Array && depth + 1 >= MAX_ARRAY_DEPTH {
                    return Err(Error::TooDeep {
                        key: key.to_string(),
                        offset: header,
                        max: MAX_ARRAY_DEPTH,
                    });
                }
                let n = self.count(elem_type.min_size(), &|| {
                    format!("array length of key {key:?}")
                })?;
                // n * min_size <= remaining bytes, so this allocation is bounded by the
                // file size.
                let mut items = Vec::with_capacity(n as usize);
                for _ in 0..n {
                    items.push(self.value(elem_type, key, depth + 1)?);
                }
                Value::Array(Array { elem_type, items })
            }
        })
    }

    fn file(mut self) -> Result<GgufFile<'a>> {
        let magic: [u8; 4] = self.array(&|| "magic".into())?;
        if magic != MAGIC {
            return Err(Error::BadMagic { found: magic });
        }
        let version = self.u32(&|| "version".into())?;
        if version != 2 && version != 3 {
            let hint = match version {
                1 => " (version 1 used 32-bit counts and is obsolete)",
                v if matches!(v.swap_bytes(), 2 | 3) => " (this looks like a big-endian file)",
                _ => "",
            };
            return Err(Error::UnsupportedVersion { version, hint });
        }
        let n_tensors_off = self.pos as u64;
        let n_tensors = self.u64(&|| "tensor count".into())?;
        let n_kv = self.count(MIN_KV_BYTES, &|| "metadata key count".into())?;
        // The full check of the tensor count comes after the metadata; this one only keeps
        // absurd counts from reaching an allocation.
        let max_tensors = self.remaining() / MIN_TENSOR_INFO_BYTES;
        if n_tensors > max_tensors {
            return Err(Error::CountTooLarge {
                what: "tensor count".into(),
                offset: n_tensors_off,
                count: n_tensors,
                available: self.remaining(),
            });
        }

        let mut metadata: Vec<(String, Value)> = Vec::with_capacity(n_kv as usize);
        let mut seen_keys: HashSet<String> = HashSet::with_capacity(n_kv as usize);
        let mut alignment = DEFAULT_ALIGNMENT;
        for i in 0..n_kv {
            let key_off = self.pos as u64;
            let key = self.string(&|| format!("metadata key #{i}"))?;
            let ty = self.value_type(&|| format!("value type of key {key:?}"))?;
            let value_off = self.pos as u64;
            let value = self.value(ty, &key, 0)?;
            if !seen_keys.insert(key.clone()) {
                return Err(Error::DuplicateKey {
                    key,
                    offset: key_off,
                });
            }
            if key == "general.alignment" {
                alignment = match value {
                    Value::U32(a) if a.is_power_of_two() => u64::from(a),
                    Value::U32(a) => {
                        return Err(Error::BadAlignment {
                            offset: value_off,
                            reason: format!("{a} is not a power of two"),
                        })
                    }
                    ref v => {
                        return Err(Error::BadAlignment {
                            offset: value_off,
                            reason: format!("type is {}, must be u32", v.value_type()),
                        })
                    }
                };
            }
            metadata.push((key, value));
        }

        if n_tensors > self.remaining() / MIN_TENSOR_INFO_BYTES {
            return Err(Error::CountTooLarge {
                what: "tensor count".into(),
                offset: n_tensors_off,
                count: n_tensors,
                available: self.remaining(),
            });
        }
        struct Desc {
            name: String,
            dims: Vec<u64>,
            ty: GgmlType,
            offset: u64,
            size: u64,
        }
        let mut descs: Vec<Desc> = Vec::with_capacity(n_tensors as usize);
        let mut tensor_index: HashMap<String, usize> = HashMap::with_capacity(n_tensors as usize);
        for i in 0..n_tensors {
            let desc_off = self.pos as u64;
            let name = self.string(&|| format!("name of tensor #{i}"))?;
            let what = || format!("descriptor of tensor {name:?}");
            let bad = |reason: String| Error::BadTensor {
                name: name.clone(),
                offset: desc_off,
                reason,
            };
            let n_dims = self.u32(&what)?;
            if n_dims as usize > MAX_DIMS {
                return Err(bad(format!(
                    "{n_dims} dimensions, ggml allows at most {MAX_DIMS}"
                )));
            }
            let mut dims = Vec::with_capacity(n_dims as usize);
            for _ in 0..n_dims {
                let d = self.u64(&what)?;
                if d > i64::MAX as u64 {
                    return Err(bad(format!("dimension {d} does not fit ggml's int64")));
                }
                dims.push(d);
            }
            let ty = GgmlType::from_id(self.u32(&what)?);
            let offset = self.u64(&what)?;
            let (Some(block), Some(_)) = (ty.block_size(), ty.type_size()) else {
                return Err(bad(format!("ggml type {} has no known byte size", ty.id())));
            };
            let ne0 = dims.first().copied().unwrap_or(1);
            if !ne0.is_multiple_of(block) {
                return Err(bad(format!(
                    "row of {ne0} elements is not a multiple of the {} block size {block}",
                    ty.name()
                )));
            }
            let size = dims
                .iter()
                .skip(1)
                .try_fold(ty.row_bytes(ne0).ok(), |acc, &d| {
                    Some(acc.and_then(|a| a.checked_mul(d)))
                })
                .flatten()
                .ok_or_else(|| bad("byte size overflows 64 bits".into()))?;
            if dims
                .iter()
                .try_fold(1u64, |a, &d| a.checked_mul(d))
                .is_none()
            {
                return Err(bad("element count overflows 64 bits".into()));
            }
            if tensor_index.contains_key(&name) {
                return Err(Error::DuplicateTensor {
                    name,
                    offset: desc_off,
                });
            }
            tensor_index.insert(name.clone(), descs.len());
            descs.push(Desc {
                name,
                dims,
                ty,
                offset,
                size,
            });
        }

        let file_len = self.buf.len() as u64;
        let data_offset = (self.pos as u64).next_multiple_of(alignment);
        let mut tensors = Vec::with_capacity(descs.len());
        for d in descs {
            if !d.offset.is_multiple_of(alignment) {
                return Err(Error::MisalignedTensor {
                    name: d.name,
                    offset: d.offset,
                    alignment,
                });
            }
            let start = data_offset.checked_add(d.offset);
            let end = start.and_then(|s| s.checked_add(d.size));
            let (Some(start), Some(end)) = (start, end) else {
                return Err(Error::TensorOutOfBounds {
                    name: d.name,
                    start: start.unwrap_or(u64::MAX),
                    end: u64::MAX,
                    file_len,
                });
            };
            if end > file_len {
                return Err(Error::TensorOutOfBounds {
                    name: d.name,
                    start,
                    end,
                    file_len,
                });
            }
            tensors.push(TensorInfo {
                name: d.name,
                dims: d.dims,
                ty: d.ty,
                offset: d.offset,
                // end <= file_len, so both fit in usize.
                data: &self.buf[start as usize..end as usize],
            });
        }
        Ok(GgufFile {
            version,
            alignment,
            metadata,
            tensors,
            data_offset,
            file_len,
            tensor_index,
        })
    }
}

/// A GGUF file mapped into memory, for reading large files without copying them. Files
/// that cannot be mapped (pipes, devices) are read into memory instead.
#[cfg(feature = "fs")]
#[derive(Debug)]
pub struct GgufMmap {
    path: PathBuf,
    bytes: Backing,
}

#[cfg(feature = "fs")]
#[derive(Debug)]
enum Backing {
    Map(memmap2::Mmap),
}

#[cfg(feature = "fs")]
impl GgufMmap {
    /// Map a file read-only.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        // A FIFO would block the open, and a device or a pipe could stream without end: only
        // a regular file is mapped (its header says how much of it is read): sky_fs::open
        // checks the type on the opened file, without blocking.
        let bytes = Backing::Map(mmap_file(&path)?);
        Ok(GgufMmap { path, bytes })
    }

    /// The file's bytes.
    pub fn bytes(&self) -> &[u8] {
        match &self.bytes {
            Backing::Map(m) => m,
        }
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Parse the bytes; the result borrows them.
    pub fn parse(&self) -> Result<GgufFile<'_>> {
        GgufFile::parse(self.bytes())
    }
}

/// Map a file read-only into memory.
#[cfg(feature = "fs")]
pub fn mmap_file(path: &Path) -> Result<memmap2::Mmap> {
    let io = |err| Error::Io {
        path: path.to_path_buf(),
        err,
    };
    let file = sky_fs::open(path, sky_fs::MODEL).map_err(|e| io(e.into()))?;
    // SAFETY: the map is read-only and every byte of it is treated as untrusted input. The
    // one hazard left is another process truncating or rewriting the file while it is
    // mapped; skyctl only replaces files by atomic rename (a new inode), never in place, so
    // files it maps are not modified under it.
    unsafe { memmap2::Mmap::map(&file) }.map_err(io)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::writer::GgufWriter;

    /// Little helpers to hand-craft (possibly broken) files.
    fn s(buf: &mut Vec<u8>, x: &str) {
        buf.extend_from_slice(&(x.len() as u64).to_le_bytes());
        buf.extend_from_slice(x.as_bytes());
    }
    fn header(version: u32, n_tensors: u64, n_kv: u64) -> Vec<u8> {
        let mut b = b"GGUF".to_vec();
        b.extend_from_slice(&version.to_le_bytes());
        b.extend_from_slice(&n_tensors.to_le_bytes());
        b.extend_from_slice(&n_kv.to_le_bytes());
        b
    }
    fn kv_u32(b: &mut Vec<u8>, key: &str, v: u32) {
        s(b, key);
        b.extend_from_slice(&4u32.to_le_bytes());
        b.extend_from_slice(&v.to_le_bytes());
    }
    fn tinfo(b: &mut Vec<u8>, name: &str, dims: &[u64], ty: u32, offset: u64) {
        s(b, name);
        b.extend_from_slice(&(dims.len() as u32).to_le_bytes());
        for d in dims {
            b.extend_from_slice(&d.to_le_bytes());
        }
        b.extend_from_slice(&ty.to_le_bytes());
        b.extend_from_slice(&offset.to_le_bytes());
    }
    fn pad(b: &mut Vec<u8>, n: usize) {
        b.resize(b.len().next_multiple_of(n), 0);
    }
    fn err(bytes: &[u8]) -> String {
        GgufFile::parse(bytes).unwrap_err().to_string()
    }

    fn sample() -> Vec<u8> {
        let mut w = GgufWriter::new();
        w.add_kv("general.architecture", "modern-bert");
        w.add_kv("x.list", Value::string_array(["a", "bc", ""]));
        w.add_kv(
            "x.nested",
            Value::array(
                ValueType::Array,
                vec![Value::i32_array([1, -2]), Value::i32_array([])],
            )
            .unwrap(),
        );
        w.add_kv("x.f64", -2.5f64);
        w.add_tensor_f32("a", vec![8, 2], GgmlType::F32, &[1.5; 16])
            .unwrap();
        w.add_tensor_f32("b", vec![32, 2], GgmlType::Q8_0, &[127.0; 64])
            .unwrap();
        w.add_tensor_f32("c", vec![16], GgmlType::F16, &[-3.0; 16])
            .unwrap();
        w.to_bytes().unwrap()
    }

    #[test]
    fn parses_sample_and_borrows_data() {
        let bytes = sample();
        let f = GgufFile::parse(&bytes).unwrap();
        assert_eq!(f.version, 3);
        assert_eq!(f.alignment, 32);
        assert_eq!(f.metadata.len(), 5);
        assert_eq!(f.metadata[4].0, "general.alignment");
        let a = f.tensor("a").unwrap();
        assert_eq!(a.shape(), vec![2, 8]);
        assert_eq!(a.to_f32().unwrap(), vec![1.5; 16]);
        // Borrowed: the slice points into `bytes`.
        let base = bytes.as_ptr() as usize;
        let p = a.data.as_ptr() as usize;
        assert_eq!(p - base, (f.data_offset() + a.offset) as usize);
        assert_eq!(f.tensor("b").unwrap().to_f32().unwrap(), vec![127.0; 64]);
        assert_eq!(f.tensor("b").unwrap().offset % 32, 0);
        assert_eq!(f.n_parameters(), 16 + 64 + 16);
    }

    #[test]
    fn every_truncation_is_an_error() {
        let bytes = sample();
        let f = GgufFile::parse(&bytes).unwrap();
        let last = f.tensors.last().unwrap();
        let data_end = (f.data_offset() + last.offset + last.n_bytes()) as usize;
        for n in 0..bytes.len() {
            let r = GgufFile::parse(&bytes[..n]);
            if n < data_end {
                let e = r.unwrap_err().to_string();
                assert!(
                    e.contains("truncated")
                        || e.contains("more than")
                        || e.contains("past the end"),
                    "{n}: {e}"
                );
            }
        }
    }

    #[test]
    fn wrong_magic_and_versions() {
        let mut b = sample();
        b[0] = b'X';
        assert!(err(&b).contains("not a GGUF file"));
        for v in [1u32, 4, 0x0300_0000] {
            let mut b = sample();
            b[4..8].copy_from_slice(&v.to_le_bytes());
            let e = err(&b);
            assert!(
                e.contains(&format!("unsupported GGUF version {v} at byte 4")),
                "{e}"
            );
        }
        let mut b = sample();
        b[4..8].copy_from_slice(&0x0300_0000u32.to_le_bytes());
        assert!(err(&b).contains("big-endian"));
        // Version 2 has the same layout and is read.
        let mut b = sample();
        b[4..8].copy_from_slice(&2u32.to_le_bytes());
        assert_eq!(GgufFile::parse(&b).unwrap().version, 2);
    }

    #[test]
    fn absurd_counts_are_refused_before_allocating() {
        let huge = 1u64 << 60;
        let b = header(3, huge, 0);
        assert!(err(&b).contains("tensor count at byte 8 is 1152921504606846976"));
        let b = header(3, 0, huge);
        assert!(err(&b).contains("metadata key count at byte 16"));
        // String length 2^60 in a key.
        let mut b = header(3, 0, 1);
        b.extend_from_slice(&huge.to_le_bytes());
        b.extend_from_slice(b"abcd");
        assert_eq!(
            err(&b),
            "truncated file: metadata key #0 at byte 32 needs 1152921504606846976 bytes, only 4 left"
        );
        // Array of 2^60 u64.
        let mut b = header(3, 0, 1);
        s(&mut b, "k");
        b.extend_from_slice(&9u32.to_le_bytes());
        b.extend_from_slice(&10u32.to_le_bytes());
        b.extend_from_slice(&huge.to_le_bytes());
        let e = err(&b);
        assert!(e.contains("array length of key \"k\" at byte 41"), "{e}");
        // Tensor count plausible before the metadata but not after it.
        let mut b = header(3, 2, 1);
        kv_u32(&mut b, "k", 1);
        b.extend_from_slice(&[0u8; 40]);
        assert!(err(&b).contains("tensor count"), "{}", err(&b));
    }

    #[test]
    fn bad_strings_and_types() {
        let mut b = header(3, 0, 1);
        s(&mut b, "k\u{e9}");
        let n = b.len();
        b[n - 1] = 0xFF;
        b.extend_from_slice(&4u32.to_le_bytes());
        b.extend_from_slice(&1u32.to_le_bytes());
        let e = err(&b);
        assert!(
            e.contains("metadata key #0 at byte 32 is not valid UTF-8"),
            "{e}"
        );

        let mut b = header(3, 0, 1);
        s(&mut b, "k");
        b.extend_from_slice(&13u32.to_le_bytes());
        assert!(
            err(&b).contains("value type of key \"k\" at byte 33: unknown metadata value type 13")
        );

        let mut b = header(3, 0, 1);
        s(&mut b, "k");
        b.extend_from_slice(&8u32.to_le_bytes());
        s(&mut b, "\u{e9}");
        b.truncate(b.len() - 1);
        b.push(b'x');
        assert!(
            err(&b).contains("value of key \"k\" at byte 45 is not valid UTF-8"),
            "{}",
            err(&b)
        );
    }

    #[test]
    fn nested_arrays_are_bounded() {
        let mut b = header(3, 0, 1);
        s(&mut b, "deep");
        b.extend_from_slice(&9u32.to_le_bytes());
        for _ in 0..10_000 {
            b.extend_from_slice(&9u32.to_le_bytes());
            b.extend_from_slice(&1u64.to_le_bytes());
        }
        let e = err(&b);
        assert!(e.contains("nested deeper than 64"), "{e}");
    }

    #[test]
    fn duplicates_are_refused() {
        let mut b = header(3, 0, 2);
        kv_u32(&mut b, "k", 1);
        kv_u32(&mut b, "k", 2);
        assert_eq!(err(&b), "duplicate metadata key \"k\" at byte 41");

        let mut b = header(3, 2, 0);
        tinfo(&mut b, "t", &[4], 0, 0);
        tinfo(&mut b, "t", &[4], 0, 32);
        pad(&mut b, 32);
        b.extend_from_slice(&[0u8; 64]);
        assert_eq!(err(&b), "duplicate tensor name \"t\" at byte 57");
    }

    #[test]
    fn alignment_is_honoured_and_checked() {
        let mut b = header(3, 1, 1);
        kv_u32(&mut b, "general.alignment", 64);
        tinfo(&mut b, "t", &[4], 0, 0);
        pad(&mut b, 64);
        let data_at = b.len();
        b.extend_from_slice(&[0u8; 16]);
        let f = GgufFile::parse(&b).unwrap();
        assert_eq!(f.alignment, 64);
        assert_eq!(f.data_offset() as usize, data_at);
        assert_eq!(data_at % 64, 0);

        for bad in [0u32, 3, 48] {
            let mut b = header(3, 0, 1);
            kv_u32(&mut b, "general.alignment", bad);
            let e = err(&b);
            assert!(e.contains("bad general.alignment at byte 53"), "{e}");
        }
        let mut b = header(3, 0, 1);
        s(&mut b, "general.alignment");
        b.extend_from_slice(&10u32.to_le_bytes());
        b.extend_from_slice(&32u64.to_le_bytes());
        assert!(err(&b).contains("type is u64, must be u32"));
    }

    #[test]
    fn bad_tensors() {
        let build = |dims: &[u64], ty: u32, offset: u64, data: usize| {
            let mut b = header(3, 1, 0);
            tinfo(&mut b, "w", dims, ty, offset);
            pad(&mut b, 32);
            b.extend_from_slice(&vec![0u8; data]);
            b
        };
        assert!(GgufFile::parse(&build(&[4, 2], 0, 0, 32)).is_ok());
        let e = err(&build(&[4, 2], 0, 0, 31));
        assert_eq!(
            e,
            "tensor \"w\": data at bytes 96..128 lies past the end of the file (127 bytes)"
        );
        let e = err(&build(&[4], 0, 16, 64));
        assert!(
            e.contains(
                "offset 16 (relative to the data section) is not a multiple of the alignment 32"
            ),
            "{e}"
        );
        let e = err(&build(&[4], 0, u64::MAX - 31, 64));
        assert!(e.contains("past the end"), "{e}");
        let e = err(&build(&[4], 99, 0, 64));
        assert_eq!(
            e,
            "tensor \"w\" (descriptor at byte 24): ggml type 99 has no known byte size"
        );
        let e = err(&build(&[33], 8, 0, 64));
        assert!(
            e.contains("row of 33 elements is not a multiple of the Q8_0 block size 32"),
            "{e}"
        );
        let e = err(&build(&[1 << 40, 1 << 40], 0, 0, 64));
        assert!(e.contains("overflows"), "{e}");
        let e = err(&build(&[1, 1, 1, 1, 1], 0, 0, 64));
        assert!(e.contains("5 dimensions"), "{e}");
        let e = err(&build(&[u64::MAX], 0, 0, 64));
        assert!(e.contains("does not fit"), "{e}");
        // Unconverted but known types are read, and their bytes kept.
        let f_bytes = build(&[256, 2], 12, 0, 288);
        let f = GgufFile::parse(&f_bytes).unwrap();
        assert_eq!(f.tensors[0].ty, GgmlType::Other(12));
        assert_eq!(f.tensors[0].n_bytes(), 288);
        assert!(f.tensors[0]
            .to_f32()
            .unwrap_err()
            .to_string()
            .contains("Q4_K"));
    }

    /// Seeded mutation fuzzing on stable Rust: byte flips, huge counts, truncations,
    /// insertions and deletions of valid files must give Ok or Err, never a panic; what
    /// parses must write back idempotently. `SKY_GGUF_MUTATE_SECS=600` runs it for that long
    /// (use --release) instead of the default 20,000 mutations.
    #[test]
    fn mutated_inputs_never_panic() {
        let seeds: Vec<Vec<u8>> = vec![
            sample(),
            include_bytes!("../../../fuzz/seeds/gguf_reader/both-align64.gguf").to_vec(),
            include_bytes!("../../../fuzz/seeds/gguf_reader/tensors.gguf").to_vec(),
        ];
        let secs: Option<u64> = std::env::var("SKY_GGUF_MUTATE_SECS")
            .ok()
            .and_then(|s| s.parse().ok());
        let start = std::time::Instant::now();
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let (mut runs, mut parsed) = (0u64, 0u64);
        loop {
            match secs {
                Some(s) if start.elapsed().as_secs() >= s => break,
                None if runs >= 20_000 => break,
                _ => {}
            }
            let mut b = seeds[(next() % seeds.len() as u64) as usize].clone();
            for _ in 0..1 + next() % 4 {
                let len = b.len().max(1) as u64;
                let at = (next() % len) as usize;
                match next() % 6 {
                    0 if !b.is_empty() => b[at] ^= 1 << (next() % 8),
                    1 if b.len() >= at + 8 => {
                        let v = [u64::MAX, 1 << 60, 1 << 32, 0, 65, next()][(next() % 6) as usize];
                        b[at..at + 8].copy_from_slice(&v.to_le_bytes());
                    }
                    2 => b.truncate(at),
                    3 => b.insert(at.min(b.len()), next() as u8),
                    4 if !b.is_empty() => {
                        b.remove(at.min(b.len() - 1));
                    }
                    _ if b.len() >= at + 4 => {
                        let v = [0u32, 9, 12, 13, 99, u32::MAX][(next() % 6) as usize];
                        b[at..at + 4].copy_from_slice(&v.to_le_bytes());
                    }
                    _ => {}
                }
            }
            runs += 1;
            if let Ok(f) = GgufFile::parse(&b) {
                parsed += 1;
                for t in &f.tensors {
                    let _ = t.to_f32();
                }
                if let Ok(once) = GgufWriter::from_gguf(&f).and_then(|w| w.to_bytes()) {
                    let again = GgufFile::parse(&once).unwrap();
                    let twice = GgufWriter::from_gguf(&again).unwrap().to_bytes().unwrap();
                    assert!(once == twice);
                }
            }
        }
        assert!(parsed > 0 && parsed < runs, "{parsed} of {runs} parsed");
        if secs.is_some() {
            #[allow(clippy::print_stderr)]
            {
                eprintln!("mutation run: {runs} inputs, {parsed} parsed, 0 panics");
            }
        }
    }

    #[cfg(feature = "fs")]
    #[test]
    fn mmap_reads_files() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("m.gguf");
        std::fs::write(&p, sample()).unwrap();
        let m = GgufMmap::open(&p).unwrap();
        let f = m.parse().unwrap();
        assert_eq!(f.tensors.len(), 3);
        let empty = dir.path().join("empty.gguf");
        std::fs::write(&empty, b"").unwrap();
        let e = GgufMmap::open(&empty).unwrap().parse().unwrap_err();
        assert!(e.to_string().contains("truncated"));
        let missing = GgufMmap::open(dir.path().join("nope.gguf")).unwrap_err();
        assert!(missing.to_string().contains("nope.gguf"));
    }
}
