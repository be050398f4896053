//! Calibration: the max |x| per input channel at every matrix product ("site"), collected by
//! running the f32 model over a prompt set, and its deterministic JSON file.
//!
//! # Format (`skycmd.calibration/1`)
//!
//! ```json
//! {
//!   "format": "skycmd.calibration/1",
//!   "sites": {
//!     "encoder.0.attn.Wqkv": {"rows": 812, "max_abs": [1.9835753, 2.7588677]},
//!     "encoder.0.attn.Wo": {"rows": 812, "max_abs": [0.5, 0.25]}
//!   }
//! }
//! ```
//!
//! Sites appear in sorted (byte-wise) order, one per line; `rows` is the number of activation
//! rows (tokens) observed; `max_abs` has one entry per input channel, each printed as the
//! shortest decimal that reads back to the same f32. The same calibration always gives the
//! same bytes, so the file can be content-hashed like any node output
//! ([`Calibration::digest`]).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Deserialize;

use crate::error::{Error, Result};
use crate::outliers::{max_outliers, select_outliers};

/// The `format` value of calibration files written by this version.
pub const CALIBRATION_FORMAT: &str = "skycmd.calibration/1";

/// Per-site, per-input-channel maximum absolute activation.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Calibration {
    sites: BTreeMap<String, SiteStats>,
}

/// What one site has seen.
#[derive(Debug, Clone, PartialEq)]
struct SiteStats {
    rows: u64,
    max_abs: Vec<f32>,
}

impl Calibration {
    /// An empty calibration.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records the activations `x` (`rows x k`, row-major) entering the matrix product `site`:
    /// each channel's max |x| grows to cover them. A site keeps the channel count of its first
    /// observation.
    ///
    /// Errors: an empty site name or `k == 0`, `x.len() != rows * k`, a non-finite activation (the f32 model is broken: the
    /// message names the site, row and channel), or a `k` different from earlier observations.
    pub fn observe(&mut self, site: &str, x: &[f32], rows: usize, k: usize) -> Result<()> {
        if site.is_empty() || k == 0 {
            return Err(Error::InvalidSite {
                site: site.to_string(),
                k,
            });
        }
        if rows.checked_mul(k) != Some(x.len()) {
            return Err(Error::Shape {
                what: format!("activations of site {site}"),
                shape: format!("rows {rows} x k {k}"),
                expected: rows.saturating_mul(k),
                got: x.len(),
            });
        }
        if let Some(i) = x.iter().position(|v| !v.is_finite()) {
            return Err(Error::NonFinite {
                what: format!(
                    "activations of site {site} (row {}, channel {})",
                    i / k,
                    i % k
                ),
                index: i,
                value: x[i],
            });
        }
        let stats = self
            .sites
            .entry(site.to_string())
            .or_insert_with(|| SiteStats {
                rows: 0,
                max_abs: vec![0.0; k],
            });
        if stats.max_abs.len() != k {
            return Err(Error::SiteWidth {
                site: site.to_string(),
                expected: stats.max_abs.len(),
                got: k,
            });
        }
        if k > 0 {
            for row in x.chunks_exact(k) {
                for (m, &v) in stats.max_abs.iter_mut().zip(row) {
                    *m = m.max(v.abs());
                }
            }
        }
        stats.rows += rows as u64;
        Ok(())
    }

    /// Folds another calibration into this one (channel-wise max, rows added), for example
    /// one collected on another thread.
    pub fn merge(&mut self, other: &Calibration) -> Result<()> {
        for (name, theirs) in &other.sites {
            match self.sites.get_mut(name) {
                None => {
                    self.sites.insert(name.clone(), theirs.clone());
                }
                Some(ours) => {
                    if ours.max_abs.len() != theirs.max_abs.len() {
                        return Err(Error::SiteWidth {
                            site: name.clone(),
                            expected: ours.max_abs.len(),
                            got: theirs.max_abs.len(),
                        });
                    }
                    for (a, &b) in ours.max_abs.iter_mut().zip(&theirs.max_abs) {
                        *a = a.max(b);
                    }
                    ours.rows += theirs.rows;
                }
            }
        }
        Ok(())
    }

