//! The GGUF writer: version 3, little endian, `general.alignment` always written, every
//! tensor padded, offsets computed in one pass. Same inputs, byte-identical output.

use std::collections::{HashMap, HashSet};
use std::io::Write;

use crate::dtype;
use crate::error::{Error, Result};
use crate::reader::{GgufFile, DEFAULT_ALIGNMENT, MAGIC, MAX_DIMS};
use crate::types::GgmlType;
use crate::value::{Array, Value};

/// The version the writer emits.
pub const WRITE_VERSION: u32 = 3;
/// llama.cpp's `GGML_MAX_NAME`: tensor names must be shorter than this many bytes.
pub const MAX_TENSOR_NAME_BYTES: usize = 64;
const ALIGNMENT_KEY: &str = "general.alignment";

#[derive(Debug, Clone)]
struct PendingTensor {
    name: String,
    dims: Vec<u64>,
    ty: GgmlType,
    data: Vec<u8>,
}

/// Collects metadata and tensors, then writes one GGUF v3 file.
///
/// Keys and tensors are written in the order they were added. `general.alignment` is
/// written where it was added, or appended after the other keys if it never was.
#[derive(Debug, Clone)]
pub struct GgufWriter {
    alignment: u64,
    metadata: Vec<(String, Value)>,
    key_index: HashMap<String, usize>,
    tensors: Vec<PendingTensor>,
    tensor_names: HashSet<String>,
}

impl Default for GgufWriter {
    fn default() -> Self {
        Self::new()
    }
}

impl GgufWriter {
    /// An empty writer with alignment 32.
    pub fn new() -> Self {
        Self::with_alignment(DEFAULT_ALIGNMENT)
    }

    /// An empty writer with the given alignment (a power of two; checked when writing).
    pub fn with_alignment(alignment: u64) -> Self {
        GgufWriter {
            alignment,
            metadata: Vec::new(),
            key_index: HashMap::new(),
            tensors: Vec::new(),
            tensor_names: HashSet::new(),
        }
    }

    /// A writer holding every key and tensor of a parsed file (tensor bytes copied as they
    /// are, whatever their type), with that file's alignment.
    pub fn from_gguf(file: &GgufFile<'_>) -> Result<Self> {
        let mut w = Self::with_alignment(file.alignment);
        for (k, v) in &file.metadata {
            w.add_kv(k.clone(), v.clone());
        }
        for t in &file.tensors {
            w.add_tensor(t.name.clone(), t.dims.clone(), t.ty, t.data.to_vec())?;
        }
        Ok(w)
    }

    /// The alignment the file will use.
    pub fn alignment(&self) -> u64 {
        self.alignment
    }

    /// Add a metadata pair. Re-adding a key replaces its value in its original position.
    /// Adding `general.alignment` (as u32) sets the alignment.
    pub fn add_kv(&mut self, key: impl Into<String>, value: impl Into<Value>) {
        let key = key.into();
        let value = value.into();
        if key == ALIGNMENT_KEY {
            if let Value::U32(a) = value {
                self.alignment = u64::from(a);
            }
        }
        match self.key_index.get(&key) {
            Some(&i) => self.metadata[i].1 = value,
            None => {
                self.key_index.insert(key.clone(), self.metadata.len());
                self.metadata.push((key, value));
            }
        }
    }

