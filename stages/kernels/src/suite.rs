//! The golden suite: the draw plan that produces the inputs (spec §10), the reference
//! outputs, the generator and the CPU harness. The table of files is in [`crate::table`].

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::format::{self, Dtype, GoldenFile, Payload, SEED};
use crate::rng::XorShift32;
use crate::table::{read_checked, FILES};
use crate::{moe, norm, q3k, rope, ssm};

/// All kernel inputs, as drawn by the generator or read from a golden directory.
#[derive(Debug, Clone, PartialEq)]
pub struct Inputs {
    /// Q3_K weight: 96 blocks of 110 bytes (24 rows × 4 blocks).
    pub q3k_weight: Vec<u8>,
    /// Mat-vec activations (1024).
    pub q3k_x: Vec<f32>,
    /// RoPE Q (16 × 256).
    pub rope_q: Vec<f32>,
    /// RoPE K (2 × 256).
    pub rope_k: Vec<f32>,
    /// QK-norm input (16 × 256).
    pub qknorm_x: Vec<f32>,
    /// QK-norm shared weight (256).
    pub qknorm_w: Vec<f32>,
    /// Router logits (256).
    pub moe_logits: Vec<f32>,
    /// Shared-expert gate weight (2048).
    pub gate_w: Vec<f32>,
    /// Shared-expert gate input (2048).
    pub gate_x: Vec<f32>,
    /// Transposed recurrence state (32 × 128 × 128).
    pub ssm_state: Vec<f32>,
    /// Recurrence q (32 × 128).
    pub ssm_q: Vec<f32>,
    /// Recurrence k (32 × 128).
    pub ssm_k: Vec<f32>,
    /// Recurrence v (32 × 128).
    pub ssm_v: Vec<f32>,
    /// Log-decay per head (32).
    pub ssm_g: Vec<f32>,
    /// β per head (32).
    pub ssm_beta: Vec<f32>,
    /// Conv input stream (8192).
    pub conv_x: Vec<f32>,
    /// Conv weights (8192 × 4).
    pub conv_w: Vec<f32>,
    /// Conv state (8192 × 3).
    pub conv_state: Vec<f32>,
    /// Gated-norm y (32 × 128).
    pub gated_y: Vec<f32>,
    /// Gated-norm weight (128).
    pub gated_w: Vec<f32>,
    /// Gated-norm z (32 × 128).
    pub gated_z: Vec<f32>,
}

/// Q3_K blocks in the weight (24 rows × 4).
const Q3K_BLOCKS: usize = 96;
/// Bytes of a block drawn one per draw (everything except `d`).
const Q3K_RANDOM_BYTES: usize = 108;

impl Inputs {
    /// Draw every input from `rng`, following the spec's draw plan (§10) exactly.
    pub fn draw(rng: &mut XorShift32) -> Self {
        let mut q3k_weight = Vec::with_capacity(Q3K_BLOCKS * q3k::BLOCK_BYTES);
        for _ in 0..Q3K_BLOCKS {
            q3k_weight.extend((0..Q3K_RANDOM_BYTES).map(|_| rng.byte()));
            q3k_weight.extend_from_slice(&q3k::f32_to_f16(rng.range(1e-3, 4e-3)).to_le_bytes());
        }
        let q3k_x = rng.range_vec(1024, -1.0, 1.0);
        let rope_q = rng.range_vec(4096, -1.0, 1.0);
        let rope_k = rng.range_vec(512, -1.0, 1.0);
        let qknorm_x = rng.range_vec(4096, -1.0, 1.0);
        let qknorm_w = one_plus(rng, 256);
        let moe_logits = rng.range_vec(256, -1.0, 1.0);
        let gate_w = rng.range_vec(2048, -1.0, 1.0);
        let gate_x = rng.range_vec(2048, -1.0, 1.0);
        let s = ssm::STATE_SIZE;
        let ssm_state = rng.range_vec(ssm::N_V_HEADS * s * s, -0.1, 0.1);
        let ssm_q = ssm::l2_normalize_heads(&rng.range_vec(4096, -1.0, 1.0), s, norm::RMS_NORM_EPS);
        let ssm_k = ssm::l2_normalize_heads(&rng.range_vec(4096, -1.0, 1.0), s, norm::RMS_NORM_EPS);
        let ssm_v = rng.range_vec(4096, -1.0, 1.0);
        let ssm_g = rng.range_vec(32, -1.0, 0.0);
        let ssm_beta = rng.range_vec(32, 0.0, 1.0);
        let conv_x = rng.range_vec(ssm::CONV_DIM, -1.0, 1.0);
        let conv_w = rng.range_vec(ssm::CONV_DIM * ssm::CONV_KERNEL, -0.5, 0.5);
        let conv_state = rng.range_vec(ssm::CONV_DIM * (ssm::CONV_KERNEL - 1), -1.0, 1.0);
        let gated_y = rng.range_vec(4096, -1.0, 1.0);
        let gated_w = one_plus(rng, 128);
        let gated_z = rng.range_vec(4096, -1.0, 1.0);
        Inputs {
            q3k_weight,
            q3k_x,
            rope_q,
            rope_k,
            qknorm_x,
            qknorm_w,
            moe_logits,
            gate_w,
            gate_x,
            ssm_state,
            ssm_q,
            ssm_k,
            ssm_v,
            ssm_g,
            ssm_beta,
            conv_x,
            conv_w,
            conv_state,
            gated_y,
            gated_w,
            gated_z,
        }
    }

