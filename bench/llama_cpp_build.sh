#!/usr/bin/env bash
# Build upstream llama.cpp's llama-bench and llama-embedding for the side-by-side benchmark
# (bench/llama_side.py). The sources come from the llama-cpp-python sdist on PyPI, which
# vendors llama.cpp at a fixed commit (0.3.36: 0c1e570), checked against its published
# sha256; nothing else is downloaded but CMake, from PyPI, into a venv under DIR when the
# machine has none.
#
#   bash bench/llama_cpp_build.sh DIR [--no-amx]   # then DIR/bin/llama-bench, llama-embedding
#
# GGML_NATIVE: built for this CPU, as a user building llama.cpp here would; skyctl picks its
# kernel path from CPUID at run time, so both sides use what the machine has.
#
# --no-amx: for a CPU that reports AMX but does not let a process use it (some VMs: the native
# build's llama-bench dies with SIGILL in ggml's AMX Q8_0 kernel, `tileloadd`). GGML_NATIVE is
# then off and every other x86 extension ggml has an option for is turned on where
# /proc/cpuinfo reports it, which is the native build less AMX. (`-mno-amx-*` in CFLAGS does
# not do it: ggml puts -march=native after them.)
set -euo pipefail

dir=${1:?usage: bash bench/llama_cpp_build.sh DIR [--no-amx]}
isa=(-DGGML_NATIVE=ON)
if [ "${2:-}" = --no-amx ]; then
  flags=" $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2) "
  isa=(-DGGML_NATIVE=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF)
  for pair in sse4_2:SSE42 avx:AVX avx2:AVX2 fma:FMA f16c:F16C bmi2:BMI2 avx_vnni:AVX_VNNI \
    avx512f:AVX512 avx512vbmi:AVX512_VBMI avx512_vnni:AVX512_VNNI avx512_bf16:AVX512_BF16; do
    on=OFF
    case "$flags" in *" ${pair%%:*} "*) on=ON ;; esac
    isa+=("-DGGML_${pair#*:}=$on")
  done
elif [ -n "${2:-}" ]; then
  echo "usage: bash bench/llama_cpp_build.sh DIR [--no-amx]" >&2
  exit 2
fi
version=0.3.36
sha256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
url=https://files.pythonhosted.org/packages/ec/e9/e7de2b0463ea3ffbf0ede6cb21b58c1258a8f6521aae45ca773a59fe7cf3/llama_cpp_python-$version.tar.gz

mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
sdist="$dir/llama_cpp_python-$version.tar.gz"
if ! echo "$sha256  $sdist" | sha256sum -c --status 2>/dev/null; then
  curl -fsSL -o "$sdist.part" "$url"
  echo "$sha256  $sdist.part" | sha256sum -c --quiet
  mv "$sdist.part" "$sdist"
fi
src="$dir/llama_cpp_python-$version/vendor/llama.cpp"
[ -d "$src" ] || tar xzf "$sdist" -C "$dir"

cmake_bin=$(command -v cmake || true)
if [ -z "$cmake_bin" ]; then
  [ -x "$dir/venv/bin/cmake" ] || { python3 -m venv "$dir/venv" && "$dir/venv/bin/pip" install --quiet cmake; }
  cmake_bin="$dir/venv/bin/cmake"
fi

"$cmake_bin" -S "$src" -B "$dir/build" -DCMAKE_BUILD_TYPE=Release "${isa[@]}" \
  -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF \
  -DLLAMA_BUILD_EXAMPLES=ON -DLLAMA_BUILD_TOOLS=ON -DBUILD_SHARED_LIBS=OFF >/dev/null
"$cmake_bin" --build "$dir/build" -j "$(nproc)" --target llama-bench llama-embedding >/dev/null
mkdir -p "$dir/bin"
cp "$dir/build/bin/llama-bench" "$dir/build/bin/llama-embedding" "$dir/bin/"
echo "llama-bench, llama-embedding (llama.cpp as vendored by llama-cpp-python $version): $dir/bin"
