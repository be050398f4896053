#!/usr/bin/env bash
# Two skyctl binaries on this CPU's default path, `skyctl bench` (built-in questions, one
# thread) of s1-micro and s1-nano, f32 / q8 / q8-fast: each pair run back to back, the order
# flipped every round so that neither binary always runs second. Prints per model and path the
# median of NEW ÷ OLD over the rounds, its range, and the ratio of the two binaries' fastest
# rounds.
# Usage: bench/ab_default_path.sh NEW_SKYCTL OLD_SKYCTL [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
new="$1"
old="$2"
rounds="${3:-10}"
us() {
  "$1" bench "models/$2" $3 --iters "$4" --rounds 1 --json 2>/dev/null |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["us_per_question"])'
}
out=$(mktemp)
echo "# $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores, $(date -u '+%F %H:%M') UTC; load $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq "$rounds"); do
  for m in s1-micro s1-nano; do
    iters=100
    [ "$m" = s1-nano ] && iters=400
    for p in "" --q8 --q8-fast; do
      if [ $((r % 2)) = 0 ]; then
        a=$(us "$new" "$m" "$p" "$iters")
        b=$(us "$old" "$m" "$p" "$iters")
      else
        b=$(us "$old" "$m" "$p" "$iters")
        a=$(us "$new" "$m" "$p" "$iters")
      fi
      printf '%s\t%s\t%s\t%s\t%s\n' "$r" "$m" "${p:-f32}" "$a" "$b" | tee -a "$out"
    done
  done
done
python3 - "$out" <<'PY'
import collections, statistics, sys

runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    _, model, path, a, b = line.split("\t")
    runs[(model, path)].append((float(a), float(b)))
print("# model, path, new median µs, old median µs, new ÷ old (median [low, high]), fastest new ÷ fastest old")
for (model, path), v in runs.items():
    r = sorted(a / b for a, b in v)
    fastest = min(a for a, _ in v) / min(b for _, b in v)
    print(model, path, f"{statistics.median([a for a, _ in v]):.0f}", f"{statistics.median([b for _, b in v]):.0f}",
          f"{statistics.median(r):.3f} [{r[0]:.3f}, {r[-1]:.3f}]", f"{fastest:.3f}", sep="\t")
PY
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
