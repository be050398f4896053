#!/usr/bin/env bash
# An AVX2-only CPU under emulation: QEMU's user-mode emulator presents AMD's Zen 3
# (`-cpu EPYC-Milan`: AVX2 and FMA, no AVX-512, no AVX-VNNI) to the engine's tests and to
# skyctl, so the default path (no SKYCTL_ISA) is the one such a machine takes, chosen from
# CPUID as there. It installs qemu-user when missing (apt-get, as `.ci/run` does).
#
#   bash bench/avx2_only.sh               the engine crates' unit tests, the bit-identity
#                                         suites on s1-pico, and s1-pico's part of the
#                                         pipeline against golden/artifacts.blake3 (about
#                                         5 minutes on 2 Zen 5 cores; on 2 cores of
#                                         BENCH.md's Intel machine well over an hour: 27
#                                         minutes for the suites, 40 for `tune` alone)
#   AVX2_ONLY_QUICK=1 bash bench/avx2_only.sh
#                                         what .ci/run runs: the unit tests only (seconds)
#
# skyctl/tests/isa.rs runs the binary the same way in `cargo test` (the detected path, the
# refusal of the levels it lacks, answers and artifacts against this machine's bytes).
# Emulated time is no AVX2 timing: nothing here measures speed.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v qemu-x86_64 >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi
  $SUDO apt-get update
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y qemu-user
fi
if [ "$(uname -m)" != x86_64 ]; then
  echo "avx2_only: this emulates an x86-64 CPU for x86-64 builds; this machine is $(uname -m)" >&2
  exit 2
fi

ZEN3=(qemu-x86_64 -cpu EPYC-Milan)
unset SKYCTL_ISA
# QEMU warns once per CPUID bit it does not emulate (none the engine reads); keep the rest.
quiet() { "$@" 2> >(grep -v '^qemu-x86_64: warning: TCG' >&2); }

t0=$(date +%s)
# Every kernel against the portable path, bit for bit, on the levels this CPU has: scalar
# and avx2.
quiet env CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUNNER="${ZEN3[*]}" \
  cargo test -p sky-infer -p sky-quant --lib --no-fail-fast
t1=$(date +%s)
echo "avx2_only: engine unit tests on the emulated Zen 3 in $((t1 - t0)) s"
if [ "${AVX2_ONLY_QUICK:-0}" = 1 ]; then
  exit 0
fi

# Every golden case of s1-pico, every compute path, 1 and 2 threads: the same bits on every
# level (nano and micro take hours under emulation; the same code runs them natively).
quiet env CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUNNER="${ZEN3[*]}" SKYCTL_TEST_MODELS=s1-pico \
  cargo test -p sky-infer --test isa_bits --test forward_simd --no-fail-fast
t2=$(date +%s)
echo "avx2_only: bit-identity suites on s1-pico, emulated, in $((t2 - t1)) s"

# s1-pico's part of the release pipeline (convert, calibrate, quantize, tune, bench and the
# golden suites), built by skyctl on the emulated Zen 3 in a scratch workspace: its artifacts
# against the committed digests of golden/artifacts.blake3.
cargo build --release -q -p skyctl
skyctl="$PWD/target/release/skyctl"
PY="${PYTHON:-.venv/bin/python}"
"$PY" -c 'import blake3' 2>/dev/null || "$PY" -m pip install --quiet blake3
ws=$(mktemp -d)
trap 'rm -rf "$ws"' EXIT
"$PY" bench/pipeline_digests.py prepare "$ws"
(cd "$ws" && quiet "${ZEN3[@]}" "$skyctl" build s1-pico)
"$PY" bench/pipeline_digests.py check "$ws" --built-only
t3=$(date +%s)
echo "avx2_only: s1-pico's pipeline built on the emulated Zen 3 in $((t3 - t2)) s, digests as committed"
