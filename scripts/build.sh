#!/usr/bin/env bash
# scripts/build.sh [BUILD_DIR]: configure (CUDA on when the toolkit is installed) and build.
set -euo pipefail
cd "$(dirname "$0")/.."
build="${1:-build}"
args=()
nvcc=$(command -v nvcc || true)
[[ -z "$nvcc" && -x /usr/local/cuda/bin/nvcc ]] && nvcc=/usr/local/cuda/bin/nvcc
if [[ -n "$nvcc" ]]; then
  # meson has no variable for nvcc: a native file names it.
  mkdir -p "$build"
  printf "[binaries]\ncuda = '%s'\n" "$nvcc" > "$build.native.ini"
  args+=(--native-file "$build.native.ini" -Dcuda=enabled)
fi
if [[ ! -f "$build/build.ninja" ]]; then
  meson setup "$build" "${args[@]}"
fi
ninja -C "$build"
