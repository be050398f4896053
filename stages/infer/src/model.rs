//! The Laya decision model: weights in forward-pass layout, built from any tensor source keyed
//! by GGUF tensor name.

use crate::config::ModelConfig;
use crate::error::{InferError, Result};
use crate::weights::Weight;

/// Where [`Model::build`] gets its tensors: GGUF tensor name -> (PyTorch-order shape, f32
/// values). `Ok(None)` means absent.
pub trait TensorSource {
    /// Look up one tensor.
    fn tensor(&self, name: &str) -> Result<Option<(Vec<usize>, Vec<f32>)>>;
}

impl<F> TensorSource for F
where
    F: Fn(&str) -> Result<Option<(Vec<usize>, Vec<f32>)>>,
{
    fn tensor(&self, name: &str) -> Result<Option<(Vec<usize>, Vec<f32>)>> {
        self(name)
    }
}

/// One ModernBERT encoder layer (pre-norm, no biases).
#[derive(Debug)]
pub struct EncoderLayer {
    /// `attn_norm` (absent on layer 0, where HF uses Identity).
    pub attn_norm: Option<Vec<f32>>,
    /// Fused Wqkv, [3d, d].
    pub qkv: Weight,
    /// Attention output, [d, d].
    pub attn_out: Weight,
    /// `mlp_norm`.
    pub ffn_norm: Vec<f32>,
    /// Wi, [2f, d]: first half GELU input, second half gate.
    pub ffn_up: Weight,
    /// Wo of the MLP, [d, f].
    pub ffn_down: Weight,
    /// Full attention (true) or sliding window.
    pub global: bool,
}

/// One decision-head block (torch `TransformerEncoderLayer`, norm_first, ReLU, biases).
#[derive(Debug)]
pub struct HeadLayer {
    /// norm1 weight, bias.
    pub norm1: (Vec<f32>, Vec<f32>),
    /// in_proj, [3d, d].
    pub qkv: Weight,
    /// in_proj bias, [3d].
    pub qkv_b: Vec<f32>,
    /// out_proj, [d, d].
    pub attn_out: Weight,
    /// out_proj bias.
    pub attn_out_b: Vec<f32>,
    /// norm2 weight, bias.
    pub norm2: (Vec<f32>, Vec<f32>),
    /// linear1, [4d, d].
    pub ffn_up: Weight,
    /// linear1 bias.
    pub ffn_up_b: Vec<f32>,
    /// linear2, [d, 4d].
    pub ffn_down: Weight,
    /// linear2 bias.
    pub ffn_down_b: Vec<f32>,
}

/// A loaded decision model.
#[derive(Debug)]
pub struct Model {
    /// Hyperparameters.
    pub config: ModelConfig,
    /// Token embeddings, `[vocab][d]`.
    pub tok_embd: Vec<f32>,
    /// Embedding LayerNorm weight (no bias).
    pub embd_norm: Vec<f32>,
    /// Encoder layers.
    pub layers: Vec<EncoderLayer>,
    /// Final encoder norm.
    pub output_norm: Vec<f32>,
    /// Decision-head blocks.
    pub head: Vec<HeadLayer>,
    /// Type embeddings, `[3][d]` (choice, score, noul).
    pub token_types: Vec<f32>,
    /// Scorer LayerNorm weight, bias.
    pub cls_norm: (Vec<f32>, Vec<f32>),
    /// Scorer Linear(d, d).
    pub cls: Weight,
    /// Its bias.
    pub cls_b: Vec<f32>,
    /// Scorer Linear(d, 1) weight, `[d]`.
    pub cls_out: Vec<f32>,
    /// Its bias.
    pub cls_out_b: f32,
}

struct Loader<'a> {
    src: &'a dyn TensorSource,
}