    /// The per-channel max |x| of `site`, if observed.
    pub fn channel_max(&self, site: &str) -> Option<&[f32]> {
        self.sites.get(site).map(|s| s.max_abs.as_slice())
    }

    /// How many activation rows (tokens) `site` has seen.
    pub fn rows(&self, site: &str) -> Option<u64> {
        self.sites.get(site).map(|s| s.rows)
    }

    /// Site names in sorted order. By convention a site is named after the PyTorch module
    /// whose input it records, as in `fixtures/laya-ref/goldens/*.activation_stats.json`:
    /// `encoder.<layer>.attn.Wqkv`, `encoder.<layer>.attn.Wo`, `encoder.<layer>.mlp.Wi`,
    /// `encoder.<layer>.mlp.Wo`, `head.<layer>.self_attn.in_proj`, `head.<layer>.linear1`, ...
    pub fn sites(&self) -> impl Iterator<Item = &str> {
        self.sites.keys().map(String::as_str)
    }

    /// Number of sites.
    pub fn len(&self) -> usize {
        self.sites.len()
    }

    /// True when no site was observed.
    pub fn is_empty(&self) -> bool {
        self.sites.is_empty()
    }

    /// The outlier channels of `site` under `ratio` with the project cap of k/16
    /// ([`select_outliers`]); `Ok(None)` when the site was never observed.
    pub fn outliers(&self, site: &str, ratio: f32) -> Result<Option<Vec<u32>>> {
        match self.channel_max(site) {
            None => Ok(None),
            Some(m) => select_outliers(m, ratio, max_outliers(m.len())).map(Some),
        }
    }

    /// The calibration file: deterministic JSON as described in the module docs, ending with
    /// a newline.
    pub fn to_json(&self) -> String {
        let mut s = String::new();
        s.push_str("{\n  \"format\": ");
        s.push_str(&json_string(CALIBRATION_FORMAT));
        s.push_str(",\n  \"sites\": {");
        for (i, (name, stats)) in self.sites.iter().enumerate() {
            s.push_str(if i == 0 { "\n    " } else { ",\n    " });
            s.push_str(&json_string(name));
            let _ = write!(s, ": {{\"rows\": {}, \"max_abs\": [", stats.rows);
            for (j, v) in stats.max_abs.iter().enumerate() {
                if j > 0 {
                    s.push_str(", ");
                }
                s.push_str(&json_f32(*v));
            }
            s.push_str("]}");
        }
        s.push_str(if self.sites.is_empty() {
            "}\n}\n"
        } else {
            "\n  }\n}\n"
        });
        s
    }

    /// blake3 hex digest of [`Calibration::to_json`]: the value for
    /// [`crate::META_CALIBRATION_DIGEST`].
    pub fn digest(&self) -> String {
        blake3::hash(self.to_json().as_bytes()).to_hex().to_string()
    }

    /// Parses and validates a calibration file. Errors name the line/column (JSON syntax),
    /// the site and the channel (bad values), duplicate sites and unknown keys.
    pub fn from_json(text: &str) -> Result<Calibration> {
        let file: FileRepr =
            serde_json::from_str(text).map_err(|e| Error::CalibrationFormat(e.to_string()))?;
        if file.format != CALIBRATION_FORMAT {
            return Err(Error::CalibrationFormat(format!(
                "unknown format {:?}, expected {CALIBRATION_FORMAT:?}",
                file.format
            )));
        }
        let mut sites = BTreeMap::new();
        for (name, site) in file.sites.0 {
            if name.is_empty() {
                return Err(Error::CalibrationFormat("a site has an empty name".into()));
            }
            if site.max_abs.is_empty() {
                return Err(Error::CalibrationFormat(format!(
                    "site {name}: max_abs is empty"
                )));
            }
            if let Some((c, v)) = site
                .max_abs
                .iter()
                .enumerate()
                .find(|(_, v)| !(v.is_finite() && **v >= 0.0))
            {
                return Err(Error::CalibrationFormat(format!(
                    "site {name}: max_abs[{c}] = {v} is not a finite value >= 0"
                )));
            }
            sites.insert(
                name,
                SiteStats {
                    rows: site.rows,
                    max_abs: site.max_abs,
                },
            );
        }
        Ok(Calibration { sites })
    }
}

