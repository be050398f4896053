//! `skyctl convert` end to end: conversions of the reference checkpoints read back by gguf-py
//! (skyctl/tests/convert_check.py) equal to the safetensors source, the seed's numbers,
//! determinism, and every kind of bad input (clear message, exit 2, no file left behind).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

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

fn python() -> PathBuf {
    match std::env::var_os("SKYCTL_TEST_PYTHON") {
        Some(p) => PathBuf::from(p),
        None => root().join(".venv/bin/python"),
    }
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn check_with_python(src: &Path, gguf: &Path, ftype: &str, head: &str, keys: bool) {
    let py = python();
    let mut c = Command::new(&py);
    c.arg(root().join("skyctl/tests/convert_check.py"))
        .arg(src)
        .arg(gguf)
        .arg(ftype)
        .arg(head);
    if keys {
        c.arg("--keys-s1-pico");
    }
    let out = c.output().unwrap_or_else(|e| {
        panic!(
            "cannot run {} (set SKYCTL_TEST_PYTHON to a python with gguf, numpy, tokenizers): {e}",
            py.display()
        )
    });
    assert!(
        out.status.success(),
        "gguf-py check of {} failed:\n{}",
        gguf.display(),
        text(&out)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).starts_with("OK"),
        "{}",
        text(&out)
    );
}

fn convert_ok(src: &Path, out: &Path, extra: &[&str]) -> String {
    let mut args: Vec<&dyn AsRef<std::ffi::OsStr>> = vec![&"convert", &src, &out];
    for e in extra {
        args.push(e);
    }
    let o = skyctl(&args);
    assert!(
        o.status.success(),
        "convert {} {extra:?} failed: {}",
        src.display(),
        text(&o)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn reference_conversions_read_back_equal_to_the_source_in_gguf_py() {
    let dir = tempfile::tempdir().unwrap();
    let pico = root().join("models/s1-pico");
    for (ftype, head) in [
        ("f16", "f32"),
        ("q8_0", "f32"),
        ("bf16", "q8_0"),
        ("f32", "bf16"),
        ("q8_0", "f16"),
    ] {
        let out = dir.path().join(format!("pico-{ftype}-{head}.gguf"));
        convert_ok(&pico, &out, &["--type", ftype, "--head-type", head]);
        check_with_python(&pico, &out, ftype, head, true);
    }
    let f32_src = root().join("fixtures/laya-ref/s1-pico-f32");
    let out = dir.path().join("pico-f32src-q8.gguf");
    convert_ok(&f32_src, &out, &["--type", "q8_0"]);
    check_with_python(&f32_src, &out, "q8_0", "f32", false);
    for (model, ftype) in [
        ("s1-nano", "q8_0"),
        ("s1-micro", "f16"),
        ("s1-micro", "q8_0"),
    ] {
        let src = root().join("models").join(model);
        let out = dir.path().join(format!("{model}-{ftype}.gguf"));
        convert_ok(&src, &out, &["--type", ftype]);
        check_with_python(&src, &out, ftype, "f32", false);
    }
}

#[test]
fn bf16_source_reads_back_equal() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("nano-bf16");
    let o = skyctl(&[
        &"random", &"s1-nano", &src, &"--dtype", &"bf16", &"--seed", &"3",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    for (ftype, head) in [("bf16", "f32"), ("q8_0", "bf16")] {
        let out = dir.path().join(format!("nano-{ftype}.gguf"));
        convert_ok(&src, &out, &["--type", ftype, "--head-type", head]);
        check_with_python(&src, &out, ftype, head, false);
    }
}

#[test]
fn s1_pico_has_the_seed_numbers_and_is_byte_deterministic() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.gguf");
    let sub = dir.path().join("elsewhere");
    std::fs::create_dir(&sub).unwrap();
    let b = sub.join("b.gguf");
    let line = convert_ok(
        &root().join("models/s1-pico"),
        &a,
        &["--name", "skycmd-s1-pico"],
    );
    assert!(
        line.contains("33 tensors, 202305 parameters, 514308 bytes of tensor data"),
        "{line}"
    );
    convert_ok(
        &root().join("models/s1-pico"),
        &b,
        &["--name", "skycmd-s1-pico"],
    );
    let (ba, bb) = (std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&a).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o644, "the output is readable like any other file");
    }
    assert!(ba == bb, "two conversions differ");
    // the f32 copy of the checkpoint holds the same values: the same file
    let c = dir.path().join("c.gguf");
    convert_ok(
        &root().join("fixtures/laya-ref/s1-pico-f32"),
        &c,
        &["--name", "skycmd-s1-pico"],
    );
    assert!(
        std::fs::read(&c).unwrap() == ba,
        "f16 and f32 sources of the same values differ"
    );

    let f = sky_gguf::GgufFile::parse(&ba).unwrap();
    assert_eq!(f.tensors.len(), 33);
    assert_eq!(f.tensor_bytes(), 514_308);
    let u = |k: &str| f.get(k).and_then(|v| v.as_u32());
    assert_eq!(u("modern-bert.block_count"), Some(3));
    assert_eq!(u("modern-bert.decision.block_count"), Some(1));
    assert_eq!(u("general.alignment"), Some(32));
    assert_eq!(
        f.get("general.name").and_then(|v| v.as_str()),
        Some("skycmd-s1-pico")
    );
    let t = |n: &str| f.tensor(n).map(|t| (t.dims.clone(), t.ty.name()));
    assert_eq!(
        t("token_embd.weight"),
        Some((vec![64, 1024], "F16".to_string()))
    );
    assert_eq!(
        t("blk.0.attn_qkv.weight"),
        Some((vec![64, 192], "F16".to_string()))
    );
    assert_eq!(
        t("blk.2.attn_qkv.weight"),
        Some((vec![64, 192], "F32".to_string()))
    );
    assert_eq!(
        t("cls.output.weight"),
        Some((vec![64, 1], "F32".to_string()))
    );
    // default general.name is the directory name
    let d = dir.path().join("d.gguf");
    convert_ok(&root().join("models/s1-pico"), &d, &["--pre", "other-pre"]);
    let bd = std::fs::read(&d).unwrap();
    let fd = sky_gguf::GgufFile::parse(&bd).unwrap();
    assert_eq!(
        fd.get("general.name").and_then(|v| v.as_str()),
        Some("s1-pico")
    );
    assert_eq!(
        fd.get("tokenizer.ggml.pre").and_then(|v| v.as_str()),
        Some("other-pre")
    );
}