    /// The input files, in table order.
    pub fn to_files(&self) -> Vec<GoldenFile> {
        let f = |name: &str, v: &[f32]| GoldenFile::new(name, Payload::F32(v.to_vec()));
        vec![
            GoldenFile::new("q3k_matvec_weight", Payload::U8(self.q3k_weight.clone())),
            f("q3k_matvec_input", &self.q3k_x),
            f("rope_q_input", &self.rope_q),
            f("rope_k_input", &self.rope_k),
            f("qknorm_input", &self.qknorm_x),
            f("qknorm_weight", &self.qknorm_w),
            f("moe_router_logits", &self.moe_logits),
            f("moe_shared_gate_weight", &self.gate_w),
            f("moe_shared_gate_input", &self.gate_x),
            f("ssm_recur_state_in", &self.ssm_state),
            f("ssm_recur_q", &self.ssm_q),
            f("ssm_recur_k", &self.ssm_k),
            f("ssm_recur_v", &self.ssm_v),
            f("ssm_recur_g", &self.ssm_g),
            f("ssm_recur_beta", &self.ssm_beta),
            f("ssm_conv_qkv", &self.conv_x),
            f("ssm_conv_weight", &self.conv_w),
            f("ssm_conv_state_in", &self.conv_state),
            f("ssm_gated_y", &self.gated_y),
            f("ssm_gated_weight", &self.gated_w),
            f("ssm_gated_z", &self.gated_z),
        ]
    }

    /// Read every input file from `dir`, each checked against the table (header name,
    /// dtype, count).
    pub fn read(dir: &Path) -> Result<Self> {
        // read_checked has verified each dtype against the table, so the fallbacks below
        // only fire if the table and this struct disagree.
        let wrong = |name: &str, found: Dtype, expected: Dtype| Error::Mismatch {
            file: format::file_path(dir, name).display().to_string(),
            field: "dtype",
            expected: expected.to_string(),
            found: found.to_string(),
        };
        let f = |name: &str| -> Result<Vec<f32>> {
            match read_checked(dir, name)? {
                Payload::F32(v) => Ok(v),
                other => Err(wrong(name, other.dtype(), Dtype::F32)),
            }
        };
        let q3k_weight = match read_checked(dir, "q3k_matvec_weight")? {
            Payload::U8(v) => v,
            other => return Err(wrong("q3k_matvec_weight", other.dtype(), Dtype::U8)),
        };
        Ok(Inputs {
            q3k_weight,
            q3k_x: f("q3k_matvec_input")?,
            rope_q: f("rope_q_input")?,
            rope_k: f("rope_k_input")?,
            qknorm_x: f("qknorm_input")?,
            qknorm_w: f("qknorm_weight")?,
            moe_logits: f("moe_router_logits")?,
            gate_w: f("moe_shared_gate_weight")?,
            gate_x: f("moe_shared_gate_input")?,
            ssm_state: f("ssm_recur_state_in")?,
            ssm_q: f("ssm_recur_q")?,
            ssm_k: f("ssm_recur_k")?,
            ssm_v: f("ssm_recur_v")?,
            ssm_g: f("ssm_recur_g")?,
            ssm_beta: f("ssm_recur_beta")?,
            conv_x: f("ssm_conv_qkv")?,
            conv_w: f("ssm_conv_weight")?,
            conv_state: f("ssm_conv_state_in")?,
            gated_y: f("ssm_gated_y")?,
            gated_w: f("ssm_gated_weight")?,
            gated_z: f("ssm_gated_z")?,
        })
    }
}

