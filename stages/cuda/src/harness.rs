//! The CUDA harness: read the golden inputs, run every kernel of [`crate::SOURCES`] on the
//! GPU (PTX from a directory the compile node wrote), and write the output files
//! [`sky_kernels::check`] judges, exactly as the CPU harness [`sky_kernels::run_cpu`] does.

use std::path::Path;
use std::time::{Duration, Instant};

use sky_kernels::suite::write_files;
use sky_kernels::{moe, norm, q3k, rope, ssm, GeneratedFile, Inputs, Outputs};

use crate::driver::{Arg, Gpu, Module};
use crate::error::{Error, Result};

/// What a harness run did.
#[derive(Debug)]
pub struct Run {
    /// The GPU's name.
    pub device: String,
    /// Its compute capability.
    pub capability: (i32, i32),
    /// The driver version (`cuDriverGetVersion`, e.g. 12040).
    pub driver_version: i32,
    /// The output files written.
    pub files: Vec<GeneratedFile>,
    /// Wall time of each kernel launch (with its synchronisation), in launch order.
    pub timings: Vec<(String, Duration)>,
}

/// Threads per block of the reductions (a power of two; the kernels' `*_THREADS`).
const THREADS: u32 = 256;

/// Run the kernels: PTX files `<stem>.ptx` from `ptx_dir`, inputs from `in_dir`, outputs into
/// `out_dir`. Without a driver or a GPU: [`Error::NoGpu`], before anything is read.
pub fn run_cuda(ptx_dir: &Path, in_dir: &Path, out_dir: &Path) -> Result<Run> {
    let gpu = Gpu::open()?;
    let inp = Inputs::read(in_dir)?;
    let load = |stem: &str| -> Result<Module<'_>> {
        let path = ptx_dir.join(format!("{stem}.ptx"));
        let text = sky_fs::read_to_string(&path, sky_fs::SOURCE).map_err(|e| Error::Ptx {
            path: path.clone(),
            reason: format!(
                "{} (compile the kernels first: `skyctl cuda compile`)",
                e.problem()
            ),
        })?;
        gpu.load_ptx(&text)
    };
    let mut timings = Vec::new();
    let mut launch = |m: &Module<'_>, name: &str, grid: usize, block: u32, args: &[Arg]| {
        let grid = u32::try_from(grid).map_err(|_| Error::Driver {
            call: "cuLaunchKernel",
            code: -1,
            name: format!("{name}: grid of {grid} blocks"),
        })?;
        let t = Instant::now();
        m.launch(name, grid, block, args)?;
        timings.push((name.to_string(), t.elapsed()));
        Ok::<(), Error>(())
    };
    let n32 = |n: usize| i32::try_from(n).unwrap_or(i32::MAX);

    // Q3_K: block 0 dequantised, and the mat-vec.
    let m = load("q3k")?;
    let w = gpu.upload(&inp.q3k_weight)?;
    let x = gpu.upload(&inp.q3k_x)?;
    let cols = inp.q3k_x.len();
    let rows = inp.q3k_weight.len() / q3k::BLOCK_BYTES / (cols / q3k::QK_K).max(1);
    let deq = gpu.alloc(q3k::QK_K * 4)?;
    launch(
        &m,
        "q3k_dequant",
        1,
        THREADS,
        &[Arg::Ptr(w.ptr), Arg::Ptr(deq.ptr), Arg::I32(1)],
    )?;
    let mv = gpu.alloc(rows * 4)?;
    launch(
        &m,
        "q3k_matvec",
        rows,
        THREADS,
        &[
            Arg::Ptr(w.ptr),
            Arg::Ptr(x.ptr),
            Arg::Ptr(mv.ptr),
            Arg::I32(n32(rows)),
            Arg::I32(n32(cols)),
        ],
    )?;
    let q3k_dequant0 = deq.download::<f32>(q3k::QK_K)?;
    let q3k_out = mv.download::<f32>(rows)?;

    // RoPE at every golden position, Q and K.
    let m = load("rope")?;
    let mut rope_at = |x: &[f32]| -> Result<Vec<Vec<f32>>> {
        let xb = gpu.upload(x)?;
        let heads = x.len() / rope::HEAD_DIM;
        let mut out = Vec::new();
        for &pos in &rope::POSITIONS {
            let yb = gpu.alloc(x.len() * 4)?;
            launch(
                &m,
                "rope_neox_partial",
                x.len().div_ceil(THREADS as usize),
                THREADS,
                &[
                    Arg::Ptr(xb.ptr),
                    Arg::Ptr(yb.ptr),
                    Arg::I32(n32(heads)),
                    Arg::U32(pos),
                ],
            )?;
            out.push(yb.download::<f32>(x.len())?);
        }
        Ok(out)
    };
    let rope_q = rope_at(&inp.rope_q)?;
    let rope_k = rope_at(&inp.rope_k)?;

    // QK norm and the gated norm.
    let m = load("norm")?;
    let dim = inp.qknorm_w.len();
    let (xb, wb) = (gpu.upload(&inp.qknorm_x)?, gpu.upload(&inp.qknorm_w)?);
    let yb = gpu.alloc(inp.qknorm_x.len() * 4)?;
    launch(
        &m,
        "rms_norm_heads",
        inp.qknorm_x.len() / dim.max(1),
        THREADS,
        &[
            Arg::Ptr(xb.ptr),
            Arg::Ptr(wb.ptr),
            Arg::Ptr(yb.ptr),
            Arg::I32(n32(dim)),
            Arg::F64(norm::RMS_NORM_EPS),
        ],
    )?;
    let qknorm_out = yb.download::<f32>(inp.qknorm_x.len())?;
    let gdim = inp.gated_w.len();
    let (gy, gw, gz) = (
        gpu.upload(&inp.gated_y)?,
        gpu.upload(&inp.gated_w)?,
        gpu.upload(&inp.gated_z)?,
    );
    let go = gpu.alloc(inp.gated_y.len() * 4)?;
    launch(
        &m,
        "gated_rms_norm",
        inp.gated_y.len() / gdim.max(1),
        THREADS,
        &[
            Arg::Ptr(gy.ptr),
            Arg::Ptr(gw.ptr),
            Arg::Ptr(gz.ptr),
            Arg::Ptr(go.ptr),
            Arg::I32(n32(gdim)),
            Arg::F64(norm::RMS_NORM_EPS),
        ],
    )?;
    let gated_out = go.download::<f32>(inp.gated_y.len())?;

    // MoE routing and the shared gate.
    let m = load("moe")?;
    let k = moe::TOP_K.min(inp.moe_logits.len());
    let lb = gpu.upload(&inp.moe_logits)?;
    let (ib, wb) = (gpu.alloc(k * 4)?, gpu.alloc(k * 4)?);
    launch(
        &m,
        "moe_route",
        1,
        THREADS,
        &[
            Arg::Ptr(lb.ptr),
            Arg::I32(n32(inp.moe_logits.len())),
            Arg::I32(n32(k)),
            Arg::F64(moe::EXPERT_WEIGHTS_SCALE),
            Arg::Ptr(ib.ptr),
            Arg::Ptr(wb.ptr),
        ],
    )?;
    let topk_indices = ib.download::<i32>(k)?;
    let topk_weights = wb.download::<f32>(k)?;
    let (gwb, gxb, gb) = (
        gpu.upload(&inp.gate_w)?,
        gpu.upload(&inp.gate_x)?,
        gpu.alloc(4)?,
    );
    launch(
        &m,
        "moe_shared_gate",
        1,
        THREADS,
        &[
            Arg::Ptr(gwb.ptr),
            Arg::Ptr(gxb.ptr),
            Arg::I32(n32(inp.gate_w.len())),
            Arg::Ptr(gb.ptr),
        ],
    )?;
    let gate = gb.download::<f32>(1)?;

    // The delta-rule recurrence and the conv.
    let m = load("ssm")?;
    let s = ssm::STATE_SIZE;
    let ins = [
        &inp.ssm_state,
        &inp.ssm_q,
        &inp.ssm_k,
        &inp.ssm_v,
        &inp.ssm_g,
        &inp.ssm_beta,
    ]
    .map(|v| gpu.upload(v));
    let [st, q, kk, v, g, beta] = ins;
    let (st, q, kk, v, g, beta) = (st?, q?, kk?, v?, g?, beta?);
    let (yb, sb) = (
        gpu.alloc(inp.ssm_v.len() * 4)?,
        gpu.alloc(inp.ssm_state.len() * 4)?,
    );
    launch(
        &m,
        "ssm_delta_rule",
        inp.ssm_v.len(),
        (s as u32).next_power_of_two(),
        &[
            Arg::Ptr(st.ptr),
            Arg::Ptr(q.ptr),
            Arg::Ptr(kk.ptr),
            Arg::Ptr(v.ptr),
            Arg::Ptr(g.ptr),
            Arg::Ptr(beta.ptr),
            Arg::Ptr(yb.ptr),
            Arg::Ptr(sb.ptr),
            Arg::I32(n32(s)),
        ],
    )?;
    let ssm_y = yb.download::<f32>(inp.ssm_v.len())?;
    let ssm_state = sb.download::<f32>(inp.ssm_state.len())?;
    let c = inp.conv_x.len();
    let (cx, cw, cs) = (
        gpu.upload(&inp.conv_x)?,
        gpu.upload(&inp.conv_w)?,
        gpu.upload(&inp.conv_state)?,
    );
    let (co, cso) = (gpu.alloc(c * 4)?, gpu.alloc(inp.conv_state.len() * 4)?);
    launch(
        &m,
        "ssm_conv1d_silu",
        c.div_ceil(THREADS as usize),
        THREADS,
        &[
            Arg::Ptr(cx.ptr),
            Arg::Ptr(cw.ptr),
            Arg::Ptr(cs.ptr),
            Arg::Ptr(co.ptr),
            Arg::Ptr(cso.ptr),
            Arg::I32(n32(c)),
        ],
    )?;
    let conv_out = co.download::<f32>(c)?;
    let conv_state = cso.download::<f32>(inp.conv_state.len())?;

    let outputs = Outputs {
        q3k_out,
        q3k_dequant0,
        rope_q,
        rope_k,
        qknorm_out,
        topk_indices,
        topk_weights,
        gate,
        ssm_y,
        ssm_state,
        conv_out,
        conv_state,
        gated_out,
    };
    let files = write_files(out_dir, &outputs.to_files())?;
    Ok(Run {
        device: gpu.name.clone(),
        capability: gpu.capability,
        driver_version: gpu.driver_version,
        files,
        timings,
    })
}
