#!/usr/bin/env bash
# Convert benchmark: `skyctl convert models/s1-micro` at each --type, with one rayon thread
# and with all cores; median wall time and max RSS (/usr/bin/time -v) over RUNS runs, and
# MB/s of tensor data written (output tensor bytes / wall time).
#   bash bench/convert.sh        (CARGO_TARGET_DIR, RUNS and MODEL may be set)
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS="${RUNS:-5}"
MODEL="${MODEL:-models/s1-micro}"
TARGET="${CARGO_TARGET_DIR:-target}"
cargo build -q --release -p skyctl
BIN="$TARGET/release/skyctl"
OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT
echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; $MODEL, median of $RUNS runs"
echo "| --type | threads | wall ms (median) | max RSS MiB (median) | tensor MB | MB/s |"
echo "|---|---|---|---|---|---|"
for ty in f32 f16 bf16 q8_0; do
  for threads in 1 "$(nproc)"; do
    walls=(); rss=(); bytes=0
    for _ in $(seq "$RUNS"); do
      t0=$(date +%s%N)
      line=$(RAYON_NUM_THREADS=$threads /usr/bin/time -f '%M' -o "$OUT/time" \
        "$BIN" convert "$MODEL" "$OUT/m.gguf" --type "$ty")
      t1=$(date +%s%N)
      bytes=$(sed -n 's/.* \([0-9]*\) bytes of tensor data.*/\1/p' <<<"$line")
      walls+=("$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.6f", (b - a) / 1e9 }')")
      rss+=("$(cat "$OUT/time")")
    done
    wall=$(printf '%s\n' "${walls[@]}" | sort -g | sed -n "$(( (RUNS + 1) / 2 ))p")
    kib=$(printf '%s\n' "${rss[@]}" | sort -g | sed -n "$(( (RUNS + 1) / 2 ))p")
    awk -v t="$ty" -v th="$threads" -v w="$wall" -v k="$kib" -v b="$bytes" 'BEGIN {
      printf "| %s | %s | %.0f | %.1f | %.2f | %.0f |\n", t, th, w * 1000, k / 1024, b / 1e6, (w > 0 ? b / 1e6 / w : 0) }'
  done
done
