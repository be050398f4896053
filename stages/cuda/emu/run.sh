#!/usr/bin/env bash
# The cuda harness on a CPU: builds a fake libcuda.so.1 (fake_libcuda.cpp: the driver calls the
# harness makes, each kernel run from the same .cu sources through the CUDA-on-CPU shim
# cuda_emu.h, one OS thread per CUDA thread), runs `skyctl kernels run --impl cuda` against it
# and checks the outputs against the goldens. It tests the harness's plumbing and the kernels'
# semantics without a GPU (not their PTX, nor Kepler timing). About a minute on 2 cores.
#
#   bash stages/cuda/emu/run.sh [SKYCTL]       # default: target/debug/skyctl
set -euo pipefail
cd "$(dirname "$0")/../../.."
skyctl=${1:-target/debug/skyctl}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
g++ -std=c++20 -O2 -shared -fPIC -o "$work/libcuda.so.1" stages/cuda/emu/fake_libcuda.cpp -lpthread
"$skyctl" cuda compile --pin stages/cuda/toolchain.txt --out "$work/ptx" stages/cuda/kernels >/dev/null
"$skyctl" golden gen "$work/gold" >/dev/null
LD_LIBRARY_PATH="$work" "$skyctl" kernels run --impl cuda --ptx "$work/ptx" "$work/gold" "$work/out"
"$skyctl" golden check "$work/gold" "$work/out"
