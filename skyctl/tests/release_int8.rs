//! `skyctl build` over a real model pipeline: convert -> calibrate -> quantize -> bench ->
//! manifest, the release tree (model files, manifest.json, bench.json), the same bytes as the
//! direct commands, and a no-op second build.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn skyctl(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_skyctl"))
        .args(args)
        .current_dir(dir)
        .env_remove("SKYCTL_STORE")
        .output()
        .expect("running skyctl")
}

fn ok(dir: &Path, args: &[&str]) -> String {
    let o = skyctl(dir, args);
    let (out, err) = (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    );
    assert!(o.status.success(), "skyctl {args:?} failed: {out}\n{err}");
    out + &err
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dst = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &dst);
        } else {
            std::fs::copy(e.path(), dst).unwrap();
        }
    }
}

const PIPELINE: &str = r#"
[project]
release_dir = "site/public"

[calibration.default]
prompts = "builtin"

[[model]]
name = "s1-pico"
source = "models/s1-pico"
variants = ["f16", "q8_0"]
bench = { modes = ["f32", "q8_0"], questions = 1, iters = 2, rounds = 1 }
publish = ["f16", "q8_0"]
"#;

#[test]
fn build_produces_the_release_like_the_direct_commands() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    copy_dir(&root().join("models/s1-pico"), &d.join("models/s1-pico"));
    std::fs::write(d.join("pipeline.toml"), PIPELINE).unwrap();
    ok(d, &["build"]);
    let rel = d.join("site/public");
    let f16 = std::fs::read(rel.join("models/s1-pico.gguf")).unwrap();
    let q8 = std::fs::read(rel.join("models/s1-pico.q8_0.gguf")).unwrap();

    // the same bytes as the direct commands
    ok(d, &["convert", "models/s1-pico", "direct.f16.gguf"]);
    ok(d, &["quantize", "models/s1-pico", "direct.q8_0.gguf"]);
    assert_eq!(
        f16,
        std::fs::read(d.join("direct.f16.gguf")).unwrap(),
        "F16 release file = skyctl convert"
    );
    assert_eq!(
        q8,
        std::fs::read(d.join("direct.q8_0.gguf")).unwrap(),
        "Q8_0 release file = skyctl quantize"
    );

    // manifest.json describes both files
    let m: serde_json::Value =
        serde_json::from_slice(&std::fs::read(rel.join("models/manifest.json")).unwrap()).unwrap();
    let model = &m["models"][0];
    assert_eq!(model["name"], "s1-pico");
    assert_eq!(model["parameters"], 202_305);
    assert_eq!(model["tensors"], 33);
    let files = model["files"].as_array().unwrap();
    assert_eq!(files.len(), 2);
    for (f, bytes) in files.iter().zip([&f16, &q8]) {
        assert_eq!(f["bytes"].as_u64(), Some(bytes.len() as u64));
        assert_eq!(
            f["blake3"].as_str(),
            Some(blake3::hash(bytes).to_hex().as_str())
        );
    }
    assert_eq!(files[0]["policy"]["encoder"], "F16");
    assert_eq!(files[0]["policy"]["head"], "F32");
    assert_eq!(files[1]["policy"]["encoder"], "Q8_0");
    assert_eq!(files[1]["policy"]["token_embd"], "F16");
    assert_eq!(files[1]["types"]["Q8_0"], 8);
    assert_eq!(files[1]["policy"]["outlier_ratio"], 3.0);
    assert_eq!(files[0]["path"], "models/s1-pico.gguf");
    assert_eq!(files[1]["path"], "models/s1-pico.q8_0.gguf");
    // every variant built, published or not, with its size and digest: the declared ones and
    // the F32 reference the Q8_0 file is quantized from
    let variants = model["variants"].as_array().unwrap();
    let names: Vec<&str> = variants
        .iter()
        .filter_map(|v| v["variant"].as_str())
        .collect();
    assert_eq!(names, ["f32", "f16", "q8_0"]);
    let f32 = std::fs::read(d.join("build/s1-pico/s1-pico.f32.gguf")).unwrap();
    for (v, bytes) in variants.iter().zip([&f32, &f16, &q8]) {
        assert_eq!(v["bytes"].as_u64(), Some(bytes.len() as u64));
        assert_eq!(
            v["blake3"].as_str(),
            Some(blake3::hash(bytes).to_hex().as_str())
        );
    }

    // bench.json: measured modes are numbers, the others null
    let b: serde_json::Value =
        serde_json::from_slice(&std::fs::read(rel.join("bench.json")).unwrap()).unwrap();
    let modes = &b["models"]["s1-pico"];
    assert!(modes["f32"].as_f64().is_some_and(|v| v > 0.0), "{b}");
    assert!(modes["q8_0"].as_f64().is_some_and(|v| v > 0.0), "{b}");
    assert!(modes["q8"].is_null() && modes["q8-fast"].is_null(), "{b}");

    // nothing changed: nothing runs
    let out = ok(d, &["build"]);
    assert!(out.contains("0 executed"), "{out}");
}
