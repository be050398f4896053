#!/usr/bin/env bash
# Every instruction-set level of this CPU, an older skyctl on its default path, and Laya's
# PyTorch eager and ONNX Runtime, in the same rounds so that all see the same machine. Each
# round runs, one after another:
#   1. bench/isa_paths.sh NEW_SKYCTL OLD_SKYCTL 1 ITERS: `skyctl bench` (built-in questions),
#      f32 / q8 / q8-fast, every SKYCTL_ISA level, the old binary beside the best level;
#   2. the infer bench `--paired` (golden cases, f32 / q8 / q8-fast back to back, thread CPU)
#      on avx512 (where present) and avx2, s1-nano and s1-micro;
#   3. bench/torch_compare.py --threads 1 on s1-nano and s1-micro (golden cases, forward).
# Then the medians over the rounds.
# Usage: bench/isa_rounds.sh NEW_SKYCTL OLD_SKYCTL PYTHON [ROUNDS] [ITERS]
#   PYTHON: a Python with torch, onnxruntime and laya (see bench/torch_compare.py).
#   The infer bench binary is built with `cargo bench -p sky-infer --bench infer --no-run`.
set -euo pipefail
cd "$(dirname "$0")/.."
new="$1"
old="$2"
python="$3"
rounds="${4:-4}"
iters="${5:-150}"
infer=$(cargo bench -p sky-infer --bench infer --no-run --message-format=json 2>/dev/null |
  python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "infer" and m.get("executable"):
        print(m["executable"])')
levels=$(for l in avx512 avx2; do
  SKYCTL_ISA=$l "$new" bench models/s1-pico --iters 1 --rounds 1 --json >/dev/null 2>&1 && echo "$l"
done)
out=$(mktemp)
{
  echo "# $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores, $(date -u '+%F %H:%M') UTC, $(git rev-parse --short HEAD)"
  for r in $(seq "$rounds"); do
    echo "## round $r $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
    bash bench/isa_paths.sh "$new" "$old" 1 "$iters"
    for l in $levels; do
      echo "### paired $l"
      SKYCTL_ISA=$l "$infer" s1-nano --iters 123 --paired
      SKYCTL_ISA=$l "$infer" s1-micro --iters 41 --paired
    done
    echo "### ort"
    "$python" bench/torch_compare.py --iters 200 --threads 1 models/s1-nano models/s1-micro 2>&1 |
      grep -v WARNING
  done
  echo "# end $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee "$out"
python3 - "$out" <<'PY'
import collections, re, statistics, sys

med = statistics.median
text = open(sys.argv[1]).read()
sky = collections.defaultdict(list)
paired = collections.defaultdict(list)
ort = collections.defaultdict(list)
for block in text.split("## round ")[1:]:
    part = None
    for line in block.splitlines():
        f = line.split("\t")
        if len(f) == 6 and f[0] == "1":
            sky[(f[1], f[2], f[3], f[4])].append(float(f[5]))
            continue
        if line.startswith("### "):
            part = line[4:]
            continue
        m = re.match(r"\| (s1-\w+) \| (f32|q8|q8-fast) \| ([\d.]+) \| ([\d.]+)", line)
        if m and part and part.startswith("paired"):
            paired[(part.split()[1], m[1], m[2])].append((float(m[3]), float(m[4])))
        m = re.match(r"\| (s1-\w+) \| (\d+) \| (\d+) \(\d+ cases\) \| (\d+) \| (\d+) \|", line)
        if m and part == "ort":
            ort[m[1]].append([int(m[i]) for i in (2, 3, 4, 5)])
print("# skyctl bench, µs per question: median (lowest) of the rounds; f32 ÷ mode per round, median [low, high]")
for (binary, level, model, path), v in sorted(sky.items()):
    line = f"{binary}\t{level}\t{model}\t{path}\t{med(v):.0f} ({min(v):.0f})"
    f32 = sky.get((binary, level, model, "f32"))
    if path != "f32" and f32 and len(f32) == len(v):
        r = [a / b for a, b in zip(f32, v)]
        line += f"\t{med(r):.2f} [{min(r):.2f}, {max(r):.2f}]"
    print(line)
print("# infer bench --paired: median over rounds of (median of case medians µs, f32 ÷ mode)")
for (level, model, mode), v in sorted(paired.items()):
    r = [x for _, x in v]
    print(f"{level}\t{model}\t{mode}\t{med([a for a, _ in v]):.0f}\t{med(r):.3f} [{min(r):.3f}, {max(r):.3f}]")
print("# torch_compare: median over rounds of eager forward, eager predict, ORT f32, ORT int8 (µs)")
for model, v in ort.items():
    print(model, *[f"{med([x[i] for x in v]):.0f}" for i in range(4)], sep="\t")
PY
