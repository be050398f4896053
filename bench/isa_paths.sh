#!/usr/bin/env bash
# Per-question latency of every compute path (f32, q8, q8-fast) on every instruction-set level
# this CPU has (SKYCTL_ISA), s1-nano and s1-micro, one thread, and optionally the same against
# another skyctl binary (an older main) on its default path: `skyctl bench --json`, the runs
# alternated (level by level, path by path, old and new in turn) so that all see the same load.
# Usage: bench/isa_paths.sh NEW_SKYCTL [OLD_SKYCTL] [ROUNDS] [ITERS]
# Prints one TSV line per run: round, binary, level, model, path, us_per_question; then the
# median over rounds of each (binary, level, model, path).
set -euo pipefail
cd "$(dirname "$0")/.."
new="$1"
old="${2:-}"
rounds="${3:-5}"
iters="${4:-200}"
echo "# machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; load: $(cut -d' ' -f1-3 /proc/loadavg); $(date -u '+%F %H:%M') UTC"
levels=$(for l in avx512 avx-vnni avx2 scalar; do SKYCTL_ISA=$l "$new" bench models/s1-pico --iters 1 --rounds 1 --json >/dev/null 2>&1 && echo "$l"; done)
run() { # binary label level model flag
  local us
  us=$(SKYCTL_ISA="$3" "$1" bench "models/$4" $5 --iters "$iters" --rounds 1 --json 2>/dev/null |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["us_per_question"])')
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$r" "$2" "$3" "$4" "${5:-f32}" "$us"
}
out=$(mktemp)
for r in $(seq "$rounds"); do
  for m in s1-nano s1-micro; do
    for flag in "" --q8 --q8-fast; do
      for l in $levels; do
        [ "$l" = scalar ] && [ "$m" = s1-micro ] && continue
        run "$new" new "$l" "$m" "$flag" | tee -a "$out"
        # The old binary knows no SKYCTL_ISA: it runs its default (best) path.
        if [ -n "$old" ] && [ "$l" = "$(echo "$levels" | head -1)" ]; then
          run "$old" old "$l" "$m" "$flag" | tee -a "$out"
        fi
      done
    done
  done
done
echo "# medians over $rounds rounds (us per question)"
python3 - "$out" <<'PY'
import sys, statistics, collections
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    _, binary, level, model, path, us = line.split("\t")
    runs[(binary, level, model, path)].append(float(us))
for k in sorted(runs):
    print("\t".join(k), f"{statistics.median(runs[k]):.1f}", sep="\t")
PY
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
