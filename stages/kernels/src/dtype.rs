//! The element types of PNGOLDEN1 payloads.

use std::fmt;

/// Element type of a golden payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Dtype {
    /// 4-byte IEEE-754 binary32, little-endian.
    F32,
    /// 4-byte two's complement, little-endian.
    I32,
    /// Raw bytes.
    U8,
}

impl Dtype {
    /// Size of one element in bytes.
    pub const fn size(self) -> u64 {
        match self {
            Dtype::F32 | Dtype::I32 => 4,
            Dtype::U8 => 1,
        }
    }

    /// The header spelling (`f32`, `i32`, `u8`).
    pub const fn as_str(self) -> &'static str {
        match self {
            Dtype::F32 => "f32",
            Dtype::I32 => "i32",
            Dtype::U8 => "u8",
        }
    }

    pub(crate) fn parse(s: &str) -> Option<Self> {
        match s {
            "f32" => Some(Dtype::F32),
            "i32" => Some(Dtype::I32),
            "u8" => Some(Dtype::U8),
            _ => None,
        }
    }
}

impl fmt::Display for Dtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
