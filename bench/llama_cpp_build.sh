#!/usr/bin/env bash
# Build upstream llama.cpp's llama-bench and llama-embedding for the side-by-side benchmark
# (bench/llama_side.py). The sources come from the llama-cpp-python sdist on PyPI, which
# vendors llama.cpp at a fixed commit (0.3.36: 0c1e570), checked against its published
# sha256; nothing else is downloaded but CMake, from PyPI, into a venv under DIR when the
# machine has none.
#
#   bash bench/llama_cpp_build.sh DIR     # then DIR/bin/llama-bench, DIR/bin/llama-embedding
#
# GGML_NATIVE: built for this CPU, as a user building llama.cpp here would; skyctl picks its
# kernel path from CPUID at run time, so both sides use what the machine has.
set -euo pipefail

dir=${1:?usage: bash bench/llama_cpp_build.sh DIR}
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

"$cmake_bin" -S "$src" -B "$dir/build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
  -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF \
  -DLLAMA_BUILD_EXAMPLES=ON -DLLAMA_BUILD_TOOLS=ON -DBUILD_SHARED_LIBS=OFF >/dev/null
"$cmake_bin" --build "$dir/build" -j "$(nproc)" --target llama-bench llama-embedding >/dev/null
mkdir -p "$dir/bin"
cp "$dir/build/bin/llama-bench" "$dir/build/bin/llama-embedding" "$dir/bin/"
echo "llama-bench, llama-embedding (llama.cpp as vendored by llama-cpp-python $version): $dir/bin"
