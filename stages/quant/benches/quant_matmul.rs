//! int8 matmul throughput for s1-micro-like and s1-pico-like shapes, every available kernel path.
//!
//! `cargo bench -p sky-quant --bench quant_matmul` prints a Markdown table: µs per
//! call and the GFLOP/s-equivalent (2·n·k·rows / time) of the naive f32 reference, and of
//! `Q8Matrix::matmul` with Q8 and Q8x2 activations on each kernel path this CPU has. Wall
//! times (median, min) and the median on-CPU time of the thread, which discounts time given to
//! other processes on a shared machine; GFLOP/s-eq uses the CPU time. Samples: `QUANT_BENCH_SAMPLES` (default 21) timed calls after a warm-up.
#![allow(clippy::print_stdout)]

use std::hint::black_box;
use std::time::Instant;

use sky_quant::{matmul_f32_ref, quantize_q8_exact_cols, ActQuant, KernelPath, Q8Matrix, Scratch};

fn data(len: usize, seed: u64, scale: f32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0) * scale
        })
        .collect()
}

/// Nanoseconds this thread has run on a CPU (`CLOCK_THREAD_CPUTIME_ID`), so that time the
/// scheduler gave to other processes on a shared machine is not counted.
#[cfg(target_os = "linux")]
fn cpu_ns() -> Option<u64> {
    #[repr(C)]
    struct Timespec {
        tv_sec: i64,
        tv_nsec: i64,
    }
    extern "C" {
        fn clock_gettime(clock: i32, ts: *mut Timespec) -> i32;
    }
    const CLOCK_THREAD_CPUTIME_ID: i32 = 3;
    let mut ts = Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime is libc's (linked by std on Linux); `ts` is a valid, writable
    // timespec with the x86_64/aarch64 Linux layout (two 64-bit fields).
    let rc = unsafe { clock_gettime(CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    (rc == 0).then(|| ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
}

#[cfg(not(target_os = "linux"))]
fn cpu_ns() -> Option<u64> {
    None
}

/// Per-call timings over `samples` calls after a warm-up, in microseconds: (median wall,
/// minimum wall, median on-CPU time; NaN where schedstat is missing).
fn median_us(samples: usize, mut f: impl FnMut()) -> (f64, f64, f64) {
    for _ in 0..3 {
        f();
    }
    let mut wall = Vec::with_capacity(samples);
    let mut cpu = Vec::with_capacity(samples);
    for _ in 0..samples {
        let c0 = cpu_ns();
        let start = Instant::now();
        f();
        wall.push(start.elapsed().as_secs_f64() * 1e6);
        let c1 = cpu_ns();
        cpu.push(match (c0, c1) {
            (Some(a), Some(b)) => (b - a) as f64 / 1e3,
            _ => f64::NAN,
        });
    }
    wall.sort_by(f64::total_cmp);
    cpu.sort_by(f64::total_cmp);
    (wall[wall.len() / 2], wall[0], cpu[cpu.len() / 2])
}

fn main() {
    let samples: usize = std::env::var("QUANT_BENCH_SAMPLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(21);
    // QUANT_BENCH_PATHS=scalar,avx2 restricts the kernel paths measured.
    let only = std::env::var("QUANT_BENCH_PATHS").ok();
    let paths: Vec<KernelPath> = KernelPath::available()
        .into_iter()
        .filter(|p| {
            only.as_deref()
                .is_none_or(|o| o.split(',').any(|n| n == p.name()))
        })
        .collect();
    println!(
        "kernel paths available: {}; samples per cell: {samples}\n",
        paths
            .iter()
            .map(|p| p.name())
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!(
        "| shape (n x k -> rows) | variant | path | median µs | min µs | CPU µs (median) | GFLOP/s-eq (CPU) |"
    );
    println!("|---|---|---|---:|---:|---:|---:|");
    // s1-micro's shapes, then s1-pico's (k = 64 and 128: two and four blocks a row, where
    // the activation quantizer and the outlier terms weigh the most), then every matrix of
    // s1-nano's layers at a median question's 121 tokens (Wqkv, Wo, Wi, the MLP's Wo).
    for (n, k, rows) in [
        (64usize, 256usize, 768usize),
        (64, 512, 256),
        (118, 64, 192),
        (118, 128, 64),
        (121, 128, 384),
        (121, 128, 128),
        (121, 128, 512),
        (121, 256, 128),
    ] {
        let shape = format!("{n} x {k} -> {rows}");
        // QUANT_BENCH_SHAPES="118 x 64" keeps the shapes whose name contains one of the
        // comma-separated parts.
        if let Ok(keep) = std::env::var("QUANT_BENCH_SHAPES") {
            if !keep.split(',').any(|s| shape.contains(s.trim())) {
                continue;
            }
        }
        let flops = 2.0 * (n * k * rows) as f64;
        let x = data(n * k, 1, 1.0);
        let w = data(rows * k, 2, 0.05);
        // Four outlier channels, like encoder.1 of s1-pico.
        let outliers = [9u32, 32, 45, 49];
        let mut out = vec![0f32; n * rows];
        let (us, min, cpu) = median_us(samples, || {
            matmul_f32_ref(black_box(&x), &w, n, k, rows, &mut out);
            black_box(&out);
        });
        println!(
            "| {shape} | f32 naive reference | - | {us:.1} | {min:.1} | {cpu:.1} | {:.2} |",
            flops / cpu / 1e3
        );
        for outl in [&outliers[..], &[]] {
            let m = Q8Matrix::quantize(&w, rows, k, outl).expect("valid shapes");
            for &path in &paths {
                let mut scratch = Scratch::with_path(path).expect("path is available");
                for mode in [ActQuant::Q8, ActQuant::Q8x2] {
                    let (us, min, cpu) = median_us(samples, || {
                        m.matmul(black_box(&x), n, &mut out, mode, &mut scratch)
                            .expect("valid shapes");
                        black_box(&out);
                    });
                    println!(
                        "| {shape} | {mode:?}, {} outliers | {path} | {us:.1} | {min:.1} | {cpu:.1} | {:.2} |",
                        outl.len(),
                        flops / cpu / 1e3
                    );
                }
            }
        }
        let (us, min, cpu) = median_us(samples.min(5), || {
            black_box(quantize_q8_exact_cols(&w, rows, k, &outliers).expect("valid"));
        });
        println!("| {rows} x {k} weights | quantize_q8_exact_cols (4 outlier cols) | scalar | {us:.1} | {min:.1} | {cpu:.1} | - |");
    }
}
