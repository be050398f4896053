//! Encode throughput, one thread: `cargo bench -p sky-tokenizer --bench encode`.
//!
//! Encodes every text of `tests/corpus.jsonl` (one `encode` call per text, as the engine does
//! per question) with each shipped tokenizer, and reports the median of several passes in MB/s
//! of UTF-8 input. No timing is asserted.
#![allow(clippy::print_stdout)] // a benchmark's output is its report

use std::hint::black_box;
use std::path::Path;
use std::time::Instant;

use sky_tokenizer::Tokenizer;

fn read(rel: &str) -> String {
    let path = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// Nanoseconds this thread has spent on a CPU (Linux `schedstat`), so that time the shared
/// machine gives to other processes does not count against us; `None` elsewhere.
fn thread_cpu_ns() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    s.split_whitespace().next()?.parse().ok()
}

struct Rates {
    wall: f64,
    cpu: Option<f64>,
    ids: usize,
}

/// Median MB/s over `passes` passes, by wall clock and by thread CPU time. A pass repeats the
/// texts for at least 0.2 s so the CPU clock (updated at scheduler ticks) has something to see.
fn median_mb_s(tok: &Tokenizer, texts: &[String], passes: usize) -> Rates {
    let bytes: usize = texts.iter().map(String::len).sum();
    let ids = texts.iter().map(|t| tok.encode(t).len()).sum();
    let mut wall = Vec::with_capacity(passes);
    let mut cpu = Vec::with_capacity(passes);
    for _ in 0..passes {
        let cpu_start = thread_cpu_ns();
        let start = Instant::now();
        let mut done = 0usize;
        while start.elapsed().as_secs_f64() < 0.2 {
            for t in texts {
                black_box(tok.encode(black_box(t)));
            }
            done += bytes;
        }
        wall.push(done as f64 / start.elapsed().as_secs_f64() / 1e6);
        if let (Some(a), Some(b)) = (cpu_start, thread_cpu_ns()) {
            if b > a {
                cpu.push(done as f64 / ((b - a) as f64 * 1e-9) / 1e6);
            }
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied()
    };
    Rates {
        wall: median(&mut wall).unwrap_or(0.0),
        cpu: median(&mut cpu),
        ids,
    }
}

fn show(r: &Rates) -> String {
    match r.cpu {
        Some(cpu) => format!("{:.1} MB/s wall, {cpu:.1} MB/s per CPU-second", r.wall),
        None => format!("{:.1} MB/s wall", r.wall),
    }
}

fn main() {
    let corpus: Vec<String> = read("stages/tokenizer/tests/corpus.jsonl")
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("corpus: {e}")))
        .collect();
    let english: Vec<String> = corpus
        .iter()
        .filter(|t| t.is_ascii() && t.len() > 20 && !t.contains('[') && !t.contains('{'))
        .cloned()
        .collect();
    let bytes: usize = corpus.iter().map(String::len).sum();
    println!(
        "corpus: {} texts, {} bytes; ASCII-prose subset: {} texts",
        corpus.len(),
        bytes,
        english.len()
    );
    for rel in [
        "models/s1-pico/tokenizer/tokenizer.json",
        "fixtures/laya-ref/tokenizers/bpe2048/tokenizer.json",
        "fixtures/laya-ref/tokenizers/bpe4096/tokenizer.json",
    ] {
        let start = Instant::now();
        let tok = Tokenizer::from_json(&read(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"));
        let load_ms = start.elapsed().as_secs_f64() * 1e3;
        let all = median_mb_s(&tok, &corpus, 11);
        let prose = median_mb_s(&tok, &english, 11);
        println!(
            "{rel}: load {load_ms:.2} ms\n  corpus: {} ({} ids, {:.2} bytes/id)\n  ASCII prose: {}",
            show(&all),
            all.ids,
            bytes as f64 / all.ids as f64,
            show(&prose)
        );
    }
}