    /// The value added for a key.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.key_index.get(key).map(|&i| &self.metadata[i].1)
    }

    /// Metadata pairs in the order they will be written (without an appended alignment key).
    pub fn metadata(&self) -> &[(String, Value)] {
        &self.metadata
    }

    /// Number of tensors added.
    pub fn tensor_count(&self) -> usize {
        self.tensors.len()
    }

    /// Add a tensor: dimensions in ggml order (innermost first), its type, and its bytes,
    /// which must be exactly the size the dims and type give.
    pub fn add_tensor(
        &mut self,
        name: impl Into<String>,
        dims_ggml: Vec<u64>,
        ty: GgmlType,
        data: Vec<u8>,
    ) -> Result<()> {
        let name = name.into();
        let invalid = |reason: String| Err(Error::Invalid(format!("tensor {name:?}: {reason}")));
        if name.len() >= MAX_TENSOR_NAME_BYTES {
            return invalid(format!(
                "name is {} bytes, llama.cpp accepts at most {}",
                name.len(),
                MAX_TENSOR_NAME_BYTES - 1
            ));
        }
        if dims_ggml.len() > MAX_DIMS {
            return invalid(format!(
                "{} dimensions, ggml allows at most {MAX_DIMS}",
                dims_ggml.len()
            ));
        }
        if self.tensor_names.contains(&name) {
            return invalid("a tensor of this name was already added".into());
        }
        let expected = tensor_bytes(&name, &dims_ggml, ty)?;
        if data.len() as u64 != expected {
            return Err(Error::LengthMismatch {
                what: format!("data of tensor {name:?} ({} {:?})", ty.name(), dims_ggml),
                expected,
                actual: data.len() as u64,
            });
        }
        self.tensor_names.insert(name.clone());
        self.tensors.push(PendingTensor {
            name,
            dims: dims_ggml,
            ty,
            data,
        });
        Ok(())
    }

    /// Encode f32 values as `ty` (F32, F16, BF16, Q8_0) and add them as a tensor. Values that
    /// do not survive `ty` finite are refused ([`crate::check_finite_in`]).
    pub fn add_tensor_f32(
        &mut self,
        name: impl Into<String>,
        dims_ggml: Vec<u64>,
        ty: GgmlType,
        values: &[f32],
    ) -> Result<()> {
        let name = name.into();
        dtype::check_finite_in(ty, &name, values)?;
        let row = dims_ggml.first().copied().unwrap_or(1);
        let row = usize::try_from(row).map_err(|_| Error::Overflow {
            what: format!("row of tensor {name:?}"),
        })?;
        let data = dtype::encode(ty, values, row).map_err(|e| match e {
            Error::NotBlockMultiple { len, block, ty, .. } => Error::NotBlockMultiple {
                what: format!("row of tensor {name:?}"),
                len,
                block,
                ty,
            },
            other => other,
        })?;
        self.add_tensor(name, dims_ggml, ty, data)
    }

    fn check_alignment(&self) -> Result<()> {
        if let Some(v) = self.get(ALIGNMENT_KEY) {
            if !matches!(v, Value::U32(_)) {
                return Err(Error::Invalid(format!(
                    "{ALIGNMENT_KEY} must be a u32, not {}",
                    v.value_type()
                )));
            }
        }
        check_alignment_value(self.alignment)
    }

    /// Header, metadata, tensor descriptors and padding: everything before the data.
    fn head(&self) -> Result<Vec<u8>> {
        self.check_alignment()?;
        let alignment_value;
        let mut meta: Vec<(&str, &Value)> =
            self.metadata.iter().map(|(k, v)| (k.as_str(), v)).collect();
        if !self.key_index.contains_key(ALIGNMENT_KEY) {
            // alignment <= u32::MAX was checked above.
            alignment_value = Value::U32(self.alignment as u32);
            meta.push((ALIGNMENT_KEY, &alignment_value));
        }
        let tensors: Vec<TensorDescriptor<'_>> = self
            .tensors
            .iter()
            .map(|t| TensorDescriptor {
                name: &t.name,
                dims: &t.dims,
                ty: t.ty,
                bytes: t.data.len() as u64,
            })
            .collect();
        encode_head(&meta, &tensors, self.alignment)
    }

    /// Total size of the file that will be written.
    pub fn file_size(&self) -> Result<u64> {
        let head = self.head()?.len() as u64;
        Ok(self.tensors.iter().fold(head, |a, t| {
            a + (t.data.len() as u64).next_multiple_of(self.alignment)
        }))
    }

    /// Write the file to `w`.
    pub fn write_to(&self, w: &mut impl Write) -> Result<()> {
        let head = self.head()?;
        w.write_all(&head).map_err(Error::Write)?;
        let zeros = vec![0u8; self.alignment as usize];
        for t in &self.tensors {
            w.write_all(&t.data).map_err(Error::Write)?;
            let pad = (t.data.len() as u64).next_multiple_of(self.alignment) - t.data.len() as u64;
            w.write_all(&zeros[..pad as usize]).map_err(Error::Write)?;
        }
        Ok(())
    }

    /// The whole file in memory.
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        let mut out = Vec::with_capacity(self.file_size()? as usize);
        self.write_to(&mut out)?;
        Ok(out)
    }

    /// Write the file atomically: into a temporary file in the same folder, synced, then
    /// renamed over `path`. On error nothing is left at `path` (an old file stays intact).
    #[cfg(feature = "fs")]
    pub fn write_file(&self, path: &std::path::Path) -> Result<()> {
        let io = |err| Error::Io {
            path: path.to_path_buf(),
            err,
        };
        let tmp = sky_fs::AtomicFile::create(path).map_err(io)?;
        {
            let mut bw = std::io::BufWriter::with_capacity(1 << 20, tmp.as_file());
            self.write_to(&mut bw).map_err(|e| match e {
                Error::Write(err) => io(err),
                other => other,
            })?;
            bw.flush().map_err(io)?;
        }
        tmp.commit().map_err(io)?;
        Ok(())
    }
}

