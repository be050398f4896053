//! Type policies outside `pipeline.toml`: a policy file (`skyctl convert --policy`, `skyctl
//! quantize --policy`, what `skyctl tune` writes) holds one `[policy.<name>]` table in the
//! pipeline's own schema, so a tuned table can be pasted into `pipeline.toml` as it is.
//!
//! Rules are globs in the engine's syntax ([`sky_dag::glob::Glob`]), resolved against the
//! model's tensor names into exact names for the converter; a rule that matches no tensor is
//! an error, located in the file.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::ops::Range;
use std::path::Path;

use serde::Deserialize;
use sky_dag::glob::Glob;
use sky_dag::source::{did_you_mean, Source};
use sky_gguf::GgmlType;
use sky_laya::{parse_type, policy_type_name, policy_type_names, TypePolicy, POLICY_TYPES};

use toml::Spanned;

/// A GGUF tensor element type a policy can choose: an entry of [`sky_laya::POLICY_TYPES`],
/// whose spellings are the only table of these names (serde reads and writes them through it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Deserialize, serde::Serialize)]
#[serde(try_from = "String", into = "&'static str")]
pub struct TensorType(usize);

impl TensorType {
    /// 32-bit float.
    pub const F32: TensorType = TensorType(0);
    /// IEEE half.
    pub const F16: TensorType = TensorType(1);
    /// bfloat16.
    pub const BF16: TensorType = TensorType(2);
    /// ggml Q8_0 blocks.
    pub const Q8_0: TensorType = TensorType(3);

    /// The name used in pipeline.toml and file names.
    pub fn name(self) -> &'static str {
        POLICY_TYPES[self.0].1
    }

    /// The GGUF type.
    pub fn ggml(self) -> GgmlType {
        POLICY_TYPES[self.0].0
    }
}

impl TryFrom<String> for TensorType {
    type Error = String;

    /// Serde's wording for an unknown value, which the pipeline's messages turn into a
    /// did-you-mean (`schema::explain_toml_error`).
    fn try_from(name: String) -> Result<TensorType, String> {
        POLICY_TYPES
            .iter()
            .position(|(_, n)| *n == name)
            .map(TensorType)
            .ok_or_else(|| {
                let names: Vec<String> = policy_type_names().map(|n| format!("`{n}`")).collect();
                format!(
                    "unknown variant `{name}`, expected one of {}",
                    names.join(", ")
                )
            })
    }
}

impl From<TensorType> for &'static str {
    fn from(t: TensorType) -> &'static str {
        t.name()
    }
}

/// `[policy.<name>]`: per-tensor types of a converted model.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Policy {
    /// Type of every encoder tensor no rule matches.
    #[serde(rename = "type", default = "default_policy_type")]
    pub default_type: TensorType,
    /// Type of the decision head's tensors.
    #[serde(default = "default_head_type")]
    pub head_type: TensorType,
    /// Ordered rules; the first whose glob matches a GGUF tensor name wins.
    #[serde(default)]
    pub rule: Vec<PolicyRule>,
}

fn default_policy_type() -> TensorType {
    TensorType::F16
}
fn default_head_type() -> TensorType {
    TensorType::F32
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            default_type: default_policy_type(),
            head_type: default_head_type(),
            rule: Vec::new(),
        }
    }
}

/// One `[[policy.<name>.rule]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyRule {
    /// Glob over GGUF tensor names (`*`, `**`, `?`, `[set]`).
    #[serde(rename = "match")]
    pub pattern: Spanned<String>,
    /// The type for matching tensors.
    #[serde(rename = "type")]
    pub tensor_type: TensorType,
}

/// The policy-file spelling of a GGUF type (`f32`, `f16`, `bf16`, `q8_0`); another type is an
/// error naming it, never a stand-in.
pub fn type_name(t: GgmlType) -> anyhow::Result<&'static str> {
    policy_type_name(t).ok_or_else(|| {
        anyhow::anyhow!(
            "tensor type {t} has no policy spelling (a policy chooses one of {})",
            policy_type_names().collect::<Vec<_>>().join(", ")
        )
    })
}

/// Why a rule could not be resolved: the rule's index and the message.
#[derive(Debug, Clone, PartialEq)]
pub struct RuleError {
    /// Index of the rule in its policy.
    pub rule: usize,
    /// What is wrong.
    pub message: String,
}

