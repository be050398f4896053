//! Streaming GGUF v3 output: the header (metadata and tensor descriptors, whose offsets
//! follow from the tensor sizes alone) is written first, then each tensor is encoded and
//! written in turn, so at most a few tensors are in memory at once.
//!
//! The header comes from `sky_gguf::encode_head`, the code `sky_gguf::GgufWriter` uses, so the
//! file is byte-for-byte what GgufWriter produces for the same keys and tensors (a test holds
//! the two together); this exists because GgufWriter keeps every tensor's bytes until it
//! writes.

use std::io::Write;
use std::path::Path;

use sky_gguf::{GgmlType, TensorDescriptor, Value};

use crate::error::{LayaError, Result};

/// One tensor to stream: name, ggml dims, type and its encoded size.
pub(crate) struct Planned {
    pub name: String,
    pub dims: Vec<u64>,
    pub ty: GgmlType,
    pub bytes: u64,
}

/// Everything before the tensor data, padded to `alignment` (sky-gguf's own layout code).
pub(crate) fn header(
    meta: &[(String, Value)],
    tensors: &[Planned],
    alignment: u64,
) -> Result<Vec<u8>> {
    let meta: Vec<(&str, &Value)> = meta.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let tensors: Vec<TensorDescriptor<'_>> = tensors
        .iter()
        .map(|t| TensorDescriptor {
            name: &t.name,
            dims: &t.dims,
            ty: t.ty,
            bytes: t.bytes,
        })
        .collect();
    sky_gguf::encode_head(&meta, &tensors, alignment).map_err(|e| LayaError::gguf("GGUF header", e))
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
    let tmp = sky_fs::AtomicFile::create(out).map_err(io)?;
    let head = header(meta, tensors, alignment)?;
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
    tmp.commit().map_err(io)?;
    Ok(size)
}
