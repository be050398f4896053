//! Choosing the outlier input channels of a matrix product from its calibration.

use crate::error::{Error, Result};

/// Default `outlier_ratio`: a channel is an outlier above 3x the median channel magnitude.
pub const OUTLIER_RATIO: f32 = 3.0;

/// The most outliers a matrix with `k` input channels may have: `k / 16`.
pub fn max_outliers(k: usize) -> usize {
    k / 16
}

/// Median of channel magnitudes (mean of the two middle values when the count is even, as
/// numpy and Python's `statistics.median`), computed in f64. `None` for an empty slice.
pub fn median(values: &[f32]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut v: Vec<f32> = values.to_vec();
    v.sort_by(f32::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        f64::from(v[n / 2])
    } else {
        (f64::from(v[n / 2 - 1]) + f64::from(v[n / 2])) / 2.0
    })
}

/// The outlier channels of one matrix product: the channels whose calibrated magnitude
/// (`channel_max[c]`, max |x| over the calibration prompts) is strictly above
/// `ratio * median(channel_max)`, at most `max_count` of them (the largest magnitudes win;
/// equal magnitudes go to the lower index). Returned in ascending channel order.
///
/// Pass [`max_outliers`]`(k)` as `max_count` for the project rule "at most k/16 per matrix".
/// A median of 0 makes every non-zero channel an outlier (still capped by `max_count`).
///
/// Errors: `ratio <= 1` or not finite ([`Error::BadRatio`]), a magnitude that is negative or
/// not finite ([`Error::BadMagnitude`]).
pub fn select_outliers(channel_max: &[f32], ratio: f32, max_count: usize) -> Result<Vec<u32>> {
    if !(ratio.is_finite() && ratio > 1.0) {
        return Err(Error::BadRatio(ratio));
    }
    if let Some((channel, &value)) = channel_max
        .iter()
        .enumerate()
        .find(|(_, v)| !(v.is_finite() && **v >= 0.0))
    {
        return Err(Error::BadMagnitude { channel, value });
    }
    let Some(med) = median(channel_max) else {
        return Ok(Vec::new());
    };
    let threshold = f64::from(ratio) * med;
    let mut picked: Vec<u32> = (0..channel_max.len() as u32)
        .filter(|&c| f64::from(channel_max[c as usize]) > threshold)
        .collect();
    picked.sort_by(|&a, &b| {
        channel_max[b as usize]
            .total_cmp(&channel_max[a as usize])
            .then(a.cmp(&b))
    });
    picked.truncate(max_count);
    picked.sort_unstable();
    Ok(picked)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn pico_stats() -> Value {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../fixtures/laya-ref/goldens/s1-pico.activation_stats.json"
        );
        let text =
            std::fs::read_to_string(path).unwrap_or_else(|e| panic!("fixture {path} missing: {e}"));
        serde_json::from_str(&text).expect("fixture is valid JSON")
    }

    fn channel_max(site: &Value) -> Vec<f32> {
        site["max_abs_per_channel"]
            .as_array()
            .expect("max_abs_per_channel array")
            .iter()
            .map(|v| v.as_f64().expect("number") as f32)
            .collect()
    }

    #[test]
    fn pytorch_activation_stats_planted_channels() {
        let stats = pico_stats();
        let sites = &stats["sites"];
        let pick = |name: &str| {
            let m = channel_max(&sites[name]);
            select_outliers(&m, OUTLIER_RATIO, max_outliers(m.len())).unwrap()
        };
        // The planted norm-weight channels (README "Planted outliers") at ~18-19x.
        assert_eq!(pick("encoder.0.attn.Wqkv"), vec![45, 49]);
        assert_eq!(pick("encoder.0.mlp.Wi"), vec![9, 32, 45]);
        assert_eq!(pick("encoder.1.attn.Wqkv"), vec![9, 32, 45, 49]);
        // Flat sites have none.
        assert_eq!(pick("encoder.0.attn.Wo"), Vec::<u32>::new());
        assert_eq!(pick("head.0.linear2"), Vec::<u32>::new());
        // scorer.3 has five channels above 3x (22, 23, 34, 46, 47) but k/16 = 4: the
        // smallest (34 at 3.04x) is dropped.
        assert_eq!(pick("scorer.3"), vec![22, 23, 46, 47]);
    }

    #[test]
    fn every_site_agrees_with_pytorch_median() {
        let stats = pico_stats();
        let sites = stats["sites"].as_object().expect("sites object");
        assert!(sites.len() >= 10);
        for (name, site) in sites {
            let m = channel_max(site);
            assert_eq!(
                m.len() as u64,
                site["in_features"].as_u64().unwrap(),
                "{name}"
            );
            let torch_median = site["median_max_abs"].as_f64().unwrap();
            let ours = median(&m).unwrap();
            assert!(
                (ours - torch_median).abs() <= 1e-6 * torch_median,
                "{name}: {ours} vs {torch_median}"
            );
            // Independent restatement of the rule with the file's own median.
            let mut expected: Vec<(f32, u32)> = m
                .iter()
                .enumerate()
                .filter(|(_, &v)| f64::from(v) > 3.0 * torch_median)
                .map(|(c, &v)| (v, c as u32))
                .collect();
            expected.sort_by(|a, b| b.0.total_cmp(&a.0));
            expected.truncate(m.len() / 16);
            let mut expected: Vec<u32> = expected.into_iter().map(|(_, c)| c).collect();
            expected.sort_unstable();
            assert_eq!(
                select_outliers(&m, 3.0, m.len() / 16).unwrap(),
                expected,
                "{name}"
            );
        }
    }

    #[test]
    fn ratio_and_magnitudes_are_validated() {
        for bad in [1.0, 0.5, -3.0, f32::NAN, f32::INFINITY] {
            assert!(matches!(
                select_outliers(&[1.0, 2.0], bad, 1),
                Err(Error::BadRatio(_))
            ));
        }
        let e = select_outliers(&[1.0, -2.0], 3.0, 1).unwrap_err();
        assert!(e.to_string().contains("channel 1"), "{e}");
        assert!(select_outliers(&[1.0, f32::NAN], 3.0, 1).is_err());
        assert_eq!(select_outliers(&[], 3.0, 4).unwrap(), Vec::<u32>::new());
    }

    #[test]
    fn cap_keeps_largest_and_ties_go_to_lower_index() {
        let mut m = vec![1.0f32; 32];
        m[3] = 10.0;
        m[7] = 30.0;
        m[9] = 10.0;
        m[20] = 3.0; // exactly 3x the median: not above it
        assert_eq!(select_outliers(&m, 3.0, 2).unwrap(), vec![3, 7]);
        assert_eq!(select_outliers(&m, 3.0, 8).unwrap(), vec![3, 7, 9]);
        assert_eq!(select_outliers(&m, 3.0, 0).unwrap(), Vec::<u32>::new());
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
    }
}
