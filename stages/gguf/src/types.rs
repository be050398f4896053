//! ggml element types: ids, names and byte sizes.

use crate::error::{Error, Result};

/// A ggml tensor element type.
///
/// Only the four types skyctl converts have their own variant; every other id is kept as
/// `Other(id)`. [`GgmlType::from_id`] never builds `Other` for the ids 0, 1, 8 and 30.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[allow(non_camel_case_types)]
pub enum GgmlType {
    /// 32-bit float (id 0).
    F32,
    /// IEEE half float (id 1).
    F16,
    /// Blocks of 32 int8 values with one f16 scale (id 8).
    Q8_0,
    /// bfloat16 (id 30).
    BF16,
    /// Any other ggml type id, kept as is.
    Other(u32),
}

/// (id, name, block size in elements, block size in bytes) for every ggml type (ggml.c
/// `type_traits`, gguf-py `GGML_QUANT_SIZES`).
const TRAITS: &[(u32, &str, u64, u64)] = &[
    (0, "F32", 1, 4),
    (1, "F16", 1, 2),
    (2, "Q4_0", 32, 18),
    (3, "Q4_1", 32, 20),
    (6, "Q5_0", 32, 22),
    (7, "Q5_1", 32, 24),
    (8, "Q8_0", 32, 34),
    (9, "Q8_1", 32, 36),
    (10, "Q2_K", 256, 84),
    (11, "Q3_K", 256, 110),
    (12, "Q4_K", 256, 144),
    (13, "Q5_K", 256, 176),
    (14, "Q6_K", 256, 210),
    (15, "Q8_K", 256, 292),
    (16, "IQ2_XXS", 256, 66),
    (17, "IQ2_XS", 256, 74),
    (18, "IQ3_XXS", 256, 98),
    (19, "IQ1_S", 256, 50),
    (20, "IQ4_NL", 32, 18),
    (21, "IQ3_S", 256, 110),
    (22, "IQ2_S", 256, 82),
    (23, "IQ4_XS", 256, 136),
    (24, "I8", 1, 1),
    (25, "I16", 1, 2),
    (26, "I32", 1, 4),
    (27, "I64", 1, 8),
    (28, "F64", 1, 8),
    (29, "IQ1_M", 256, 56),
    (30, "BF16", 1, 2),
    (34, "TQ1_0", 256, 54),
    (35, "TQ2_0", 256, 66),
    (39, "MXFP4", 32, 17),
    (40, "NVFP4", 64, 36),
    (41, "Q1_0", 128, 18),
];

impl GgmlType {
    /// The numeric ggml type id.
    pub fn id(self) -> u32 {
        match self {
            GgmlType::F32 => 0,
            GgmlType::F16 => 1,
            GgmlType::Q8_0 => 8,
            GgmlType::BF16 => 30,
            GgmlType::Other(n) => n,
        }
    }

    /// The type for a numeric id (unknown ids become `Other(id)`).
    pub fn from_id(id: u32) -> GgmlType {
        match id {
            0 => GgmlType::F32,
            1 => GgmlType::F16,
            8 => GgmlType::Q8_0,
            30 => GgmlType::BF16,
            n => GgmlType::Other(n),
        }
    }

    fn traits(self) -> Option<&'static (u32, &'static str, u64, u64)> {
        let id = self.id();
        TRAITS.iter().find(|t| t.0 == id)
    }

    /// Elements per block (1 for plain types), `None` for an id ggml does not define.
    pub fn block_size(self) -> Option<u64> {
        self.traits().map(|t| t.2)
    }

    /// Bytes per block, `None` for an id ggml does not define.
    pub fn type_size(self) -> Option<u64> {
        self.traits().map(|t| t.3)
    }

    /// Bytes of one row of `n` elements. Fails if the type's size is unknown or `n` is not a
    /// multiple of the block size.
    pub fn row_bytes(self, n: u64) -> Result<u64> {
        let (Some(bs), Some(ts)) = (self.block_size(), self.type_size()) else {
            return Err(Error::UnknownType {
                what: "row size".into(),
                id: self.id(),
            });
        };
        if !n.is_multiple_of(bs) {
            return Err(Error::NotBlockMultiple {
                what: "row".into(),
                len: n,
                block: bs,
                ty: self.name(),
            });
        }
        (n / bs).checked_mul(ts).ok_or_else(|| Error::Overflow {
            what: format!("row of {n} {} values", self.name()),
        })
    }

    /// ggml's name of the type ("F32", "Q8_0", "Q4_K"), or "type N" for an unknown id.
    pub fn name(self) -> String {
        match self.traits() {
            Some(t) => t.1.to_string(),
            None => format!("type {}", self.id()),
        }
    }

    /// The type for a ggml name ("f16", "Q8_0", case-insensitive), if ggml defines it.
    pub fn from_name(name: &str) -> Option<GgmlType> {
        TRAITS
            .iter()
            .find(|t| t.1.eq_ignore_ascii_case(name))
            .map(|t| GgmlType::from_id(t.0))
    }
}

impl std::fmt::Display for GgmlType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_and_known_sizes() {
        for &(id, name, bs, ts) in TRAITS {
            let t = GgmlType::from_id(id);
            assert_eq!(t.id(), id);
            assert_eq!(t.name(), name);
            assert_eq!(t.block_size(), Some(bs));
            assert_eq!(t.type_size(), Some(ts));
            assert_eq!(GgmlType::from_name(name), Some(t));
        }
        assert_eq!(GgmlType::from_id(8), GgmlType::Q8_0);
        assert_eq!(GgmlType::from_id(12).name(), "Q4_K");
        assert_eq!(GgmlType::from_id(99).name(), "type 99");
        assert_eq!(GgmlType::from_id(99).type_size(), None);
    }

    #[test]
    fn row_bytes_checks_blocks() {
        assert_eq!(GgmlType::Q8_0.row_bytes(64).unwrap(), 68);
        assert_eq!(GgmlType::F16.row_bytes(3).unwrap(), 6);
        assert_eq!(GgmlType::from_id(14).row_bytes(512).unwrap(), 420);
        assert!(matches!(
            GgmlType::Q8_0.row_bytes(33),
            Err(Error::NotBlockMultiple { .. })
        ));
        assert!(matches!(
            GgmlType::Other(99).row_bytes(1),
            Err(Error::UnknownType { .. })
        ));
        assert!(matches!(
            GgmlType::Other(28).row_bytes(u64::MAX),
            Err(Error::Overflow { .. })
        ));
    }
}
