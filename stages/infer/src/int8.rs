//! The int8 compute path: Q8_0 weights with int8 x int8 -> int32 products (the kernels of
//! sky-quant), wired into the engine as [`MatmulKernel`]s.
//!
//! Where the int8 weights come from:
//! - [`quantize_at_load`]: an f32/F16 model quantized when loaded, the outlier input channels
//!   (calibrated max |x| above `ratio x median`) kept in f32 with exact weights;
//! - [`quantize_plain_at_load`]: plain round-to-nearest Q8_0, no outliers (`--no-calib`);
//! - [`from_q8_file`]: the Q8_0 tensors of a GGUF taken as they are, with the outlier columns
//!   recorded by `skyctl quantize` under `skycmd.quant.outliers.<tensor>` moved to f32.
//!
//! Only the encoder matrices are quantized at load (the type policy of the Q8_0 variant:
//! the decision head stays f32); from a file, every matrix stored as Q8_0 is.

use std::sync::Mutex;

use crate::calibrate::{calibrate_builtin, quant_err};
use crate::engine::Engine;
use crate::error::{InferError, Result};
use crate::kernels::Isa;
use crate::model::Model;
use crate::weights::{MatmulKernel, Weight, WeightData};
use sky_gguf::{GgmlType, GgufFile, Value as GValue};
use sky_quant::{
    max_outliers, select_outliers, ActQuant, Calibration, Q8Matrix, Scratch, META_OUTLIERS_PREFIX,
    META_OUTLIER_RATIO,
};

pub use sky_quant::OUTLIER_RATIO;

/// Key prefix of the exact f32 weights of a tensor's outlier columns (sky-quant's metadata
/// proposal). The Q8_0 bytes must stay valid for llama.cpp, so a block holding two outlier
/// columns can represent only one of them exactly; these values let the engine compute every
/// outlier column with its exact weight, as quantizing at load does.
pub use sky_quant::META_OUTLIER_WEIGHTS_PREFIX;

/// Activation buffers a kernel keeps for concurrent callers (the threads of one pass).
const SCRATCHES: usize = 4;

/// A [`Q8Matrix`] as an engine matmul kernel, with its activation mode.
pub struct Q8Kernel {
    matrix: Q8Matrix,
    mode: ActQuant,
    /// Activation buffers reused between calls, one per concurrent caller; a caller that
    /// finds all of them busy gets fresh ones.
    scratch: [Mutex<Scratch>; SCRATCHES],
}

impl Q8Kernel {
    /// Wrap a quantized matrix.
    pub fn new(matrix: Q8Matrix, mode: ActQuant) -> Q8Kernel {
        Q8Kernel {
            matrix,
            mode,
            scratch: std::array::from_fn(|_| Mutex::new(Scratch::new())),
        }
    }

    /// The quantized matrix.
    pub fn matrix(&self) -> &Q8Matrix {
        &self.matrix
    }
}

impl MatmulKernel for Q8Kernel {
    fn matmul(&self, isa: Isa, x: &[f32], rows: usize, out: &mut [f32]) -> Result<()> {
        // Every int8 path gives the same bits; the instruction set only caps the speed.
        let path = isa.int8_path();
        let res = match self.scratch.iter().find_map(|m| m.try_lock().ok()) {
            Some(mut s) => s
                .set_path(path)
                .and_then(|()| self.matrix.matmul(x, rows, out, self.mode, &mut s)),
            None => Scratch::with_path(path)
                .and_then(|mut s| self.matrix.matmul(x, rows, out, self.mode, &mut s)),
        };
        // The forward pass always passes the declared shapes; should that ever break, the
        // pass fails with this error (never a panic, never scores from a product not made).
        res.map_err(|e| InferError::upstream("int8 kernel", e))
    }

    fn describe(&self) -> String {
        let mode = match self.mode {
            ActQuant::Q8 => "q8",
            ActQuant::Q8x2 => "q8x2",
        };
        match self.matrix.outliers().len() {
            0 => format!("q8_0/{mode}"),
            n => format!("q8_0/{mode}+{n} outliers"),
        }
    }
}

