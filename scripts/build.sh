#!/usr/bin/env bash
# scripts/build.sh [BUILD_DIR [MESON_ARGS...]]: configure (CUDA on when the toolkit is
# installed) and build. With -Dgpu_emulator=true among MESON_ARGS the CUDA backend is built
# for the CPU emulator instead of nvcc (see backend/cuda/emu).
set -euo pipefail
cd "$(dirname "$0")/.."
build="${1:-build}"
shift || true
args=("$@")
emulator=0
for a in "${args[@]}"; do [[ "$a" == -Dgpu_emulator=true || "$a" == -Dcuda=disabled ]] && emulator=1; done
nvcc=$(command -v nvcc || true)
[[ -z "$nvcc" && -x /usr/local/cuda/bin/nvcc ]] && nvcc=/usr/local/cuda/bin/nvcc
if [[ -n "$nvcc" && $emulator -eq 0 ]]; then
  # meson has no variable for nvcc: a native file names it.
  mkdir -p "$build"
  printf "[binaries]\ncuda = '%s'\n" "$nvcc" > "$build.native.ini"
  args+=(--native-file "$build.native.ini" -Dcuda=enabled)
fi
if [[ ! -f "$build/build.ninja" ]]; then
  meson setup "$build" "${args[@]}"
fi
ninja -C "$build"
