#!/usr/bin/env bash
# Per-question latency of sky-infer (one thread, F16 GGUF of each model, >= 1,000 questions
# from the golden cases), then the full golden suites in release on every path.
# Usage: bench/infer.sh [ITERS]   (results: paste into bench/results/infer.md)
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target/infer}"
iters="${1:-1000}"
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; load: $(cut -d' ' -f1-3 /proc/loadavg); $(date -u +%F)"
cargo bench -p sky-infer --bench infer -- --iters "$iters"
cargo bench -p sky-infer --bench infer -- --iters "$iters" --avx2 s1-nano
cargo bench -p sky-infer --bench infer -- --iters "$((iters / 4))" --scalar s1-nano