/// What an int8 conversion did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Int8Summary {
    /// Matrices now computed in int8.
    pub matrices: usize,
    /// Outlier input channels computed in f32, over all those matrices.
    pub outlier_columns: usize,
}

/// The GGUF tensor name of a site.
pub fn tensor_name(site: &str) -> String {
    format!("{site}.weight")
}

/// Whether a site is an encoder matrix (`blk.N.*` with `N < n_enc`): what the Q8_0 type
/// policy quantizes, and so what [`quantize_at_load`] quantizes.
pub fn is_encoder_site(site: &str, n_enc: usize) -> bool {
    site.strip_prefix("blk.")
        .and_then(|r| r.split('.').next())
        .and_then(|i| i.parse::<usize>().ok())
        .is_some_and(|i| i < n_enc)
}

fn check_ratio(ratio: f32) -> Result<()> {
    if ratio.is_finite() && ratio > 1.0 {
        Ok(())
    } else {
        Err(InferError::BadValue {
            key: "outlier_ratio".into(),
            message: format!("{ratio} is not a number above 1 (a channel is an outlier above ratio x the median channel)"),
        })
    }
}

/// The outlier channels of `site` (width `k`) in a calibration, with the k/16 cap.
pub fn site_outliers(calib: &Calibration, site: &str, k: usize, ratio: f32) -> Result<Vec<u32>> {
    check_ratio(ratio)?;
    let m = calib
        .channel_max(site)
        .ok_or_else(|| InferError::BadValue {
            key: site.into(),
            message: "the calibration has no statistics for this matrix (made for another model?)"
                .into(),
        })?;
    if m.len() != k {
        return Err(InferError::BadValue {
            key: site.into(),
            message: format!(
                "the calibration has {} input channels, the model {k} (made for another model?)",
                m.len()
            ),
        });
    }
    select_outliers(m, ratio, max_outliers(k)).map_err(quant_err)
}

fn quantize_weight(w: &mut Weight, outliers: &[u32], mode: ActQuant) -> Result<usize> {
    let rows = w.to_rows().ok_or_else(|| InferError::BadValue {
        key: w.site.clone(),
        message: "already quantized: quantizing at load needs f32 weights".into(),
    })?;
    let m = Q8Matrix::quantize(&rows, w.n, w.k, outliers).map_err(|e| InferError::BadTensor {
        name: tensor_name(&w.site),
        message: e.to_string(),
    })?;
    w.data = WeightData::Int8(Box::new(Q8Kernel::new(m, mode)));
    Ok(outliers.len())
}

/// Quantize the encoder matrices of an f32 model to Q8_0 at load, the input channels that
/// `calib` shows above `ratio x median` (at most k/16 per matrix) kept in f32 with their exact
/// weights; activations quantized per `mode`.
///
/// Errors: `ratio <= 1`, a site missing from the calibration or of another width, weights
/// already quantized, a matrix width that is not a multiple of 32.
pub fn quantize_at_load(
    model: &mut Model,
    calib: &Calibration,
    ratio: f32,
    mode: ActQuant,
) -> Result<Int8Summary> {
    check_ratio(ratio)?;
    let n_enc = model.config.n_enc;
    let mut sum = Int8Summary::default();
    // Select everything first so that an error leaves the model untouched.
    let mut plan = Vec::new();
    for w in model.weights_mut() {
        if is_encoder_site(&w.site, n_enc) {
            plan.push(site_outliers(calib, &w.site, w.k, ratio)?);
        }
    }
    let mut plan = plan.into_iter();
    for w in model.weights_mut() {
        if is_encoder_site(&w.site, n_enc) {
            let outliers = plan.next().unwrap_or_default();
            sum.outlier_columns += quantize_weight(w, &outliers, mode)?;
            sum.matrices += 1;
        }
    }
    Ok(sum)
}

