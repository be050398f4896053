#!/usr/bin/env bash
# Pipeline engine benchmark: skyctl vs GNU make, ninja and dvc on the same synthetic graphs
# (bench/pipeline_gen.py): cold build, no-op build, one-leaf-changed build.
#
#   bash bench/pipeline.sh   # hyperfine JSON in $OUT (default /tmp/skyctl-pipeline-bench/raw), table on stdout
#
# Needs: a release skyctl (SKYCTL=path, default target/release/skyctl), hyperfine and ninja
# (apt-get install hyperfine ninja-build), optionally dvc in /tmp/dvcvenv
# (python3 -m venv /tmp/dvcvenv && /tmp/dvcvenv/bin/pip install dvc), never the repo .venv.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
SKYCTL=${SKYCTL:-$REPO/target/release/skyctl}
DVC=${DVC:-/tmp/dvcvenv/bin/dvc}
RUNS=${RUNS:-10}
TOOLS=${TOOLS:-"skyctl make ninja dvc"}
# dvc repro on the 500-stage graph needed over 20 minutes for one cold run here: model30 only
# unless asked.
DVC_SHAPES=${DVC_SHAPES:-model30}
OUT=${OUT:-/tmp/skyctl-pipeline-bench/raw}
WORK=${WORK:-/tmp/skyctl-pipeline-bench}
mkdir -p "$OUT"
command -v hyperfine >/dev/null || { echo "hyperfine missing: apt-get install hyperfine" >&2; exit 2; }
command -v ninja >/dev/null || { echo "ninja missing: apt-get install ninja-build" >&2; exit 2; }
[ -x "$SKYCTL" ] || { echo "no skyctl at $SKYCTL (cargo build --release -p skyctl)" >&2; exit 2; }

leaf_change='date +%s%N > in/leaf.txt'

bench_tool() { # shape tool clean-command build-command [runs]
  local shape=$1 tool=$2 clean=$3 build=$4 RUNS=${5:-$RUNS}
  case " $TOOLS " in *" $tool "*) ;; *) return 0;; esac
  local dir=$WORK/$shape
  cd "$dir"
  # Cold: everything (outputs and caches) removed before each run.
  hyperfine -N --runs "$RUNS" --prepare "bash -c '$clean'" --export-json "$OUT/$shape-$tool-cold.json" "$build" >/dev/null
  bash -c "$build" >/dev/null 2>&1
  # No-op: nothing changed since the last build.
  hyperfine -N --warmup 3 --runs $((RUNS * 3)) --export-json "$OUT/$shape-$tool-noop.json" "$build" >/dev/null
  # One leaf changed: the input of one node without dependents changes before each run.
  hyperfine -N --runs "$RUNS" --prepare "bash -c '$leaf_change'" --export-json "$OUT/$shape-$tool-leaf.json" "$build" >/dev/null
  cd "$REPO"
}

for shape in model30 wide500; do
  dir=$WORK/$shape
  if [ ! -f "$dir/pipeline.toml" ]; then
    mkdir -p "$dir"
    python3 bench/pipeline_gen.py "$dir" "$shape"
    (cd "$dir" && git init -q . && git config user.email b@b && git config user.name b && git add -A >/dev/null && git commit -qm init)
  fi
  bench_tool "$shape" skyctl "rm -rf out .skyctl site" "$SKYCTL build -j 2"
  bench_tool "$shape" make "rm -rf out" "make -s -j2 -f Makefile"
  bench_tool "$shape" ninja "rm -rf out .ninja_log .ninja_deps" "ninja -j2 --quiet"
  if [ -x "$DVC" ] && [[ " $DVC_SHAPES " == *" $shape "* ]] && [[ " $TOOLS " == *" dvc "* ]]; then
    (cd "$dir" && "$DVC" init -q 2>/dev/null || true; "$DVC" config core.autostage false; "$DVC" config core.analytics false)
    bench_tool "$shape" dvc "rm -rf out .dvc/cache .dvc/tmp dvc.lock" "$DVC repro -q" "${DVC_RUNS:-3}"
  fi
done
python3 bench/pipeline_report.py "$OUT" "$SKYCTL"
