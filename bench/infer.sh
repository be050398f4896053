#!/usr/bin/env bash
# Per-question latency of sky-infer (one thread, F16 GGUF of each model, >= 1,000 questions
# from the golden cases) on every compute path, the f32 FMA ceiling of this core, and, when a
# Python with torch + onnxruntime + laya is given, Laya's own PyTorch eager and ONNX Runtime
# on the same checkpoints and questions.
# Usage: bench/infer.sh [ITERS] [PYTHON]   (results: bench/results/infer.md)
#   PYTHON: e.g. /tmp/tv/bin/python after
#   python3 -m venv /tmp/tv && /tmp/tv/bin/pip install laya==0.4.15 torch transformers \
#       safetensors onnxruntime onnx onnxscript numpy
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target/infer}"
iters="${1:-1000}"
python="${2:-}"
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; load: $(cut -d' ' -f1-3 /proc/loadavg); $(date -u +%F)"
cargo bench -p sky-infer --bench infer -- gemm
cargo bench -p sky-infer --bench infer -- --iters "$iters"
cargo bench -p sky-infer --bench infer -- --iters "$iters" --q8 | tail -3
cargo bench -p sky-infer --bench infer -- --iters "$iters" --q8-fast | tail -3
cargo bench -p sky-infer --bench infer -- --iters "$iters" --avx2 s1-nano | tail -1
cargo bench -p sky-infer --bench infer -- --iters "$((iters / 4))" --scalar s1-nano | tail -1
if [ -n "$python" ]; then
  "$python" bench/torch_compare.py --iters "$iters"
fi
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
