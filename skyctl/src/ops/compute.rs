//! Compute paths: how a model's matrix products are computed. The one list of them; the CLI
//! flags (`--q8`, `--q8-fast`), golden suites (`compute = ...`) and benchmarks map onto it.

use std::path::Path;

use anyhow::Context;
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
        sky_infer::int8::open(model, &self.options(), None)
            .with_context(|| format!("loading {}", model.display()))
    }
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
