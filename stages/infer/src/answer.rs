//! From raw scores to probabilities and answers, as the Laya runtime computes them
//! (`Agent._decode_answers`): `z = scores / T` and the softmax in float32 (NumPy 2 keeps
//! `float32_array / float` in float32), T clamped to [0.5, 5.0].

use crate::config::QType;
use crate::sequence::Question;
use serde_json::{json, Map, Value};

/// NumPy's float32 `sum` (pairwise: 8 accumulators for 8..=128 elements), so the normaliser
/// matches bit for bit on the golden sizes.
fn numpy_sum_f32(a: &[f32]) -> f32 {
    let n = a.len();
    if n < 8 {
        let mut s = 0f32;
        for &v in a {
            s += v;
        }
        return s;
    }
    if n <= 128 {
        let mut r = [0f32; 8];
        r.copy_from_slice(&a[..8]);
        let mut i = 8;
        while i + 8 <= n {
            for j in 0..8 {
                r[j] += a[i + j];
            }
            i += 8;
        }
        let mut s = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        while i < n {
            s += a[i];
            i += 1;
        }
        return s;
    }
    let half = n / 2 / 8 * 8;
    numpy_sum_f32(&a[..half]) + numpy_sum_f32(&a[half..])
}

/// Softmax of `scores / t` in float32, as Laya's NumPy code runs it.
pub fn probabilities(scores: &[f32], t: f64) -> Vec<f32> {
    let t32 = t as f32;
    let z: Vec<f32> = scores.iter().map(|s| s / t32).collect();
    let max = z.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let e: Vec<f32> = z.iter().map(|v| ((v - max) as f64).exp() as f32).collect();
    let sum = numpy_sum_f32(&e);
    e.iter().map(|v| v / sum).collect()
}

/// Laya's normalised-entropy confidence: 1 - H(p) / ln k, clipped to [0, 1].
pub fn entropy_confidence(p: &[f32]) -> f64 {
    let k = p.len();
    if k < 2 {
        return 1.0;
    }
    let ent: f64 = p
        .iter()
        .map(|&v| {
            let v = v as f64;
            -(v * v.clamp(1e-12, 1.0).ln())
        })
        .sum();
    (1.0 - ent / (k as f64).ln()).clamp(0.0, 1.0)
}

/// The answer object of one question (spec 5.2 shape; Laya's confidences).
pub fn answer(q: &Question, p: &[f32]) -> Value {
    let probs = |keys: &[String]| -> Map<String, Value> {
        keys.iter()
            .zip(p)
            .map(|(k, v)| (k.clone(), json!(*v as f64)))
            .collect()
    };
    let max_p = p.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    match q.qtype {
        QType::Choice => {
            // First maximal option, as numpy argmax.
            let best = p
                .iter()
                .enumerate()
                .fold(0, |b, (i, v)| if *v > p[b] { i } else { b });
            json!({
                "type": "choice",
                "choice": q.keys[best],
                "probabilities": probs(&q.keys),
                "confidence": entropy_confidence(p),
                "answer_confidence": max_p,
            })
        }
        QType::Score => {
            let score: f64 = p
                .iter()
                .enumerate()
                .map(|(i, v)| i as f64 * *v as f64)
                .sum();
            let legend: Map<String, Value> = q
                .legend
                .iter()
                .enumerate()
                .map(|(i, c)| (i.to_string(), c.clone()))
                .collect();
            json!({
                "type": "score",
                "score": score,
                "legend": legend,
                "probabilities": probs(&q.keys),
                "confidence": entropy_confidence(p),
                "answer_confidence": max_p,
            })
        }
        QType::Noul => {
            let pt = p.get(1).copied().unwrap_or(0.0) as f64;
            json!({
                "type": "noul",
                "noul": pt,
                "confidence": pt.max(1.0 - pt),
                "answer_confidence": max_p,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probabilities_sum_to_one_and_follow_temperature() {
        let p = probabilities(&[1.0, 2.0, 3.0], 1.0);
        let s: f32 = p.iter().sum();
        assert!((s - 1.0).abs() < 1e-6);
        assert!((p[2] as f64 - (2f64.exp() / (1.0 + 1f64.exp() + 2f64.exp()))).abs() < 1e-6);
        let sharp = probabilities(&[1.0, 2.0, 3.0], 0.5);
        assert!(sharp[2] > p[2]);
    }

    #[test]
    fn numpy_sum_matches_its_blocking() {
        let v: Vec<f32> = (0..20).map(|i| 1.0 / (i as f32 + 1.0)).collect();
        let plain: f64 = v.iter().map(|&x| x as f64).sum();
        assert!((numpy_sum_f32(&v) as f64 - plain).abs() < 1e-6);
    }

    #[test]
    fn confidence_is_zero_for_uniform_and_one_for_certain() {
        assert!(entropy_confidence(&[0.5, 0.5]).abs() < 1e-12);
        assert!((entropy_confidence(&[1.0, 0.0, 0.0]) - 1.0).abs() < 1e-9);
    }
}