/// Plain round-to-nearest Q8_0 of the encoder matrices, no outlier handling (`--no-calib`).
pub fn quantize_plain_at_load(model: &mut Model, mode: ActQuant) -> Result<Int8Summary> {
    let n_enc = model.config.n_enc;
    let mut sum = Int8Summary::default();
    for w in model.weights_mut() {
        if is_encoder_site(&w.site, n_enc) {
            quantize_weight(w, &[], mode)?;
            sum.matrices += 1;
        }
    }
    Ok(sum)
}

/// Read the `skycmd.quant.outliers.<tensor>` array of a file, validated against `k`.
fn file_outliers(key: &str, v: &GValue, k: usize) -> Result<Vec<u32>> {
    let bad = |message: String| InferError::BadValue {
        key: key.into(),
        message,
    };
    let arr = v.as_array().ok_or_else(|| {
        bad(format!(
            "expected an array of u32 channel indices, found {:?}",
            v.value_type()
        ))
    })?;
    let mut out = Vec::with_capacity(arr.items.len());
    for (i, item) in arr.items.iter().enumerate() {
        let c = item
            .as_u64()
            .ok_or_else(|| bad(format!("item {i} is not an unsigned integer")))?;
        if c >= k as u64 {
            return Err(bad(format!(
                "item {i}: channel {c} is out of range for a tensor with {k} input channels"
            )));
        }
        if out.last().is_some_and(|&p: &u32| u64::from(p) >= c) {
            return Err(bad(format!(
                "item {i}: channels must be strictly ascending, {c} follows {}",
                out.last().copied().unwrap_or(0)
            )));
        }
        out.push(c as u32);
    }
    if out.len() > max_outliers(k) {
        return Err(bad(format!(
            "{} outlier channels, more than k/16 = {}",
            out.len(),
            max_outliers(k)
        )));
    }
    Ok(out)
}

/// Read the `skycmd.quant.outlier_weights.<tensor>` array of a file: `len` finite floats.
fn file_outlier_weights(key: &str, v: &GValue, len: usize) -> Result<Vec<f32>> {
    let bad = |message: String| InferError::BadValue {
        key: key.into(),
        message,
    };
    let arr = v.as_array().ok_or_else(|| {
        bad(format!(
            "expected an array of f32, found {:?}",
            v.value_type()
        ))
    })?;
    if arr.items.len() != len {
        return Err(bad(format!(
            "{} values, expected rows x outliers = {len}",
            arr.items.len()
        )));
    }
    arr.items
        .iter()
        .enumerate()
        .map(|(i, item)| match item.as_f32() {
            Some(x) if x.is_finite() => Ok(x),
            _ => Err(bad(format!("item {i} is not a finite f32"))),
        })
        .collect()
}

