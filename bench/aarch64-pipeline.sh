#!/usr/bin/env bash
# `skyctl build` of this repository's pipeline by an aarch64 skyctl under qemu-user, and the
# blake3 digests of its non-volatile artifacts against golden/artifacts.blake3 (the x86-64
# bytes): what the remote-cache test checks natively, on the NEON kernels. Too slow for CI
# under emulation, so a script: it builds the model part of pipeline.toml (everything above
# the browser engine's marker, as that test does) in a scratch copy of models/ and golden/.
#
#   bash bench/aarch64-pipeline.sh          (QEMU_CPU=cortex-a53 for the path without sdot;
#                                            SKYCTL_ISA=scalar to build on the portable path)
# Prints the build's wall time; emulated time is no ARM timing. Exit 1 if any digest differs.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
cargo build -q --release --target aarch64-unknown-linux-gnu -p skyctl
BIN="$TARGET/aarch64-unknown-linux-gnu/release/skyctl"
PY="${PYTHON:-.venv/bin/python}"
"$PY" -c 'import blake3' 2>/dev/null || "$PY" -m pip install --quiet blake3

WS="$(mktemp -d)"
trap 'rm -rf "$WS"' EXIT
"$PY" bench/pipeline_digests.py prepare "$WS"

t0=$(date +%s)
(cd "$WS" && qemu-aarch64 -cpu "${QEMU_CPU:-max}" -L /usr/aarch64-linux-gnu "$BIN" build)
t1=$(date +%s)
echo "aarch64 (qemu -cpu ${QEMU_CPU:-max}, SKYCTL_ISA=${SKYCTL_ISA:-auto}): skyctl build in $((t1 - t0)) s"
"$PY" bench/pipeline_digests.py check "$WS"