/// `1 + R(−0.1, 0.1)` evaluated in f64 and rounded once (the "≈ 1 ± 0.1" norm weights).
fn one_plus(rng: &mut XorShift32, n: usize) -> Vec<f32> {
    (0..n)
        .map(|_| (1.0 + (-0.1 + 0.2 * rng.unit())) as f32)
        .collect()
}

/// All reference outputs.
#[derive(Debug, Clone, PartialEq)]
pub struct Outputs {
    /// Mat-vec output (24).
    pub q3k_out: Vec<f32>,
    /// Dequantised block 0 (256).
    pub q3k_dequant0: Vec<f32>,
    /// RoPE Q per position of [`rope::POSITIONS`].
    pub rope_q: Vec<Vec<f32>>,
    /// RoPE K per position of [`rope::POSITIONS`].
    pub rope_k: Vec<Vec<f32>>,
    /// QK-norm output (16 × 256).
    pub qknorm_out: Vec<f32>,
    /// Top-8 expert indices, in selection order.
    pub topk_indices: Vec<i32>,
    /// Top-8 weights.
    pub topk_weights: Vec<f32>,
    /// Shared-expert gate (1).
    pub gate: Vec<f32>,
    /// Recurrence output y (32 × 128).
    pub ssm_y: Vec<f32>,
    /// Updated transposed state (32 × 128 × 128).
    pub ssm_state: Vec<f32>,
    /// Conv output (8192).
    pub conv_out: Vec<f32>,
    /// Rolled conv state (8192 × 3).
    pub conv_state: Vec<f32>,
    /// Gated-norm output (32 × 128).
    pub gated_out: Vec<f32>,
}

impl Outputs {
    /// Run every reference kernel on `inp`.
    pub fn compute(inp: &Inputs) -> Self {
        let q3k_dequant0 = q3k::dequantize(inp.q3k_weight.get(..q3k::BLOCK_BYTES).unwrap_or(&[]));
        let (topk_indices, topk_weights) = moe::route(&inp.moe_logits, moe::TOP_K);
        let recur = ssm::RecurInputs {
            state: &inp.ssm_state,
            q: &inp.ssm_q,
            k: &inp.ssm_k,
            v: &inp.ssm_v,
            g: &inp.ssm_g,
            beta: &inp.ssm_beta,
        };
        let (ssm_y, ssm_state) = ssm::delta_rule_step(&recur, ssm::STATE_SIZE);
        let (conv_out, conv_state) = ssm::conv1d_silu(&inp.conv_x, &inp.conv_w, &inp.conv_state);
        Outputs {
            q3k_out: q3k::matvec(&inp.q3k_weight, &inp.q3k_x),
            q3k_dequant0,
            rope_q: rope::POSITIONS
                .iter()
                .map(|&p| rope::rope_neox_partial(&inp.rope_q, p))
                .collect(),
            rope_k: rope::POSITIONS
                .iter()
                .map(|&p| rope::rope_neox_partial(&inp.rope_k, p))
                .collect(),
            qknorm_out: norm::rms_norm_heads(&inp.qknorm_x, &inp.qknorm_w, norm::RMS_NORM_EPS),
            topk_indices,
            topk_weights,
            gate: vec![moe::shared_gate(&inp.gate_w, &inp.gate_x)],
            ssm_y,
            ssm_state,
            conv_out,
            conv_state,
            gated_out: norm::gated_rms_norm(
                &inp.gated_y,
                &inp.gated_w,
                &inp.gated_z,
                norm::RMS_NORM_EPS,
            ),
        }
    }

