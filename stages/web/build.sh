#!/usr/bin/env bash
# Build the browser engine for wasm32-unknown-unknown, twice: with SIMD128 and without.
#
#   bash stages/web/build.sh OUT_DIR
#
# writes OUT_DIR/sky-web.simd.wasm and OUT_DIR/sky-web.scalar.wasm. The pipeline runs this as
# the `web-wasm` node (pipeline.toml), and skyctl's build script (skyctl/build.rs) runs it to
# embed the modules in skyctl; by hand it is the same command. CARGO_TARGET_DIR defaults
# to build/web/target (each variant in its own subfolder, so neither rebuilds the other and the
# build never waits on the workspace's own target/ lock, e.g. under `cargo run -- build`).
#
# Reproducible: the source folder, CARGO_HOME and RUSTUP_HOME are remapped out of the modules
# (--remap-path-prefix), debug info is off and symbols are stripped, so the same sources and
# toolchain give byte-identical modules in any folder.
set -euo pipefail
out=${1:?usage: build.sh OUT_DIR}
root=$(cd "$(dirname "$0")/../.." && pwd)
target=${CARGO_TARGET_DIR:-$root/build/web/target}
case "$target" in /*) ;; *) target="$root/$target" ;; esac
cargo_home=${CARGO_HOME:-$HOME/.cargo}
rustup_home=${RUSTUP_HOME:-$HOME/.rustup}
mkdir -p "$out"

if [ ! -d "$(rustc --print sysroot)/lib/rustlib/wasm32-unknown-unknown/lib" ]; then
  rustup target add wasm32-unknown-unknown
fi

# Flags in CARGO_ENCODED_RUSTFLAGS (separated by 0x1f), so that folders with spaces work.
sep=$'\x1f'
remap="--remap-path-prefix=$root=/sky$sep--remap-path-prefix=$cargo_home=/cargo$sep--remap-path-prefix=$rustup_home=/rustup"
export CARGO_PROFILE_RELEASE_DEBUG=0
export CARGO_PROFILE_RELEASE_STRIP=symbols
export CARGO_PROFILE_RELEASE_LTO=fat
export CARGO_PROFILE_RELEASE_CODEGEN_UNITS=1
export CARGO_PROFILE_RELEASE_PANIC=abort
export CARGO_PROFILE_RELEASE_OPT_LEVEL=3
unset RUSTFLAGS CARGO_BUILD_RUSTFLAGS CARGO_ENCODED_RUSTFLAGS

build() { # variant, extra rustflags
  local variant=$1 flags=$2
  CARGO_TARGET_DIR="$target/$variant" \
    CARGO_ENCODED_RUSTFLAGS="$remap$sep$flags" \
    cargo build --quiet --locked --release --manifest-path "$root/Cargo.toml" \
      -p sky-web --target wasm32-unknown-unknown
  cp "$target/$variant/wasm32-unknown-unknown/release/sky_web.wasm" "$out/sky-web.$variant.wasm.tmp"
  chmod 644 "$out/sky-web.$variant.wasm.tmp" # a module, not a program
  mv "$out/sky-web.$variant.wasm.tmp" "$out/sky-web.$variant.wasm"
}
build simd "-Ctarget-feature=+simd128"
# The scalar module must not use SIMD128 even where rustc's wasm32 defaults would allow it.
build scalar "-Ctarget-feature=-simd128"