/// Resolve ordered `(glob, type)` rules against the model's tensor names (in model order) into
/// exact-name rules for the converter: first matching rule wins, as in `pipeline.toml`.
///
/// Errors: a bad glob, a bad type name, a rule that matches no tensor.
pub fn resolve_rules<'a>(
    rules: &[(&str, &str)],
    names: impl IntoIterator<Item = &'a str> + Clone,
) -> Result<Vec<(String, GgmlType)>, RuleError> {
    let mut compiled = Vec::with_capacity(rules.len());
    for (i, (pattern, ty)) in rules.iter().enumerate() {
        let err = |message: String| RuleError { rule: i, message };
        let glob = Glob::new(pattern).map_err(|e| err(format!("policy rule `{pattern}`: {e}")))?;
        let ty = parse_type(ty).map_err(|e| err(format!("policy rule `{pattern}`: {e}")))?;
        if !names.clone().into_iter().any(|n| glob.matches(n)) {
            return Err(err(format!(
                "policy rule `{pattern}` matches no tensor of the model{}",
                did_you_mean(pattern, names.clone())
            )));
        }
        compiled.push((glob, ty));
    }
    Ok(names
        .into_iter()
        .filter_map(|n| {
            compiled
                .iter()
                .find(|(g, _)| g.matches(n))
                .map(|(_, ty)| (n.to_string(), *ty))
        })
        .collect())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPolicyFile {
    #[serde(default)]
    policy: BTreeMap<String, toml::Spanned<Policy>>,
}

/// A policy file, read and checked against a model's tensor names.
#[derive(Debug)]
pub struct PolicyFile {
    /// The table's name (`[policy.<name>]`).
    pub name: String,
    /// The converter's policy, rules resolved to exact tensor names.
    pub policy: TypePolicy,
}

impl PolicyFile {
    /// Read `path`, which must hold exactly one `[policy.<name>]` table, and resolve its rules
    /// against `names` (the model's GGUF tensor names). Errors are `FILE:LINE:COL`.
    pub fn read<'a>(
        path: &Path,
        names: impl IntoIterator<Item = &'a str> + Clone,
    ) -> anyhow::Result<PolicyFile> {
        let text = sky_fs::read_to_string(path, sky_fs::POLICY)?;
        PolicyFile::parse(&text, path, names)
    }

    /// [`PolicyFile::read`] on text; `path` is only used in messages.
    pub fn parse<'a>(
        text: &str,
        path: &Path,
        names: impl IntoIterator<Item = &'a str> + Clone,
    ) -> anyhow::Result<PolicyFile> {
        let src = Source::new(path, text);
        let at = |span: Range<usize>, msg: String| anyhow::Error::new(src.error_at(span, msg));
        let raw: RawPolicyFile = toml::from_str(text)
            .map_err(|e| at(e.span().unwrap_or(0..0), e.message().to_string()))?;
        let mut tables = raw.policy.into_iter();
        let Some((name, table)) = tables.next() else {
            return Err(at(
                0..0,
                "no [policy.<name>] table (a policy file holds one, as `skyctl tune` writes it)"
                    .into(),
            ));
        };
        if let Some((other, t)) = tables.next() {
            return Err(at(
                t.span(),
                format!("a second policy `{other}` beside `{name}`: a policy file holds one"),
            ));
        }
        let p = table.into_inner();
        let rules: Vec<(&str, &str)> = p
            .rule
            .iter()
            .map(|r| (r.pattern.get_ref().as_str(), r.tensor_type.name()))
            .collect();
        let resolved = resolve_rules(&rules, names)
            .map_err(|e| at(p.rule[e.rule].pattern.span(), e.message))?;
        let policy = TypePolicy {
            ftype: p.default_type.ggml(),
            head_type: p.head_type.ggml(),
            rules: resolved,
        };
        policy.validate()?;
        Ok(PolicyFile { name, policy })
    }
}

