#!/usr/bin/env bash
# Every shipped model golden suite (golden/laya) on every f32 path (Laya dir, F32 GGUF,
# F16 GGUF), every case, in release; prints max |Δp| against the f32 and f64 goldens.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target/infer}"
SKY_GOLDEN_FULL=1 cargo test --release -p sky-infer --test golden_paths -- --nocapture --test-threads 1 2>&1 \
  | grep -E 'cases|test result'
