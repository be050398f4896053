//! A Laya checkpoint: configs, tokenizer, and safetensors weights (memory-mapped from a
//! directory, or the same files in memory).

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use safetensors::{Dtype, SafeTensors};
use serde_json::Value as Json;

use crate::config::{
    parse_json_object, read_file, read_json_object, read_optional, AgentConfig, EncoderConfig,
    Size, AGENT_WHAT, ENCODER_WHAT,
};
use crate::error::{LayaError, Result};
use crate::names::{gguf_name, is_dropped};
use crate::tokenizer::{LayaTokenizer, TokenizerFiles};

/// Element type of a source tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourceDtype {
    /// 32-bit float.
    F32,
    /// IEEE half.
    F16,
    /// bfloat16.
    BF16,
}

impl SourceDtype {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            SourceDtype::F32 => 4,
            SourceDtype::F16 | SourceDtype::BF16 => 2,
        }
    }
}

/// One tensor the converter keeps, in GGUF order.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorEntry {
    /// Name in the safetensors file.
    pub pytorch_name: String,
    /// Name in GGUF.
    pub gguf_name: String,
    /// PyTorch shape (outermost first).
    pub shape: Vec<usize>,
    /// Source element type.
    pub dtype: SourceDtype,
    shard: usize,
    start: usize,
    end: usize,
}

impl TensorEntry {
    /// Number of elements.
    pub fn n_elements(&self) -> usize {
        self.shape.iter().product()
    }

    /// ggml dims: the PyTorch shape reversed (innermost first), the same bytes.
    pub fn ggml_dims(&self) -> Vec<u64> {
        self.shape.iter().rev().map(|&d| d as u64).collect()
    }
}

struct Shard {
    path: PathBuf,
    bytes: ShardBytes,
}

/// A safetensors file's bytes, read from a directory or copied from memory.
enum ShardBytes {
    Owned(Vec<u8>),
}

impl ShardBytes {
    fn as_slice(&self) -> &[u8] {
        match self {
            ShardBytes::Owned(v) => v,
        }
    }
}

/// A checkpoint's files in memory, for [`LayaCheckpoint::from_files`] (single-file weights).
#[derive(Debug, Clone, Copy, Default)]
pub struct CheckpointFiles<'a> {
    /// `model.safetensors`.
    pub weights: &'a [u8],
    /// `encoder/config.json`.
    pub encoder_config: &'a [u8],
    /// `rl_agent_config.json`.
    pub agent_config: &'a [u8],
    /// `tokenizer/tokenizer.json`.
    pub tokenizer_json: &'a [u8],
    /// `tokenizer/tokenizer_config.json`.
    pub tokenizer_config: &'a [u8],
    /// The root `config.json`, if any.
    pub root_config: Option<&'a [u8]>,
    /// `tokenizer/config.json`, if any.
    pub tokenizer_model_config: Option<&'a [u8]>,
}

/// A checkpoint's files as read, each read error kept until the loader reaches that file
/// (so a directory and the same files in memory fail with the same first error).
struct Sources<'a> {
    encoder: Result<Cow<'a, [u8]>>,
    agent: Result<Cow<'a, [u8]>>,
    root_config: Result<Option<Cow<'a, [u8]>>>,
    tokenizer: TokenizerFiles<'a>,
    shards: Vec<Result<Shard>>,
}

/// An opened Laya checkpoint directory.
///
/// The layout (spec section 1): `model.safetensors` (or `model-*.safetensors` with
/// `model.safetensors.index.json`), `encoder/config.json`, `rl_agent_config.json`,
/// `tokenizer/tokenizer.json` + `tokenizer/tokenizer_config.json`, and optionally a root
/// `config.json` (written by the seed's exporter, not by Laya; not used for
/// hyperparameters). Shapes are checked against the configs when the directory is opened.
pub struct LayaCheckpoint {
    /// The directory.
    pub dir: PathBuf,
    /// `encoder/config.json`.
    pub encoder: EncoderConfig,
    /// `rl_agent_config.json`.
    pub agent: AgentConfig,
    /// The root `config.json`, when present.
    pub root_config: Option<serde_json::Map<String, Json>>,
    /// The tokenizer files.
    pub tokenizer: LayaTokenizer,
    shards: Vec<Shard>,
    tensors: Vec<TensorEntry>,
}

impl std::fmt::Debug for LayaCheckpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LayaCheckpoint")
            .field("dir", &self.dir)
            .field("encoder", &self.encoder)
            .field("agent", &self.agent)
            .field("tensors", &self.tensors.len())
            .finish()
    }
}