/// A policy file's text: `comment` lines (without `#`), then `[policy.<name>]` with `type`,
/// `head_type` and one exact-name rule per `(tensor, type)`, in order.
pub fn render(
    name: &str,
    comment: &[String],
    ftype: GgmlType,
    head_type: GgmlType,
    rules: &[(String, GgmlType)],
) -> anyhow::Result<String> {
    let mut s = String::new();
    for line in comment {
        let _ = writeln!(s, "# {line}");
    }
    let _ = writeln!(
        s,
        "[policy.{name}]\ntype = \"{}\"\nhead_type = \"{}\"",
        type_name(ftype)?,
        type_name(head_type)?
    );
    for (tensor, ty) in rules {
        let _ = writeln!(
            s,
            "\n[[policy.{name}.rule]]\nmatch = \"{tensor}\"\ntype = \"{}\"",
            type_name(*ty)?
        );
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NAMES: [&str; 4] = [
        "token_embd.weight",
        "blk.0.attn_qkv.weight",
        "blk.0.ffn_up.weight",
        "blk.1.attn_qkv.weight",
    ];

    #[test]
    fn a_type_without_a_policy_spelling_is_an_error_not_f32() {
        let q4_0 = GgmlType::from_id(2);
        let e = type_name(q4_0).unwrap_err().to_string();
        assert_eq!(
            e,
            "tensor type Q4_0 has no policy spelling (a policy chooses one of f32, f16, bf16, q8_0)"
        );
        let e = render(
            "p",
            &[],
            GgmlType::F16,
            GgmlType::F32,
            &[("t".into(), q4_0)],
        )
        .unwrap_err();
        assert!(e.to_string().starts_with("tensor type Q4_0"), "{e}");
        for (t, name) in [
            (TensorType::F32, "f32"),
            (TensorType::BF16, "bf16"),
            (TensorType::Q8_0, "q8_0"),
        ] {
            assert_eq!(t.name(), name);
            assert_eq!(TensorType::try_from(name.to_string()), Ok(t));
        }
        assert_eq!(
            TensorType::try_from("f8".to_string()),
            Err("unknown variant `f8`, expected one of `f32`, `f16`, `bf16`, `q8_0`".to_string())
        );
    }

    #[test]
    fn rules_resolve_first_match_in_model_order() {
        let r = resolve_rules(
            &[("blk.[0].*", "q8_0"), ("blk.*", "f16")],
            NAMES.iter().copied(),
        )
        .unwrap();
        assert_eq!(
            r,
            vec![
                ("blk.0.attn_qkv.weight".to_string(), GgmlType::Q8_0),
                ("blk.0.ffn_up.weight".to_string(), GgmlType::Q8_0),
                ("blk.1.attn_qkv.weight".to_string(), GgmlType::F16),
            ]
        );
    }

    #[test]
    fn unknown_tensor_is_located_with_a_suggestion() {
        let text = "[policy.tuned]\ntype = \"f32\"\n\n[[policy.tuned.rule]]\nmatch = \"blk.0.ffn_up.weight\"\ntype = \"f16\"\n\n[[policy.tuned.rule]]\nmatch = \"blk.0.attn_qvk.weight\"\ntype = \"q8_0\"\n";
        let e = PolicyFile::parse(text, Path::new("P.toml"), NAMES.iter().copied())
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("P.toml:9:9: "), "{e}");
        assert!(
            e.contains("policy rule `blk.0.attn_qvk.weight` matches no tensor of the model (did you mean `blk.0.attn_qkv.weight`?)"),
            "{e}"
        );
    }

    #[test]
    fn one_table_per_file_and_types_checked() {
        let two = "[policy.a]\ntype = \"f16\"\n[policy.b]\ntype = \"f16\"\n";
        let e = PolicyFile::parse(two, Path::new("P.toml"), NAMES.iter().copied())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("a second policy `b` beside `a`: a policy file holds one"),
            "{e}"
        );
        let e = PolicyFile::parse("", Path::new("P.toml"), NAMES.iter().copied())
            .unwrap_err()
            .to_string();
        assert!(e.contains("P.toml:1:1: no [policy.<name>] table"), "{e}");
        let e = PolicyFile::parse(
            "[policy.a]\ntype = \"q4\"\n",
            Path::new("P.toml"),
            NAMES.iter().copied(),
        )
        .unwrap_err()
        .to_string();
        assert!(e.starts_with("P.toml:2:8: "), "{e}");
    }

    #[test]
    fn rendered_policy_reads_back() {
        let rules = vec![
            ("blk.0.attn_qkv.weight".to_string(), GgmlType::Q8_0),
            ("token_embd.weight".to_string(), GgmlType::F16),
        ];
        let text = render(
            "tuned",
            &["measured".into()],
            GgmlType::Q8_0,
            GgmlType::F32,
            &rules,
        )
        .unwrap();
        let p = PolicyFile::parse(&text, Path::new("P.toml"), NAMES.iter().copied()).unwrap();
        assert_eq!(p.name, "tuned");
        assert_eq!(p.policy.ftype, GgmlType::Q8_0);
        assert_eq!(p.policy.head_type, GgmlType::F32);
        // resolved in model order
        assert_eq!(p.policy.rules, vec![rules[1].clone(), rules[0].clone()]);
        assert!(text.starts_with("# measured\n[policy.tuned]\n"), "{text}");
    }
}
