//! Calibration of a model over a prompt set; what `skyctl calibrate` and the `calibrate` node
//! share.

use std::path::Path;

use anyhow::Context;
use sky_infer::calibrate::{calibrate, parse_prompts, CalibrationRun};
use sky_quant::calibration_prompts;

/// Calibrate `model` on `prompts` (a JSONL file) or the built-in set.
pub fn calibrate_model(model: &Path, prompts: Option<&Path>) -> anyhow::Result<CalibrationRun> {
    let set = match prompts {
        Some(p) => {
            let text = std::fs::read_to_string(p)
                .with_context(|| format!("reading prompt set {}", p.display()))?;
            parse_prompts(&text).with_context(|| format!("prompt set {}", p.display()))?
        }
        None => calibration_prompts(),
    };
    let engine =
        sky_infer::load::open(model).with_context(|| format!("loading {}", model.display()))?;
    let run =
        calibrate(&engine, &set).with_context(|| format!("calibrating {}", model.display()))?;
    Ok(run)
}