/// One expected tensor: name, shape, and the config values that give the shape.
#[derive(Debug, Clone)]
pub struct ExpectedTensor {
    /// PyTorch name.
    pub name: String,
    /// Shape.
    pub shape: Vec<usize>,
    /// Which config values give the shape (for messages).
    pub why: String,
    /// False only for `encoder.layers.0.attn_norm.weight` (Identity in ModernBERT).
    pub required: bool,
}

/// Every tensor a Laya model of these configs has (act head and temperature excluded).
pub fn expected_tensors(enc: &EncoderConfig, agent: &AgentConfig) -> Vec<ExpectedTensor> {
    let (d, v, f) = (enc.hidden_size, enc.vocab_size, enc.intermediate_size);
    let mut out = Vec::new();
    let mut add = |name: String, shape: Vec<usize>, why: &str, required: bool| {
        out.push(ExpectedTensor {
            name,
            shape,
            why: why.to_string(),
            required,
        })
    };
    let dw = format!("hidden_size {d}");
    add(
        "encoder.embeddings.tok_embeddings.weight".into(),
        vec![v, d],
        &format!("vocab_size {v}, hidden_size {d}"),
        true,
    );
    add("encoder.embeddings.norm.weight".into(), vec![d], &dw, true);
    for i in 0..enc.num_hidden_layers {
        let p = format!("encoder.layers.{i}");
        add(format!("{p}.attn_norm.weight"), vec![d], &dw, i > 0);
        add(
            format!("{p}.attn.Wqkv.weight"),
            vec![3 * d, d],
            &format!("3 x hidden_size {d}"),
            true,
        );
        add(format!("{p}.attn.Wo.weight"), vec![d, d], &dw, true);
        add(format!("{p}.mlp_norm.weight"), vec![d], &dw, true);
        add(
            format!("{p}.mlp.Wi.weight"),
            vec![2 * f, d],
            &format!("2 x intermediate_size {f}, hidden_size {d}"),
            true,
        );
        add(
            format!("{p}.mlp.Wo.weight"),
            vec![d, f],
            &format!("hidden_size {d}, intermediate_size {f}"),
            true,
        );
    }
    add("encoder.final_norm.weight".into(), vec![d], &dw, true);
    let h4 = format!("4 x hidden_size {d}");
    for k in 0..agent.head_layers {
        let p = format!("head.layers.{k}");
        add(
            format!("{p}.self_attn.in_proj_weight"),
            vec![3 * d, d],
            &format!("3 x hidden_size {d}"),
            true,
        );
        add(
            format!("{p}.self_attn.in_proj_bias"),
            vec![3 * d],
            &format!("3 x hidden_size {d}"),
            true,
        );
        add(
            format!("{p}.self_attn.out_proj.weight"),
            vec![d, d],
            &dw,
            true,
        );
        add(format!("{p}.self_attn.out_proj.bias"), vec![d], &dw, true);
        add(format!("{p}.linear1.weight"), vec![4 * d, d], &h4, true);
        add(format!("{p}.linear1.bias"), vec![4 * d], &h4, true);
        add(format!("{p}.linear2.weight"), vec![d, 4 * d], &h4, true);
        add(format!("{p}.linear2.bias"), vec![d], &dw, true);
        for n in ["norm1", "norm2"] {
            add(format!("{p}.{n}.weight"), vec![d], &dw, true);
            add(format!("{p}.{n}.bias"), vec![d], &dw, true);
        }
    }
    add(
        "type_emb.weight".into(),
        vec![3, d],
        &format!("3 question types, hidden_size {d}"),
        true,
    );
    add("scorer.0.weight".into(), vec![d], &dw, true);
    add("scorer.0.bias".into(), vec![d], &dw, true);
    add("scorer.1.weight".into(), vec![d, d], &dw, true);
    add("scorer.1.bias".into(), vec![d], &dw, true);
    add("scorer.3.weight".into(), vec![1, d], &dw, true);
    add("scorer.3.bias".into(), vec![1], "one score", true);
    out
}

