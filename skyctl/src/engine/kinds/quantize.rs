//! `quantize`: the reference F32 GGUF + a calibration -> the calibrated Q8_0 GGUF (Q8_0
//! encoder matrices, F16 token embeddings, F32 head; outlier columns and their exact weights
//! in `skycmd.quant.*` metadata).
//!
//! Params: `outlier_ratio` (> 1). Inputs: the F32 GGUF, the calibration JSON. Output: the GGUF.

use anyhow::{bail, Context};
use std::io::Write as _;

use super::{StageCtx, StageKind};

/// The `quantize` kind.
pub struct Quantize;

impl StageKind for Quantize {
    fn name(&self) -> &'static str {
        "quantize"
    }

    fn version(&self) -> u32 {
        1
    }

    fn run(&self, ctx: &mut StageCtx<'_>) -> anyhow::Result<()> {
        let node = ctx.node;
        let Some(ratio) = ctx.params["outlier_ratio"].as_f64() else {
            bail!(
                "node `{node}`: params.outlier_ratio must be a number, got {}",
                ctx.params["outlier_ratio"]
            );
        };
        let (Some(model), Some(calib), Some(out)) =
            (ctx.inputs.first(), ctx.inputs.get(1), ctx.outputs.first())
        else {
            bail!(
                "node `{node}`: expects the F32 GGUF and the calibration as inputs and one output"
            );
        };
        let text = std::fs::read_to_string(&calib.path)
            .with_context(|| format!("reading {}", calib.rel))?;
        let calibration = sky_quant::Calibration::from_json(&text)
            .with_context(|| format!("node `{node}`: {}", calib.rel))?;
        let reference = crate::commands::quantize::reference_bytes(&model.path)?;
        let q = crate::commands::quantize::quantize_to(
            &reference,
            std::path::Path::new(&model.rel),
            &calibration,
            ratio as f32,
            false,
            out,
        )
        .with_context(|| format!("node `{node}`"))?;
        writeln!(
            ctx.log,
            "{} Q8_0 matrices, {} outlier columns kept in f32, {} bytes",
            q.q8_tensors,
            q.outlier_columns,
            q.bytes.len()
        )?;
        Ok(())
    }
}
