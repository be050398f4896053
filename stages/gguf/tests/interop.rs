//! Interoperability with llama.cpp's `gguf` Python package (gguf-py): files we write are
//! read back by `gguf.GGUFReader` with every key, value, tensor and byte equal; files
//! `gguf.GGUFWriter` writes are read by us with everything equal (and re-written byte for
//! byte); our Q8_0, F16 and BF16 bytes equal gguf-py's / numpy's.
//!
//! The interpreter comes from `SKYCTL_TEST_PYTHON`, else `<workspace>/.venv/bin/python`;
//! if neither can `import gguf, numpy` the tests fail (they never pass silently).

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Value as Json};
use sky_gguf::{
    f32_to_bf16, f32_to_f16, quantize_q8_0, Array, GgmlType, GgufFile, GgufWriter, Value, ValueType,
};

fn python() -> PathBuf {
    let candidates: Vec<PathBuf> = match std::env::var_os("SKYCTL_TEST_PYTHON") {
        Some(p) => vec![PathBuf::from(p)],
        None => vec![Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.venv/bin/python")],
    };
    for p in &candidates {
        let ok = Command::new(p)
            .args(["-c", "import gguf, numpy"])
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false);
        if ok {
            return p.clone();
        }
    }
    panic!(
        "no Python with the `gguf` and `numpy` packages: tried {candidates:?}; set \
         SKYCTL_TEST_PYTHON to an interpreter that has them (pip install gguf numpy)"
    );
}

/// Run a Python script with arguments; panic with its stderr if it fails.
fn run_py(script: &str, args: &[&Path]) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("script.py");
    std::fs::write(&file, script).unwrap();
    let out = Command::new(python())
        .arg(&file)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "python failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Shared Python helpers: walk a ReaderField's parts as gguf-py parsed them, giving
/// {"array": elem_type, "items": [...]} for arrays (nested ones included).
const PY_COMMON: &str = r#"
import json, sys
import numpy as np
import gguf
from gguf import GGUFValueType as VT

def walk(t, it):
    if t == VT.STRING:
        next(it)
        return bytes(next(it).tobytes()).decode("utf-8")
    if t == VT.ARRAY:
        et = int(next(it)[0]); n = int(next(it)[0])
        return {"array": et, "items": [walk(et, it) for _ in range(n)]}
    return next(it).tolist()[0]

import struct
def tag(t, v):
    """Floats as bit patterns, so JSON number parsing cannot blur them."""
    if t == VT.FLOAT32:
        return {"f32": struct.unpack("<I", struct.pack("<f", v))[0]}
    if t == VT.FLOAT64:
        return {"f64": struct.unpack("<Q", struct.pack("<d", v))[0]}
    if t == VT.ARRAY:
        return {"array": v["array"], "items": [tag(v["array"], x) for x in v["items"]]}
    return v
"#;

/// Our value in the same JSON form as `walk` above.
fn value_json(v: &Value) -> Json {
    match v {
        Value::U8(x) => json!(x),
        Value::I8(x) => json!(x),
        Value::U16(x) => json!(x),
        Value::I16(x) => json!(x),
        Value::U32(x) => json!(x),
        Value::I32(x) => json!(x),
        Value::U64(x) => json!(x),
        Value::I64(x) => json!(x),
        Value::F32(x) => json!({"f32": x.to_bits()}),
        Value::F64(x) => json!({"f64": x.to_bits()}),
        Value::Bool(x) => json!(x),
        Value::String(s) => json!(s),
        Value::Array(a) => json!({
            "array": a.elem_type.id(),
            "items": a.items.iter().map(value_json).collect::<Vec<_>>(),
        }),
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn metadata_json(f: &GgufFile<'_>) -> Vec<Json> {
    f.metadata
        .iter()
        .map(|(k, v)| json!({"key": k, "type": v.value_type().id(), "value": value_json(v)}))
        .collect()
}

fn tensors_json(f: &GgufFile<'_>) -> Vec<Json> {
    f.tensors
        .iter()
        .map(|t| {
            json!({
                "name": t.name,
                "dims": t.dims,
                "type": t.ty.id(),
                "n_bytes": t.n_bytes(),
                "data_offset": f.data_offset() + t.offset,
                "data": hex(t.data),
            })
        })
        .collect()
}

/// Deterministic pseudo-random f32s in [-scale, scale).
fn randoms(n: usize, seed: u64, scale: f32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
        })
        .collect()
}