    /// The output files, in table order.
    pub fn to_files(&self) -> Vec<GoldenFile> {
        let f = |name: &str, v: &[f32]| GoldenFile::new(name, Payload::F32(v.to_vec()));
        let mut files = vec![
            f("q3k_matvec_output", &self.q3k_out),
            f("q3k_dequant_block0", &self.q3k_dequant0),
        ];
        for (i, p) in rope::POSITIONS.iter().enumerate() {
            files.push(f(&format!("rope_q_pos{p}"), &self.rope_q[i]));
            files.push(f(&format!("rope_k_pos{p}"), &self.rope_k[i]));
        }
        files.extend([
            f("qknorm_output", &self.qknorm_out),
            GoldenFile::new("moe_topk_indices", Payload::I32(self.topk_indices.clone())),
            f("moe_topk_weights", &self.topk_weights),
            f("moe_shared_gate_scalar", &self.gate),
            f("ssm_recur_y", &self.ssm_y),
            f("ssm_recur_state_out", &self.ssm_state),
            f("ssm_conv_out", &self.conv_out),
            f("ssm_conv_state_out", &self.conv_state),
            f("ssm_gated_out", &self.gated_out),
        ]);
        files
    }
}

/// The whole golden set in memory, in table order: inputs drawn from the seeded stream and
/// the reference outputs computed from them.
pub fn golden_set() -> Vec<GoldenFile> {
    let inputs = Inputs::draw(&mut XorShift32::new(SEED));
    let outputs = Outputs::compute(&inputs);
    order_like_table(
        inputs
            .to_files()
            .into_iter()
            .chain(outputs.to_files())
            .collect(),
    )
}

/// Sort files into [`FILES`] order (unknown names last, by name).
pub(crate) fn order_like_table(mut files: Vec<GoldenFile>) -> Vec<GoldenFile> {
    let rank = |f: &GoldenFile| {
        FILES
            .iter()
            .position(|s| s.name == f.name)
            .unwrap_or(FILES.len())
    };
    files.sort_by(|a, b| rank(a).cmp(&rank(b)).then_with(|| a.name.cmp(&b.name)));
    files
}

/// A file written by [`generate`] or [`run_cpu`].
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct GeneratedFile {
    /// Golden name.
    pub name: String,
    /// Where it was written.
    pub path: PathBuf,
    /// File size in bytes.
    pub bytes: u64,
    /// BLAKE3 of the file bytes, lowercase hex.
    pub blake3: String,
}

/// Write `files` into `dir` (created if missing), each atomically.
pub fn write_files(dir: &Path, files: &[GoldenFile]) -> Result<Vec<GeneratedFile>> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    files
        .iter()
        .map(|f| {
            let (path, bytes) = f.write(dir)?;
            Ok(GeneratedFile {
                name: f.name.clone(),
                path,
                bytes: bytes.len() as u64,
                blake3: blake3::hash(&bytes).to_hex().to_string(),
            })
        })
        .collect()
}

/// Generate the whole golden set (all 40 files of the seed's tables) into `out_dir`. A golden
/// `f32` value that is NaN or infinite is refused before anything is written (naming the
/// file and element): the checker refuses to judge against such a file, so none is made.
pub fn generate(out_dir: &Path) -> Result<Vec<GeneratedFile>> {
    let files = golden_set();
    check_goldens_finite(out_dir, &files)?;
    write_files(out_dir, &files)
}

/// Every `f32` value of `files` (goldens about to be written into `dir`) is finite.
/// (Candidate files, the harness's outputs, may hold anything: the checker reports them.)
pub fn check_goldens_finite(dir: &Path, files: &[GoldenFile]) -> Result<()> {
    for f in files {
        if let Payload::F32(v) = &f.payload {
            if let Some((index, &value)) = v.iter().enumerate().find(|(_, x)| !x.is_finite()) {
                return Err(Error::NonFiniteGolden {
                    file: format::file_path(dir, &f.name).display().to_string(),
                    index,
                    value,
                });
            }
        }
    }
    Ok(())
}

/// One digest for a set of written files: BLAKE3 over `name \0 blake3-hex \n` in the given
/// order. Identical sets give identical digests on every machine.
pub fn set_digest(files: &[GeneratedFile]) -> String {
    let mut h = blake3::Hasher::new();
    for f in files {
        h.update(f.name.as_bytes());
        h.update(b"\0");
        h.update(f.blake3.as_bytes());
        h.update(b"\n");
    }
    h.finalize().to_hex().to_string()
}

