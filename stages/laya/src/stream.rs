//! Streaming GGUF v3 output: the header (metadata and tensor descriptors, whose offsets
//! follow from the tensor sizes alone) is written first, then each tensor is encoded and
//! written in turn, so at most a few tensors are in memory at once.
//!
//! The layout is byte-for-byte the one `sky_gguf::GgufWriter` produces for the same keys and
//! tensors (a test holds the two together); this exists because GgufWriter keeps every
//! tensor's bytes until it writes.

use std::io::Write;
use std::path::Path;

use sky_gguf::{GgmlType, Value};

use crate::error::{LayaError, Result};

/// One tensor to stream: name, ggml dims, type and its encoded size.
pub(crate) struct Planned {
    pub name: String,
    pub dims: Vec<u64>,
    pub ty: GgmlType,
    pub bytes: u64,
}

fn put_string(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

/// A value's payload (without its type id).
fn put_value(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::U8(x) => out.push(*x),
        Value::I8(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::U16(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I16(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::U32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::F32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::Bool(x) => out.push(u8::from(*x)),
        Value::String(s) => put_string(out, s),
        Value::Array(a) => {
            out.extend_from_slice(&a.elem_type.id().to_le_bytes());
            out.extend_from_slice(&(a.items.len() as u64).to_le_bytes());
            for item in &a.items {
                put_value(out, item);
            }
        }
        Value::U64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::F64(x) => out.extend_from_slice(&x.to_le_bytes()),
    }
}

/// Everything before the tensor data, padded to `alignment`.
pub(crate) fn header(meta: &[(String, Value)], tensors: &[Planned], alignment: u64) -> Vec<u8> {
    let mut head = Vec::with_capacity(1 << 16);
    head.extend_from_slice(b"GGUF");
    head.extend_from_slice(&3u32.to_le_bytes());
    head.extend_from_slice(&(tensors.len() as u64).to_le_bytes());
    head.extend_from_slice(&(meta.len() as u64).to_le_bytes());
    for (k, v) in meta {
        put_string(&mut head, k);
        head.extend_from_slice(&v.value_type().id().to_le_bytes());
        put_value(&mut head, v);
    }
    let mut offset = 0u64;
    for t in tensors {
        put_string(&mut head, &t.name);
        head.extend_from_slice(&(t.dims.len() as u32).to_le_bytes());
        for d in &t.dims {
            head.extend_from_slice(&d.to_le_bytes());
        }
        head.extend_from_slice(&t.ty.id().to_le_bytes());
        head.extend_from_slice(&offset.to_le_bytes());
        offset = (offset + t.bytes).next_multiple_of(alignment);
    }
    let padded = (head.len() as u64).next_multiple_of(alignment) as usize;
    head.resize(padded, 0);
    head
}

/// Write the file atomically: header, then tensors encoded `batch` at a time (in parallel
/// within a batch, written in order). Returns the file size.
pub(crate) fn write_file(
    out: &Path,
    meta: &[(String, Value)],
    tensors: &[Planned],
    alignment: u64,
    batch: usize,
    encode: impl Fn(usize) -> Result<Vec<u8>> + Sync,
) -> Result<u64> {
    use rayon::prelude::*;
    let io = |e: std::io::Error| LayaError::io(out, e);
    let dir = match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let tmp = tempfile::Builder::new()
        .prefix(".skyctl-tmp-")
        .suffix(".gguf")
        .tempfile_in(dir)
        .map_err(io)?;
    let head = header(meta, tensors, alignment);
    let mut size = head.len() as u64;
    {
        let mut w = std::io::BufWriter::with_capacity(1 << 20, tmp.as_file());
        w.write_all(&head).map_err(io)?;
        let zeros = vec![0u8; alignment as usize];
        let ids: Vec<usize> = (0..tensors.len()).collect();
        for chunk in ids.chunks(batch.max(1)) {
            let encoded: Vec<Vec<u8>> = chunk
                .par_iter()
                .map(|&i| encode(i))
                .collect::<Result<_>>()?;
            for (&i, data) in chunk.iter().zip(encoded) {
                let t = &tensors[i];
                if data.len() as u64 != t.bytes {
                    return Err(LayaError::Invalid(format!(
                        "tensor {:?}: encoded {} bytes, planned {}",
                        t.name,
                        data.len(),
                        t.bytes
                    )));
                }
                w.write_all(&data).map_err(io)?;
                let pad = (t.bytes.next_multiple_of(alignment) - t.bytes) as usize;
                w.write_all(&zeros[..pad]).map_err(io)?;
                size += t.bytes + pad as u64;
            }
        }
        w.flush().map_err(io)?;
    }
    tmp.as_file().sync_all().map_err(io)?;
    readable_mode(tmp.as_file()).map_err(io)?;
    tmp.persist(out).map_err(|e| io(e.error))?;
    Ok(size)
}

/// Temporary files are created 0600; a published model or checkpoint file should be readable
/// like any other output (0644).
pub(crate) fn readable_mode(file: &std::fs::File) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        file.set_permissions(std::fs::Permissions::from_mode(0o644))?;
    }
    #[cfg(not(unix))]
    let _ = file;
    Ok(())
}
