//! Name tables: an enum whose values have one name each (and maybe aliases), declared once by
//! [`name_table!`]. The table gives `name()`, `parse()`, `ALL`, `NAMES`, `Display`, `FromStr`,
//! serde (a value is its name; an unknown name is an error listing the valid ones) and
//! `clap::ValueEnum`, so `pipeline.toml`, node params, reports and the CLI cannot disagree.

use sky_dag::source::did_you_mean;

/// A name that is none of a table's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownName {
    /// What the table names ("compute path").
    pub what: &'static str,
    /// The name given.
    pub name: String,
    /// The valid names.
    pub valid: &'static [&'static str],
}

impl std::fmt::Display for UnknownName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "unknown {} `{}`; expected one of {}{}",
            self.what,
            self.name,
            self.valid.join(", "),
            did_you_mean(&self.name, self.valid.iter().copied())
        )
    }
}

impl std::error::Error for UnknownName {}

/// Declare an enum by its name table:
///
/// ```ignore
/// name_table! {
///     /// Doc.
///     pub enum Mode("mode") {
///         /// Doc.
///         Fast = "fast" | "quick",
///         Slow = "slow",
///     }
/// }
/// ```
///
/// The first name of a value is its name; the others are aliases `parse` (and serde, and clap)
/// also accept.
macro_rules! name_table {
    (
        $(#[$meta:meta])*
        $vis:vis enum $T:ident ($what:literal) {
            $( $(#[$vmeta:meta])* $V:ident = $name:literal $(| $alias:literal)* ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        $vis enum $T {
            $( $(#[$vmeta])* $V, )*
        }

        impl $T {
            /// Every value, in declaration order.
            pub const ALL: &'static [$T] = &[$($T::$V),*];
            /// Every name (not the aliases), in declaration order.
            pub const NAMES: &'static [&'static str] = &[$($name),*];
            /// What a value is called in messages.
            pub const WHAT: &'static str = $what;

            /// The name in `pipeline.toml`, node params, reports and on the command line.
            pub const fn name(self) -> &'static str {
                match self {
                    $($T::$V => $name,)*
                }
            }

            /// The value named `name` (or one of its aliases).
            pub fn parse(name: &str) -> Result<$T, $crate::ops::names::UnknownName> {
                match name {
                    $($name $(| $alias)* => Ok($T::$V),)*
                    _ => Err($crate::ops::names::UnknownName {
                        what: $what,
                        name: name.to_string(),
                        valid: $T::NAMES,
                    }),
                }
            }
        }

        impl std::fmt::Display for $T {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.name())
            }
        }

        impl std::str::FromStr for $T {
            type Err = $crate::ops::names::UnknownName;
            fn from_str(s: &str) -> Result<$T, Self::Err> {
                $T::parse(s)
            }
        }

        impl serde::Serialize for $T {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.name())
            }
        }

        impl<'de> serde::Deserialize<'de> for $T {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<$T, D::Error> {
                let s = String::deserialize(d)?;
                $T::parse(&s)
                    .map_err(|_| <D::Error as serde::de::Error>::unknown_variant(&s, $T::NAMES))
            }
        }

        impl clap::ValueEnum for $T {
            fn value_variants<'a>() -> &'a [Self] {
                $T::ALL
            }
            fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
                let v = clap::builder::PossibleValue::new(self.name());
                Some(match self {
                    $($T::$V => v $(.alias($alias))*,)*
                })
            }
        }
    };
}

pub(crate) use name_table;

name_table! {
    /// A variant of a model that can be built and shipped: the names of `variants` and
    /// `publish`, of the files `<name>.<variant>.gguf`, and the roles of a `bench` node's inputs.
    pub enum Variant("variant") {
        /// Everything f32: the reference conversion.
        F32 = "f32",
        /// The policy's conversion (f16 encoder, f32 head by default).
        F16 = "f16",
        /// Outlier-aware Q8_0 from calibration.
        Q8_0 = "q8_0",
        /// The smallest policy within the model's `tune` tolerance (`skyctl tune`).
        Tuned = "tuned",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::bench::BenchMode;
    use crate::ops::compute::Compute;

    /// Every value's name parses back to it, in every form (parse, serde, clap); an unknown
    /// name is refused with the valid names listed.
    fn round_trip<T>(unknown: &str, listed: &str)
    where
        T: Copy
            + PartialEq
            + std::fmt::Debug
            + std::fmt::Display
            + std::str::FromStr<Err = UnknownName>
            + serde::Serialize
            + serde::de::DeserializeOwned
            + clap::ValueEnum,
    {
        let all = T::value_variants();
        assert!(!all.is_empty());
        for &v in all {
            let name = v.to_string();
            assert_eq!(name.parse::<T>(), Ok(v), "{name}");
            assert_eq!(serde_json::to_value(v).unwrap(), serde_json::json!(name));
            assert_eq!(
                serde_json::from_value::<T>(serde_json::json!(name)).unwrap(),
                v
            );
            assert_eq!(<T as clap::ValueEnum>::from_str(&name, false), Ok(v));
        }
        let e = unknown.parse::<T>().unwrap_err();
        assert_eq!(e.name, unknown);
        assert!(e.to_string().contains(listed), "{e}");
        let e = serde_json::from_value::<T>(serde_json::json!(unknown))
            .unwrap_err()
            .to_string();
        assert!(e.contains(&format!("unknown variant `{unknown}`")), "{e}");
    }

    #[test]
    fn every_table_round_trips_and_lists_its_names() {
        round_trip::<Compute>("int8", "expected one of f32, q8, q8-fast");
        round_trip::<BenchMode>("fp8", "expected one of f32, q8, q8-fast, q8_0, tuned");
        round_trip::<Variant>("q4", "expected one of f32, f16, q8_0, tuned");
    }

    #[test]
    fn unknown_names_say_what_and_suggest() {
        let e = Compute::parse("q8_fast").unwrap_err().to_string();
        assert_eq!(
            e,
            "unknown compute path `q8_fast`; expected one of f32, q8, q8-fast (did you mean `q8-fast`?)"
        );
        let e = serde_json::from_value::<Variant>(serde_json::json!("q8"))
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "unknown variant `q8`, expected one of `f32`, `f16`, `q8_0`, `tuned`"
        );
    }

    #[test]
    fn aliases_parse_but_are_not_names() {
        assert_eq!(BenchMode::parse("int8"), Ok(BenchMode::Q8));
        assert_eq!(
            serde_json::from_value::<BenchMode>(serde_json::json!("int8")).unwrap(),
            BenchMode::Q8
        );
        assert_eq!(
            <BenchMode as clap::ValueEnum>::from_str("int8", false),
            Ok(BenchMode::Q8)
        );
        assert!(!BenchMode::NAMES.contains(&"int8"));
        // The modes of a compute path on the float file are named like the path.
        for m in [BenchMode::F32, BenchMode::Q8, BenchMode::Q8Fast] {
            assert_eq!(m.name(), m.compute().name());
        }
        assert_eq!(BenchMode::Q8.name(), "q8");
    }
}
