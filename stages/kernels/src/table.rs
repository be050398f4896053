//! The table of golden files: the seed's names, dtypes, counts, shapes (with dimension
//! names, to report an element in the kernel's own coordinates), roles and tolerances.

use std::path::Path;

use crate::error::{Error, Result};
use crate::format::{self, Dtype, GoldenFile, Payload};

/// The seven kernels, in the seed's (and the random stream's) order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kernel {
    /// Kernel 1: Q3_K dequant + mat-vec.
    Q3k,
    /// Kernel 2: partial NEOX RoPE.
    Rope,
    /// Kernel 3: per-head QK RMSNorm.
    QkNorm,
    /// Kernel 4: MoE routing and shared-expert gate.
    Moe,
    /// Kernel 5: gated delta-rule recurrence.
    SsmRecur,
    /// Kernel 6: causal conv1d + SiLU.
    SsmConv,
    /// Kernel 7: gated RMSNorm.
    SsmGatedNorm,
}

impl Kernel {
    /// Short name (as serialized).
    pub const fn as_str(self) -> &'static str {
        match self {
            Kernel::Q3k => "q3k",
            Kernel::Rope => "rope",
            Kernel::QkNorm => "qk_norm",
            Kernel::Moe => "moe",
            Kernel::SsmRecur => "ssm_recur",
            Kernel::SsmConv => "ssm_conv",
            Kernel::SsmGatedNorm => "ssm_gated_norm",
        }
    }
}

/// Whether a harness reads the file or must produce it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// A kernel input (copied to the kernel host).
    Input,
    /// A golden output (the kernel host must write a file of this name and shape).
    Output,
}

/// How a candidate output is judged against its golden.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Tolerance {
    /// Integers must be equal.
    Exact,
    /// f32: `|c − g| / max(|g|, floor) ≤ rtol` per element, with
    /// `floor = FLOOR_FRACTION · max_i |g_i|` over the file (see [`check`](mod@crate::check)).
    Relative {
        /// The largest relative error that passes.
        rtol: f64,
    },
}

/// Tolerance of the Kepler fp32 kernels (the seed: "~1e-4 .. 1e-3 relative").
pub const RTOL_KERNEL: f64 = 1e-3;
/// Tolerance of the MoE weights and the gate scalar (the seed: "~1e-5 .. 1e-4 relative").
pub const RTOL_ROUTING: f64 = 1e-4;

/// One file of the suite.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FileSpec {
    /// File stem and header name.
    pub name: &'static str,
    /// Element type.
    pub dtype: Dtype,
    /// The kernel the file belongs to.
    pub kernel: Kernel,
    /// Input or golden output.
    pub role: Role,
    /// Row-major shape with dimension names; the product is the element count.
    pub dims: &'static [(&'static str, usize)],
    /// The RoPE position of a `rope_*_pos<P>` output.
    pub position: Option<u32>,
    /// How outputs are judged (`None` for inputs).
    pub tolerance: Option<Tolerance>,
}

impl FileSpec {
    /// Number of elements.
    pub fn count(&self) -> usize {
        self.dims.iter().map(|&(_, n)| n).product()
    }

    /// Decode a flat element index into named coordinates (plus `pos` for RoPE outputs).
    pub fn coords(&self, mut index: usize) -> Vec<(&'static str, usize)> {
        let mut out = vec![("", 0); self.dims.len()];
        for (slot, &(name, n)) in out.iter_mut().zip(self.dims).rev() {
            *slot = (name, index % n.max(1));
            index /= n.max(1);
        }
        if let Some(p) = self.position {
            out.insert(0, ("pos", p as usize));
        }
        out
    }
}

const fn input(
    name: &'static str,
    dtype: Dtype,
    kernel: Kernel,
    dims: &'static [(&'static str, usize)],
) -> FileSpec {
    FileSpec {
        name,
        dtype,
        kernel,
        role: Role::Input,
        dims,
        position: None,
        tolerance: None,
    }
}

const fn output(
    name: &'static str,
    kernel: Kernel,
    dims: &'static [(&'static str, usize)],
    rtol: f64,
) -> FileSpec {
    FileSpec {
        name,
        dtype: Dtype::F32,
        kernel,
        role: Role::Output,
        dims,
        position: None,
        tolerance: Some(Tolerance::Relative { rtol }),
    }
}

const fn rope_out(
    name: &'static str,
    dims: &'static [(&'static str, usize)],
    pos: u32,
) -> FileSpec {
    let mut f = output(name, Kernel::Rope, dims, RTOL_KERNEL);
    f.position = Some(pos);
    f
}