impl Loader<'_> {
    fn get(&self, name: &str, shape: &[usize]) -> Result<Vec<f32>> {
        let (found, data) = self
            .src
            .tensor(name)?
            .ok_or_else(|| InferError::MissingTensor { name: name.into() })?;
        // A [d] vector may come as [1, d] or [d, 1]; compare element-wise shapes without unit dims.
        let squeeze = |s: &[usize]| s.iter().copied().filter(|&x| x != 1).collect::<Vec<_>>();
        if squeeze(&found) != squeeze(shape) {
            return Err(InferError::BadShape {
                name: name.into(),
                expected: shape.to_vec(),
                found,
            });
        }
        if data.len() != shape.iter().product::<usize>() {
            return Err(InferError::BadTensor {
                name: name.into(),
                message: format!("{} values for shape {shape:?}", data.len()),
            });
        }
        // Every weight is checked once here, as it is loaded (a GGUF file or a Laya
        // directory, f32 or int8 path alike), not in the hot loops: a NaN or infinite weight
        // would otherwise turn into a plausible-looking answer.
        sky_gguf::check_finite_in(sky_gguf::GgmlType::F32, name, &data)
            .map_err(|e| InferError::upstream("weights", e))?;
        Ok(data)
    }

    fn opt(&self, name: &str, shape: &[usize]) -> Result<Option<Vec<f32>>> {
        match self.src.tensor(name)? {
            None => Ok(None),
            Some(_) => self.get(name, shape).map(Some),
        }
    }

    fn weight(&self, site: &str, n: usize, k: usize) -> Result<Weight> {
        let rows = self.get(&format!("{site}.weight"), &[n, k])?;
        Ok(Weight::from_rows(site, n, k, &rows))
    }
}

/// Whether a GGUF tensor is the weight of a matrix product (a site: `blk.N.attn_qkv`,
/// `attn_output`, `ffn_up`, `ffn_down`, or the scorer's `cls`), as [`Model::weights_mut`] lists
/// them. Other tensors (embeddings, token types, the scorer's output vector, norms) are read
/// as f32 whatever their stored type.
pub fn is_matmul_tensor(name: &str) -> bool {
    let Some(site) = name.strip_suffix(".weight") else {
        return false;
    };
    if site == "cls" {
        return true;
    }
    site.strip_prefix("blk.")
        .and_then(|rest| rest.split_once('.'))
        .is_some_and(|(n, m)| {
            n.parse::<usize>().is_ok()
                && matches!(m, "attn_qkv" | "attn_output" | "ffn_up" | "ffn_down")
        })
}

