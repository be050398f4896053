//! GGUF benchmarks (run by bench/gguf.sh): header parse time of a ~100 MB and a ~10 MB
//! file with the same header, write speed, f32->f16 and Q8_0 throughput (one thread).
//! Prints one `name value unit` line per figure.
#![allow(clippy::print_stdout)]

use std::time::{Duration, Instant};

use sky_gguf::{
    encode, f32_to_f16, quantize_q8_0_into, GgmlType, GgufMmap, GgufWriter, Value,
    Q8_0_BLOCK_BYTES, QK8_0,
};

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn time<T>(runs: usize, mut f: impl FnMut() -> T) -> Duration {
    median(
        (0..runs)
            .map(|_| {
                let t = Instant::now();
                std::hint::black_box(f());
                t.elapsed()
            })
            .collect(),
    )
}

fn randoms(n: usize) -> Vec<f32> {
    let mut s = 0x9E37_79B9_7F4A_7C15u64;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            // Sum of two uniforms: a cheap bell shape around 0.
            let a = (s >> 40) as f32 / (1u64 << 24) as f32;
            let b = ((s >> 16) & 0xFF_FFFF) as f32 / (1u64 << 24) as f32;
            (a + b - 1.0) * 0.1
        })
        .collect()
}

/// A Laya-like file: 50,000-token vocabulary, 20 keys, 64 F16 tensors of rows x 768.
fn model(rows: u64, x: &[f32]) -> GgufWriter {
    let mut w = GgufWriter::new();
    w.add_kv("general.architecture", "modern-bert");
    for i in 0..20u32 {
        w.add_kv(format!("modern-bert.key.{i}"), i);
    }
    w.add_kv(
        "tokenizer.ggml.tokens",
        Value::string_array((0..50_000).map(|i| format!("tok{i}"))),
    );
    w.add_kv(
        "tokenizer.ggml.token_type",
        Value::i32_array(vec![1; 50_000]),
    );
    let n = (rows * 768) as usize;
    for t in 0..64 {
        w.add_tensor_f32(
            format!("blk.{t}.w"),
            vec![768, rows],
            GgmlType::F16,
            &x[..n],
        )
        .unwrap();
    }
    w
}

fn main() {
    let dir = tempfile::tempdir().unwrap();
    let x = randoms(1 << 24); // 16 Mi values, 64 MiB of f32
    let mb = |bytes: usize, d: Duration| bytes as f64 / 1e6 / d.as_secs_f64();

    let big = model(1024, &x);
    let small = model(96, &x);
    let big_path = dir.path().join("big.gguf");
    let small_path = dir.path().join("small.gguf");
    let big_size = big.file_size().unwrap() as usize;
    let d = time(5, || big.write_file(&big_path).unwrap());
    println!("file_bytes_big {big_size} bytes");
    println!(
        "write_file_big {:.0} MB/s (median of 5, {:.1} ms, incl. fsync)",
        mb(big_size, d),
        d.as_secs_f64() * 1e3
    );
    let d = time(5, || big.to_bytes().unwrap());
    println!("to_bytes_big {:.0} MB/s (median of 5)", mb(big_size, d));
    small.write_file(&small_path).unwrap();
    println!("file_bytes_small {} bytes", small.file_size().unwrap());
    for (name, p) in [("big", &big_path), ("small", &small_path)] {
        let d = time(50, || {
            let m = GgufMmap::open(p).unwrap();
            let f = m.parse().unwrap();
            f.tensors.len() + f.metadata.len()
        });
        println!("open_parse_{name} {:.3} ms (mmap + header + 64 descriptors + 50k-token vocab, median of 50)", d.as_secs_f64() * 1e3);
    }
    // Header-only cost without the vocabulary: 64 descriptors and 20 keys.
    let mut lean = GgufWriter::new();
    for t in 0..64 {
        lean.add_tensor_f32(
            format!("blk.{t}.w"),
            vec![768, 1024],
            GgmlType::F16,
            &x[..768 * 1024],
        )
        .unwrap();
    }
    let lean_path = dir.path().join("lean.gguf");
    lean.write_file(&lean_path).unwrap();
    let d = time(200, || {
        let m = GgufMmap::open(&lean_path).unwrap();
        m.parse().unwrap().tensors.len()
    });
    println!(
        "open_parse_no_vocab {:.1} us (100 MB file, 64 descriptors, median of 200)",
        d.as_secs_f64() * 1e6
    );

    let in_bytes = x.len() * 4;
    let d = time(5, || encode(GgmlType::F16, &x, 1024).unwrap());
    println!(
        "f32_to_f16_encode {:.0} MB/s of f32 input (16 Mi values, median of 5)",
        mb(in_bytes, d)
    );
    let mut out16 = vec![0u16; x.len()];
    let d = time(5, || {
        for (o, &v) in out16.iter_mut().zip(&x) {
            *o = f32_to_f16(v);
        }
    });
    println!(
        "f32_to_f16_into {:.0} MB/s of f32 input (preallocated output)",
        mb(in_bytes, d)
    );
    let mut q = vec![0u8; x.len() / QK8_0 * Q8_0_BLOCK_BYTES];
    let d = time(5, || quantize_q8_0_into(&x, &mut q).unwrap());
    println!(
        "q8_0_quantize_into {:.0} MB/s of f32 input (16 Mi values, median of 5)",
        mb(in_bytes, d)
    );
    let d = time(5, || encode(GgmlType::Q8_0, &x, 1024).unwrap());
    println!("q8_0_encode {:.0} MB/s of f32 input", mb(in_bytes, d));
}
