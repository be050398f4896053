#!/usr/bin/env bash
# GGUF benchmarks: the Rust figures (stages/gguf/benches/gguf.rs, release build, one
# thread) and the gguf-py / numpy reference on the same amount of data.
#   bash bench/gguf.sh            (CARGO_TARGET_DIR and PYTHON may be set)
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-.venv/bin/python}"
echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores"
cargo bench -q -p sky-gguf --bench gguf
"$PYTHON" bench/gguf_quant_py.py
