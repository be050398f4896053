#!/usr/bin/env bash
# `skyctl tune` on s1-pico, s1-nano and s1-micro at tolerances 1e-3, 1e-2 and 3e-2 (default
# margin 0.5): tuned on golden/laya/tune.jsonl (twins of the golden cases), golden/laya/cases.jsonl
# held out. Prints one Markdown row per run: sizes against F16 and uniform Q8_0, the errors, the
# three costliest tensors and the search time (wall clock of the whole command).
#
#   bash bench/tune.sh            # needs `cargo build --release -p skyctl` and `skyctl build`
#                                 # (it uses build/<model>/calibration.json)
set -euo pipefail
cd "$(dirname "$0")/.."
SKYCTL=${SKYCTL:-target/release/skyctl}
OUT=${OUT:-target/bench-tune}
MARGIN=${MARGIN:-0.5}
mkdir -p "$OUT"
echo "| model | tolerance | tuned bytes | vs F16 | vs uniform Q8_0 | error (tuned cases) | error (held out) | costliest tensors | search s |"
echo "|---|---:|---:|---:|---:|---:|---:|---|---:|"
for m in s1-pico s1-nano s1-micro; do
  for t in 0.001 0.01 0.03; do
    start=$(date +%s.%N)
    "$SKYCTL" tune "models/$m" --cases golden/laya/tune.jsonl --holdout golden/laya/cases.jsonl \
      --tolerance "$t" --margin "$MARGIN" --calibration "build/$m/calibration.json" \
      --out "$OUT/$m-$t.toml" --report "$OUT/$m-$t.json" > "$OUT/$m-$t.txt"
    end=$(date +%s.%N)
    python3 - "$OUT/$m-$t.json" "$m" "$t" "$start" "$end" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
m, t, start, end = sys.argv[2], sys.argv[3], float(sys.argv[4]), float(sys.argv[5])
u = {x["type"]: x for x in r["uniform"]}
f16, q8 = u["f16"]["bytes"], u["q8_0"]["bytes"]
cost = ", ".join(f"`{c['tensor']}` {c['error_alone']:.1e}" for c in r["costliest"])
print(f"| {m} | {t} | {r['bytes']:,} | {r['bytes']/f16:.3f} | {r['bytes']/q8:.3f} | "
      f"{r['error']:.2e} | {r['holdout_error']:.2e} | {cost} | {end-start:.1f} |")
PY
  done
done
