#!/bin/sh
# Which of the AVX2 int8 tile's instructions share a pipe with vpmaddwd, and what the sign
# trick costs against it (see bench/avx2_pipes.c).
# Usage: bench/avx2_pipes.sh [ROUNDS]
set -eu
out="${TMPDIR:-/tmp}/avx2_pipes.$$"
cc -O2 -o "$out" "$(dirname "$0")/avx2_pipes.c"
trap 'rm -f "$out"' EXIT
"$out" "${1:-7}"