// ---- bad input ----

/// Safetensors as (name, dtype, shape, bytes), header order.
type St = Vec<(String, String, Vec<usize>, Vec<u8>)>;

fn read_st(path: &Path) -> St {
    let raw = std::fs::read(path).unwrap();
    let n = u64::from_le_bytes(raw[..8].try_into().unwrap()) as usize;
    let header: Value = serde_json::from_slice(&raw[8..8 + n]).unwrap();
    let mut out = Vec::new();
    for (name, info) in header.as_object().unwrap() {
        if name == "__metadata__" {
            continue;
        }
        let off = info["data_offsets"].as_array().unwrap();
        let (a, b) = (
            off[0].as_u64().unwrap() as usize,
            off[1].as_u64().unwrap() as usize,
        );
        let shape = info["shape"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_u64().unwrap() as usize)
            .collect();
        out.push((
            name.clone(),
            info["dtype"].as_str().unwrap().to_string(),
            shape,
            raw[8 + n + a..8 + n + b].to_vec(),
        ));
    }
    out
}

fn write_st(path: &Path, tensors: &St) {
    let mut header = serde_json::Map::new();
    let mut data = Vec::new();
    for (name, dtype, shape, bytes) in tensors {
        header.insert(
            name.clone(),
            serde_json::json!({"dtype": dtype, "shape": shape, "data_offsets": [data.len(), data.len() + bytes.len()]}),
        );
        data.extend_from_slice(bytes);
    }
    let mut h = serde_json::to_vec(&Value::Object(header)).unwrap();
    while !h.len().is_multiple_of(8) {
        h.push(b' ');
    }
    let mut out = (h.len() as u64).to_le_bytes().to_vec();
    out.extend(h);
    out.extend(data);
    std::fs::write(path, out).unwrap();
}