/// The CPU harness: read the input files from `in_dir`, compute every output with the
/// reference kernels (the stored golden outputs are never read), and write the output files
/// into `out_dir`.
pub fn run_cpu(in_dir: &Path, out_dir: &Path) -> Result<Vec<GeneratedFile>> {
    let inputs = Inputs::read(in_dir)?;
    write_files(out_dir, &Outputs::compute(&inputs).to_files())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_non_finite_golden_is_refused_before_anything_is_written() {
        let dir = std::path::Path::new("gold");
        let ok = GoldenFile::new("q3k_matvec_output", Payload::F32(vec![1.0, 2.0]));
        let bad = GoldenFile::new("ssm_recur_y", Payload::F32(vec![1.0, 2.0, f32::NAN]));
        check_goldens_finite(dir, std::slice::from_ref(&ok)).unwrap();
        let e = check_goldens_finite(dir, &[ok, bad])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("ssm_recur_y.bin: golden value at element 2 is not finite"),
            "{e}"
        );
    }

    #[test]
    fn generated_set_matches_the_table_file_for_file() {
        let set = golden_set();
        assert_eq!(set.len(), FILES.len());
        for (file, spec) in set.iter().zip(FILES.iter()) {
            assert_eq!(file.name, spec.name);
            crate::table::check_shape(spec, file, spec.name).unwrap();
        }
    }

    #[test]
    fn draw_plan_running_totals() {
        let mut r = XorShift32::new(SEED);
        let inp = Inputs::draw(&mut r);
        let total = 96 * 109 + 1024 + 4096 + 512 + 4096 + 256 + 256 + 2048 + 2048;
        let k5 = 524288 + 3 * 4096 + 32 + 32;
        let k6 = 8192 + 32768 + 24576;
        let k7 = 4096 + 128 + 4096;
        assert_eq!(r.draws() as usize, total + k5 + k6 + k7);
        // Running totals stated by the spec: 11488 after K1, 16096 after K2, 20448 after K3.
        assert_eq!(96 * 109 + 1024, 11488);
        assert_eq!(11488 + 4096 + 512, 16096);
        assert_eq!(16096 + 4096 + 256, 20448);
        // The router logits are draws 20448.. (spec §1): draw 20448 = 0x159E270D.
        let want = -1.0 + 2.0 * f64::from(0x159E_270Du32 >> 8) / 16_777_216.0;
        assert_eq!(f64::from(inp.moe_logits[0]), want);
        let gate_w0 = -1.0 + 2.0 * f64::from(0x9A85_7B3Bu32 >> 8) / 16_777_216.0;
        assert_eq!(f64::from(inp.gate_w[0]), gate_w0);
        let gate_x0 = -1.0 + 2.0 * f64::from(0x94F9_4D3Cu32 >> 8) / 16_777_216.0;
        assert_eq!(f64::from(inp.gate_x[0]), gate_x0);
        let gate_x_last = -1.0 + 2.0 * f64::from(0x1358_459Fu32 >> 8) / 16_777_216.0;
        assert_eq!(f64::from(inp.gate_x[2047]), gate_x_last);
    }

    #[test]
    fn reproduces_the_seed_reference_values() {
        let inp = Inputs::draw(&mut XorShift32::new(SEED));
        let out = Outputs::compute(&inp);
        assert_eq!(out.topk_indices, vec![1, 93, 212, 144, 170, 76, 180, 203]);
        let sum: f64 = out.topk_weights.iter().map(|&w| f64::from(w)).sum();
        assert!((sum - 1.0).abs() < 1e-6, "weights sum to {sum}");
        assert!(
            out.topk_weights.windows(2).all(|w| w[0] >= w[1]),
            "descending"
        );
        let gate = f64::from(out.gate[0]);
        // The seed prints 0.051038; the exact value 0.0510387 sits on the rounding boundary.
        assert!((gate - 0.051038).abs() <= 2e-6, "gate {gate}");
        assert!((gate - 0.0510387).abs() <= 2e-7, "gate {gate}");
        let dot: f64 = inp
            .gate_w
            .iter()
            .zip(&inp.gate_x)
            .map(|(&a, &b)| f64::from(a) * f64::from(b))
            .sum();
        assert!((dot - -2.922784).abs() < 1e-6, "w·x = {dot}");
    }

    #[test]
    fn inputs_are_in_their_documented_ranges() {
        let inp = Inputs::draw(&mut XorShift32::new(SEED));
        for blk in inp.q3k_weight.chunks(110) {
            let d = q3k::f16_to_f32(u16::from_le_bytes([blk[108], blk[109]]));
            assert!((1e-3..=4e-3).contains(&d), "d = {d}");
        }
        for head in inp.ssm_q.chunks(128).chain(inp.ssm_k.chunks(128)) {
            let n: f64 = head.iter().map(|&v| f64::from(v) * f64::from(v)).sum();
            assert!((n - 1.0).abs() < 1e-6);
        }
        assert!(inp.ssm_g.iter().all(|&g| (-1.0..0.0).contains(&g)));
        assert!(inp
            .qknorm_w
            .iter()
            .chain(&inp.gated_w)
            .all(|&w| (0.9..=1.1).contains(&w)));
    }
}

