//! `skyctl inspect` end to end: the real binary on small files written in a tempdir.

use std::path::Path;
use std::process::{Command, Output};

use sky_gguf::{GgmlType, GgufWriter, Value};

fn skyctl(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_skyctl"))
        .current_dir(dir)
        .args(args)
        .output()
        .unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).unwrap()
}

/// A small Laya-like file: a few keys of different types, an array longer than the cut,
/// and tensors of F16, F32, Q8_0 and an unconverted type (Q6_K).
fn write_sample(dir: &Path) {
    let mut w = GgufWriter::new();
    w.add_kv("general.architecture", "modern-bert");
    w.add_kv("modern-bert.block_count", 3u32);
    w.add_kv("modern-bert.decision.temperature.choice.2", 1.064_769_9f32);
    w.add_kv("modern-bert.decision.flag", false);
    w.add_kv(
        "modern-bert.feed_forward_length",
        Value::i32_array([96, 96, 256]),
    );
    w.add_kv(
        "tokenizer.ggml.tokens",
        Value::string_array(["<pad>", "<s>", "</s>", "a\"b", "\u{0120}the", "x"]),
    );
    w.add_kv("general.big", u64::MAX);
    let x: Vec<f32> = (0..64 * 6).map(|i| i as f32 / 64.0).collect();
    w.add_tensor_f32("token_embd.weight", vec![64, 6], GgmlType::F16, &x)
        .unwrap();
    w.add_tensor_f32("blk.0.attn_qkv.weight", vec![64, 6], GgmlType::Q8_0, &x)
        .unwrap();
    w.add_tensor_f32("output_norm.weight", vec![64], GgmlType::F32, &x[..64])
        .unwrap();
    w.add_tensor(
        "blk.1.ffn_up.weight",
        vec![256, 2],
        GgmlType::from_id(14),
        vec![0; 420],
    )
    .unwrap();
    w.write_file(&dir.join("m.gguf")).unwrap();
}

#[test]
fn text_output_is_pinned() {
    let dir = tempfile::tempdir().unwrap();
    write_sample(dir.path());
    let size = std::fs::metadata(dir.path().join("m.gguf")).unwrap().len();
    let o = skyctl(dir.path(), &["inspect", "m.gguf", "--max-array", "4"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let want = format!(
        r#"m.gguf: GGUF v3, {size} bytes, alignment 32

8 metadata keys:
  general.architecture (string) = "modern-bert"
  modern-bert.block_count (u32) = 3
  modern-bert.decision.temperature.choice.2 (f32) = 1.0647699
  modern-bert.decision.flag (bool) = false
  modern-bert.feed_forward_length (array<i32>) = [96, 96, 256] (3 items)
  tokenizer.ggml.tokens (array<string>) = ["<pad>", "<s>", "</s>", "a\"b", ...] (6 items)
  general.big (u64) = 18446744073709551615
  general.alignment (u32) = 32
4 tensors (ggml dims, ne[0] = innermost):
  token_embd.weight                        [64, 6]                F16           768 bytes
  blk.0.attn_qkv.weight                    [64, 6]                Q8_0          408 bytes
  output_norm.weight                       [64]                   F32           256 bytes
  blk.1.ffn_up.weight                      [256, 2]               Q6_K          420 bytes
total: 1344 parameters, 1852 bytes of tensor data
"#
    );
    assert_eq!(stdout(&o), want);
    // 704 bytes of header, keys and descriptors (padded to 32) + each tensor padded to 32.
    assert_eq!(size, 704 + 768 + 416 + 256 + 448);
}

#[test]
fn max_array_cuts_arrays() {
    let dir = tempfile::tempdir().unwrap();
    write_sample(dir.path());
    let o = skyctl(dir.path(), &["inspect", "m.gguf", "--max-array", "1"]);
    let out = stdout(&o);
    assert!(
        out.contains("(array<string>) = [\"<pad>\", ...] (6 items)\n"),
        "{out}"
    );
    assert!(
        out.contains("(array<i32>) = [96, ...] (3 items)\n"),
        "{out}"
    );
    let o = skyctl(dir.path(), &["inspect", "m.gguf", "--max-array", "0"]);
    assert!(stdout(&o).contains("(array<i32>) = [...] (3 items)\n"));
}

#[test]
fn json_output_has_everything() {
    let dir = tempfile::tempdir().unwrap();
    write_sample(dir.path());
    let o = skyctl(
        dir.path(),
        &["inspect", "m.gguf", "--json", "--max-array", "1"],
    );
    assert!(o.status.success());
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let size = std::fs::metadata(dir.path().join("m.gguf")).unwrap().len();
    assert_eq!(j["version"], 3);
    assert_eq!(j["alignment"], 32);
    assert_eq!(j["file_bytes"], size);
    let meta = j["metadata"].as_array().unwrap();
    assert_eq!(meta.len(), 8);
    assert_eq!(
        meta[2],
        serde_json::json!({"key": "modern-bert.decision.temperature.choice.2", "type": "f32", "value": 1.0647699})
    );
    // Arrays are whole in JSON whatever --max-array says.
    assert_eq!(
        meta[5]["value"],
        serde_json::json!(["<pad>", "<s>", "</s>", "a\"b", "\u{0120}the", "x"])
    );
    assert_eq!(meta[5]["type"], "array<string>");
    assert_eq!(meta[6]["value"], serde_json::json!(u64::MAX));
    let t = j["tensors"].as_array().unwrap();
    assert_eq!(t.len(), 4);
    assert_eq!(
        t[1],
        serde_json::json!({"name": "blk.0.attn_qkv.weight", "dims": [64, 6], "type": "Q8_0", "offset": 768, "bytes": 408})
    );
    assert_eq!(t[3]["type"], "Q6_K");
}

#[test]
fn bad_files_exit_2_naming_file_and_offset() {
    let dir = tempfile::tempdir().unwrap();
    write_sample(dir.path());
    let mut bytes = std::fs::read(dir.path().join("m.gguf")).unwrap();
    bytes.truncate(300);
    std::fs::write(dir.path().join("cut.gguf"), &bytes).unwrap();
    let o = skyctl(dir.path(), &["inspect", "cut.gguf"]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.starts_with("skyctl: cut.gguf: truncated file: "),
        "{err}"
    );
    assert!(
        err.contains("metadata key #5 at byte 284 needs 21 bytes, only 16 left"),
        "{err}"
    );
    assert!(o.stdout.is_empty());

    std::fs::write(dir.path().join("txt.gguf"), b"hello world, not gguf").unwrap();
    let o = skyctl(dir.path(), &["inspect", "txt.gguf"]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("txt.gguf: not a GGUF file: magic at byte 0"),
        "{err}"
    );

    let o = skyctl(dir.path(), &["inspect", "missing.gguf"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("missing.gguf"));
}
