#!/usr/bin/env bash
# The CUDA kernels on a real GPU, prepared where there is none (a GPU host lent for a few minutes
# has no Rust toolchain, no network and no CUDA 11.8), then run there in one go.
#
#   bash bench/gpu_kernels.sh prepare DIR [SKYCTL]   # here; DIR: a folder git ignores
#   bash bench/gpu_kernels.sh run DIR [LOG]          # on the GPU host
#
# prepare writes into DIR: a stripped copy of SKYCTL (default target/release/skyctl); the
# kernel goldens (`skyctl golden gen`); the compute_37 PTX of stages/cuda/kernels (`skyctl cuda
# compile`, the pinned CUDA 11.8 toolchain in .venv) and the PTX of three copies of the sources
# with a planted bug each (RoPE pairing i with i + 1 instead of i + 32, the SSM read-out before
# the state write, the Q3_K high bit taken from the wrong hmask bit); the same four sets as
# compute_90 PTX (`--arch sm_90`, below); every set of .cu sources; the emulator's sources
# (below). About 18 MB: it travels with the working tree.
#
# run prints the GPU and driver (nvidia-smi), then:
#   1. the harness on the good compute_37 PTX with its per-kernel times, then `skyctl golden
#      check` (max abs and relative error per file): must pass;
#   2. the verification node: `skyctl verify` of DIR/pipeline.toml, whose `[[golden]] kind =
#      "kernels"` suite runs the cuda harness on the same PTX and judges its 19 files against
#      the goldens exactly as the repository's `kernels-gpu` node does: must pass;
#   3. each planted bug: `skyctl golden check` must fail, naming the kernel and the element.
# If the harness cannot run the compute_37 PTX (a driver that no longer JIT-compiles Kepler
# PTX), every step uses the compute_90 PTX instead, and the log and the result say so: that is
# the same sources, not the K80's PTX. The GPU host needs no CUDA toolkit either way.
# LOG (default: $OUT/gpu_kernels.log where $OUT is set, else DIR/gpu_kernels.log) gets
# everything. Exit 0 only when the good kernels pass and every planted bug fails.
#
# The node's harness gets PATH, HOME and the suite's declared `env` only (every node does), so
# DIR/pipeline.toml declares LD_LIBRARY_PATH, through which some CUDA images find the driver.
#
# Without a GPU, `GPU_KERNELS_EMULATE=1 bash bench/gpu_kernels.sh run DIR` rehearses every step
# against stages/cuda/emu's fake libcuda.so.1, built (g++) once per source set so that each
# planted bug is in the kernels the harness runs. The emulator runs the .cu sources, not the
# PTX: it checks the script, the harness and the planted bugs' detection, not the PTX. About 4
# minutes on 2 cores. With CUDA_EMU_REFUSE_TARGET=sm_37 besides, the fake driver refuses the
# K80's PTX, which rehearses the compute_90 fallback.
set -euo pipefail

usage() {
  echo "usage: bash bench/gpu_kernels.sh prepare DIR [SKYCTL] | run DIR [LOG]" >&2
  exit 2
}
[ $# -ge 2 ] || usage
mode=$1
dir=$2

# The planted bugs: name, file, the exact text, its replacement (each must occur once).
plant() {
  python3 - "$1" "$2" "$3" <<'PY'
import sys
path, old, new = sys.argv[1:]
text = open(path).read()
if text.count(old) != 1:
    sys.exit(f"gpu_kernels: {path}: the planted bug's anchor occurs {text.count(old)} times, not once: {old!r}")
open(path, "w").write(text.replace(old, new))
PY
}

BUGS="rope_pairing ssm_read_before_write q3k_high_mask"

prepare() {
  local skyctl=${1:-target/release/skyctl}
  # DIR is cleared first: only when it is empty or was written by an earlier prepare.
  if [ -e "$dir" ] && [ -n "$(ls -A "$dir")" ] && [ ! -e "$dir/.gpu_kernels" ]; then
    echo "gpu_kernels: $dir holds other files; give an empty or new folder" >&2
    exit 2
  fi
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  skyctl=$(realpath "$skyctl")
  cd "$(dirname "$0")/.."
  [ -x "$skyctl" ] || { echo "gpu_kernels: $skyctl: not built (cargo build --release -p skyctl)" >&2; exit 2; }
  find "$dir" -mindepth 1 -delete
  touch "$dir/.gpu_kernels"
  mkdir -p "$dir/ptx" "$dir/src"
  cp "$skyctl" "$dir/skyctl"
  strip "$dir/skyctl"
  "$skyctl" golden gen "$dir/gold" >/dev/null
  cp -r stages/cuda/kernels "$dir/src/good"
  mkdir -p "$dir/emu"
  cp stages/cuda/emu/fake_libcuda.cpp stages/cuda/emu/cuda_emu.h "$dir/emu/"
  for bug in $BUGS; do
    cp -r stages/cuda/kernels "$dir/src/$bug"
    case $bug in
      rope_pairing)
        plant "$dir/src/$bug/rope.cu" "double x1 = (double)head[i + half];" "double x1 = (double)head[i + 1];" ;;
      ssm_read_before_write)
        plant "$dir/src/$bug/ssm.cu" "    r += ki * delta;
    if (live) state_out[at] = (float)r;
    double read = ssm_block_sum(r * qi, sh);" "    double read = ssm_block_sum(r * qi, sh);
    r += ki * delta;
    if (live) state_out[at] = (float)r;" ;;
      q3k_high_mask)
        plant "$dir/src/$bug/q3k.cu" "(hmask[16 * h + l] >> (4 * n + j)) & 1" "(hmask[16 * h + l] >> (n + 4 * j)) & 1" ;;
    esac
  done
  for name in good $BUGS; do
    "$skyctl" cuda compile --pin stages/cuda/toolchain.txt --out "$dir/ptx/$name" "$dir/src/$name" >/dev/null
    "$skyctl" cuda compile --arch sm_90 --pin stages/cuda/toolchain.txt --out "$dir/ptx90/$name" "$dir/src/$name" >/dev/null
  done
  du -sh "$dir"
  echo "prepared $dir: on the GPU host, bash bench/gpu_kernels.sh run DIR"
}

