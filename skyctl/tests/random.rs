//! `skyctl random`: exact preset sizes, determinism, planted massive channels, the embedded
//! tokenizer, and conversion of the result.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn skyctl(args: &[&dyn AsRef<std::ffi::OsStr>]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_skyctl"));
    for a in args {
        c.arg(a);
    }
    c.output().expect("run skyctl")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// f32 tensors of a safetensors file: name -> (shape, values).
fn read_f32_st(path: &Path) -> std::collections::BTreeMap<String, (Vec<usize>, Vec<f32>)> {
    let raw = std::fs::read(path).unwrap();
    let n = u64::from_le_bytes(raw[..8].try_into().unwrap()) as usize;
    let header: serde_json::Value = serde_json::from_slice(&raw[8..8 + n]).unwrap();
    let mut out = std::collections::BTreeMap::new();
    for (name, info) in header.as_object().unwrap() {
        if name == "__metadata__" {
            continue;
        }
        assert_eq!(info["dtype"], "F32", "{name}");
        let off = info["data_offsets"].as_array().unwrap();
        let (a, b) = (
            off[0].as_u64().unwrap() as usize,
            off[1].as_u64().unwrap() as usize,
        );
        let v = raw[8 + n + a..8 + n + b]
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        let shape = info["shape"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_u64().unwrap() as usize)
            .collect();
        out.insert(name.clone(), (shape, v));
    }
    out
}

#[test]
fn presets_have_exact_sizes_and_convert() {
    let tmp = tempfile::tempdir().unwrap();
    for (preset, params, n_tensors, tokenizer) in [
        (
            "s1-pico",
            202_305u64,
            33usize,
            "models/s1-pico/tokenizer/tokenizer.json",
        ),
        (
            "s1-nano",
            1_134_209,
            45,
            "fixtures/laya-ref/tokenizers/bpe2048/tokenizer.json",
        ),
        (
            "s1-micro",
            6_630_913,
            69,
            "fixtures/laya-ref/tokenizers/bpe4096/tokenizer.json",
        ),
    ] {
        let dir = tmp.path().join(preset);
        let o = skyctl(&[&"random", &preset, &dir, &"--seed", &"11"]);
        assert!(o.status.success(), "{}", text(&o));
        assert!(
            text(&o).contains(&format!("{params} parameters")),
            "{}",
            text(&o)
        );
        assert!(
            std::fs::read(dir.join("tokenizer/tokenizer.json")).unwrap()
                == std::fs::read(root().join(tokenizer)).unwrap()
        );
        let out = tmp.path().join(format!("{preset}.gguf"));
        let o = skyctl(&[&"convert", &dir, &out]);
        assert!(o.status.success(), "{}", text(&o));
        let bytes = std::fs::read(&out).unwrap();
        let f = sky_gguf::GgufFile::parse(&bytes).unwrap();
        assert_eq!(f.n_parameters(), params, "{preset}");
        assert_eq!(f.tensors.len(), n_tensors, "{preset}");
        if preset == "s1-pico" {
            assert_eq!(f.tensor_bytes(), 514_308);
        }
    }
}

#[test]
fn same_seed_same_bytes_other_seed_other_weights() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b, c) = (
        tmp.path().join("a"),
        tmp.path().join("b"),
        tmp.path().join("c"),
    );
    for (d, seed) in [(&a, "5"), (&b, "5"), (&c, "6")] {
        let o = skyctl(&[&"random", &"s1-pico", d, &"--seed", &seed]);
        assert!(o.status.success(), "{}", text(&o));
    }
    let st = |d: &Path| std::fs::read(d.join("model.safetensors")).unwrap();
    assert!(st(&a) == st(&b));
    assert!(st(&a) != st(&c));
    // default seed is the preset's reference seed (1001 for pico)
    let d = tmp.path().join("d");
    let e = tmp.path().join("e");
    assert!(skyctl(&[&"random", &"s1-pico", &d]).status.success());
    assert!(skyctl(&[&"random", &"s1-pico", &e, &"--seed", &"1001"])
        .status
        .success());
    assert!(st(&d) == st(&e));
}

#[test]
fn massive_channels_are_planted() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("m");
    assert!(skyctl(&[&"random", &"s1-nano", &dir]).status.success());
    let t = read_f32_st(&dir.join("model.safetensors"));
    let spikes = |name: &str| -> Vec<usize> {
        let v = &t[name].1;
        (0..v.len()).filter(|&i| v[i] >= 18.0).collect()
    };
    let r = spikes("encoder.embeddings.norm.weight");
    assert_eq!(r.len(), 2, "residual spikes {r:?}");
    for i in 0..4 {
        for norm in ["mlp_norm", "attn_norm"] {
            if i == 0 && norm == "attn_norm" {
                continue;
            }
            let w = spikes(&format!("encoder.layers.{i}.{norm}.weight"));
            assert_eq!(w.len(), 2, "layer {i} {norm}");
            assert!(w.iter().all(|c| !r.contains(c)), "R and W must differ");
        }
    }
    let fin = &t["encoder.final_norm.weight"].1;
    assert!(r.iter().all(|&c| fin[c] == 0.05));
    // the Wqkv / Wi input columns of those channels are scaled down 20x
    for name in [
        "encoder.layers.2.attn.Wqkv.weight",
        "encoder.layers.2.mlp.Wi.weight",
    ] {
        let (shape, v) = &t[name];
        let col = |c: usize| {
            v.chunks_exact(shape[1])
                .map(|row| row[c].abs())
                .sum::<f32>()
        };
        let typical = (0..shape[1]).map(col).sum::<f32>() / shape[1] as f32;
        assert!(col(r[0]) < typical / 8.0, "{name}");
    }
    let scorer = &t["scorer.3.weight"].1;
    let rms = (scorer.iter().map(|x| x * x).sum::<f32>() / scorer.len() as f32).sqrt();
    assert!(
        rms > 0.5,
        "scorer output scaled for a few logits of spread: rms {rms}"
    );
}

#[test]
fn bad_preset_and_unwritable_dir() {
    let tmp = tempfile::tempdir().unwrap();
    let o = skyctl(&[&"random", &"s1-huge", &tmp.path().join("x")]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o).contains("unknown preset \"s1-huge\""),
        "{}",
        text(&o)
    );
    let file = tmp.path().join("file");
    std::fs::write(&file, "x").unwrap();
    let o = skyctl(&[&"random", &"s1-pico", &file.join("sub")]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).starts_with("skyctl: ") && text(&o).contains("file/sub"),
        "{}",
        text(&o)
    );
}

/// The random weights are informative: through the engine (`skyctl ask`), option scores on
/// the reference cases spread by a few logits (median), not ~0 as for a uniform model.
#[test]
fn random_models_spread_option_scores_by_a_few_logits() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("p");
    assert!(skyctl(&[&"random", &"s1-pico", &dir]).status.success());
    let cases = root().join("fixtures/laya-ref/cases.jsonl");
    let o = skyctl(&[&"ask", &dir, &"--requests", &cases, &"--json"]);
    assert!(o.status.success(), "{}", text(&o));
    let mut spreads: Vec<f64> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            let s: Vec<f64> = v["scores"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap())
                .collect();
            s.iter().cloned().fold(f64::MIN, f64::max) - s.iter().cloned().fold(f64::MAX, f64::min)
        })
        .collect();
    assert_eq!(spreads.len(), 41);
    spreads.sort_by(f64::total_cmp);
    let median = spreads[spreads.len() / 2];
    assert!(
        (1.0..8.0).contains(&median),
        "median option-score spread {median}"
    );
}
