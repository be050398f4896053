#!/bin/sh
# Which of the AVX2 int8 tile's instructions share a pipe with vpmaddwd, what the sign trick
# costs against it, and what the tile's chunk loop costs with its data flow (see
# bench/avx2_pipes.c).
# Usage: bench/avx2_pipes.sh [ROUNDS]
set -eu
out="${TMPDIR:-/tmp}/avx2_pipes.$$"
cc -O2 -o "$out" "$(dirname "$0")/avx2_pipes.c"
trap 'rm -f "$out"' EXIT
"$out" "${1:-7}"
