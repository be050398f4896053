#!/bin/sh
# The int8 timing table of bench/results/int8.md: s1-pico, s1-nano, s1-micro x {F16 file f32
# compute, --q8, --q8-fast, calibrated Q8_0 file}, per-question microseconds, best median of 3
# rounds, one question per frame. Usage: bench/int8-table.sh [SKYCTL] [OUTDIR]
set -eu
SKYCTL=${1:-${CARGO_TARGET_DIR:-target}/release/skyctl}
OUT=${2:-$(mktemp -d)}
for m in s1-pico s1-nano s1-micro; do
  case $m in s1-micro) iters=300 ;; *) iters=1000 ;; esac
  "$SKYCTL" convert "models/$m" "$OUT/$m.f16.gguf" >/dev/null
  "$SKYCTL" convert --type q8_0 "models/$m" "$OUT/$m.plain-q8_0.gguf" >/dev/null
  "$SKYCTL" quantize "models/$m" "$OUT/$m.q8_0.gguf" 2>/dev/null
  for flags in "" "--q8" "--q8-fast"; do
    # shellcheck disable=SC2086
    "$SKYCTL" bench "$OUT/$m.f16.gguf" $flags --questions 1 --iters $iters --rounds 3 2>/dev/null
  done
  "$SKYCTL" bench "$OUT/$m.q8_0.gguf" --questions 1 --iters $iters --rounds 3
done
ls -l "$OUT"/*.gguf
