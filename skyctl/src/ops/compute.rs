//! Compute paths: how a model's matrix products are computed. The one list of them; the CLI
//! flags (`--q8`, `--q8-fast`), golden suites (`compute = ...`) and benchmarks map onto it.

use std::path::Path;

use sky_infer::engine::Engine;
use sky_infer::int8::{ComputeOptions, ComputeReport};
use sky_quant::ActQuant;

super::names::name_table! {
    /// A compute path.
    #[derive(Default)]
    pub enum Compute("compute path") {
        /// f32 matrix products (a Q8_0 file still runs in int8).
        #[default]
        F32 = "f32",
        /// Int8 with two-pass (Q8x2, ~15-bit) activations; a float model is quantized at load.
        Q8 = "q8",
        /// Int8 with single-pass Q8 activations: fastest, least accurate.
        Q8Fast = "q8-fast",
    }
}

/// A compute path and whether to drop the outlier calibration.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ComputePath {
    /// The path.
    pub compute: Compute,
    /// Plain round-to-nearest int8, no outlier channels in f32.
    pub no_calib: bool,
}

impl ComputePath {
    /// `compute` with calibration.
    pub fn new(compute: Compute) -> ComputePath {
        ComputePath {
            compute,
            no_calib: false,
        }
    }

    /// The engine options this path selects.
    pub fn options(&self) -> ComputeOptions {
        let act = match self.compute {
            Compute::F32 => None,
            Compute::Q8 => Some(ActQuant::Q8x2),
            Compute::Q8Fast => Some(ActQuant::Q8),
        };
        ComputeOptions {
            act,
            no_calib: self.no_calib,
            ..ComputeOptions::default()
        }
    }

    /// Load a model (GGUF file or Laya directory) on this path.
    pub fn open(&self, model: &Path) -> anyhow::Result<(Engine, ComputeReport)> {
        if let Some(e) = missing_model(model) {
            return Err(e);
        }
        if let Some(e) = sky_laya::checkpoint::not_a_checkpoint(model).filter(|_| model.is_dir()) {
            return Err(e.into());
        }
        sky_infer::int8::open(model, &self.options(), None).map_err(|e| match &e {
            // A flag that does not fit the model is the flag's error, not the load's.
            sky_infer::InferError::BadValue { key, .. } if key.starts_with("--") => e.into(),
            _ => anyhow::Error::from(e).context(format!("loading {}", model.display())),
        })
    }
}

/// The error for a model path that does not exist: the path once, and the closest file or
/// folder beside it (a mistyped variant, `s1-pico.f61.gguf`); `None` when it exists.
pub fn missing_model(model: &Path) -> Option<anyhow::Error> {
    if std::fs::symlink_metadata(model).is_ok() {
        return None;
    }
    let dir = match model.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let beside: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| {
                    if dir == Path::new(".") && model.parent() != Some(dir) {
                        e.file_name().to_string_lossy().into_owned()
                    } else {
                        dir.join(e.file_name()).display().to_string()
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    let given = model.display().to_string();
    let hint = sky_dag::source::did_you_mean(&given, beside.iter().map(String::as_str));
    Some(anyhow::anyhow!(
        "{given}: no such file or directory{hint}; a model is a .gguf file or a Laya checkpoint directory"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for &c in Compute::ALL {
            assert_eq!(Compute::parse(c.name()), Ok(c));
            assert_eq!(serde_json::to_value(c).unwrap(), c.name());
        }
        let e = Compute::parse("int8").unwrap_err();
        assert_eq!((e.name.as_str(), e.valid), ("int8", Compute::NAMES));
    }
}