const PY_READ_OURS: &str = r#"
r = gguf.GGUFReader(sys.argv[1])
meta = []
for name, field in r.fields.items():
    if name.startswith("GGUF."):
        continue
    t = int(field.types[0])
    v = walk(t, iter(field.parts[3:]))
    # The public accessor must agree with the walk for everything but nested arrays.
    if not (t == VT.ARRAY and v["array"] == VT.ARRAY):
        c = field.contents()
        want = v["items"] if t == VT.ARRAY else v
        assert c == want, (name, c, want)
    meta.append({"key": name, "type": t, "value": tag(t, v)})
tensors = []
for t in r.tensors:
    tensors.append({"name": t.name, "dims": [int(d) for d in t.shape], "type": int(t.tensor_type),
                    "n_bytes": int(t.n_bytes), "data_offset": int(t.data_offset),
                    "data": t.data.tobytes().hex()})
json.dump({"alignment": int(r.alignment), "metadata": meta, "tensors": tensors}, open(sys.argv[2], "w"))
"#;

fn all_value_types(w: &mut GgufWriter) {
    w.add_kv("general.architecture", "modern-bert");
    w.add_kv("t.u8", 255u8);
    w.add_kv("t.i8", -128i8);
    w.add_kv("t.u16", 65535u16);
    w.add_kv("t.i16", -32768i16);
    w.add_kv("t.u32", 4_000_000_000u32);
    w.add_kv("t.i32", -2_000_000_000i32);
    w.add_kv("t.f32", 1.064_769_9f32);
    w.add_kv("t.bool", true);
    w.add_kv("t.string", "h\u{e9}llo \u{1F600} \"q\"\n");
    w.add_kv("t.u64", u64::MAX);
    w.add_kv("t.i64", i64::MIN);
    w.add_kv("t.f64", -1.5e300f64);
    w.add_kv(
        "t.strings",
        Value::string_array(["<pad>", "", "\u{0120}the"]),
    );
    w.add_kv("t.i32s", Value::i32_array([1, -2, 3]));
    w.add_kv("t.u32s", Value::u32_array([7, 8]));
    w.add_kv("t.f32s", Value::f32_array([0.1, -0.0, 3e38]));
    w.add_kv(
        "t.bools",
        Value::array(ValueType::Bool, vec![Value::Bool(false), Value::Bool(true)]).unwrap(),
    );
    w.add_kv(
        "t.u64s",
        Value::array(ValueType::U64, vec![Value::U64(1 << 60)]).unwrap(),
    );
    w.add_kv("t.empty", Value::i32_array([]));
    w.add_kv(
        "t.nested",
        Value::Array(Array {
            elem_type: ValueType::Array,
            items: vec![
                Value::i32_array([1, 2]),
                Value::i32_array([-3]),
                Value::i32_array([]),
            ],
        }),
    );
    w.add_kv(
        "t.nested_strings",
        Value::Array(Array {
            elem_type: ValueType::Array,
            items: vec![Value::string_array(["a", "bc"]), Value::string_array(["d"])],
        }),
    );
}

#[test]
fn gguf_py_reads_what_we_write() {
    let dir = tempfile::tempdir().unwrap();
    for alignment in [32u64, 64] {
        let mut w = GgufWriter::with_alignment(alignment);
        all_value_types(&mut w);
        let x = randoms(64 * 3, 1, 2.0);
        w.add_tensor_f32("w.f32", vec![64, 3], GgmlType::F32, &x)
            .unwrap();
        w.add_tensor_f32("w.f16", vec![64, 3], GgmlType::F16, &x)
            .unwrap();
        w.add_tensor_f32("w.bf16", vec![8, 8, 3], GgmlType::BF16, &x)
            .unwrap();
        w.add_tensor_f32("w.q8_0", vec![64, 3], GgmlType::Q8_0, &x)
            .unwrap();
        w.add_tensor_f32("w.odd", vec![5], GgmlType::F32, &x[..5])
            .unwrap();
        let q6k: Vec<u8> = (0..420u32).map(|i| (i * 7 % 251) as u8).collect();
        w.add_tensor("w.q6_k", vec![256, 2], GgmlType::from_id(14), q6k)
            .unwrap();
        let path = dir.path().join(format!("ours{alignment}.gguf"));
        w.write_file(&path).unwrap();
        let out = dir.path().join("read.json");
        run_py(&format!("{PY_COMMON}{PY_READ_OURS}"), &[&path, &out]);
        let theirs: Json = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();

        let bytes = std::fs::read(&path).unwrap();
        let f = GgufFile::parse(&bytes).unwrap();
        assert_eq!(theirs["alignment"], json!(alignment));
        let want_meta = metadata_json(&f);
        assert_eq!(want_meta.len(), 23);
        let got_meta = theirs["metadata"].as_array().unwrap();
        assert_eq!(got_meta.len(), want_meta.len());
        for (g, w) in got_meta.iter().zip(&want_meta) {
            assert_eq!(g, w);
        }
        let want_t = tensors_json(&f);
        assert_eq!(theirs["tensors"].as_array().unwrap(), &want_t);
    }
}