fn check_alignment_value(alignment: u64) -> Result<()> {
    if !alignment.is_power_of_two() || alignment > u64::from(u32::MAX) {
        return Err(Error::Invalid(format!(
            "alignment {alignment} is not a power of two that fits in u32"
        )));
    }
    Ok(())
}

/// A tensor as the header describes it: name, dims in ggml order, type and data size in bytes.
#[derive(Debug, Clone, Copy)]
pub struct TensorDescriptor<'a> {
    /// Tensor name.
    pub name: &'a str,
    /// Dimensions, innermost first.
    pub dims: &'a [u64],
    /// Element type.
    pub ty: GgmlType,
    /// Size of its data (the next tensor starts at the following multiple of the alignment).
    pub bytes: u64,
}

/// Everything a GGUF v3 file holds before its tensor data: magic, version, counts, the
/// metadata in the order given, the tensor descriptors (offsets follow from the sizes and
/// `alignment`) and the padding up to the data. For writers that stream tensor data
/// themselves; [`GgufWriter`] uses it too, so both lay files out identically. `meta` must carry
/// `general.alignment` when `alignment` is not the default 32.
pub fn encode_head(
    meta: &[(&str, &Value)],
    tensors: &[TensorDescriptor<'_>],
    alignment: u64,
) -> Result<Vec<u8>> {
    check_alignment_value(alignment)?;
    let mut head = Vec::with_capacity(4096);
    head.extend_from_slice(&MAGIC);
    head.extend_from_slice(&WRITE_VERSION.to_le_bytes());
    head.extend_from_slice(&(tensors.len() as u64).to_le_bytes());
    head.extend_from_slice(&(meta.len() as u64).to_le_bytes());
    for (k, v) in meta {
        put_string(&mut head, k);
        head.extend_from_slice(&v.value_type().id().to_le_bytes());
        put_value(&mut head, v, k)?;
    }
    let mut offset = 0u64;
    for t in tensors {
        put_string(&mut head, t.name);
        head.extend_from_slice(&(t.dims.len() as u32).to_le_bytes());
        for d in t.dims {
            head.extend_from_slice(&d.to_le_bytes());
        }
        head.extend_from_slice(&t.ty.id().to_le_bytes());
        head.extend_from_slice(&offset.to_le_bytes());
        offset = (offset + t.bytes).next_multiple_of(alignment);
    }
    let padded = (head.len() as u64).next_multiple_of(alignment);
    head.resize(padded as usize, 0);
    Ok(head)
}

/// Bytes a tensor of these dims and type takes (without padding).
fn tensor_bytes(name: &str, dims: &[u64], ty: GgmlType) -> Result<u64> {
    let ne0 = dims.first().copied().unwrap_or(1);
    let row = ty.row_bytes(ne0).map_err(|e| match e {
        Error::UnknownType { id, .. } => Error::UnknownType {
            what: format!("tensor {name:?}"),
            id,
        },
        Error::NotBlockMultiple { len, block, ty, .. } => Error::NotBlockMultiple {
            what: format!("row of tensor {name:?}"),
            len,
            block,
            ty,
        },
        other => other,
    })?;
    dims.iter()
        .skip(1)
        .try_fold(row, |a, &d| a.checked_mul(d))
        .ok_or_else(|| Error::Overflow {
            what: format!("tensor {name:?}"),
        })
}

fn put_string(buf: &mut Vec<u8>, s: &str) {
    buf.extend_from_slice(&(s.len() as u64).to_le_bytes());
    buf.extend_from_slice(s.as_bytes());
}

/// A float metadata value must be finite: no file this crate writes carries NaN or inf (a
/// temperature, an epsilon, an exact outlier weight), so a reader never computes with one.
fn finite_float(key: &str, index: Option<usize>, x: f64) -> Result<()> {
    if x.is_finite() {
        return Ok(());
    }
    let at = index.map(|i| format!(" at index {i}")).unwrap_or_default();
    Err(Error::Invalid(format!(
        "metadata key {key:?}: value {x}{at} is not finite"
    )))
}

fn put_value(buf: &mut Vec<u8>, v: &Value, key: &str) -> Result<()> {
    match v {
        Value::U8(x) => buf.push(*x),
        Value::I8(x) => buf.extend_from_slice(&x.to_le_bytes()),
        Value::U16(x) => buf.extend_from_slice(&x.to_le_bytes()),
        Value::I16(x) => buf.extend_from_slice(&x.to_le_bytes()),
        Value::U32(x) => buf.extend_from_slice(&x.to_le_bytes()),
        Value::I32(x) => buf.extend_from_slice(&x.to_le_bytes()),
        Value::F32(x) => {
            finite_float(key, None, f64::from(*x))?;
            buf.extend_from_slice(&x.to_le_bytes())
        }
        Value::Bool(x) => buf.push(u8::from(*x)),
        Value::String(s) => put_string(buf, s),
        Value::U64(x) => buf.extend_from_slice(&x.to_le_bytes()),
        Value::I64(x) => buf.extend_from_slice(&x.to_le_bytes()),
        Value::F64(x) => {
            finite_float(key, None, *x)?;
            buf.extend_from_slice(&x.to_le_bytes())
        }
        Value::Array(Array { elem_type, items }) => {
            buf.extend_from_slice(&elem_type.id().to_le_bytes());
            buf.extend_from_slice(&(items.len() as u64).to_le_bytes());
            for (i, item) in items.iter().enumerate() {
                if item.value_type() != *elem_type {
                    return Err(Error::Invalid(format!(
                        "metadata key {key:?}: array of {elem_type} has a {} at index {i}",
                        item.value_type()
                    )));
                }
                match item {
                    Value::F32(x) => finite_float(key, Some(i), f64::from(*x))?,
                    Value::F64(x) => finite_float(key, Some(i), *x)?,
                    _ => {}
                }
                put_value(buf, item, key)?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::value::ValueType;

    fn all_values() -> Vec<(&'static str, Value)> {
        vec![
            ("u8", Value::U8(200)),
            ("i8", Value::I8(-100)),
            ("u16", Value::U16(60_000)),
            ("i16", Value::I16(-30_000)),
            ("u32", Value::U32(4_000_000_000)),
            ("i32", Value::I32(-2_000_000_000)),
            ("f32", Value::F32(1.064_769_9)),
            ("bool", Value::Bool(true)),
            ("string", Value::from("h\u{e9}llo")),
            ("u64", Value::U64(u64::MAX)),
            ("i64", Value::I64(i64::MIN)),
            ("f64", Value::F64(-1e300)),
            (
                "strings",
                Value::string_array(["a".to_string(), String::new()]),
            ),
            (
                "nested",
                Value::array(
                    ValueType::Array,
                    vec![Value::f32_array([1.0, 2.0]), Value::f32_array([])],
                )
                .unwrap(),
            ),
        ]
    }

    fn writer() -> GgufWriter {
        let mut w = GgufWriter::new();
        for (k, v) in all_values() {
            w.add_kv(k, v);
        }
        w.add_tensor_f32(
            "t.f16",
            vec![3, 2],
            GgmlType::F16,
            &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0],
        )
        .unwrap();
        w.add_tensor("t.q4k", vec![256], GgmlType::Other(12), vec![7u8; 144])
            .unwrap();
        w
    }

    #[test]
    fn round_trip_every_value_type() {
        let bytes = writer().to_bytes().unwrap();
        let f = GgufFile::parse(&bytes).unwrap();
        let mut want = all_values();
        want.push(("general.alignment", Value::U32(32)));
        assert_eq!(f.metadata.len(), want.len());
        for ((k, v), (wk, wv)) in f.metadata.iter().zip(&want) {
            assert_eq!(k, wk);
            assert_eq!(v, wv, "{k}");
        }
        let t = f.tensor("t.f16").unwrap();
        assert_eq!((t.dims.clone(), t.shape()), (vec![3, 2], vec![2, 3]));
        assert_eq!(t.to_f32().unwrap(), vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        assert_eq!(f.tensor("t.q4k").unwrap().data, &[7u8; 144][..]);
        assert_eq!(f.tensor("t.q4k").unwrap().offset, 32);
        assert_eq!(bytes.len() as u64, writer().file_size().unwrap());
        assert_eq!(bytes.len() % 32, 0);
    }

    #[test]
    fn output_is_deterministic_and_copies_are_identical() {
        let a = writer().to_bytes().unwrap();
        assert_eq!(a, writer().to_bytes().unwrap());
        let f = GgufFile::parse(&a).unwrap();
        assert_eq!(GgufWriter::from_gguf(&f).unwrap().to_bytes().unwrap(), a);
    }

    #[test]
    fn re_adding_a_key_keeps_its_position() {
        let mut w = GgufWriter::new();
        w.add_kv("a", 1u32);
        w.add_kv("b", 2u32);
        w.add_kv("a", "three");
        let bytes = w.to_bytes().unwrap();
        let f = GgufFile::parse(&bytes).unwrap();
        let keys: Vec<_> = f.metadata.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["a", "b", "general.alignment"]);
        assert_eq!(f.get("a").and_then(Value::as_str), Some("three"));
    }

    #[test]
    fn alignment_key_and_padding() {
        let mut w = GgufWriter::with_alignment(64);
        w.add_kv("general.architecture", "x");
        w.add_tensor("a", vec![3], GgmlType::F32, vec![0; 12])
            .unwrap();
        w.add_tensor("b", vec![3], GgmlType::F32, vec![1; 12])
            .unwrap();
        let bytes = w.to_bytes().unwrap();
        let f = GgufFile::parse(&bytes).unwrap();
        assert_eq!(f.alignment, 64);
        assert_eq!(f.get("general.alignment"), Some(&Value::U32(64)));
        assert_eq!(f.tensor("b").unwrap().offset, 64);
        assert_eq!(f.data_offset() % 64, 0);

        // An explicitly added key sets the alignment and keeps its place.
        let mut w = GgufWriter::new();
        w.add_kv("general.alignment", 16u32);
        w.add_kv("z", 0u8);
        let bytes = w.to_bytes().unwrap();
        let f = GgufFile::parse(&bytes).unwrap();
        assert_eq!(f.alignment, 16);
        assert_eq!(f.metadata[0].0, "general.alignment");
        assert_eq!(f.metadata.len(), 2);

        let mut w = GgufWriter::new();
        w.add_kv("general.alignment", 16u64);
        assert!(w
            .to_bytes()
            .unwrap_err()
            .to_string()
            .contains("must be a u32"));
        assert!(GgufWriter::with_alignment(48).to_bytes().is_err());
    }

    #[test]
    fn add_tensor_checks_its_input() {
        let mut w = GgufWriter::new();
        let e = w
            .add_tensor("a", vec![4, 2], GgmlType::F32, vec![0; 31])
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "data of tensor \"a\" (F32 [4, 2]): expected 32 bytes, got 31"
        );
        w.add_tensor("a", vec![4, 2], GgmlType::F32, vec![0; 32])
            .unwrap();
        let e = w
            .add_tensor("a", vec![1], GgmlType::F32, vec![0; 4])
            .unwrap_err();
        assert!(e.to_string().contains("already added"), "{e}");
        let e = w
            .add_tensor_f32("q", vec![33, 1], GgmlType::Q8_0, &[0.0; 33])
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "row of tensor \"q\": 33 values do not split into blocks of 32 (Q8_0)"
        );
        let e = w
            .add_tensor("u", vec![4], GgmlType::Other(99), vec![])
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "tensor \"u\": ggml type 99 has no known byte size"
        );
        let e = w
            .add_tensor("x".repeat(64), vec![1], GgmlType::F32, vec![0; 4])
            .unwrap_err();
        assert!(e.to_string().contains("at most 63"), "{e}");
        let e = w
            .add_tensor("d", vec![1; 5], GgmlType::F32, vec![0; 4])
            .unwrap_err();
        assert!(e.to_string().contains("5 dimensions"), "{e}");
        let bad = Value::Array(Array {
            elem_type: ValueType::U8,
            items: vec![Value::U8(1), Value::I8(1)],
        });
        w.add_kv("bad", bad);
        let e = w.to_bytes().unwrap_err();
        assert!(
            e.to_string().contains("array of u8 has a i8 at index 1"),
            "{e}"
        );
    }

    #[test]
    fn writer_refuses_values_that_do_not_stay_finite() {
        let mut w = GgufWriter::new();
        let e = w
            .add_tensor_f32("h", vec![2], GgmlType::F16, &[1.0, 1e10])
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "tensor \"h\": value 1e10 at flat index 1 overflows F16 to inf (largest finite F16: 65504)"
        );
        w.add_tensor_f32("f", vec![2], GgmlType::F32, &[1.0, 1e10])
            .unwrap();
        w.add_kv("t", Value::F32(f32::INFINITY));
        let e = w.to_bytes().unwrap_err();
        assert_eq!(e.to_string(), "metadata key \"t\": value inf is not finite");
        w.add_kv("t", Value::f32_array(vec![1.0, f32::NAN]));
        let e = w.to_bytes().unwrap_err();
        assert_eq!(
            e.to_string(),
            "metadata key \"t\": value NaN at index 1 is not finite"
        );
        w.add_kv("t", Value::F64(0.5));
        w.to_bytes().unwrap();
    }

    #[cfg(feature = "fs")]
    #[test]
    fn write_file_is_atomic() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("m.gguf");
        writer().write_file(&p).unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), writer().to_bytes().unwrap());
        // A failing write leaves the old file intact and no temp file behind.
        let mut bad = GgufWriter::new();
        bad.add_kv("general.alignment", "x");
        assert!(bad.write_file(&p).is_err());
        assert_eq!(std::fs::read(&p).unwrap(), writer().to_bytes().unwrap());
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 1, "{names:?}");
        let e = writer()
            .write_file(&dir.path().join("no/such/dir.gguf"))
            .unwrap_err();
        assert!(e.to_string().contains("no/such/dir.gguf"), "{e}");
    }
}