/// A fresh random s1-pico checkpoint (f32) in `dir/name`.
fn random_pico(dir: &Path, name: &str) -> PathBuf {
    let p = dir.join(name);
    let o = skyctl(&[&"random", &"s1-pico", &p]);
    assert!(o.status.success(), "{}", text(&o));
    p
}

/// Convert and expect exit 2 with all `needles` in the message, no panic, and nothing left in
/// the output folder.
fn expect_refusal(src: &Path, out_dir: &Path, extra: &[&str], needles: &[&str]) {
    std::fs::create_dir_all(out_dir).unwrap();
    let out = out_dir.join("out.gguf");
    let mut args: Vec<&dyn AsRef<std::ffi::OsStr>> = vec![&"convert", &src, &out];
    for e in extra {
        args.push(e);
    }
    let o = skyctl(&args);
    let msg = text(&o);
    assert_eq!(o.status.code(), Some(2), "expected exit 2: {msg}");
    assert!(msg.starts_with("skyctl: "), "{msg}");
    assert!(!msg.contains("panicked"), "{msg}");
    for n in needles {
        assert!(msg.contains(n), "message lacks {n:?}: {msg}");
    }
    let left: Vec<_> = std::fs::read_dir(out_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "files left behind: {left:?}");
}

#[test]
fn missing_files_and_keys() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    expect_refusal(&t.join("nope"), &t.join("o1"), &[], &["nope", "missing"]);
    for (rel, needle) in [
        ("model.safetensors", "model.safetensors"),
        ("encoder/config.json", "encoder/config.json"),
        ("rl_agent_config.json", "rl_agent_config.json"),
        ("tokenizer/tokenizer.json", "tokenizer.json"),
        ("tokenizer/tokenizer_config.json", "tokenizer_config.json"),
    ] {
        let src = random_pico(t, "m");
        std::fs::remove_file(src.join(rel)).unwrap();
        expect_refusal(&src, &t.join("o2"), &[], &[needle, "missing"]);
        std::fs::remove_dir_all(&src).unwrap();
    }
    let src = random_pico(t, "k");
    let cfg = src.join("encoder/config.json");
    let good = std::fs::read_to_string(&cfg).unwrap();
    let mut v: Value = serde_json::from_str(&good).unwrap();
    v.as_object_mut().unwrap().remove("hidden_size");
    std::fs::write(&cfg, v.to_string()).unwrap();
    expect_refusal(
        &src,
        &t.join("o3"),
        &[],
        &["encoder/config.json", "\"hidden_size\"", "missing"],
    );
    std::fs::write(&cfg, good).unwrap();
    let agent = src.join("rl_agent_config.json");
    std::fs::write(&agent, "{\"head_layers\": \"two\"}").unwrap();
    expect_refusal(
        &src,
        &t.join("o4"),
        &[],
        &["rl_agent_config.json", "\"head_layers\""],
    );
    std::fs::write(&agent, "{not json").unwrap();
    expect_refusal(
        &src,
        &t.join("o5"),
        &[],
        &["rl_agent_config.json", "invalid JSON"],
    );
}

