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

# "<wall> ms wall, <user+sys> ms cpu": medians over N runs of "$@" (stdout discarded; exit 1
# allowed, as `golden check` answers "no" with it). CPU time is reported too because on a
# shared, loaded machine wall time mostly measures the scheduler.
median_ms() {
  local walls=() cpus=() line
  for _ in $(seq "$N"); do
    line=$( { TIMEFORMAT='%3R %3U %3S'; time "$@" >/dev/null 2>&1 || [ $? -eq 1 ]; } 2>&1 )
    walls+=("$(echo "$line" | awk '{print $1 * 1000}')")
    cpus+=("$(echo "$line" | awk '{print ($2 + $3) * 1000}')")
  done
  local mw mc
  mw=$(printf '%s\n' "${walls[@]}" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
  mc=$(printf '%s\n' "${cpus[@]}" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
  echo "${mw} ms wall, ${mc} ms cpu"
}

"$SKYCTL" golden gen "$work/g" >/dev/null
"$SKYCTL" kernels run --impl cpu "$work/g" "$work/o" >/dev/null
echo "load average: $(cut -d" " -f1-3 /proc/loadavg)"
echo "machine: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) cores; $(date -u +%F)"
echo "runs per median: $N"
echo "golden gen (40 files, $(cat "$work"/g/*.bin | wc -c) bytes): $(median_ms "$SKYCTL" golden gen "$work/g2")"
echo "kernels run --impl cpu:                 $(median_ms "$SKYCTL" kernels run --impl cpu "$work/g" "$work/o2")"
echo "golden check (19 outputs):              $(median_ms "$SKYCTL" golden check "$work/g" "$work/o")"
echo "golden check --json:                    $(median_ms "$SKYCTL" golden check "$work/g" "$work/o" --json)"
echo "max abs error, CPU harness vs goldens:  $("$SKYCTL" golden check "$work/g" "$work/o" --json \
  | python3 -c 'import json,sys; print(max(f["max_abs_err"] for f in json.load(sys.stdin)["files"]))')"
