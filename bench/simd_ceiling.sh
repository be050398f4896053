#!/bin/sh
# The f32 multiply-add ceiling of this core per vector width (see bench/simd_ceiling.c).
# Usage: bench/simd_ceiling.sh [ROUNDS]
set -eu
out="${TMPDIR:-/tmp}/simd_ceiling.$$"
cc -O2 -o "$out" "$(dirname "$0")/simd_ceiling.c"
trap 'rm -f "$out"' EXIT
"$out" "${1:-7}"