/// The safetensors files of a checkpoint, in the order their tensors are listed (sorted
/// file names, as llama.cpp's converter processes parts).
fn weight_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let single = dir.join("model.safetensors");
    if single.is_file() {
        return Ok(vec![single]);
    }
    let index = dir.join("model.safetensors.index.json");
    if !index.is_file() {
        return Err(LayaError::MissingFile {
            path: single,
            what: "the weights (or model.safetensors.index.json for sharded weights)",
        });
    }
    let map = read_json_object(&index, "model.safetensors.index.json")?;
    let wm = map
        .get("weight_map")
        .and_then(Json::as_object)
        .ok_or_else(|| LayaError::key(&index, "weight_map", "missing or not an object"))?;
    let mut files = std::collections::BTreeSet::new();
    for (name, file) in wm {
        let file = file.as_str().ok_or_else(|| {
            LayaError::key(&index, format!("weight_map.{name}"), "expected a file name")
        })?;
        if file.contains('/') || file.contains('\\') || file == ".." {
            return Err(LayaError::key(
                &index,
                format!("weight_map.{name}"),
                format!("{file:?} is not a plain file name"),
            ));
        }
        files.insert(file.to_string());
    }
    if files.is_empty() {
        return Err(LayaError::key(&index, "weight_map", "lists no files"));
    }
    Ok(files.into_iter().map(|f| dir.join(f)).collect())
}

/// Read the safetensors files of a checkpoint directory.
fn map_shards(dir: &Path) -> Vec<Result<Shard>> {
    let paths = match weight_files(dir) {
        Ok(p) => p,
        Err(e) => return vec![Err(e)],
    };
    let map = |path: PathBuf| -> Result<Shard> {
        // Read, not mapped: a checkpoint truncated while we convert it (a trainer writing it
        // anew) would kill the process with SIGBUS, the whole build with it; read, it is a
        // short file, which the reader or the safetensors header check names.
        let bytes =
            sky_fs::read(&path, sky_fs::MODEL).map_err(|e| LayaError::io(&path, e.into()))?;
        Ok(Shard {
            path,
            bytes: ShardBytes::Owned(bytes),
        })
    };
    paths.into_iter().map(map).collect()
}

/// [`LayaError::NotACheckpoint`] for a directory with neither config (some other folder, not
/// a checkpoint with a file missing, whose own error names that file).
pub fn not_a_checkpoint(dir: &Path) -> Option<LayaError> {
    let none = !dir.join("encoder").join("config.json").exists()
        && !dir.join("rl_agent_config.json").exists();
    none.then(|| LayaError::NotACheckpoint {
        path: dir.to_path_buf(),
    })
}

impl LayaCheckpoint {
    /// Open a Laya directory: parse the configs and the tokenizer, map the weights, and
    /// check every tensor's name, dtype and shape against the configs (the first
    /// inconsistency is reported by tensor name).
    pub fn open(dir: impl AsRef<Path>) -> Result<LayaCheckpoint> {
        let dir = dir.as_ref();
        if !dir.is_dir() {
            return Err(LayaError::MissingFile {
                path: dir.to_path_buf(),
                what: "a Laya checkpoint directory",
            });
        }
        if let Some(e) = not_a_checkpoint(dir) {
            return Err(e);
        }
        let owned = |b: Result<Option<Vec<u8>>>| b.map(|b| b.map(Cow::Owned));
        LayaCheckpoint::from_sources(
            dir,
            Sources {
                encoder: read_file(
                    &dir.join("encoder").join("config.json"),
                    ENCODER_WHAT,
                    Size::Config,
                )
                .map(Cow::Owned),
                agent: read_file(&dir.join("rl_agent_config.json"), AGENT_WHAT, Size::Config)
                    .map(Cow::Owned),
                root_config: owned(read_optional(&dir.join("config.json"), "config.json")),
                tokenizer: TokenizerFiles::read(&dir.join("tokenizer")),
                shards: map_shards(dir),
            },
        )
    }

    /// [`LayaCheckpoint::open`] on files in memory, with the same checks and errors (paths
    /// under `dir`, which is not read). The weights are copied.
    pub fn from_files(
        dir: impl AsRef<Path>,
        files: &CheckpointFiles<'_>,
    ) -> Result<LayaCheckpoint> {
        let dir = dir.as_ref();
        let tokenizer = TokenizerFiles {
            json: Ok(Cow::Borrowed(files.tokenizer_json)),
            config: Ok(Cow::Borrowed(files.tokenizer_config)),
            model_config: Ok(files.tokenizer_model_config.map(Cow::Borrowed)),
        };
        let shard = Shard {
            path: dir.join("model.safetensors"),
            bytes: ShardBytes::Owned(files.weights.to_vec()),
        };
        LayaCheckpoint::from_sources(
            dir,
            Sources {
                encoder: Ok(Cow::Borrowed(files.encoder_config)),
                agent: Ok(Cow::Borrowed(files.agent_config)),
                root_config: Ok(files.root_config.map(Cow::Borrowed)),
                tokenizer,
                shards: vec![Ok(shard)],
            },
        )
    }