/// Run the Q8_0 tensors of `file` in int8 (the model was built from the same file, with these
/// tensors dequantized). With `use_outliers`, the columns listed under
/// `skycmd.quant.outliers.<tensor>` leave the int8 product and are computed in f32; without
/// it (`--no-calib`), the file runs as plain Q8_0.
///
/// Errors (a file whose outlier metadata does not match its tensors): an outlier key naming a
/// tensor that is absent, not Q8_0 or not a matrix of the model; indices out of range,
/// unordered or above k/16; a bad `skycmd.quant.outlier_ratio`.
pub fn from_q8_file(
    model: &mut Model,
    file: &GgufFile<'_>,
    mode: ActQuant,
    use_outliers: bool,
) -> Result<Int8Summary> {
    if let Some(v) = file.get(META_OUTLIER_RATIO) {
        let r = v.as_f64().ok_or_else(|| InferError::BadValue {
            key: META_OUTLIER_RATIO.into(),
            message: "expected a float".into(),
        })?;
        check_ratio(r as f32).map_err(|_| InferError::BadValue {
            key: META_OUTLIER_RATIO.into(),
            message: format!("{r} is not above 1"),
        })?;
    }
    let sites: Vec<(String, usize)> = model
        .weights_mut()
        .iter()
        .map(|w| (tensor_name(&w.site), w.k))
        .collect();
    // Every outlier key must name a Q8_0 matrix of the model.
    for (key, _) in &file.metadata {
        let Some(tensor) = key
            .strip_prefix(META_OUTLIERS_PREFIX)
            .or_else(|| key.strip_prefix(META_OUTLIER_WEIGHTS_PREFIX))
        else {
            continue;
        };
        let bad = |message: String| InferError::BadValue {
            key: key.clone(),
            message,
        };
        let t = file.tensor(tensor).ok_or_else(|| {
            bad(format!(
                "names tensor `{tensor}`, which the file does not have"
            ))
        })?;
        if t.ty != GgmlType::Q8_0 {
            return Err(bad(format!(
                "tensor `{tensor}` is {}, but outliers are recorded for Q8_0 tensors only",
                t.ty.name()
            )));
        }
        if !sites.iter().any(|(n, _)| n == tensor) {
            return Err(bad(format!(
                "tensor `{tensor}` is not a matrix of the model"
            )));
        }
        if key.starts_with(META_OUTLIER_WEIGHTS_PREFIX)
            && file
                .get(&format!("{META_OUTLIERS_PREFIX}{tensor}"))
                .is_none()
        {
            return Err(bad(format!(
                "weights without a {META_OUTLIERS_PREFIX}{tensor} key saying which columns they are"
            )));
        }
    }
    let mut sum = Int8Summary::default();
    let mut replaced = Vec::new();
    for (name, k) in &sites {
        let Some(t) = file.tensor(name) else { continue };
        if t.ty != GgmlType::Q8_0 {
            continue;
        }
        let key = format!("{META_OUTLIERS_PREFIX}{name}");
        let outliers = match (use_outliers, file.get(&key)) {
            (true, Some(v)) => file_outliers(&key, v, *k)?,
            _ => Vec::new(),
        };
        let rows = t.shape().first().copied().unwrap_or(0) as usize;
        let wkey = format!("{META_OUTLIER_WEIGHTS_PREFIX}{name}");
        let exact = match (outliers.is_empty(), file.get(&wkey)) {
            (false, Some(v)) => Some(file_outlier_weights(&wkey, v, rows * outliers.len())?),
            _ => None,
        };
        let m = Q8Matrix::from_q8_0_bytes(t.data, rows, *k, &outliers, exact.as_deref()).map_err(
            |e| InferError::BadTensor {
                name: name.clone(),
                message: e.to_string(),
            },
        )?;
        sum.outlier_columns += outliers.len();
        replaced.push(Q8Kernel::new(m, mode));
    }
    let mut replaced = replaced.into_iter();
    for w in model.weights_mut() {
        if file
            .tensor(&tensor_name(&w.site))
            .is_some_and(|t| t.ty == GgmlType::Q8_0)
        {
            if let Some(kern) = replaced.next() {
                w.data = WeightData::Int8(Box::new(kern));
                sum.matrices += 1;
            }
        }
    }
    Ok(sum)
}

/// Whether any matrix of the model is stored as Q8_0 in `file`.
pub fn has_q8_matrices(model: &mut Model, file: &GgufFile<'_>) -> bool {
    model.weights_mut().iter().any(|w| {
        file.tensor(&tensor_name(&w.site))
            .is_some_and(|t| t.ty == GgmlType::Q8_0)
    })
}

/// The compute path a user asked for (`--q8`, `--q8-fast`, `--no-calib`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ComputeOptions {
    /// `Some` for the int8 path on a float model (`--q8`: Q8x2, `--q8-fast`: Q8); on a
    /// Q8_0 file it picks the activation mode (Q8x2 when `None`).
    pub act: Option<ActQuant>,
    /// Plain round-to-nearest, no outlier handling.
    pub no_calib: bool,
    /// Outlier ratio for quantizing at load.
    pub ratio: f32,
}

impl Default for ComputeOptions {
    fn default() -> Self {
        ComputeOptions {
            act: None,
            no_calib: false,
            ratio: OUTLIER_RATIO,
        }
    }
}