const Q_HEADS: &[(&str, usize)] = &[("head", 16), ("dim", 256)];
const K_HEADS: &[(&str, usize)] = &[("head", 2), ("dim", 256)];
const SSM_HJ: &[(&str, usize)] = &[("head", 32), ("j", 128)];
const SSM_HI: &[(&str, usize)] = &[("head", 32), ("i", 128)];
const SSM_STATE: &[(&str, usize)] = &[("head", 32), ("j", 128), ("i", 128)];
const SSM_HEAD: &[(&str, usize)] = &[("head", 32)];
const CONV_STATE: &[(&str, usize)] = &[("channel", 8192), ("t", 3)];
const CHANNELS: &[(&str, usize)] = &[("channel", 8192)];
const GATED: &[(&str, usize)] = &[("head", 32), ("d", 128)];

/// Every file of the seed's tables, in the seed's order.
pub const FILES: [FileSpec; 40] = {
    use Dtype::{F32, U8};
    use Kernel::*;
    [
        input(
            "q3k_matvec_weight",
            U8,
            Q3k,
            &[("row", 24), ("block", 4), ("byte", 110)],
        ),
        input("q3k_matvec_input", F32, Q3k, &[("col", 1024)]),
        output("q3k_matvec_output", Q3k, &[("row", 24)], RTOL_KERNEL),
        // e = 128n + 32j + 16h + l: half n, 2-bit plane j, 16-group h, lane l (spec §3.2);
        // the sub-block is 8n + 2j + h.
        output(
            "q3k_dequant_block0",
            Q3k,
            &[("n", 2), ("j", 4), ("h", 2), ("l", 16)],
            RTOL_KERNEL,
        ),
        input("rope_q_input", F32, Rope, Q_HEADS),
        input("rope_k_input", F32, Rope, K_HEADS),
        rope_out("rope_q_pos0", Q_HEADS, 0),
        rope_out("rope_k_pos0", K_HEADS, 0),
        rope_out("rope_q_pos1", Q_HEADS, 1),
        rope_out("rope_k_pos1", K_HEADS, 1),
        rope_out("rope_q_pos7", Q_HEADS, 7),
        rope_out("rope_k_pos7", K_HEADS, 7),
        rope_out("rope_q_pos100", Q_HEADS, 100),
        rope_out("rope_k_pos100", K_HEADS, 100),
        input("qknorm_input", F32, QkNorm, Q_HEADS),
        input("qknorm_weight", F32, QkNorm, &[("dim", 256)]),
        output("qknorm_output", QkNorm, Q_HEADS, RTOL_KERNEL),
        input("moe_router_logits", F32, Moe, &[("expert", 256)]),
        input("moe_shared_gate_weight", F32, Moe, &[("embd", 2048)]),
        input("moe_shared_gate_input", F32, Moe, &[("embd", 2048)]),
        FileSpec {
            name: "moe_topk_indices",
            dtype: Dtype::I32,
            kernel: Moe,
            role: Role::Output,
            dims: &[("rank", 8)],
            position: None,
            tolerance: Some(Tolerance::Exact),
        },
        output("moe_topk_weights", Moe, &[("rank", 8)], RTOL_ROUTING),
        output("moe_shared_gate_scalar", Moe, &[("gate", 1)], RTOL_ROUTING),
        input("ssm_recur_state_in", F32, SsmRecur, SSM_STATE),
        input("ssm_recur_q", F32, SsmRecur, SSM_HI),
        input("ssm_recur_k", F32, SsmRecur, SSM_HI),
        input("ssm_recur_v", F32, SsmRecur, SSM_HJ),
        input("ssm_recur_g", F32, SsmRecur, SSM_HEAD),
        input("ssm_recur_beta", F32, SsmRecur, SSM_HEAD),
        output("ssm_recur_y", SsmRecur, SSM_HJ, RTOL_KERNEL),
        output("ssm_recur_state_out", SsmRecur, SSM_STATE, RTOL_KERNEL),
        input("ssm_conv_qkv", F32, SsmConv, CHANNELS),
        input(
            "ssm_conv_weight",
            F32,
            SsmConv,
            &[("channel", 8192), ("tap", 4)],
        ),
        input("ssm_conv_state_in", F32, SsmConv, CONV_STATE),
        output("ssm_conv_out", SsmConv, CHANNELS, RTOL_KERNEL),
        output("ssm_conv_state_out", SsmConv, CONV_STATE, RTOL_KERNEL),
        input("ssm_gated_y", F32, SsmGatedNorm, GATED),
        input("ssm_gated_weight", F32, SsmGatedNorm, &[("d", 128)]),
        input("ssm_gated_z", F32, SsmGatedNorm, GATED),
        output("ssm_gated_out", SsmGatedNorm, GATED, RTOL_KERNEL),
    ]
};

