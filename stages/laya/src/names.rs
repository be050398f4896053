//! PyTorch tensor names of a Laya checkpoint and their GGUF names (llama.cpp's
//! `ModernBertDecisionModel` mapping, spec section 2.4).

/// The GGUF name of a Laya tensor, or `None` for tensors the converter drops (`act_head.*`,
/// the `temperature` buffer) or that are not part of the layout.
///
/// `n_enc` is the encoder depth: decision-head block `k` becomes `blk.{n_enc + k}`.
pub fn gguf_name(pytorch_name: &str, n_enc: usize) -> Option<String> {
    let fixed = match pytorch_name {
        "encoder.embeddings.tok_embeddings.weight" => Some("token_embd.weight"),
        "encoder.embeddings.norm.weight" => Some("token_embd_norm.weight"),
        "encoder.final_norm.weight" => Some("output_norm.weight"),
        "type_emb.weight" => Some("token_types.weight"),
        "scorer.0.weight" => Some("cls.norm.weight"),
        "scorer.0.bias" => Some("cls.norm.bias"),
        "scorer.1.weight" => Some("cls.weight"),
        "scorer.1.bias" => Some("cls.bias"),
        "scorer.3.weight" => Some("cls.output.weight"),
        "scorer.3.bias" => Some("cls.output.bias"),
        _ => None,
    };
    if let Some(f) = fixed {
        return Some(f.to_string());
    }
    if let Some(rest) = pytorch_name.strip_prefix("encoder.layers.") {
        let (i, tail) = split_index(rest)?;
        if i >= n_enc {
            return None;
        }
        let suffix = match tail {
            "attn_norm.weight" => "attn_norm.weight",
            "attn.Wqkv.weight" => "attn_qkv.weight",
            "attn.Wo.weight" => "attn_output.weight",
            "mlp_norm.weight" => "ffn_norm.weight",
            "mlp.Wi.weight" => "ffn_up.weight",
            "mlp.Wo.weight" => "ffn_down.weight",
            _ => return None,
        };
        return Some(format!("blk.{i}.{suffix}"));
    }
    if let Some(rest) = pytorch_name.strip_prefix("head.layers.") {
        let (k, tail) = split_index(rest)?;
        let suffix = match tail {
            "norm1.weight" => "attn_norm.weight",
            "norm1.bias" => "attn_norm.bias",
            "self_attn.in_proj_weight" => "attn_qkv.weight",
            "self_attn.in_proj_bias" => "attn_qkv.bias",
            "self_attn.out_proj.weight" => "attn_output.weight",
            "self_attn.out_proj.bias" => "attn_output.bias",
            "norm2.weight" => "ffn_norm.weight",
            "norm2.bias" => "ffn_norm.bias",
            "linear1.weight" => "ffn_up.weight",
            "linear1.bias" => "ffn_up.bias",
            "linear2.weight" => "ffn_down.weight",
            "linear2.bias" => "ffn_down.bias",
            _ => return None,
        };
        return Some(format!("blk.{}.{suffix}", n_enc.checked_add(k)?));
    }
    None
}

/// Split `"12.rest"` into `(12, "rest")`.
fn split_index(s: &str) -> Option<(usize, &str)> {
    let (num, tail) = s.split_once('.')?;
    if num.is_empty() || !num.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((num.parse().ok()?, tail))
}

/// Tensors a Laya checkpoint may carry that the converter drops on purpose.
pub fn is_dropped(pytorch_name: &str) -> bool {
    pytorch_name == "temperature" || pytorch_name.starts_with("act_head.")
}

/// True for decision-head tensors by GGUF name: `blk.N` with `N >= n_enc`,
/// `token_types.*` and `cls.*`.
pub fn is_head_tensor(gguf_name: &str, n_enc: usize) -> bool {
    if gguf_name.starts_with("token_types.") || gguf_name == "cls" || gguf_name.starts_with("cls.")
    {
        return true;
    }
    match gguf_name.strip_prefix("blk.").and_then(split_index) {
        Some((n, _)) => n >= n_enc,
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_table() {
        let cases = [
            (
                "encoder.embeddings.tok_embeddings.weight",
                "token_embd.weight",
            ),
            ("encoder.embeddings.norm.weight", "token_embd_norm.weight"),
            (
                "encoder.layers.1.attn_norm.weight",
                "blk.1.attn_norm.weight",
            ),
            ("encoder.layers.0.attn.Wqkv.weight", "blk.0.attn_qkv.weight"),
            (
                "encoder.layers.1.attn.Wo.weight",
                "blk.1.attn_output.weight",
            ),
            ("encoder.layers.1.mlp_norm.weight", "blk.1.ffn_norm.weight"),
            ("encoder.layers.1.mlp.Wi.weight", "blk.1.ffn_up.weight"),
            ("encoder.layers.1.mlp.Wo.weight", "blk.1.ffn_down.weight"),
            ("encoder.final_norm.weight", "output_norm.weight"),
            ("head.layers.0.norm1.bias", "blk.2.attn_norm.bias"),
            (
                "head.layers.1.self_attn.in_proj_weight",
                "blk.3.attn_qkv.weight",
            ),
            (
                "head.layers.0.self_attn.in_proj_bias",
                "blk.2.attn_qkv.bias",
            ),
            (
                "head.layers.0.self_attn.out_proj.weight",
                "blk.2.attn_output.weight",
            ),
            ("head.layers.0.norm2.weight", "blk.2.ffn_norm.weight"),
            ("head.layers.0.linear1.bias", "blk.2.ffn_up.bias"),
            ("head.layers.0.linear2.weight", "blk.2.ffn_down.weight"),
            ("type_emb.weight", "token_types.weight"),
            ("scorer.0.bias", "cls.norm.bias"),
            ("scorer.1.weight", "cls.weight"),
            ("scorer.3.bias", "cls.output.bias"),
        ];
        for (src, dst) in cases {
            assert_eq!(gguf_name(src, 2).as_deref(), Some(dst), "{src}");
        }
        for dropped in [
            "act_head.0.weight",
            "temperature",
            "encoder.layers.2.attn.Wo.weight",
            "encoder.layers.x.attn.Wo.weight",
            "head.layers.0.foo",
        ] {
            assert_eq!(gguf_name(dropped, 2), None, "{dropped}");
        }
        assert!(
            is_dropped("act_head.2.bias")
                && is_dropped("temperature")
                && !is_dropped("type_emb.weight")
        );
    }

    #[test]
    fn head_tensors() {
        assert!(is_head_tensor("blk.2.attn_qkv.weight", 2));
        assert!(!is_head_tensor("blk.1.attn_qkv.weight", 2));
        assert!(is_head_tensor("blk.10.ffn_up.bias", 6));
        assert!(is_head_tensor("token_types.weight", 2));
        assert!(is_head_tensor("cls.output.weight", 2));
        assert!(!is_head_tensor("token_embd.weight", 2));
        assert!(!is_head_tensor("output_norm.weight", 2));
    }
}
