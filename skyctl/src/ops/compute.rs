//! Compute paths: how a model's matrix products are computed. The one list of them; the CLI
//! flags (`--q8`, `--q8-fast`), golden suites (`compute = ...`) and benchmarks map onto it.

use std::path::Path;

use anyhow::Context;
use serde::{Deserialize, Serialize};
use sky_infer::engine::Engine;
use sky_infer::int8::{ComputeOptions, ComputeReport};
use sky_quant::ActQuant;

/// A compute path.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Compute {
    /// f32 matrix products (a Q8_0 file still runs in int8).
    #[default]
    #[serde(rename = "f32")]
    F32,
    /// Int8 with two-pass (Q8x2, ~15-bit) activations; a float model is quantized at load.
    #[serde(rename = "q8")]
    Q8,
    /// Int8 with single-pass Q8 activations: fastest, least accurate.
    #[serde(rename = "q8-fast")]
    Q8Fast,
}

impl Compute {
    /// Every path.
    pub const ALL: [Compute; 3] = [Compute::F32, Compute::Q8, Compute::Q8Fast];

    /// The name used in `pipeline.toml`, reports and `bench.json`.
    pub fn name(self) -> &'static str {
        match self {
            Compute::F32 => "f32",
            Compute::Q8 => "q8",
            Compute::Q8Fast => "q8-fast",
        }
    }

    /// The path named `name`.
    pub fn parse(name: &str) -> Option<Compute> {
        Compute::ALL.into_iter().find(|c| c.name() == name)
    }

    /// The names, for messages and suggestions.
    pub fn names() -> impl Iterator<Item = &'static str> {
        Compute::ALL.into_iter().map(Compute::name)
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
        for c in Compute::ALL {
            assert_eq!(Compute::parse(c.name()), Some(c));
            assert_eq!(serde_json::to_value(c).unwrap(), c.name());
        }
        assert_eq!(Compute::parse("int8"), None);
    }
}