/// How a loaded engine computes, for logs and bench labels.
#[derive(Debug, Clone, PartialEq)]
pub struct ComputeReport {
    /// `f32`, `q8` (Q8x2 activations) or `q8-fast` (Q8 activations).
    pub mode: &'static str,
    /// Where the int8 weights came from: `none`, `q8_0 file`, `at load`.
    pub weights: &'static str,
    /// Int8 conversion counts.
    pub int8: Int8Summary,
    /// Things the user should know (calibrated on the built-in set, truncated prompts...).
    pub notes: Vec<String>,
}

fn mode_name(act: ActQuant) -> &'static str {
    match act {
        ActQuant::Q8x2 => "q8",
        ActQuant::Q8 => "q8-fast",
    }
}

/// Put a loaded engine on the requested compute path. `gguf` is the file it was loaded from
/// (`None` for a Laya directory); `calibration` is used for quantizing at load (when `None`,
/// the engine calibrates itself on the built-in prompts and says so in the notes).
///
/// - A file whose matrices are Q8_0 runs in int8 by default (`--no-calib`: without its
///   outlier columns).
/// - A float model runs in f32 unless `opts.act` asks for int8.
/// - `--no-calib` on a float model without `--q8`/`--q8-fast` is an error.
pub fn apply(
    engine: &mut Engine,
    gguf: Option<&GgufFile<'_>>,
    opts: &ComputeOptions,
    calibration: Option<&Calibration>,
) -> Result<ComputeReport> {
    check_ratio(opts.ratio)?;
    if let Some(f) = gguf {
        if has_q8_matrices(&mut engine.model, f) {
            let act = opts.act.unwrap_or_default();
            let int8 = from_q8_file(&mut engine.model, f, act, !opts.no_calib)?;
            let mut notes = Vec::new();
            if !opts.no_calib && int8.outlier_columns == 0 {
                notes.push("the Q8_0 file records no outlier columns (plain Q8_0): it runs without outlier handling".into());
            }
            return Ok(ComputeReport {
                mode: mode_name(act),
                weights: "q8_0 file",
                int8,
                notes,
            });
        }
    }
    let Some(act) = opts.act else {
        if opts.no_calib {
            return Err(InferError::BadValue {
                key: "--no-calib".into(),
                message: "selects plain int8 without outliers: use it with --q8 or --q8-fast, or on a Q8_0 file".into(),
            });
        }
        return Ok(ComputeReport {
            mode: "f32",
            weights: "none",
            int8: Int8Summary::default(),
            notes: Vec::new(),
        });
    };
    let mut notes = Vec::new();
    let int8 = if opts.no_calib {
        quantize_plain_at_load(&mut engine.model, act)?
    } else {
        let own;
        let calib = match calibration {
            Some(c) => c,
            None => {
                let run = calibrate_builtin(engine)?;
                notes.push(format!(
                    "no calibration given: calibrated on the {} built-in prompts",
                    run.prompts
                ));
                notes.extend(run.notes());
                own = run.calibration;
                &own
            }
        };
        quantize_at_load(&mut engine.model, calib, opts.ratio, act)?
    };
    Ok(ComputeReport {
        mode: mode_name(act),
        weights: "at load",
        int8,
        notes,
    })
}

/// Load a `.gguf` file or a Laya directory onto the requested compute path.
#[cfg(feature = "std-fs")]
pub fn open(
    path: &std::path::Path,
    opts: &ComputeOptions,
    calibration: Option<&Calibration>,
) -> Result<(Engine, ComputeReport)> {
    if path.is_dir() {
        let mut e = crate::load::engine_from_laya_dir(path)?;
        let r = apply(&mut e, None, opts, calibration)?;
        return Ok((e, r));
    }
    // Mapped, not read (see `load::open`): a FIFO or a device is refused before it is opened.
    let map = sky_gguf::GgufMmap::open(path).map_err(|e| match e {
        sky_gguf::Error::Io { err, .. } => InferError::io(path.display().to_string(), err),
        other => InferError::io(path.display().to_string(), other),
    })?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string());
    open_bytes(map.bytes(), name, opts, calibration).map_err(|e| e.at(path.display().to_string()))
}