/// The table entry of `name`.
pub fn file_spec(name: &str) -> Result<&'static FileSpec> {
    FILES
        .iter()
        .find(|f| f.name == name)
        .ok_or_else(|| Error::UnknownFile {
            name: name.to_string(),
        })
}

/// The files a harness reads (to copy to the kernel host), in table order.
pub fn input_files() -> impl Iterator<Item = &'static FileSpec> {
    FILES.iter().filter(|f| f.role == Role::Input)
}

/// The files a harness must write (to copy back from the kernel host), in table order.
pub fn output_files() -> impl Iterator<Item = &'static FileSpec> {
    FILES.iter().filter(|f| f.role == Role::Output)
}

/// Read `<dir>/<name>.bin` and check its dtype and count against the table.
pub fn read_checked(dir: &Path, name: &str) -> Result<Payload> {
    let spec = file_spec(name)?;
    let file = GoldenFile::read(dir, name)?;
    check_shape(
        spec,
        &file,
        &format::file_path(dir, name).display().to_string(),
    )?;
    Ok(file.payload)
}

pub(crate) fn check_shape(spec: &FileSpec, file: &GoldenFile, label: &str) -> Result<()> {
    let mismatch = |field, expected: String, found: String| Error::Mismatch {
        file: label.to_string(),
        field,
        expected,
        found,
    };
    if file.payload.dtype() != spec.dtype {
        return Err(mismatch(
            "dtype",
            spec.dtype.to_string(),
            file.payload.dtype().to_string(),
        ));
    }
    if file.payload.len() != spec.count() {
        return Err(mismatch(
            "count",
            spec.count().to_string(),
            file.payload.len().to_string(),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_has_the_seed_counts() {
        let want: &[(&str, Dtype, usize)] = &[
            ("q3k_matvec_weight", Dtype::U8, 10560),
            ("q3k_matvec_input", Dtype::F32, 1024),
            ("q3k_matvec_output", Dtype::F32, 24),
            ("q3k_dequant_block0", Dtype::F32, 256),
            ("rope_q_input", Dtype::F32, 4096),
            ("rope_k_input", Dtype::F32, 512),
            ("rope_q_pos100", Dtype::F32, 4096),
            ("rope_k_pos7", Dtype::F32, 512),
            ("qknorm_input", Dtype::F32, 4096),
            ("qknorm_weight", Dtype::F32, 256),
            ("qknorm_output", Dtype::F32, 4096),
            ("moe_router_logits", Dtype::F32, 256),
            ("moe_shared_gate_weight", Dtype::F32, 2048),
            ("moe_shared_gate_input", Dtype::F32, 2048),
            ("moe_topk_indices", Dtype::I32, 8),
            ("moe_topk_weights", Dtype::F32, 8),
            ("moe_shared_gate_scalar", Dtype::F32, 1),
            ("ssm_recur_state_in", Dtype::F32, 524288),
            ("ssm_recur_q", Dtype::F32, 4096),
            ("ssm_recur_k", Dtype::F32, 4096),
            ("ssm_recur_v", Dtype::F32, 4096),
            ("ssm_recur_g", Dtype::F32, 32),
            ("ssm_recur_beta", Dtype::F32, 32),
            ("ssm_recur_y", Dtype::F32, 4096),
            ("ssm_recur_state_out", Dtype::F32, 524288),
            ("ssm_conv_qkv", Dtype::F32, 8192),
            ("ssm_conv_weight", Dtype::F32, 32768),
            ("ssm_conv_state_in", Dtype::F32, 24576),
            ("ssm_conv_out", Dtype::F32, 8192),
            ("ssm_conv_state_out", Dtype::F32, 24576),
            ("ssm_gated_y", Dtype::F32, 4096),
            ("ssm_gated_weight", Dtype::F32, 128),
            ("ssm_gated_z", Dtype::F32, 4096),
            ("ssm_gated_out", Dtype::F32, 4096),
        ];
        for &(name, dtype, count) in want {
            let spec = file_spec(name).unwrap();
            assert_eq!((spec.dtype, spec.count()), (dtype, count), "{name}");
        }
        assert_eq!(input_files().count(), 21);
        assert_eq!(output_files().count(), 19);
        let mut names: Vec<_> = FILES.iter().map(|f| f.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), FILES.len(), "names are unique");
    }
}
