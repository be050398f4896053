#!/usr/bin/env bash
# The CUDA kernels on a real GPU, prepared where there is none (a GPU host lent for a few minutes
# has no Rust toolchain, no network and no CUDA 11.8), then run there in one go.
#
#   bash bench/gpu_kernels.sh prepare DIR [SKYCTL]   # here; DIR: a folder git ignores
#   bash bench/gpu_kernels.sh run DIR [LOG]          # on the GPU host
#   bash bench/gpu_kernels.sh slurm DIR [LOG]        # step 4 alone (PTX=ptx90 for compute_90)
#
# prepare writes into DIR: a stripped copy of SKYCTL (default target/release/skyctl); the
# kernel goldens (`skyctl golden gen`); the compute_37 PTX of stages/cuda/kernels (`skyctl cuda
# compile`, the pinned CUDA 11.8 toolchain in .venv) and the PTX of three copies of the sources
# with a planted bug each (RoPE pairing i with i + 1 instead of i + 32, the SSM read-out before
# the state write, the Q3_K high bit taken from the wrong hmask bit); the same four sets as
# compute_90 PTX (`--arch sm_90`, below); every set of .cu sources; the emulator's sources
# (below); where this machine has Debian's Slurm and munge, slurm.tar.gz: their programs,
# plugins and the libraries they need but glibc's (about 7 MB), for step 4. About 25 MB: it
# travels with the working tree.
#
# run prints the GPU and driver (nvidia-smi), then:
#   1. the harness on the good compute_37 PTX with its per-kernel times, then `skyctl golden
#      check` (max abs and relative error per file): must pass;
#   2. the verification node: `skyctl verify` of DIR/pipeline.toml, whose `[[golden]] kind =
#      "kernels"` suite runs the cuda harness on the same PTX and judges its 19 files against
#      the goldens exactly as the repository's `kernels-gpu` node does: must pass;
#   3. each planted bug: `skyctl golden check` must fail, naming the kernel and the element;
#   4. the verification node routed to the card through Slurm: a one-machine cluster
#      (bench/slurm_cluster.sh, from slurm.tar.gz where the host has no Slurm) offers the card
#      as `gpu:TYPE:1` with `Feature=TYPE` (TYPE from nvidia-smi's name, h100 say), a remote
#      cache (bench/http_cache.py) carries the data, and `skyctl build --execute slurm` runs the
#      suite's harness node as a Slurm job asking `gpus = 1, constraint = "TYPE"`: the job must
#      complete (the cluster's jobcomp.txt) and pass; `skyctl verify` after it must pass with
#      nothing executed (the node's key is the same whichever engine ran it).
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
  echo "usage: bash bench/gpu_kernels.sh prepare DIR [SKYCTL] | run DIR [LOG] | slurm DIR [LOG]" >&2
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

here=$(cd "$(dirname "$0")" && pwd)
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
  slurm_bundle
  du -sh "$dir"
  echo "prepared $dir: on the GPU host, bash bench/gpu_kernels.sh run DIR"
}

# This machine's Slurm and munge (Debian's packages: the files they install, the names Debian's
# alternatives give the daemons, and every library they load but glibc's) into DIR/slurm.tar.gz.
slurm_bundle() {
  if ! command -v dpkg >/dev/null || ! dpkg -s slurmctld slurmd slurm-client munge >/dev/null 2>&1; then
    echo "gpu_kernels: no Debian Slurm here, so no slurm.tar.gz: step 4 runs only where the GPU host has Slurm"
    return 0
  fi
  local stage f
  stage=$(mktemp -d)
  mkdir -p "$stage/root" "$stage/lib"
  for f in $(dpkg -L slurmctld slurmd slurm-client slurm-wlm-basic-plugins munge libmunge2); do
    # Programs and libraries only: no service files, no /etc.
    case $f in /usr/bin/*|/usr/sbin/*|/usr/lib/*) ;; *) continue ;; esac
    if [ -f "$f" ] && [ ! -L "$f" ]; then mkdir -p "$stage/root${f%/*}" && cp -a "$f" "$stage/root$f"; fi
  done
  # slurmd starts /usr/sbin/slurmstepd by that name.
  for f in slurmctld slurmd slurmstepd; do ln -s "$f-wlm" "$stage/root/usr/sbin/$f"; done
  find "$stage/root" -type f -print0 | while IFS= read -r -d '' f; do
    if file -b "$f" | grep -q ELF; then ldd "$f" 2>/dev/null | awk '/=> \// {print $3}'; fi
  done | sort -u | grep -v -E '/slurm-wlm/|/(libc|libm|libdl|libpthread|librt|libresolv|ld-linux-x86-64)\.so' |
    while read -r f; do cp -L "$f" "$stage/lib/"; done
  tar -C "$stage" -czf "$dir/slurm.tar.gz" root lib
  rm -rf "$stage"
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
  ptx=$dir/${PTX:-ptx}
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
  if [ "${STEPS:-}" = slurm_only ]; then
    echo "## 4. the verification node through Slurm, on this machine's card (${ptx##*/})"
    if on_slurm "$out"; then echo "RESULT: slurm: pass"; else echo "RESULT: slurm: FAILED"; ok=0; fi
    rm -rf "$out"
    [ $ok = 1 ]
    return
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
  echo "## 4. the verification node through Slurm, on this machine's card"
  if on_slurm "$out"; then echo "slurm: pass"; else echo "slurm: FAILED"; ok=0; fi
  rm -rf "$out"
  if [ $ok = 1 ]; then
    echo "RESULT: pass (the kernels within tolerance through the harness and the node, every planted bug caught), on the $which"
  else
    echo "RESULT: FAILED, on the $which"
  fi
  [ $ok = 1 ]
}