/// Load the bytes of a `.gguf` file onto the requested compute path: what [`open`] does with a
/// file, for callers without a file system (the browser engine). A Q8_0 file runs in int8
/// with its outlier columns in f32, exactly as natively.
pub fn open_bytes(
    bytes: &[u8],
    name: String,
    opts: &ComputeOptions,
    calibration: Option<&Calibration>,
) -> Result<(Engine, ComputeReport)> {
    let mut e = crate::load::engine_from_gguf(bytes, name)?;
    let f = GgufFile::parse(bytes).map_err(|e| InferError::upstream("gguf", e))?;
    let r = apply(&mut e, Some(&f), opts, calibration)?;
    Ok((e, r))
}

/// What [`quantize_gguf`] wrote.
#[derive(Debug, Clone, PartialEq)]
pub struct QuantizedFile {
    /// The GGUF bytes.
    pub bytes: Vec<u8>,
    /// Tensors written as Q8_0.
    pub q8_tensors: usize,
    /// Outlier columns recorded over all of them.
    pub outlier_columns: usize,
}

/// The type policy of the Q8_0 variant: Q8_0 encoder matrices, F16 token embeddings, F32
/// head (what `skyctl convert --type q8_0` uses).
pub fn q8_policy() -> sky_laya::TypePolicy {
    sky_laya::TypePolicy {
        ftype: GgmlType::Q8_0,
        ..Default::default()
    }
}

