#!/usr/bin/env bash
# Builds llama.cpp's `llama-server` from source for the test suite and the benchmarks, once:
# the llama.cpp tree vendored in the PyPI sdist of llama-cpp-python (a pinned, registry-hosted
# copy of llama.cpp, so no git or GitHub access is needed), CMake with CURL off, only the
# llama-server target. The binary goes into a cache folder outside the repository, keyed by
# version and build variant, and is reused when present. Prints the binary's path on its last line.
#
#   scripts/build_llama_server.sh            # build (6-10 min on 2 cores) or reuse
#   KVSCOPE_CACHE=/some/dir scripts/...      # another cache root (default ~/.cache/kvscope)
set -euo pipefail

VERSION="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
CACHE="${KVSCOPE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kvscope}"
# "noamx": built without Intel AMX. On a CPU that reports AMX under a hypervisor that does not
# let a process load tile state (seen on an Intel Xeon VM here), ggml's AMX matmul dies with a
# general-protection fault at its first `ldtilecfg`, in the model's warm-up; AMX only speeds
# ggml's batched quantized matmuls, not the one-token decode the benchmark compares.
DEST="$CACHE/llama-server-$VERSION-noamx"
BIN="$DEST/bin/llama-server"
PIP="${PIP:-pip}"
if [ -x "$(dirname "$0")/../.venv/bin/pip" ] && [ "$PIP" = pip ]; then PIP="$(dirname "$0")/../.venv/bin/pip"; fi

if [ -x "$BIN" ] && "$BIN" --version >/dev/null 2>&1; then
  echo "$BIN"
  exit 0
fi

command -v cmake >/dev/null || { echo "build_llama_server: cmake is required" >&2; exit 2; }
command -v c++ >/dev/null || { echo "build_llama_server: a C++ compiler is required" >&2; exit 2; }

work="$(mktemp -d "${TMPDIR:-/tmp}/llama-build.XXXXXX")"
trap 'rm -rf "$work"' EXIT
echo "[llama-server] downloading the llama-cpp-python==$VERSION sdist (vendored llama.cpp)" >&2
"$PIP" download -q --no-deps --no-binary :all: "llama-cpp-python==$VERSION" -d "$work" >&2
tar -xzf "$work"/llama_cpp_python-"$VERSION".tar.gz -C "$work"
src="$work/llama_cpp_python-$VERSION/vendor/llama.cpp"
[ -f "$src/CMakeLists.txt" ] || { echo "build_llama_server: no llama.cpp tree in the sdist" >&2; exit 1; }

jobs="$(nproc 2>/dev/null || echo 2)"
echo "[llama-server] configuring and building with $jobs jobs (about 6-10 minutes on 2 cores)" >&2
# Native CPU code paths are what the benchmark compares against, less AMX (see DEST); shared
# libs off so the one binary can be moved into the cache folder on its own.
no_amx="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
cmake -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DBUILD_SHARED_LIBS=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DGGML_NATIVE=ON \
  -DCMAKE_C_FLAGS="$no_amx" -DCMAKE_CXX_FLAGS="$no_amx" >"$work/configure.log" 2>&1 \
  || { tail -30 "$work/configure.log" >&2; exit 1; }
cmake --build "$work/build" --target llama-server -j "$jobs" >"$work/build.log" 2>&1 \
  || { tail -30 "$work/build.log" >&2; exit 1; }

mkdir -p "$DEST/bin"
cp "$work/build/bin/llama-server" "$BIN.tmp"
mv "$BIN.tmp" "$BIN"
"$BIN" --version >&2 2>&1 || true
echo "$BIN"
