//! Which ggml type each tensor gets: the seed's policy plus ordered glob overrides.

use sky_gguf::GgmlType;

use crate::error::{LayaError, Result};
use crate::names::is_head_tensor;

/// Q8_0 block length (values per block).
const QK8_0: usize = 32;

/// The per-tensor type policy of a conversion.
///
/// Without rules: 1-D tensors (norms, biases) are F32; decision-head tensors (`blk.N` for
/// `N >= n_enc`, `token_types.*`, `cls.*`) take `head_type`; other matrices take `ftype`,
/// except that `token_embd.weight` stays F16 when `ftype` is Q8_0. `rules` are
/// `(glob, type)` pairs matched against the GGUF tensor name in order, first match wins,
/// and replace that choice for any tensor. Last, a Q8_0 tensor whose rows (the innermost
/// dimension) do not split into blocks of 32 falls back to F16, as llama.cpp does.
#[derive(Debug, Clone, PartialEq)]
pub struct TypePolicy {
    /// Type of encoder matrices (`--type`, F16 by default).
    pub ftype: GgmlType,
    /// Type of decision-head matrices (`--head-type`, F32 by default).
    pub head_type: GgmlType,
    /// Ordered `(glob, type)` overrides; `*` matches any run of characters, `?` one.
    pub rules: Vec<(String, GgmlType)>,
}

impl Default for TypePolicy {
    fn default() -> Self {
        TypePolicy {
            ftype: GgmlType::F16,
            head_type: GgmlType::F32,
            rules: Vec::new(),
        }
    }
}

/// The four types the converter writes, with their spelling in `pipeline.toml`, policy files,
/// node parameters and the CLI: the one table of these names.
pub const POLICY_TYPES: [(GgmlType, &str); 4] = [
    (GgmlType::F32, "f32"),
    (GgmlType::F16, "f16"),
    (GgmlType::BF16, "bf16"),
    (GgmlType::Q8_0, "q8_0"),
];

/// The four types the converter writes.
pub const CONVERTIBLE: [GgmlType; 4] = [
    POLICY_TYPES[0].0,
    POLICY_TYPES[1].0,
    POLICY_TYPES[2].0,
    POLICY_TYPES[3].0,
];

/// Parse a type name as the CLI and pipeline.toml spell it (`f32`, `f16`, `bf16`, `q8_0`,
/// any case).
pub fn parse_type(name: &str) -> Result<GgmlType> {
    POLICY_TYPES
        .iter()
        .find(|(_, n)| n.eq_ignore_ascii_case(name))
        .map(|(t, _)| *t)
        .ok_or_else(|| {
            LayaError::Invalid(format!(
                "unknown tensor type {name:?} (expected one of {})",
                policy_type_names().collect::<Vec<_>>().join(", ")
            ))
        })
}

/// The policy spelling of a type the converter writes; `None` for any other ggml type (never
/// a stand-in: a policy must not name a type it does not mean).
pub fn policy_type_name(t: GgmlType) -> Option<&'static str> {
    POLICY_TYPES.iter().find(|(p, _)| *p == t).map(|(_, n)| *n)
}

/// The policy spellings, in table order.
pub fn policy_type_names() -> impl Iterator<Item = &'static str> {
    POLICY_TYPES.iter().map(|(_, n)| *n)
}

/// llama.cpp's `general.file_type` (LlamaFileType) for an output type.
pub fn file_type(ftype: GgmlType) -> u32 {
    match ftype {
        GgmlType::F32 => 0,
        GgmlType::F16 => 1,
        GgmlType::Q8_0 => 7,
        GgmlType::BF16 => 32,
        GgmlType::Other(_) => 1,
    }
}

impl TypePolicy {
    /// Check that every type in the policy is one the converter writes.
    pub fn validate(&self) -> Result<()> {
        let check = |what: &str, t: GgmlType| {
            if CONVERTIBLE.contains(&t) {
                Ok(())
            } else {
                Err(LayaError::Invalid(format!(
                    "{what}: type {t} cannot be written by the converter (only F32, F16, BF16, Q8_0)"
                )))
            }
        };
        check("type", self.ftype)?;
        check("head type", self.head_type)?;
        for (glob, t) in &self.rules {
            check(&format!("rule {glob:?}"), *t)?;
        }
        Ok(())
    }

    /// The type for a tensor, given its GGUF name, PyTorch shape and the encoder depth.
    pub fn type_for(&self, gguf_name: &str, shape: &[usize], n_enc: usize) -> GgmlType {
        let chosen = self
            .rules
            .iter()
            .find(|(glob, _)| glob_match(glob, gguf_name))
            .map(|(_, t)| *t);
        let ty = chosen.unwrap_or_else(|| {
            if shape.len() < 2 {
                GgmlType::F32
            } else if is_head_tensor(gguf_name, n_enc) {
                self.head_type
            } else if gguf_name == "token_embd.weight" && self.ftype == GgmlType::Q8_0 {
                // a lookup gains no speed from int8, and embedding rounding moves the scores
                GgmlType::F16
            } else {
                self.ftype
            }
        });
        let inner = shape.last().copied().unwrap_or(1);
        if ty == GgmlType::Q8_0 && !inner.is_multiple_of(QK8_0) {
            GgmlType::F16
        } else {
            ty
        }
    }
}