#[cfg(test)]
mod digests {
    use super::*;

    /// BLAKE3 of every generated file. A change here means the goldens changed: every GPU
    /// harness result recorded against the old set is void. Update only on purpose.
    const PINNED: [(&str, &str); 40] = [
        (
            "q3k_matvec_weight",
            "e36fd98c7f3dbae54ea8334c843e1b429f712a4b84e7fa82375a194aabf37630",
        ),
        (
            "q3k_matvec_input",
            "36dfa6b08a47b39608a315a3cda94fa049cbffa91f9531b7f0dad54ad1d178e9",
        ),
        (
            "q3k_matvec_output",
            "4f333f7be7dd821486743cf305446a49437a7b48833650921c1eb8eafb2ba3ab",
        ),
        (
            "q3k_dequant_block0",
            "45b058ad95af8fcf91dd079724516b5df7534aa52d9c218f42e7f45deca191e0",
        ),
        (
            "rope_q_input",
            "c096c3474047b1b74425da226b5b86dde8cd92911913b032877d4871d821a626",
        ),
        (
            "rope_k_input",
            "33f691cd4f0d5c1bdfdef76d0745040c42361d5549decd3cd247cf1b92c6d790",
        ),
        (
            "rope_q_pos0",
            "fedd0412e1c7b17024f350f444decf7a9550e90076fcd0653d91d1cbff5b58ae",
        ),
        (
            "rope_k_pos0",
            "39b743fb8f75c0706653e341aa4d87be5bcce05107de1feb3f784d414602d149",
        ),
        (
            "rope_q_pos1",
            "ecb2e21bf3f35330501cb6089f590a359d427844361c98fd51df3a618e4ed941",
        ),
        (
            "rope_k_pos1",
            "3c055bafd1dd6596fb08ef17cc6f1ee23d4ecff8851383ece1dc8612246a7601",
        ),
        (
            "rope_q_pos7",
            "4cc7d73b080ab9824aada3d6af54142f4abc65ad5ca1dc7c1cf1c612fd5f8151",
        ),
        (
            "rope_k_pos7",
            "6b5b1e3815a30fb0a67092e8fa8a619cfabe771b2ffd20e124350875f719a7d5",
        ),
        (
            "rope_q_pos100",
            "a8a9520299b14f28c75fbdd430b304dad7f971d238c621dba42d697170edbf05",
        ),
        (
            "rope_k_pos100",
            "2a1d016763969d5724f3501b2cc870675f6dfc13315150db8b23fa2ad6681ed3",
        ),
        (
            "qknorm_input",
            "46de5b8e49030d71367db0bb75944beed62ffac47a91681215ce9d7c2b9cafbf",
        ),
        (
            "qknorm_weight",
            "2182b09c72cc7b60eca98c8b6de1aa00db91ad79a55ebd8a1798b52939763137",
        ),
        (
            "qknorm_output",
            "3a509d49a08ad0902137b5c812d823bf5c1da37aef36f66c33118688d2e00a60",
        ),
        (
            "moe_router_logits",
            "19a4a4d8aa4bebfac7e0850dc98e402e7a3189bd14e9005dbd0db8a5ef2063bd",
        ),
        (
            "moe_shared_gate_weight",
            "4525e039250248f6e1d4eb535e500a98820ddf0a15be20d625e469eed76fafa3",
        ),
        (
            "moe_shared_gate_input",
            "639960189a6c711fcb69419b4855f3ccdc180c5173ddf8e80409bcb702883773",
        ),
        (
            "moe_topk_indices",
            "9958a2806bea5d794b556f27b38e4060dc45eb158f1fa611420aa40503148b51",
        ),
        (
            "moe_topk_weights",
            "59c2335e88edc041e98b9394bfe47dd3d292c476117c23516827d0abd56d489a",
        ),
        (
            "moe_shared_gate_scalar",
            "b93a3593037de45871a67412ee90293e184859fb107f18cd72c2d1d20a066130",
        ),
        (
            "ssm_recur_state_in",
            "5f74fb33bc52dad31e447fd95adf4f27094593745d2baecb285d680cee70b467",
        ),
        (
            "ssm_recur_q",
            "9dcb6ff70392266076b91e2d878f44ea572c4620e2956a2734801b24ca82de84",
        ),
        (
            "ssm_recur_k",
            "e942dd7945e7cb0050672fb4ad7f303d2a388a63abd22701eec163144acc892a",
        ),
        (
            "ssm_recur_v",
            "6b050fd26c2655871eb7036250a0ee5b5bfff49598805ff6379bcc2ee9184798",
        ),
        (
            "ssm_recur_g",
            "87bb1b7f34d7b2d5d02f245a900278213bc97150bc0d04c788f369208d652689",
        ),
        (
            "ssm_recur_beta",
            "698d7a44f02a02a453cafa5ecfc3cfdbc5b5be501c89708f0f40321d8bff40b6",
        ),
        (
            "ssm_recur_y",
            "9413df4dd5f1355ce12e959bd29d5588d25284e184cca68633897e239afdac21",
        ),
        (
            "ssm_recur_state_out",
            "bea3110c6625892a320ef2128ffc556c8053e3a47f18beaa89cf2379f10d15b2",
        ),
        (
            "ssm_conv_qkv",
            "c14d184a0b1d07948576a7c482186acb2399f0a95cc5a7a108c615e2ead3ae9a",
        ),
        (
            "ssm_conv_weight",
            "d6726b5290c1bd7e112c18d9f31f7712b6d6c1b0c0c6aa1d69dabce06694542c",
        ),
        (
            "ssm_conv_state_in",
            "bdadec86b96568af651d345137565a4bccc54d77086a0f298fabe4d43f59b17d",
        ),
        (
            "ssm_conv_out",
            "06f9e17da24a4bb936fae87468d6376c96da4e71c2dfd062a707e13263fea713",
        ),
        (
            "ssm_conv_state_out",
            "595bb639c5461836db679d065b3b37c6d99ef49f0a535e02f5fa4f99823308d4",
        ),
        (
            "ssm_gated_y",
            "5b0da077eceb08ceb4bb21e9bd9c679f7bb912da181f519f408317c389d2b103",
        ),
        (
            "ssm_gated_weight",
            "4521503c0c29a26122c3ecc5a700a1fac8eec2c8928a120599d61553b08a63c1",
        ),
        (
            "ssm_gated_z",
            "8eaf31f201acd34e68399af72f5bd8606c65da5c4e91358dd1841c838b087460",
        ),
        (
            "ssm_gated_out",
            "31265b7e94f5ecb48160ac36ac795fab29d18d40dfeae96da0b13f1da93c13b6",
        ),
    ];

    #[test]
    fn every_generated_file_has_its_pinned_digest() {
        let set = golden_set();
        let got: Vec<(String, String)> = set
            .iter()
            .map(|f| {
                (
                    f.name.clone(),
                    blake3::hash(&f.to_bytes()).to_hex().to_string(),
                )
            })
            .collect();
        assert_eq!(got.len(), PINNED.len());
        for ((name, digest), (pn, pd)) in got.iter().zip(PINNED.iter()) {
            assert_eq!((name.as_str(), digest.as_str()), (*pn, *pd));
        }
    }

    #[test]
    fn generation_is_byte_identical_across_runs_and_directories() {
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let fa = generate(a.path()).unwrap();
        let fb = generate(&b.path().join("nested/dir")).unwrap();
        assert_eq!(set_digest(&fa), set_digest(&fb));
        for (x, y) in fa.iter().zip(&fb) {
            assert_eq!(
                std::fs::read(&x.path).unwrap(),
                std::fs::read(&y.path).unwrap(),
                "{}",
                x.name
            );
        }
    }
}