const PY_WRITE: &str = r#"
out_path, expect_path = sys.argv[1], sys.argv[2]
w = gguf.GGUFWriter(out_path, "modern-bert")
meta = [{"key": "general.architecture", "type": VT.STRING, "value": "modern-bert"}]
def kv(key, t, v, sub=None, walked=None):
    w.add_key_value(key, v, t, sub_type=sub)
    meta.append({"key": key, "type": int(t), "value": tag(t, walked if walked is not None else v)})
kv("t.u8", VT.UINT8, 200)
kv("t.i8", VT.INT8, -100)
kv("t.u16", VT.UINT16, 60000)
kv("t.i16", VT.INT16, -30000)
kv("t.u32", VT.UINT32, 4000000000)
kv("t.i32", VT.INT32, -2000000000)
kv("t.f32", VT.FLOAT32, 1.5)
kv("t.bool", VT.BOOL, False)
kv("t.string", VT.STRING, "caf\u00e9 \u2603")
kv("t.u64", VT.UINT64, 2**64 - 1)
kv("t.i64", VT.INT64, -2**63)
kv("t.f64", VT.FLOAT64, 2.0**-1074)
kv("t.strings", VT.ARRAY, ["a", "", "\u0120x"], walked={"array": 8, "items": ["a", "", "\u0120x"]})
kv("t.ints", VT.ARRAY, [1, -2, 3], walked={"array": 5, "items": [1, -2, 3]})
kv("t.floats", VT.ARRAY, [0.5, -0.25], walked={"array": 6, "items": [0.5, -0.25]})
kv("t.bools", VT.ARRAY, [True, False], walked={"array": 7, "items": [True, False]})
kv("t.u8s", VT.ARRAY, [1, 255], sub=VT.UINT8, walked={"array": 0, "items": [1, 255]})
kv("t.u64s", VT.ARRAY, [2**63], sub=VT.UINT64, walked={"array": 10, "items": [2**63]})
kv("t.nested", VT.ARRAY, [[1, 2], [3]],
   walked={"array": 9, "items": [{"array": 5, "items": [1, 2]}, {"array": 5, "items": [3]}]})
kv("t.nested_strings", VT.ARRAY, [["x"], ["y", "z"]],
   walked={"array": 9, "items": [{"array": 8, "items": ["x"]}, {"array": 8, "items": ["y", "z"]}]})
w.add_custom_alignment(32)
meta.append({"key": "general.alignment", "type": 4, "value": 32})

rng = np.random.default_rng(7)
x = rng.standard_normal((3, 64)).astype(np.float32)
tensors = []
def tensor(name, arr, raw_dtype, dims, ttype, deq):
    if raw_dtype is None:
        w.add_tensor(name, arr)
    else:
        w.add_tensor(name, arr, raw_dtype=raw_dtype)
    tensors.append({"name": name, "dims": dims, "type": ttype, "data": arr.tobytes().hex(),
                    "f32": None if deq is None else deq.astype(np.float32).reshape(-1).view(np.uint32).tolist()})
