#!/usr/bin/env bash
# Kernel-golden timings: `skyctl golden gen` (whole set), `skyctl kernels run --impl cpu`,
# `skyctl golden check` (text and --json). Prints the median of N runs of each (default 11).
#   bash bench/kernels.sh [N]
# Uses $SKYCTL if set, else builds the release binary (into $CARGO_TARGET_DIR if set).
set -euo pipefail
cd "$(dirname "$0")/.."
N="${1:-11}"
if [ -z "${SKYCTL:-}" ]; then
  cargo build --release -q -p skyctl
  SKYCTL="${CARGO_TARGET_DIR:-target}/release/skyctl"
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

median_ms() { # median wall time in ms of N runs of "$@" (stdout discarded)
  local times=()
  for _ in $(seq "$N"); do
    local t0 t1
    t0=$(date +%s%N)
    "$@" >/dev/null || [ $? -eq 1 ]
    t1=$(date +%s%N)
    times+=($(( (t1 - t0) / 1000 )))
  done
  printf '%s\n' "${times[@]}" | sort -n | awk '{a[NR]=$1} END {printf "%.1f", a[int((NR+1)/2)]/1000}'
}

"$SKYCTL" golden gen "$work/g" >/dev/null
"$SKYCTL" kernels run --impl cpu "$work/g" "$work/o" >/dev/null
echo "machine: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) cores; $(date -u +%F)"
echo "runs per median: $N"
echo "golden gen (40 files, $(du -sb "$work/g" | cut -f1) bytes): $(median_ms "$SKYCTL" golden gen "$work/g2") ms"
echo "kernels run --impl cpu:                 $(median_ms "$SKYCTL" kernels run --impl cpu "$work/g" "$work/o2") ms"
echo "golden check (19 outputs):              $(median_ms "$SKYCTL" golden check "$work/g" "$work/o") ms"
echo "golden check --json:                    $(median_ms "$SKYCTL" golden check "$work/g" "$work/o" --json) ms"
echo "max abs error, CPU harness vs goldens:  $("$SKYCTL" golden check "$work/g" "$work/o" --json \
  | python3 -c 'import json,sys; print(max(f["max_abs_err"] for f in json.load(sys.stdin)["files"]))')"