fn json_string(s: &str) -> String {
    // Serializing a &str cannot fail.
    serde_json::to_string(s).unwrap_or_default()
}

/// Shortest decimal that reads back to the same f32 (serde_json uses ryu's f32 mode).
fn json_f32(v: f32) -> String {
    serde_json::to_string(&v).unwrap_or_default()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileRepr {
    format: String,
    sites: SitesRepr,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SiteRepr {
    rows: u64,
    max_abs: Vec<f32>,
}

/// Sites as a list of pairs, so that a duplicate name is an error rather than silently
/// overwritten.
struct SitesRepr(Vec<(String, SiteRepr)>);

impl<'de> Deserialize<'de> for SitesRepr {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = SitesRepr;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object mapping site names to {rows, max_abs}")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> std::result::Result<SitesRepr, A::Error> {
                let mut seen = std::collections::BTreeSet::new();
                let mut out = Vec::new();
                while let Some(name) = map.next_key::<String>()? {
                    if !seen.insert(name.clone()) {
                        return Err(serde::de::Error::custom(format!(
                            "site {name} is listed twice"
                        )));
                    }
                    let site: SiteRepr = map.next_value()?;
                    out.push((name, site));
                }
                Ok(SitesRepr(out))
            }
        }
        d.deserialize_map(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observe_takes_channel_max_over_rows_and_calls() {
        let mut c = Calibration::new();
        c.observe("b.site", &[1.0, -2.0, 0.5, 3.0, -0.25, 1.5], 2, 3)
            .unwrap();
        c.observe("b.site", &[-4.0, 0.0, 0.0], 1, 3).unwrap();
        c.observe("a.site", &[0.1, 0.2], 1, 2).unwrap();
        assert_eq!(c.channel_max("b.site").unwrap(), &[4.0, 2.0, 1.5]);
        assert_eq!(c.rows("b.site"), Some(3));
        assert_eq!(c.sites().collect::<Vec<_>>(), vec!["a.site", "b.site"]);
        let e = c.observe("b.site", &[1.0; 4], 1, 4).unwrap_err();
        assert!(e.to_string().contains("b.site"), "{e}");
        let e = c.observe("b.site", &[1.0; 4], 2, 3).unwrap_err();
        assert!(matches!(e, Error::Shape { .. }), "{e}");
        let e = c
            .observe("x", &[1.0, f32::NAN, 0.0, 0.0], 2, 2)
            .unwrap_err();
        assert!(e.to_string().contains("row 0, channel 1"), "{e}");
    }

    #[test]
    fn json_is_deterministic_sorted_and_round_trips_exactly() {
        let mut a = Calibration::new();
        let mut b = Calibration::new();
        // Awkward f32 values: shortest round-trip strings must read back bit-exactly.
        let vals = [
            0.1f32,
            1.0 / 3.0,
            16_777_217.0,
            1e-38,
            3.402_823_5e38,
            0.0,
            2.5,
        ];
        a.observe("zeta", &vals, 1, vals.len()).unwrap();
        a.observe("alpha", &[7.0, 8.0], 1, 2).unwrap();
        b.observe("alpha", &[7.0, 8.0], 1, 2).unwrap();
        b.observe("zeta", &vals, 1, vals.len()).unwrap();
        let text = a.to_json();
        assert_eq!(text, b.to_json());
        assert!(text.find("\"alpha\"").unwrap() < text.find("\"zeta\"").unwrap());
        assert!(text.contains("0.1,"), "{text}");
        assert!(text.contains("0.33333334"), "{text}");
        let back = Calibration::from_json(&text).unwrap();
        assert_eq!(back, a);
        for (x, y) in back.channel_max("zeta").unwrap().iter().zip(&vals) {
            assert_eq!(x.to_bits(), y.to_bits());
        }
        assert_eq!(back.to_json(), text);
        assert_eq!(a.digest(), b.digest());
        assert_eq!(a.digest().len(), 64);
        assert_eq!(
            Calibration::from_json(&Calibration::new().to_json()).unwrap(),
            Calibration::new()
        );
    }

    #[test]
    fn random_bit_patterns_round_trip() {
        let mut c = Calibration::new();
        let mut state = 0x1234_5678_u32;
        let vals: Vec<f32> = (0..2000)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 17;
                state ^= state << 5;
                f32::from_bits(state & 0x7F7F_FFFF) // positive finite
            })
            .collect();
        c.observe("s", &vals, 1, vals.len()).unwrap();
        let back = Calibration::from_json(&c.to_json()).unwrap();
        assert_eq!(back.channel_max("s").unwrap(), vals.as_slice());
    }

    #[test]
    fn parse_errors_are_clear() {
        let cases = [
            ("{", "EOF"),
            (r#"{"format": "other/2", "sites": {}}"#, "unknown format"),
            (
                r#"{"format": "skycmd.calibration/1", "sites": {}, "x": 1}"#,
                "unknown field",
            ),
            (
                r#"{"format": "skycmd.calibration/1", "sites": {"a": {"rows": 1, "max_abs": []}}}"#,
                "site a: max_abs is empty",
            ),
            (
                r#"{"format": "skycmd.calibration/1", "sites": {"a": {"rows": 1, "max_abs": [1, -2]}}}"#,
                "max_abs[1]",
            ),
            (
                r#"{"format": "skycmd.calibration/1", "sites": {"a": {"rows": 1, "max_abs": [1]}, "a": {"rows": 1, "max_abs": [1]}}}"#,
                "listed twice",
            ),
            (
                r#"{"format": "skycmd.calibration/1", "sites": {"a": {"rows": 1, "max_abs": [1e39]}}}"#,
                "max_abs[0]",
            ),
        ];
        for (text, needle) in cases {
            let e = Calibration::from_json(text).unwrap_err().to_string();
            assert!(e.contains(needle), "{text}: {e}");
        }
    }

    #[test]
    fn truncated_or_corrupted_files_are_errors_not_panics() {
        let mut c = Calibration::new();
        c.observe("encoder.0.attn.Wqkv", &[1.5, 0.25, 3.0], 1, 3)
            .unwrap();
        c.observe("scorer.1", &[2.0], 1, 1).unwrap();
        let text = c.to_json();
        for cut in 0..text.len() - 1 {
            if text.is_char_boundary(cut) {
                assert!(
                    Calibration::from_json(&text[..cut]).is_err(),
                    "cut at {cut}"
                );
            }
        }
        let corrupt = text.replace("\"rows\": 1", "\"rows\": -1");
        assert!(Calibration::from_json(&corrupt).is_err());
        let corrupt = text.replace("3.0", "\"3\"");
        assert!(Calibration::from_json(&corrupt).is_err());
        assert!(Calibration::from_json(&text.replace("1.5", "NaN")).is_err());
    }

    #[test]
    fn merge_is_channel_max() {
        let mut a = Calibration::new();
        a.observe("s", &[1.0, 5.0], 1, 2).unwrap();
        let mut b = Calibration::new();
        b.observe("s", &[3.0, 2.0], 1, 2).unwrap();
        b.observe("t", &[1.0], 1, 1).unwrap();
        a.merge(&b).unwrap();
        assert_eq!(a.channel_max("s").unwrap(), &[3.0, 5.0]);
        assert_eq!(a.rows("s"), Some(2));
        assert_eq!(a.len(), 2);
    }
}
