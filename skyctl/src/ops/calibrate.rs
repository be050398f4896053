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
            let text = sky_fs::read_to_string(p, sky_fs::PROMPTS)?;
            parse_prompts(&text).with_context(|| format!("prompt set {}", p.display()))?
        }
        None => calibration_prompts(),
    };
    let mut engine =
        sky_infer::load::open(model).with_context(|| format!("loading {}", model.display()))?;
    engine.stop = Some(crate::ops::stop_requested);
    let run =
        calibrate(&engine, &set).with_context(|| format!("calibrating {}", model.display()))?;
    Ok(run)
}

/// The calibration a quantizing command uses: `calibration` (a `skyctl calibrate` file), or a
/// run of `model` on `prompts` or the built-in set. Returns the notes the user should see.
pub fn calibration_for(
    model: &Path,
    calibration: Option<&Path>,
    prompts: Option<&Path>,
) -> anyhow::Result<(sky_quant::Calibration, Vec<String>)> {
    if let Some(p) = calibration {
        let text = sky_fs::read_to_string(p, sky_fs::CALIBRATION)?;
        let c = sky_quant::Calibration::from_json(&text)
            .with_context(|| format!("calibration {}", p.display()))?;
        return Ok((c, Vec::new()));
    }
    let run = calibrate_model(model, prompts)?;
    let mut notes = Vec::new();
    if prompts.is_none() {
        notes.push(format!(
            "no calibration given: calibrated on the {} built-in prompts",
            run.prompts
        ));
    }
    notes.extend(run.notes());
    Ok((run.calibration, notes))
}