/// Glob match on the whole name: `*` any run of characters (dots included), `?` exactly
/// one character, everything else literal.
pub fn glob_match(glob: &str, name: &str) -> bool {
    let (g, n): (Vec<char>, Vec<char>) = (glob.chars().collect(), name.chars().collect());
    // iterative matcher with one backtrack point (the last `*`)
    let (mut gi, mut ni) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        if gi < g.len() && (g[gi] == '?' || g[gi] == n[ni]) {
            gi += 1;
            ni += 1;
        } else if gi < g.len() && g[gi] == '*' {
            star = Some((gi, ni));
            gi += 1;
        } else if let Some((sg, sn)) = star {
            gi = sg + 1;
            ni = sn + 1;
            star = Some((sg, sn + 1));
        } else {
            return false;
        }
    }
    while gi < g.len() && g[gi] == '*' {
        gi += 1;
    }
    gi == g.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        assert!(glob_match("blk.*.ffn_up.weight", "blk.10.ffn_up.weight"));
        assert!(glob_match("*", "anything"));
        assert!(glob_match("blk.?.attn_qkv.*", "blk.1.attn_qkv.weight"));
        assert!(!glob_match("blk.?.attn_qkv.*", "blk.10.attn_qkv.weight"));
        assert!(!glob_match("token_embd", "token_embd.weight"));
        assert!(glob_match("*.weight", "cls.weight"));
        assert!(glob_match("a*b*c", "aXXbYYbc"));
    }

    #[test]
    fn seed_policy() {
        let p = TypePolicy::default();
        assert_eq!(
            p.type_for("blk.0.attn_norm.weight", &[64], 2),
            GgmlType::F32
        );
        assert_eq!(
            p.type_for("blk.0.attn_qkv.weight", &[192, 64], 2),
            GgmlType::F16
        );
        assert_eq!(
            p.type_for("blk.2.attn_qkv.weight", &[192, 64], 2),
            GgmlType::F32
        );
        assert_eq!(p.type_for("token_types.weight", &[3, 64], 2), GgmlType::F32);
        assert_eq!(p.type_for("cls.output.weight", &[1, 64], 2), GgmlType::F32);
        let q = TypePolicy {
            ftype: GgmlType::Q8_0,
            head_type: GgmlType::Q8_0,
            rules: vec![],
        };
        assert_eq!(
            q.type_for("token_embd.weight", &[1024, 64], 2),
            GgmlType::F16
        );
        assert_eq!(
            q.type_for("blk.0.ffn_down.weight", &[64, 128], 2),
            GgmlType::Q8_0
        );
        assert_eq!(
            q.type_for("blk.0.ffn_down.weight", &[64, 100], 2),
            GgmlType::F16
        );
        assert_eq!(q.type_for("cls.weight", &[64, 64], 2), GgmlType::Q8_0);
        assert_eq!(q.type_for("cls.norm.weight", &[64], 2), GgmlType::F32);
    }

    #[test]
    fn rules_first_match_wins() {
        let p = TypePolicy {
            ftype: GgmlType::Q8_0,
            head_type: GgmlType::F32,
            rules: vec![
                ("blk.1.*".into(), GgmlType::F32),
                ("blk.*".into(), GgmlType::BF16),
                ("token_embd.weight".into(), GgmlType::Q8_0),
            ],
        };
        assert_eq!(
            p.type_for("blk.1.ffn_up.weight", &[256, 64], 2),
            GgmlType::F32
        );
        assert_eq!(
            p.type_for("blk.0.ffn_up.weight", &[256, 64], 2),
            GgmlType::BF16
        );
        assert_eq!(
            p.type_for("blk.3.attn_norm.weight", &[64], 2),
            GgmlType::BF16
        );
        assert_eq!(
            p.type_for("token_embd.weight", &[1024, 64], 2),
            GgmlType::Q8_0
        );
        assert_eq!(p.type_for("output_norm.weight", &[64], 2), GgmlType::F32);
    }

    #[test]
    fn type_names() {
        assert_eq!(parse_type("Q8_0").unwrap(), GgmlType::Q8_0);
        assert_eq!(parse_type("bf16").unwrap(), GgmlType::BF16);
        assert!(parse_type("q4_0").unwrap_err().to_string().contains("q4_0"));
        for (t, name) in POLICY_TYPES {
            assert_eq!(parse_type(name).unwrap(), t);
            assert_eq!(policy_type_name(t), Some(name));
        }
        assert_eq!(policy_type_name(GgmlType::from_id(2)), None); // Q4_0
        assert_eq!(file_type(GgmlType::BF16), 32);
        assert_eq!(file_type(GgmlType::Q8_0), 7);
    }
}