# The library path under which `skyctl kernels run --impl cuda` finds libcuda.so.1 for the
# kernels of source set NAME: the emulated driver built from DIR/src/NAME, or this host's.
libpath() {
  if [ "${GPU_KERNELS_EMULATE:-}" = 1 ]; then echo "$emu/$1/lib"; else echo "${LD_LIBRARY_PATH:-}"; fi
}

# The harness on the PTX of source set NAME into OUT_DIR.
harness() {
  LD_LIBRARY_PATH=$(libpath "$1") "$dir/skyctl" kernels run --impl cuda --ptx "$ptx/$1" "$dir/gold" "$2"
}

steps() {
  local sk="$dir/skyctl" ok=1 out
  out=$(mktemp -d)
  ptx=$dir/ptx
  emu=$out/emu
  echo "# $(date -u '+%F %H:%M:%S') UTC; $(uname -m); CPU: $(lscpu 2>/dev/null | sed -n 's/^Model name: *//p')"
  if [ "${GPU_KERNELS_EMULATE:-}" = 1 ]; then
    echo "EMULATED: stages/cuda/emu's fake libcuda.so.1, no GPU (the .cu sources run on the CPU, not the PTX)"
    for name in good $BUGS; do
      mkdir -p "$emu/$name/emu" "$emu/$name/lib"
      cp "$dir/emu/"* "$emu/$name/emu/"
      ln -s "$dir/src/$name" "$emu/$name/kernels"
      g++ -std=c++20 -O2 -shared -fPIC -o "$emu/$name/lib/libcuda.so.1" "$emu/$name/emu/fake_libcuda.cpp" -lpthread
    done
  else
    nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total --format=csv 2>&1 || echo "(no nvidia-smi)"
  fi

  echo "## 1. the harness on the compute_37 PTX (the K80's), then the golden check"
  local which="compute_37 PTX"
  if ! harness good "$out/good"; then
    echo "the compute_37 PTX did not run here: compute_90 PTX of the same sources from here on (NOT the K80's PTX)"
    ptx=$dir/ptx90
    which="compute_90 PTX: the compute_37 PTX did not run"
    harness good "$out/good" || ok=0
  fi
  if "$sk" golden check "$dir/gold" "$out/good"; then echo "check: pass"; else echo "check: FAILED"; ok=0; fi

  local rel=${ptx#"$dir"/}
  echo "## 2. the verification node: skyctl verify ($dir/pipeline.toml, $rel)"
  cat >"$dir/pipeline.toml" <<TOML
# The CUDA kernels judged by the verification node (bench/gpu_kernels.sh run writes this).
[project]
release_dir = "release"
store_dir = ".skyctl"
build_dir = "build"

[[golden]]
name = "kernels-gpu"
kind = "kernels"
path = "gold"
sources = ["$rel/good"]
harness = "{skyctl} kernels run --impl cuda --ptx $rel/good {inputs} {outputs}"
env = ["LD_LIBRARY_PATH"]
TOML
  rm -rf "$dir/.skyctl" "$dir/build" "$dir/release"
  if (cd "$dir" && LD_LIBRARY_PATH=$(libpath good) "$sk" verify); then echo "verify: pass"; else echo "verify: FAILED"; ok=0; fi

  echo "## 3. the planted bugs must fail"
  for bug in $BUGS; do
    echo "### $bug"
    if ! harness "$bug" "$out/$bug" >/dev/null; then
      echo "$bug: the harness failed"
      ok=0
      continue
    fi
    local report caught=1
    report=$("$sk" golden check "$dir/gold" "$out/$bug") && caught=0
    # The header, the failing files and the verdict.
    grep -v " pass$" <<<"$report" || true
    if [ $caught = 1 ]; then echo "$bug: caught"; else echo "$bug: NOT caught (the check passed)"; ok=0; fi
  done
  rm -rf "$out"
  if [ $ok = 1 ]; then
    echo "RESULT: pass (the kernels within tolerance through the harness and the node, every planted bug caught), on the $which"
  else
    echo "RESULT: FAILED, on the $which"
  fi
  [ $ok = 1 ]
}

run() {
  [ -x "$dir/skyctl" ] && [ -e "$dir/.gpu_kernels" ] || { echo "gpu_kernels: $dir: not prepared (bash bench/gpu_kernels.sh prepare $dir)" >&2; exit 2; }
  dir=$(cd "$dir" && pwd)
  local log=${1:-${OUT:+$OUT/gpu_kernels.log}}
  log=${log:-$dir/gpu_kernels.log}
  steps 2>&1 | tee "$log"
  return "${PIPESTATUS[0]}"
}

case $mode in
  prepare) prepare "${3:-}" ;;
  run) run "${3:-}" ;;
  *) usage ;;
esac