#[test]
fn wrong_shape_unknown_dtype_and_missing_tensor() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let src = random_pico(t, "s");
    let st_path = src.join("model.safetensors");
    let orig = read_st(&st_path);

    let mut bad = orig.clone();
    let e = bad
        .iter_mut()
        .find(|e| e.0 == "encoder.layers.1.mlp.Wo.weight")
        .unwrap();
    e.2 = vec![128, 64];
    write_st(&st_path, &bad);
    expect_refusal(
        &src,
        &t.join("o1"),
        &[],
        &["encoder.layers.1.mlp.Wo.weight", "[128, 64]", "[64, 128]"],
    );

    let mut bad = orig.clone();
    let e = bad.iter_mut().find(|e| e.0 == "scorer.1.bias").unwrap();
    e.1 = "I32".into();
    write_st(&st_path, &bad);
    expect_refusal(&src, &t.join("o2"), &[], &["scorer.1.bias", "dtype", "I32"]);

    let bad: St = orig
        .iter()
        .filter(|e| e.0 != "type_emb.weight")
        .cloned()
        .collect();
    write_st(&st_path, &bad);
    expect_refusal(
        &src,
        &t.join("o3"),
        &[],
        &["missing tensor", "type_emb.weight"],
    );

    let mut bad = orig.clone();
    bad.push((
        "encoder.extra.weight".into(),
        "F32".into(),
        vec![2],
        vec![0; 8],
    ));
    write_st(&st_path, &bad);
    expect_refusal(
        &src,
        &t.join("o4"),
        &[],
        &["encoder.extra.weight", "not part of a Laya checkpoint"],
    );

    std::fs::write(&st_path, b"\x10\x00\x00\x00\x00\x00\x00\x00{\"a\":").unwrap();
    expect_refusal(
        &src,
        &t.join("o5"),
        &[],
        &["model.safetensors", "not a valid safetensors file"],
    );

    // extra tensors Laya checkpoints carry are fine: the act head and temperature are in `orig`
    write_st(&st_path, &orig);
    let out = t.join("ok.gguf");
    convert_ok(&src, &out, &[]);
}

#[test]
fn nonfinite_weights_are_refused_unless_allowed() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let src = random_pico(t, "n");
    let st_path = src.join("model.safetensors");
    let mut st = read_st(&st_path);
    let e = st
        .iter_mut()
        .find(|e| e.0 == "head.layers.0.linear1.weight")
        .unwrap();
    e.3[4 * 77..4 * 78].copy_from_slice(&f32::NAN.to_le_bytes());
    e.3[4 * 90..4 * 91].copy_from_slice(&f32::INFINITY.to_le_bytes());
    write_st(&st_path, &st);
    expect_refusal(
        &src,
        &t.join("o1"),
        &[],
        &[
            "head.layers.0.linear1.weight",
            "index 77",
            "NaN",
            "--allow-nonfinite",
        ],
    );
    let out = t.join("allowed.gguf");
    convert_ok(&src, &out, &["--allow-nonfinite"]);
    assert!(out.is_file());
}

#[test]
fn tokenizer_of_another_model_type() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let src = random_pico(t, "tk");
    let tj = src.join("tokenizer/tokenizer.json");
    let mut v: Value = serde_json::from_str(&std::fs::read_to_string(&tj).unwrap()).unwrap();
    v["model"]["type"] = Value::String("WordPiece".into());
    std::fs::write(&tj, v.to_string()).unwrap();
    expect_refusal(
        &src,
        &t.join("o1"),
        &[],
        &["tokenizer.json", "WordPiece", "BPE"],
    );
    v["model"]["type"] = Value::String("BPE".into());
    v["pre_tokenizer"] = serde_json::json!({"type": "Metaspace", "replacement": "\u{2581}"});
    std::fs::write(&tj, v.to_string()).unwrap();
    expect_refusal(
        &src,
        &t.join("o2"),
        &[],
        &["tokenizer.json", "pre_tokenizer", "ByteLevel"],
    );
}

#[test]
fn unwritable_output_and_bad_types() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let src = root().join("models/s1-pico");
    let missing_dir = t.join("no/such/dir/out.gguf");
    let o = skyctl(&[&"convert", &src, &missing_dir]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("no/such/dir"), "{}", text(&o));
    assert!(!t.join("no").exists());
    // an output path that is a directory
    let as_dir = t.join("isdir");
    std::fs::create_dir(&as_dir).unwrap();
    let o = skyctl(&[&"convert", &src, &as_dir]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("isdir"), "{}", text(&o));
    assert_eq!(
        std::fs::read_dir(t).unwrap().count(),
        1,
        "temp files left in the output folder"
    );
    expect_refusal(
        &src,
        &t.join("o3"),
        &["--type", "q4_0"],
        &["q4_0", "f32, f16, bf16, q8_0"],
    );
}