impl Model {
    /// Build from tensors named as in the GGUF (`token_embd.weight`, `blk.N.attn_qkv.weight`,
    /// `token_types.weight`, `cls.*`), see spec section 2.4.
    pub fn build(config: ModelConfig, src: &dyn TensorSource) -> Result<Model> {
        config.validate()?;
        let l = Loader { src };
        let (d, f, v) = (config.hidden, config.intermediate, config.vocab);
        let mut layers = Vec::with_capacity(config.n_enc);
        for i in 0..config.n_enc {
            layers.push(EncoderLayer {
                attn_norm: if i == 0 {
                    l.opt(&format!("blk.{i}.attn_norm.weight"), &[d])?
                } else {
                    Some(l.get(&format!("blk.{i}.attn_norm.weight"), &[d])?)
                },
                qkv: l.weight(&format!("blk.{i}.attn_qkv"), 3 * d, d)?,
                attn_out: l.weight(&format!("blk.{i}.attn_output"), d, d)?,
                ffn_norm: l.get(&format!("blk.{i}.ffn_norm.weight"), &[d])?,
                ffn_up: l.weight(&format!("blk.{i}.ffn_up"), 2 * f, d)?,
                ffn_down: l.weight(&format!("blk.{i}.ffn_down"), d, f)?,
                global: config.global_layers[i],
            });
        }
        let mut head = Vec::with_capacity(config.n_head_layers);
        for k in 0..config.n_head_layers {
            let b = config.n_enc + k;
            let vec = |suffix: &str, len: usize| l.get(&format!("blk.{b}.{suffix}"), &[len]);
            head.push(HeadLayer {
                norm1: (vec("attn_norm.weight", d)?, vec("attn_norm.bias", d)?),
                qkv: l.weight(&format!("blk.{b}.attn_qkv"), 3 * d, d)?,
                qkv_b: vec("attn_qkv.bias", 3 * d)?,
                attn_out: l.weight(&format!("blk.{b}.attn_output"), d, d)?,
                attn_out_b: vec("attn_output.bias", d)?,
                norm2: (vec("ffn_norm.weight", d)?, vec("ffn_norm.bias", d)?),
                ffn_up: l.weight(&format!("blk.{b}.ffn_up"), 4 * d, d)?,
                ffn_up_b: vec("ffn_up.bias", 4 * d)?,
                ffn_down: l.weight(&format!("blk.{b}.ffn_down"), d, 4 * d)?,
                ffn_down_b: vec("ffn_down.bias", d)?,
            });
        }
        let cls_out_b = l.get("cls.output.bias", &[1])?;
        Ok(Model {
            tok_embd: l.get("token_embd.weight", &[v, d])?,
            embd_norm: l.get("token_embd_norm.weight", &[d])?,
            layers,
            output_norm: l.get("output_norm.weight", &[d])?,
            head,
            token_types: l.get("token_types.weight", &[3, d])?,
            cls_norm: (
                l.get("cls.norm.weight", &[d])?,
                l.get("cls.norm.bias", &[d])?,
            ),
            cls: l.weight("cls", d, d)?,
            cls_b: l.get("cls.bias", &[d])?,
            cls_out: l.get("cls.output.weight", &[1, d])?,
            cls_out_b: cls_out_b[0],
            config,
        })
    }

    /// Every matrix of the model with its site name, in forward order (what a quantizer or
    /// calibration walks).
    pub fn weights_mut(&mut self) -> Vec<&mut Weight> {
        let mut out: Vec<&mut Weight> = Vec::new();
        for l in &mut self.layers {
            out.extend([&mut l.qkv, &mut l.attn_out, &mut l.ffn_up, &mut l.ffn_down]);
        }
        for h in &mut self.head {
            out.extend([&mut h.qkv, &mut h.attn_out, &mut h.ffn_up, &mut h.ffn_down]);
        }
        out.push(&mut self.cls);
        out
    }
}

#[cfg(test)]
mod tests {
    // The engine reads names through sky-laya's mapping, the one the converter writes.
    use sky_laya::gguf_name;

    #[test]
    fn matmul_tensors_are_the_sites() {
        use super::is_matmul_tensor;
        for yes in [
            "blk.0.attn_qkv.weight",
            "blk.7.ffn_down.weight",
            "cls.weight",
        ] {
            assert!(is_matmul_tensor(yes), "{yes}");
        }
        for no in [
            "token_embd.weight",
            "token_types.weight",
            "cls.output.weight",
            "blk.0.attn_norm.weight",
            "blk.0.attn_qkv.bias",
            "blk.x.ffn_up.weight",
            "cls",
        ] {
            assert!(!is_matmul_tensor(no), "{no}");
        }
    }

    #[test]
    fn gguf_names_follow_the_spec_table() {
        assert_eq!(
            gguf_name("encoder.layers.1.attn.Wqkv.weight", 2).as_deref(),
            Some("blk.1.attn_qkv.weight")
        );
        assert_eq!(
            gguf_name("head.layers.1.linear2.bias", 6).as_deref(),
            Some("blk.7.ffn_down.bias")
        );
        assert_eq!(
            gguf_name("scorer.3.weight", 2).as_deref(),
            Some("cls.output.weight")
        );
        assert_eq!(gguf_name("act_head.0.weight", 2), None);
        assert_eq!(gguf_name("temperature", 2), None);
    }
}
