#!/usr/bin/env bash
# aarch64 under emulation: cross-builds the workspace for aarch64-unknown-linux-gnu (Debian's
# gcc-aarch64-linux-gnu links it against libc6-dev-arm64-cross) and runs the engine crates'
# tests under qemu-user, twice for the int8 kernels: `-cpu max` (NEON with the dot-product
# extension: the `sdot` path) and `-cpu cortex-a53` (NEON without it: the `smull` path).
# `.ci/run` runs it; it installs what is missing (apt-get only when missing, as `.ci/run` does
# for its own packages).
#
#   bash bench/aarch64.sh          (CARGO_TARGET_DIR may be set)
#   AARCH64_FULL=1 bash bench/aarch64.sh    (every model)
#   AARCH64_QUICK=1 bash bench/aarch64.sh   (what .ci/run runs: unit tests and isa_bits on s1-pico)
#
# Under emulation every instruction costs ~10-50x: by default the golden bit-identity suites
# run on s1-pico only (`SKYCTL_TEST_MODELS=s1-pico`, which the nano and micro tests read to
# skip themselves), every kernel unit test runs in full. AARCH64_FULL=1 runs every model.
# Emulated time is no ARM timing: nothing here measures speed.
set -euo pipefail
cd "$(dirname "$0")/.."

apt_missing=()
command -v aarch64-linux-gnu-gcc >/dev/null 2>&1 || apt_missing+=(gcc-aarch64-linux-gnu)
[ -e /usr/aarch64-linux-gnu/lib/libc.so.6 ] || apt_missing+=(libc6-dev-arm64-cross)
command -v qemu-aarch64 >/dev/null 2>&1 || apt_missing+=(qemu-user)
if [ ${#apt_missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi
  $SUDO apt-get update
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y "${apt_missing[@]}"
fi
rustup target list --installed | grep -qx aarch64-unknown-linux-gnu ||
  rustup target add aarch64-unknown-linux-gnu

export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
TARGET=aarch64-unknown-linux-gnu
ENGINE=(-p sky-gguf -p sky-tokenizer -p sky-quant -p sky-infer -p sky-laya -p sky-kernels)
if [ "${AARCH64_FULL:-0}" != 1 ]; then
  export SKYCTL_TEST_MODELS=s1-pico
fi

t0=$(date +%s)
# The NEON kernels only compile for aarch64: lint them there.
cargo clippy --target "$TARGET" -p sky-infer -p sky-quant --all-targets -- -D warnings
cargo build --target "$TARGET" --workspace
t1=$(date +%s)
echo "aarch64: linted and workspace built in $((t1 - t0)) s"

export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="qemu-aarch64 -cpu max -L /usr/aarch64-linux-gnu"
if [ "${AARCH64_QUICK:-0}" = 1 ]; then
  # CI: every engine crate's unit tests (the kernels against scalar, bit for bit) and the
  # golden bit-identity suite on s1-pico; the other integration suites (threads, int8_golden,
  # golden_paths: 10 more minutes under qemu) follow from those bits, and run natively.
  cargo test --target "$TARGET" "${ENGINE[@]}" --lib --no-fail-fast
  cargo test --target "$TARGET" -p sky-infer --test isa_bits --test forward_simd --no-fail-fast
else
  cargo test --target "$TARGET" "${ENGINE[@]}" --no-fail-fast
fi
t2=$(date +%s)
echo "aarch64: engine crates' tests under qemu -cpu max (sdot) in $((t2 - t1)) s"

# Without the dot-product extension: the unit tests (the int8 kernels take the `smull` path)
# and the golden bit-identity suite again.
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="qemu-aarch64 -cpu cortex-a53 -L /usr/aarch64-linux-gnu"
cargo test --target "$TARGET" -p sky-quant -p sky-infer --lib --no-fail-fast
if [ "${AARCH64_QUICK:-0}" != 1 ]; then
  cargo test --target "$TARGET" -p sky-infer --test isa_bits --no-fail-fast
fi
t3=$(date +%s)
echo "aarch64: sky-quant and sky-infer unit tests${AARCH64_QUICK:+ (quick set)} under qemu -cpu cortex-a53 in $((t3 - t2)) s"
