#!/usr/bin/env bash
# int8 matmul benchmark of sky-quant (every kernel path this CPU has), printed as Markdown.
# Usage: bench/quant.sh [samples]   (default 31; results go to bench/results/quant.md by hand)
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target/sky-quant}"
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs; load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "date: $(date -u +%Y-%m-%dT%H:%MZ); rustc: $(rustc --version)"
QUANT_BENCH_SAMPLES="${1:-31}" cargo bench -q -p sky-quant --bench quant_matmul