/// Re-encode a float reference GGUF (from `skyctl convert --type f32`) as the calibrated
/// Q8_0 variant: every key and tensor copied in order, each tensor encoded with the type
/// `policy` gives it, `general.file_type` set to the policy's, and for each Q8_0 matrix its
/// outlier columns recorded under `skycmd.quant.outliers.<tensor>` with their exact weights
/// under `skycmd.quant.outlier_weights.<tensor>` (plus `skycmd.quant.outlier_ratio` and
/// `skycmd.quant.calibration_digest`), keys llama.cpp ignores.
///
/// The Q8_0 bytes are plain ggml Q8_0 (byte-identical to `skyctl convert --type q8_0`) unless
/// `exact_cols`: then [`sky_quant::quantize_q8_exact_cols`] picks block scales that represent
/// the outlier weights exactly, which helps readers that ignore the metadata (llama.cpp) but
/// coarsens the other weights of those blocks, so sky-infer loses accuracy (measured in
/// bench/results/int8-readme.md). With the default, a file loaded by sky-infer computes
/// exactly what quantizing at load computes.
///
/// Errors: a reference that holds quantized tensors, a matrix missing from the calibration,
/// `ratio <= 1`.
pub fn quantize_gguf(
    reference: &GgufFile<'_>,
    calib: &Calibration,
    ratio: f32,
    policy: &sky_laya::TypePolicy,
    exact_cols: bool,
) -> Result<QuantizedFile> {
    check_ratio(ratio)?;
    policy.validate().map_err(|e| InferError::BadValue {
        key: "policy".into(),
        message: e.to_string(),
    })?;
    let arch = reference
        .get("general.architecture")
        .and_then(GValue::as_str)
        .unwrap_or("modern-bert");
    let count = |k: &str| {
        reference
            .get(&format!("{arch}.{k}"))
            .and_then(GValue::as_u64)
            .map(|v| v as usize)
    };
    let n_layer = count("block_count").ok_or_else(|| InferError::MissingKey {
        origin: "GGUF".into(),
        key: format!("{arch}.block_count"),
    })?;
    let n_enc = n_layer.saturating_sub(count("decision.block_count").unwrap_or(0));
    let mut w = sky_gguf::GgufWriter::with_alignment(reference.alignment);
    for (k, v) in &reference.metadata {
        if k.starts_with("skycmd.quant.") {
            continue;
        }
        if k == "general.file_type" {
            w.add_kv(k.clone(), sky_laya::policy::file_type(policy.ftype));
        } else {
            w.add_kv(k.clone(), v.clone());
        }
    }
    let mut out = QuantizedFile {
        bytes: Vec::new(),
        q8_tensors: 0,
        outlier_columns: 0,
    };
    let mut recorded = Vec::new();
    for t in &reference.tensors {
        let gerr = |e: &dyn std::fmt::Display| InferError::BadTensor {
            name: t.name.clone(),
            message: e.to_string(),
        };
        if !matches!(t.ty, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16) {
            return Err(InferError::BadTensor {
                name: t.name.clone(),
                message: format!(
                    "is {}: quantizing needs a float reference (skyctl convert --type f32)",
                    t.ty.name()
                ),
            });
        }
        let values = t.to_f32().map_err(|e| gerr(&e))?;
        let shape: Vec<usize> = t.shape().iter().map(|&d| d as usize).collect();
        let ty = policy.type_for(&t.name, &shape, n_enc);
        // The one check every writer runs: finite in the type it is written as.
        sky_gguf::check_finite_in(ty, &t.name, &values)
            .map_err(|e| InferError::upstream("gguf", e))?;
        let data = if ty == GgmlType::Q8_0 {
            let k = shape.last().copied().unwrap_or(1);
            let rows = values.len().checked_div(k).unwrap_or(0);
            let site = t.name.strip_suffix(".weight").unwrap_or(&t.name);
            // Embeddings and the scorer vector are read as f32 at load: no int8 product, no
            // outlier columns, plain Q8_0 bytes.
            let outliers = if crate::model::is_matmul_tensor(&t.name) {
                site_outliers(calib, site, k, ratio)?
            } else {
                Vec::new()
            };
            let bytes = if exact_cols {
                sky_quant::quantize_for_file(&values, rows, k, &outliers)
            } else {
                sky_quant::quantize_q8_0(&values)
            }
            .map_err(|e| gerr(&e))?;
            out.q8_tensors += 1;
            out.outlier_columns += outliers.len();
            if !outliers.is_empty() {
                let exact: Vec<f32> = (0..rows)
                    .flat_map(|r| outliers.iter().map(move |&c| (r, c)))
                    .map(|(r, c)| values[r * k + c as usize])
                    .collect();
                recorded.push((t.name.clone(), outliers, exact));
            }
            bytes
        } else {
            let row = t.dims.first().copied().unwrap_or(1) as usize;
            sky_gguf::encode(ty, &values, row).map_err(|e| gerr(&e))?
        };
        w.add_tensor(t.name.clone(), t.dims.clone(), ty, data)
            .map_err(|e| gerr(&e))?;
    }
    if out.q8_tensors > 0 {
        w.add_kv(META_OUTLIER_RATIO, GValue::F32(ratio));
        w.add_kv(sky_quant::META_CALIBRATION_DIGEST, calib.digest());
        for (name, cols, exact) in recorded {
            w.add_kv(
                format!("{META_OUTLIERS_PREFIX}{name}"),
                GValue::u32_array(cols),
            );
            w.add_kv(
                format!("{META_OUTLIER_WEIGHTS_PREFIX}{name}"),
                GValue::f32_array(exact),
            );
        }
    }
    out.bytes = w.to_bytes().map_err(|e| InferError::upstream("gguf", e))?;
    Ok(out)
}