# Step 4 (see the top). Returns non-zero when it cannot run or fails.
on_slurm() (
  local out=$1 sk="$dir/skyctl" gpu_file=/dev/null gpu_type=k80 lib=""
  cd "$dir"
  if ! command -v slurmctld >/dev/null 2>&1 && [ ! -x /usr/sbin/slurmctld ]; then
    [ -s slurm.tar.gz ] || { echo "no Slurm on this host and no slurm.tar.gz"; return 1; }
    [ "$(id -u)" = 0 ] || { echo "no Slurm on this host, and installing slurm.tar.gz needs root"; return 1; }
    mkdir -p "$out/slurm"
    tar -C "$out/slurm" -xzf slurm.tar.gz
    cp -a --no-clobber "$out/slurm/root/." /
    # A library the host has (a newer build of the same soname) is the host's to give.
    for f in "$out/slurm/lib/"*; do
      if ldconfig -p | grep -q "^[[:space:]]*${f##*/} "; then rm "$f"; fi
    done
    echo "libraries from slurm.tar.gz: $(cd "$out/slurm/lib" && echo *)"
    lib=$out/slurm/lib
  fi
  export PATH="$PATH:/usr/sbin"
  python3 "$here/http_cache.py" "$out/cache" "$out/cache.port" &
  local cache_pid=$!
  # The daemons' logs go along with the result where the device tool collects files ($OUT).
  trap 'kill $cache_pid 2>/dev/null; bash "$here/slurm_cluster.sh" stop "$out/cluster"
    if [ -n "${OUT:-}" ]; then cp "$out/cluster/"*.log "$OUT/" 2>/dev/null || true; fi' EXIT
  LD_LIBRARY_PATH=$(libpath good)
  export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH${lib:+:}}$lib
  if [ "${GPU_KERNELS_EMULATE:-}" != 1 ]; then
    gpu_file=/dev/nvidia0
    gpu_type=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 |
      grep -o -i -E '[a-z][0-9]{2,4}' | head -1 | tr '[:upper:]' '[:lower:]')
    gpu_type=${gpu_type:-card}
  fi
  for _ in $(seq 100); do [ -s "$out/cache.port" ] && break; sleep 0.1; done
  [ -s "$out/cache.port" ] || { echo "the cache server did not start"; return 1; }
  local env
  env=$(SLURM_GPU_FILE=$gpu_file SLURM_GPU_TYPE=$gpu_type bash "$here/slurm_cluster.sh" start "$out/cluster") ||
    { tail -n 20 "$out/cluster/"*.log; return 1; }
  eval "$env"
  echo "cluster: one node offering gpu:$gpu_type:1 (File=$gpu_file), Feature=$gpu_type; $(srun --version)"
  # A project of its own (its own store and state), holding copies of the goldens and the PTX.
  mkdir -p "$out/project/ptx"
  cp -r gold "$out/project/gold"
  cp -r "$ptx/good" "$out/project/ptx/good"
  cd "$out/project"
  cat >pipeline.toml <<TOML
# The kernels suite's harness node as a Slurm job on the card (bench/gpu_kernels.sh step 4).
[project]
release_dir = "release"
store_dir = ".skyctl"
build_dir = "build"

[cache]
remote = "http://127.0.0.1:$(cat "$out/cache.port")"

[[golden]]
name = "kernels-gpu"
kind = "kernels"
path = "gold"
sources = ["ptx/good"]
harness = "{skyctl} kernels run --impl cuda --ptx ptx/good {inputs} {outputs}"
env = ["LD_LIBRARY_PATH"]
resources = { gpus = 1, constraint = "$gpu_type" }
TOML
  "$sk" build --execute slurm golden/kernels-gpu || { tail -n 20 "$out/cluster/"*.log; return 1; }
  echo "what the harness said in its job (its log, from the store):"
  grep -rah "^cuda: " .skyctl | head -n 1
  echo "jobs the cluster ran:"
  cat "$out/cluster/jobcomp.txt" 2>/dev/null || true
  grep -q "JobState=COMPLETED" "$out/cluster/jobcomp.txt" || { echo "no completed job in jobcomp.txt"; return 1; }
  echo "then skyctl verify here (must execute nothing):"
  local summary
  summary=$("$sk" verify --json | tail -n 1) || { echo "$summary"; return 1; }
  echo "$summary"
  grep -q '"executed":0' <<<"$summary" || { echo "verify executed nodes again"; return 1; }
)

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
  slurm) STEPS=slurm_only run "${3:-}" ;;
  *) usage ;;
esac