Q = gguf.GGMLQuantizationType
tensor("w.f32", x, None, [64, 3], 0, x)
h = x.astype(np.float16)
tensor("w.f16", h, None, [64, 3], 1, h.astype(np.float32))
b = gguf.quants.quantize(x, Q.BF16)
tensor("w.bf16", b, Q.BF16, [64, 3], 30, gguf.quants.dequantize(b, Q.BF16))
q = gguf.quants.quantize(x, Q.Q8_0)
tensor("w.q8_0", q, Q.Q8_0, [64, 3], 8, gguf.quants.dequantize(q, Q.Q8_0))
k = rng.integers(0, 256, size=(2, 144), dtype=np.uint8)
tensor("w.q4_k", k, Q.Q4_K, [256, 2], 12, None)
tensor("w.odd", x[0, :7].copy(), None, [7], 0, x[0, :7])
w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()
json.dump({"metadata": meta, "tensors": tensors}, open(expect_path, "w"))
"#;

#[test]
fn we_read_what_gguf_py_writes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("py.gguf");
    let expect = dir.path().join("expect.json");
    run_py(&format!("{PY_COMMON}{PY_WRITE}"), &[&path, &expect]);
    let want: Json = serde_json::from_slice(&std::fs::read(&expect).unwrap()).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    let f = GgufFile::parse(&bytes).unwrap();
    assert_eq!((f.version, f.alignment), (3, 32));

    let got_meta = metadata_json(&f);
    let want_meta = want["metadata"].as_array().unwrap();
    assert_eq!(got_meta.len(), want_meta.len());
    for (g, w) in got_meta.iter().zip(want_meta) {
        assert_eq!(g, w);
    }
    let want_t = want["tensors"].as_array().unwrap();
    assert_eq!(f.tensors.len(), want_t.len());
    for (t, w) in f.tensors.iter().zip(want_t) {
        assert_eq!(json!(t.name), w["name"]);
        assert_eq!(json!(t.dims), w["dims"], "{}", t.name);
        assert_eq!(json!(t.ty.id()), w["type"], "{}", t.name);
        assert_eq!(hex(t.data), w["data"].as_str().unwrap(), "{}", t.name);
        assert_eq!(t.offset % 32, 0);
        match w["f32"].as_array() {
            Some(vals) => {
                let ours = t.to_f32().unwrap();
                let ours: Vec<u32> = ours.iter().map(|v| v.to_bits()).collect();
                let theirs: Vec<u32> = vals.iter().map(|v| v.as_u64().unwrap() as u32).collect();
                assert_eq!(ours, theirs, "{}", t.name);
            }
            None => assert!(t.to_f32().is_err()),
        }
    }
    assert_eq!(f.tensor("w.q4_k").unwrap().ty, GgmlType::Other(12));
    assert_eq!(f.tensor("w.f32").unwrap().shape(), vec![3, 64]);

    // Copying every key and tensor through our writer reproduces gguf-py's bytes exactly.
    let copy = GgufWriter::from_gguf(&f).unwrap().to_bytes().unwrap();
    assert_eq!(copy.len(), bytes.len());
    assert!(copy == bytes, "re-written file differs from gguf-py's");
}

const PY_QUANT: &str = r#"
Q = gguf.GGMLQuantizationType
x = np.fromfile(sys.argv[1], dtype=np.float32).reshape(-1, 32)
gguf.quants.quantize(x, Q.Q8_0).tofile(sys.argv[2])
y = np.fromfile(sys.argv[3], dtype=np.float32)
with np.errstate(over="ignore"):
    y.astype(np.float16).tofile(sys.argv[4])
gguf.quants.quantize(y, Q.BF16).tofile(sys.argv[5])
"#;

/// Edge-case blocks of 32 for Q8_0.
fn q8_cases() -> Vec<f32> {
    let mut x = Vec::new();
    // Random data at several scales.
    for (i, scale) in [1.0f32, 1e-3, 40.0, 1e4, 1e-7].into_iter().enumerate() {
        x.extend(randoms(32 * 64, 10 + i as u64, scale));
    }
    // All zeros, all equal, negative zero.
    x.extend([0.0f32; 32]);
    x.extend([-0.0f32; 32]);
    x.extend([3.25f32; 32]);
    // One huge value per block.
    for pos in [0usize, 17, 31] {
        let mut b = randoms(32, 100 + pos as u64, 0.01);
        b[pos] = 1e6;
        x.extend(b);
        let mut b = randoms(32, 200 + pos as u64, 0.01);
        b[pos] = -3e4;
        x.extend(b);
    }
    // Negative extremes: the block minimum sets the scale; values at exact half steps.
    let mut b: Vec<f32> = (0..32).map(|i| -127.0 + i as f32 * 8.5).collect();
    b[5] = -127.0;
    x.extend(b);
    x.extend((0..32).map(|i| (i as f32 - 16.0) + 0.5));
    x.extend((0..32).map(|i| {
        if i % 2 == 0 {
            -f32::MAX
        } else {
            f32::MAX / 3.0
        }
    }));
    x.extend((0..32).map(|i| f32::MIN_POSITIVE * i as f32));
    x.extend((0..32).map(|i| 65504.0 * 127.0 * if i == 3 { -1.0 } else { 0.5 }));
    x
}