    /// Parse and check a checkpoint's files: what `open` and `from_files` share.
    fn from_sources(dir: &Path, src: Sources<'_>) -> Result<LayaCheckpoint> {
        let encoder =
            EncoderConfig::parse(&dir.join("encoder").join("config.json"), &src.encoder?)?;
        let agent = AgentConfig::parse(&dir.join("rl_agent_config.json"), &src.agent?)?;
        crate::config::validate(
            &dir.join("encoder").join("config.json"),
            &encoder,
            &dir.join("rl_agent_config.json"),
            &agent,
        )?;
        let root_config = match src.root_config? {
            Some(bytes) => Some(parse_json_object(&dir.join("config.json"), &bytes)?),
            None => None,
        };
        let tokenizer = LayaTokenizer::from_files(&dir.join("tokenizer"), src.tokenizer)?;

        let mut shards = Vec::new();
        let mut found: Vec<(String, usize, safetensors::tensor::TensorInfo, usize)> = Vec::new();
        let mut seen: BTreeMap<String, usize> = BTreeMap::new();
        for shard_read in src.shards {
            let Shard { path, bytes } = shard_read?;
            let map = bytes.as_slice();
            let len = map.len();
            if len < 8 {
                return Err(LayaError::Safetensors {
                    path,
                    reason: format!("{len} bytes, too short for a header"),
                });
            }
            let (header_len, meta) =
                SafeTensors::read_metadata(map).map_err(|e| LayaError::Safetensors {
                    path: path.clone(),
                    reason: safetensors_reason(&e, map.len()),
                })?;
            let data_start = 8 + header_len;
            let shard = shards.len();
            let mut names: Vec<(String, safetensors::tensor::TensorInfo)> = meta
                .tensors()
                .into_iter()
                .map(|(n, i)| (n, i.clone()))
                .collect();
            names.sort_by(|a, b| a.0.cmp(&b.0));
            for (name, info) in names {
                if let Some(&prev) = seen.get(&name) {
                    return Err(LayaError::DuplicateTensor {
                        name,
                        first: shards
                            .get(prev)
                            .map_or_else(|| path.clone(), |s: &Shard| s.path.clone()),
                        second: path.clone(),
                    });
                }
                seen.insert(name.clone(), shard);
                found.push((name, shard, info, data_start));
            }
            shards.push(Shard { path, bytes });
        }

        let expected = expected_tensors(&encoder, &agent);
        let exp_by_name: BTreeMap<&str, &ExpectedTensor> =
            expected.iter().map(|e| (e.name.as_str(), e)).collect();
        let n_enc = encoder.num_hidden_layers;
        let mut tensors = Vec::new();
        for (name, shard, info, data_start) in found {
            if is_dropped(&name) {
                continue;
            }
            let path = &shards[shard].path;
            let (Some(exp), Some(gg)) = (exp_by_name.get(name.as_str()), gguf_name(&name, n_enc))
            else {
                return Err(LayaError::UnknownTensor {
                    name,
                    path: path.clone(),
                });
            };
            let dtype = match info.dtype {
                Dtype::F32 => SourceDtype::F32,
                Dtype::F16 => SourceDtype::F16,
                Dtype::BF16 => SourceDtype::BF16,
                other => {
                    return Err(LayaError::UnsupportedDtype {
                        name,
                        path: path.clone(),
                        dtype: format!("{other:?}"),
                    })
                }
            };
            if info.shape != exp.shape {
                return Err(LayaError::Shape {
                    name,
                    found: info.shape.clone(),
                    expected: exp.shape.clone(),
                    why: exp.why.clone(),
                });
            }
            let (s, e) = info.data_offsets;
            let (start, end) = (data_start + s, data_start + e);
            let n: usize = info.shape.iter().product();
            if end > shards[shard].bytes.as_slice().len()
                || e.checked_sub(s) != Some(n * dtype.size())
            {
                return Err(LayaError::Safetensors {
                    path: path.clone(),
                    reason: format!(
                        "tensor {name:?}: data offsets {s}..{e} do not fit the file or the shape"
                    ),
                });
            }
            tensors.push(TensorEntry {
                pytorch_name: name,
                gguf_name: gg,
                shape: info.shape.clone(),
                dtype,
                shard,
                start,
                end,
            });
        }
        for exp in expected.iter().filter(|e| e.required) {
            if !tensors.iter().any(|t| t.pytorch_name == exp.name) {
                return Err(LayaError::MissingTensor {
                    name: exp.name.clone(),
                    expected: exp.shape.clone(),
                    dir: dir.to_path_buf(),
                });
            }
        }
        Ok(LayaCheckpoint {
            dir: dir.to_path_buf(),
            encoder,
            agent,
            root_config,
            tokenizer,
            shards,
            tensors,
        })
    }