/// The reference F32 GGUF of a Laya checkpoint directory, built in memory.
#[cfg(feature = "std-fs")]
pub fn f32_reference_from_dir(dir: &std::path::Path) -> Result<Vec<u8>> {
    let up = |e: sky_laya::LayaError| InferError::upstream("laya", e).at(dir.display().to_string());
    let ckpt = sky_laya::LayaCheckpoint::open(dir).map_err(up)?;
    let opts = sky_laya::ConvertOptions {
        policy: sky_laya::TypePolicy {
            ftype: GgmlType::F32,
            head_type: GgmlType::F32,
            rules: Vec::new(),
        },
        ..Default::default()
    };
    let (w, _) = sky_laya::build_writer(&ckpt, &opts).map_err(up)?;
    w.to_bytes().map_err(|e| InferError::upstream("gguf", e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::Isa;

    #[test]
    fn encoder_sites() {
        assert!(is_encoder_site("blk.0.attn_qkv", 2));
        assert!(is_encoder_site("blk.1.ffn_down", 2));
        assert!(!is_encoder_site("blk.2.ffn_down", 2));
        assert!(!is_encoder_site("cls", 2));
        assert!(!is_encoder_site("blkx.0", 2));
    }

    #[test]
    fn kernel_matches_f32_and_keeps_outliers_exact() {
        let (n, k) = (3, 64);
        let rows: Vec<f32> = (0..n * k)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 400.0)
            .collect();
        let mut x: Vec<f32> = (0..2 * k)
            .map(|i| ((i * 13 % 29) as f32 - 14.0) / 20.0)
            .collect();
        x[5] = 40.0;
        x[k + 5] = -35.0;
        let f = Weight::from_rows("s", n, k, &rows);
        let mut want = vec![0f32; 2 * n];
        f.matmul(Isa::Scalar, &x, 2, &mut want).unwrap();
        let m = Q8Matrix::quantize(&rows, n, k, &[5]).unwrap();
        let q = Weight {
            site: "s".into(),
            k,
            n,
            data: WeightData::Int8(Box::new(Q8Kernel::new(m, ActQuant::Q8x2))),
        };
        let mut got = vec![0f32; 2 * n];
        q.matmul(Isa::Scalar, &x, 2, &mut got).unwrap();
        for (a, b) in got.iter().zip(&want) {
            assert!((a - b).abs() < 2e-3, "{a} vs {b}");
        }
        assert!(format!("{q:?}").contains("q8_0/q8x2+1 outliers"));
    }

    #[test]
    fn a_kernel_given_the_wrong_shapes_returns_an_error_not_nan() {
        let (n, k) = (3, 64);
        let rows = vec![0.5f32; n * k];
        let kern = Q8Kernel::new(Q8Matrix::quantize(&rows, n, k, &[]).unwrap(), ActQuant::Q8);
        // Two rows announced, one row of input given.
        let mut out = vec![7f32; 2 * n];
        let e = kern
            .matmul(Isa::Scalar, &vec![1.0; k], 2, &mut out)
            .unwrap_err();
        match &e {
            InferError::Upstream {
                component, source, ..
            } => {
                assert_eq!(*component, "int8 kernel");
                assert!(source.to_string().contains("matmul input"), "{source}");
            }
            other => panic!("{other:?}"),
        }
        assert!(out.iter().all(|v| !v.is_nan()), "{out:?}");
    }

    #[test]
    fn bad_ratio_and_foreign_calibration_are_refused() {
        let c = Calibration::new();
        assert!(site_outliers(&c, "blk.0.attn_qkv", 64, 1.0)
            .unwrap_err()
            .to_string()
            .contains("above 1"));
        let e = site_outliers(&c, "blk.0.attn_qkv", 64, 3.0)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("blk.0.attn_qkv") && e.contains("no statistics"),
            "{e}"
        );
        let mut c = Calibration::new();
        c.observe("blk.0.attn_qkv", &[1.0; 32], 1, 32).unwrap();
        let e = site_outliers(&c, "blk.0.attn_qkv", 64, 3.0)
            .unwrap_err()
            .to_string();
        assert!(e.contains("32 input channels"), "{e}");
    }

    #[test]
    fn file_outlier_arrays_are_validated() {
        let ok = GValue::u32_array([1, 7]);
        assert_eq!(file_outliers("k", &ok, 64).unwrap(), vec![1, 7]);
        for (v, needle) in [
            (GValue::u32_array([64]), "out of range"),
            (GValue::u32_array([7, 1]), "ascending"),
            (GValue::u32_array([1, 2, 3, 4, 5]), "k/16"),
            (GValue::U32(3), "expected an array"),
        ] {
            let e = file_outliers("skycmd.quant.outliers.t", &v, 64)
                .unwrap_err()
                .to_string();
            assert!(
                e.contains(needle) && e.contains("skycmd.quant.outliers.t"),
                "{e}"
            );
        }
    }
}
