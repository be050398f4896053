//! sky-gguf: the GGUF container and the ggml element types skyctl converts.
//!
//! - [`GgufFile::parse`] reads GGUF versions 2 and 3 from a borrowed byte slice (or a
//!   [`GgufMmap`]) without copying tensor data, and checks every count, offset, string and
//!   size against the file, so hostile input gives an [`Error`] naming what and where.
//! - [`GgufWriter`] writes version 3: keys and tensors in the order given,
//!   `general.alignment` always present, every tensor padded; same inputs, same bytes.
//! - [`GgmlType`] knows the block and byte size of every ggml type; F32, F16, BF16 and Q8_0
//!   convert to and from f32 ([`encode`], [`decode`], [`quantize_q8_0`] identical to
//!   ggml's `quantize_row_q8_0_ref`).
//!
//! The default `fs` feature adds what touches the file system ([`GgufMmap`],
//! [`GgufWriter::write_file`]) and its dependencies (memmap2, sky-fs); without it the crate
//! works on bytes only, which is what the browser build (sky-web on wasm32) links.
//!
//! Dimensions are kept in ggml order (innermost first); [`TensorInfo::shape`] gives the
//! PyTorch order.
//!
//! ```
//! use sky_gguf::{GgmlType, GgufFile, GgufWriter, Value};
//!
//! let mut w = GgufWriter::new();
//! w.add_kv("general.architecture", "modern-bert");
//! w.add_kv("tokenizer.ggml.tokens", Value::string_array(["<pad>", "a"]));
//! w.add_tensor_f32("blk.0.w", vec![32, 2], GgmlType::Q8_0, &[0.5; 64])?;
//! let bytes = w.to_bytes()?;
//!
//! let f = GgufFile::parse(&bytes)?;
//! let t = f.tensor("blk.0.w").unwrap();
//! assert_eq!((t.dims.clone(), t.shape()), (vec![32, 2], vec![2, 32]));
//! assert_eq!(f.get("general.alignment").and_then(Value::as_u32), Some(32));
//! # Ok::<(), sky_gguf::Error>(())
//! ```

mod dtype;
mod error;
mod reader;
mod types;
mod value;
mod writer;

pub use dtype::{
    bf16_to_f32, check_finite_in, decode, dequantize_q8_0, encode, f16_to_f32, f32_to_bf16,
    f32_to_f16, quantize_q8_0, quantize_q8_0_into, Q8_0_BLOCK_BYTES, QK8_0,
};
pub use error::{Error, Result};
#[cfg(feature = "fs")]
pub use reader::{mmap_file, GgufMmap};
pub use reader::{GgufFile, TensorInfo, DEFAULT_ALIGNMENT, MAGIC, MAX_ARRAY_DEPTH, MAX_DIMS};
pub use types::GgmlType;
pub use value::{Array, Value, ValueType};
pub use writer::{encode_head, GgufWriter, TensorDescriptor, MAX_TENSOR_NAME_BYTES, WRITE_VERSION};