/// `convert --encoder-only`: what upstream llama.cpp loads for embeddings. Read with the gguf
/// package: `block_count` and `feed_forward_length` cut to the encoder, no decision-head
/// block, `token_types` or `cls.*` tensor, no `decision.*` key, and every encoder tensor the
/// full file's (name, type, shape, bytes).
#[test]
fn encoder_only_files_read_in_gguf_py_as_the_encoder_of_the_full_file() {
    let dir = tempfile::tempdir().unwrap();
    const READ: &str = r#"
import json, sys
import numpy as np
from gguf import GGUFReader
def load(path):
    r = GGUFReader(path)
    keys = {f.name: f.contents() for f in r.fields.values() if not f.name.startswith(("GGUF.", "tokenizer.ggml.tokens", "tokenizer.ggml.merges", "tokenizer.ggml.token_type"))}
    tensors = {t.name: (t.tensor_type.name, [int(d) for d in t.shape], np.asarray(t.data).tobytes().hex()) for t in r.tensors}
    return keys, tensors
full_keys, full = load(sys.argv[1])
enc_keys, enc = load(sys.argv[2])
print(json.dumps({
    "block_count": enc_keys["modern-bert.block_count"],
    "full_block_count": full_keys["modern-bert.block_count"],
    "ffn": enc_keys["modern-bert.feed_forward_length"],
    "full_ffn": full_keys["modern-bert.feed_forward_length"],
    "decision_keys": sorted(k for k in enc_keys if ".decision." in k),
    "tensors": sorted(enc),
    "full_tensors": sorted(full),
    "same": [n for n in enc if n in full and enc[n] == full[n]],
    "other_keys_differ": sorted(k for k in enc_keys if k in full_keys and enc_keys[k] != full_keys[k]),
}))
"#;
    for (model, n_enc, intermediate) in [("s1-pico", 2, 128), ("s1-micro", 6, 512)] {
        let src = root().join("models").join(model);
        let full = dir.path().join(format!("{model}.gguf"));
        let enc = dir.path().join(format!("{model}.encoder.gguf"));
        convert_ok(&src, &full, &[]);
        let line = convert_ok(&src, &enc, &["--encoder-only"]);
        assert!(line.contains(" tensors, "), "{line}");
        let out = Command::new(python())
            .args(["-c", READ])
            .arg(&full)
            .arg(&enc)
            .output()
            .expect("python with gguf");
        assert!(out.status.success(), "{}", text(&out));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["block_count"], n_enc, "{model}");
        assert!(v["full_block_count"].as_u64().unwrap() > n_enc, "{model}");
        assert_eq!(
            v["ffn"],
            serde_json::json!(vec![intermediate; n_enc as usize]),
            "{model}"
        );
        assert_eq!(v["decision_keys"], serde_json::json!([]), "{model}");
        let names = |k: &str| -> Vec<String> {
            v[k].as_array()
                .unwrap()
                .iter()
                .map(|n| n.as_str().unwrap().to_string())
                .collect()
        };
        let is_head = |n: &str| {
            n.starts_with("cls") || n.starts_with("token_types") || {
                let block = n.strip_prefix("blk.").and_then(|r| r.split('.').next());
                block
                    .and_then(|b| b.parse::<u64>().ok())
                    .is_some_and(|b| b >= n_enc)
            }
        };
        let want: Vec<String> = names("full_tensors")
            .into_iter()
            .filter(|n| !is_head(n))
            .collect();
        assert_eq!(names("tensors"), want, "{model}");
        let mut same = names("same");
        same.sort();
        assert_eq!(
            same, want,
            "{model}: encoder tensors differ from the full file's"
        );
        // Besides the cut keys, only the parameter count's label may differ.
        assert_eq!(
            v["other_keys_differ"],
            serde_json::json!([
                "general.size_label",
                "modern-bert.block_count",
                "modern-bert.feed_forward_length"
            ]),
            "{model}"
        );
    }
}