    /// The kept tensors in GGUF order (llama.cpp's converter order: parts in sorted file
    /// order, names sorted within each part, dropped tensors left out).
    pub fn tensors(&self) -> &[TensorEntry] {
        &self.tensors
    }

    /// A tensor by PyTorch name.
    pub fn tensor(&self, pytorch_name: &str) -> Option<&TensorEntry> {
        self.tensors.iter().find(|t| t.pytorch_name == pytorch_name)
    }

    /// The safetensors file a tensor lives in.
    pub fn tensor_path(&self, t: &TensorEntry) -> &Path {
        &self.shards[t.shard].path
    }

    /// The raw little-endian bytes of a tensor as stored.
    pub fn raw_bytes(&self, t: &TensorEntry) -> &[u8] {
        &self.shards[t.shard].bytes.as_slice()[t.start..t.end]
    }

    /// A tensor's values converted to f32.
    pub fn read_f32(&self, t: &TensorEntry) -> Vec<f32> {
        let raw = self.raw_bytes(t);
        let mut out = vec![0f32; t.n_elements()];
        decode_into(t.dtype, raw, &mut out);
        out
    }

    /// Iterate the kept tensors as (gguf name, PyTorch name, PyTorch shape, f32 data).
    pub fn iter_f32(&self) -> impl Iterator<Item = (&str, &str, &[usize], Vec<f32>)> + '_ {
        self.tensors.iter().map(|t| {
            (
                t.gguf_name.as_str(),
                t.pytorch_name.as_str(),
                t.shape.as_slice(),
                self.read_f32(t),
            )
        })
    }

    /// Total number of parameters of the kept tensors.
    pub fn n_params(&self) -> usize {
        self.tensors.iter().map(TensorEntry::n_elements).sum()
    }

    /// The directory name (the default `general.name`).
    pub fn dir_name(&self) -> String {
        let canon = std::fs::canonicalize(&self.dir).unwrap_or_else(|_| self.dir.clone());
        canon
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "model".to_string())
    }
}

/// Decode little-endian source bytes into f32 (`out.len()` elements).
pub(crate) fn decode_into(dtype: SourceDtype, raw: &[u8], out: &mut [f32]) {
    match dtype {
        SourceDtype::F32 => {
            for (o, c) in out.iter_mut().zip(raw.chunks_exact(4)) {
                *o = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            }
        }
        SourceDtype::F16 => {
            for (o, c) in out.iter_mut().zip(raw.chunks_exact(2)) {
                *o = half::f16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f32();
            }
        }
        SourceDtype::BF16 => {
            for (o, c) in out.iter_mut().zip(raw.chunks_exact(2)) {
                *o = f32::from_bits(u32::from(u16::from_le_bytes([c[0], c[1]])) << 16);
            }
        }
    }
}

/// The first non-finite value of a tensor, as (flat index, value).
pub fn first_nonfinite(values: &[f32]) -> Option<(usize, f32)> {
    values
        .iter()
        .position(|v| !v.is_finite())
        .map(|i| (i, values[i]))
}

/// What the safetensors crate found wrong, in words (its `Display` prints variant names).
fn safetensors_reason(e: &safetensors::SafeTensorError, file_len: usize) -> String {
    use safetensors::SafeTensorError as E;
    match e {
        E::InvalidHeader => "the header is not valid UTF-8".into(),
        E::InvalidHeaderStart => "the header does not start with `{`".into(),
        E::InvalidHeaderDeserialization => "the header is not valid JSON".into(),
        E::JsonError(j) => format!("the header is not valid JSON: {j}"),
        E::HeaderTooLarge => "the header length is over the 100 MB the format allows".into(),
        E::HeaderTooSmall => "the file is shorter than the 8-byte header length".into(),
        E::InvalidHeaderLength => {
            format!("the header length in the first 8 bytes runs past the end of the file ({file_len} bytes)")
        }
        E::TensorNotFound(name) => format!("tensor `{name}` not found"),
        E::TensorInvalidInfo => {
            "a tensor's shape, dtype and data offsets do not agree".into()
        }
        E::InvalidOffset(name) => format!("tensor `{name}`: its data offsets are invalid"),
        E::IoError(io) => format!("read error: {io}"),
        E::InvalidTensorView(dtype, shape, len) => {
            format!("a {dtype:?} tensor of shape {shape:?} cannot hold {len} bytes")
        }
        E::MetadataIncompleteBuffer => {
            "the tensors' data does not cover the data section exactly (the last offset must be the end of the file)".into()
        }
        E::ValidationOverflow => "a tensor's shape or byte size overflows".into(),
    }
}