/// Edge cases for f16 and bf16 rounding: subnormals, overflow, ties, NaN.
fn half_cases() -> Vec<f32> {
    let mut y = vec![
        0.0,
        -0.0,
        1.0,
        -1.0,
        65504.0,
        65519.0,
        65520.0,
        -65520.0,
        1e9,
        f32::MAX,
        f32::MIN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        -f32::NAN,
        f32::from_bits(0x7F80_0001),
        f32::from_bits(0x7FBF_FFFF),
        f32::MIN_POSITIVE,
        1e-45,
        5.960_464_5e-8,
        2.980_232_2e-8,
        2.980_233e-8,
        8.940_697e-8,
        6.097_555e-5,
        6.103_515_6e-5,
        1.000_488_3,
        1.001_464_8,
        2049.0,
        2051.0,
        0.1,
        1.0 / 3.0,
        3.389_531_4e38,
    ];
    // Every f16 tie point between consecutive halves near 1, and many random bit patterns.
    for m in 0u32..64 {
        y.push(f32::from_bits(0x3F80_0000 + (m << 13) + 0x1000));
    }
    let mut s = 0xDEAD_BEEFu64;
    for _ in 0..100_000 {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        y.push(f32::from_bits((s >> 32) as u32));
    }
    y
}

#[test]
fn q8_0_f16_bf16_bytes_equal_gguf_py_and_numpy() {
    let dir = tempfile::tempdir().unwrap();
    let x = q8_cases();
    let y = half_cases();
    let p = |n: &str| dir.path().join(n);
    let f32_bytes = |v: &[f32]| v.iter().flat_map(|f| f.to_le_bytes()).collect::<Vec<u8>>();
    std::fs::write(p("x.f32"), f32_bytes(&x)).unwrap();
    std::fs::write(p("y.f32"), f32_bytes(&y)).unwrap();
    run_py(
        &format!("{PY_COMMON}{PY_QUANT}"),
        &[
            &p("x.f32"),
            &p("x.q8"),
            &p("y.f32"),
            &p("y.f16"),
            &p("y.bf16"),
        ],
    );

    let theirs = std::fs::read(p("x.q8")).unwrap();
    let ours = quantize_q8_0(&x).unwrap();
    assert_eq!(ours.len(), theirs.len());
    for (i, (a, b)) in ours.chunks(34).zip(theirs.chunks(34)).enumerate() {
        assert_eq!(a, b, "Q8_0 block {i}: input {:?}", &x[i * 32..i * 32 + 32]);
    }

    let halves = |b: Vec<u8>| -> Vec<u16> {
        b.chunks_exact(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]))
            .collect()
    };
    let np_f16 = halves(std::fs::read(p("y.f16")).unwrap());
    let py_bf16 = halves(std::fs::read(p("y.bf16")).unwrap());
    for (i, &v) in y.iter().enumerate() {
        let (ours, theirs) = (f32_to_f16(v), np_f16[i]);
        if v.is_nan() {
            // NaN stays NaN (payloads may differ: we set the quiet bit), sign kept.
            assert!(
                ours & 0x7C00 == 0x7C00 && ours & 0x3FF != 0,
                "{:#x}",
                v.to_bits()
            );
            assert_eq!(ours & 0x8000, theirs & 0x8000);
        } else {
            assert_eq!(ours, theirs, "f16 of {v:e} ({:#010x})", v.to_bits());
        }
        assert_eq!(
            f32_to_bf16(v),
            py_bf16[i],
            "bf16 of {v:e} ({:#010x})",
            v.to_bits()
        );
    }
}
