#!/usr/bin/env bash
# scripts/gpu/pack.sh [--keep-going | --no-build] [BUILD_DIR]: build megac with CUDA (release, sm_80 + sm_90 code and
# their PTX) and pack what the lent GPU machine lacks into gpu-pack/ (ignored by git):
#   gpu-pack/megac-gpu.tar.xz   bin/ (megac, test_cuda_ops, test_cuda_half, test_cuda_fused,
#                               test_cuda_flash_tc, test_cudnn_attn, test_cuda_grouped,
#                               bench_train), lib/ (MPICH, HDF5,
#                               OpenBLAS, json-c, PCRE2 and their dependencies), env.sh
#                               (scripts/gpu/env.sh: the library path, found without python)
#   gpu-pack/MANIFEST.txt       what is inside, with the libraries left to the GPU machine
#   gpu-pack/xz/                xz and liblzma.so.5, uncompressed: the GPU machine may lack xz
# The GPU machine has glibc, libstdc++, libgcc and the CUDA libraries (cudart, cuBLAS,
# cuBLASLt, NCCL, cuDNN: NVIDIA's Python wheels, /usr/local/cuda): those are not packed
# (cuBLASLt and cuDNN are opened with dlopen: ldd does not list them).
# scripts/gpu/selfcheck.sh unpacks it there; scripts/gpu/README.md says how to call it.
#   BUILD_DIR     default build-gpu (its own, release, -Dcuda=enabled)
#   --keep-going  pack the binaries that did build when others fail (loud warning)
#   --no-build    pack BUILD_DIR's binaries as they are (testing the packing only)
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
mode=build
while [[ $# -gt 0 && "$1" == --* ]]; do
  case "$1" in
    --keep-going) mode=keep-going ;;
    --no-build) mode=no-build ;;
    *) echo "usage: scripts/gpu/pack.sh [--keep-going | --no-build] [BUILD_DIR]" >&2; exit 2 ;;
  esac
  shift
done
build="${1:-build-gpu}"
pack="$root/gpu-pack"
limit_mib=64  # the device tool's carry limit (whole working tree, so stay well below)

die() { echo "pack.sh: $*" >&2; exit 1; }

# NVCC=path overrides the search (PATH, then /usr/local/cuda/bin).
nvcc=${NVCC:-$(command -v nvcc || true)}
[[ -z "${NVCC:-}" && -z "$nvcc" && -x /usr/local/cuda/bin/nvcc ]] && nvcc=/usr/local/cuda/bin/nvcc
[[ -n "$nvcc" && -x "$nvcc" ]] ||
  die "nvcc not found (${NVCC:+NVCC=$NVCC, }not on PATH, not in /usr/local/cuda/bin): install the CUDA 13 toolkit"
for t in meson ninja ldd tar xz readelf objdump awk; do
  command -v "$t" >/dev/null || die "'$t' not found (scripts/setup.sh installs the build tools)"
done

# --- build -----------------------------------------------------------------------------
if [[ $mode == no-build ]]; then
  [[ -f "$build/build.ninja" ]] || die "$build is not a meson build directory"
  grep -q "MEGAC_HAVE_CUDA" "$build/build.ninja" ||
    echo "pack.sh: WARNING: $build was configured without CUDA" >&2
  echo "pack.sh: --no-build: packing $build as it is, NOT rebuilt" >&2
else
  echo "pack.sh: building into $build with $nvcc"
  printf "[binaries]\ncuda = '%s'\n" "$nvcc" > "$build.native.ini"
  if [[ ! -f "$build/build.ninja" ]]; then
    meson setup "$build" --native-file "$build.native.ini" -Dcuda=enabled -Dbuildtype=release
  elif [[ "$(meson introspect "$build" --buildoptions 2>/dev/null | python3 -c '
import json, sys
o = {x["name"]: x["value"] for x in json.load(sys.stdin)}
print(o.get("cuda"), o.get("buildtype"))' 2>/dev/null)" != "enabled release" ]]; then
    meson configure "$build" -Dcuda=enabled -Dbuildtype=release >/dev/null
  fi
  if ! ninja -C "$build"; then
    [[ $mode == keep-going ]] || die "the build failed (see above); --keep-going packs what did build"
    ninja -C "$build" -k 0 >/dev/null 2>&1 || true
    echo "pack.sh: WARNING: the build FAILED; packing the binaries that exist (may be stale)" >&2
  fi
fi

# --- binaries --------------------------------------------------------------------------
declare -A want=([megac]="megac/megac" [test_cuda_ops]="tests/backend/cuda/test_cuda_ops"
                 [test_cuda_half]="tests/backend/cuda/test_cuda_half"
                 [test_cuda_fused]="tests/backend/cuda/test_cuda_fused" [bench_train]="bench/bench_train"
                 [test_cuda_flash_tc]="tests/backend/cuda/test_cuda_flash_tc"
                 [test_cudnn_attn]="tests/backend/cuda/test_cudnn_attn"
                 [test_cuda_grouped]="tests/backend/cuda/test_cuda_grouped")
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib"
bins=()
for name in megac test_cuda_ops test_cuda_half test_cuda_fused test_cuda_flash_tc test_cudnn_attn \
            test_cuda_grouped bench_train; do
  f="$build/${want[$name]}"
  if [[ -x "$f" ]]; then
    cp "$f" "$stage/bin/$name"
    bins+=("$stage/bin/$name")
  else
    echo "pack.sh: WARNING: $f was not built; the pack goes without it" >&2
  fi
done
((${#bins[@]})) || die "none of the binaries was built"
for b in "${bins[@]}"; do
  arch=$(readelf -h "$b" | awk '/Machine:/ {print $2}')
  [[ "$arch" == "Advanced" ]] || die "$b is not x86-64 ($arch): the GPU machine is x86-64"
done
# The cubins in the binaries (sm_90 for the H200); cuobjdump is not always installed here.
if command -v cuobjdump >/dev/null; then
  echo "pack.sh: GPU code in megac: $(cuobjdump --list-elf "$stage/bin/megac" 2>/dev/null |
       grep -o 'sm_[0-9a-z]*' | sort -u | tr '\n' ' ')"
fi

# --- shared libraries ------------------------------------------------------------------
# Left to the GPU machine: the C library and loader, the C++ and GCC runtime (nvcc's host
# compiler needs them there) and CUDA's libraries (NVIDIA's wheels under PyTorch, the toolkit).
skip_re='^(linux-vdso|ld-linux|libc|libm|libdl|libpthread|librt|libresolv|libutil|libanl|libstdc\+\+|libgcc_s|libcuda|libcudart|libcublas|libcublasLt|libcudnn[a-z_]*|libnccl|libnvidia-[a-z-]*|libnvrtc|libnvJitLink)\.so'
declare -A seen=()
add_lib() {  # $1 = resolved path
  local p=$1 base
  base=$(basename "$p")
  [[ -n "${seen[$base]:-}" ]] && return 0
  seen[$base]=1
  cp -L "$p" "$stage/lib/$base"
}
missing=()
left=()
scan() {  # ldd of one ELF file: copy what it needs into lib/
  local line name path
  while IFS= read -r line; do
    name=$(awk '{print $1}' <<<"$line")
    [[ "$line" == *"=>"* ]] || continue
    path=$(awk '{print $3}' <<<"$line")
    if [[ "$path" == "not" ]]; then missing+=("$name (needed by $(basename "$1"))"); continue; fi
    if [[ "$name" =~ $skip_re ]]; then left+=("$name"); continue; fi
    add_lib "$path"
  done < <(ldd "$1")
}
for b in "${bins[@]}"; do scan "$b"; done

# Plug-ins the libraries open at run time (not in ldd): UCX's transports (MPICH ch4:ucx
# loads them from <dir of libucs>/ucx/) and their own dependencies. A singleton needs
# none of them (UCX's self transport is built in), but they keep shared memory working.
ucs=$(ldd "${bins[0]}" | awk '$1 ~ /^libucs\.so/ {print $3}')
if [[ -n "$ucs" ]]; then
  ucxdir="$(dirname "$(readlink -f "$ucs")")/ucx"
  if [[ -d "$ucxdir" ]]; then
    mkdir -p "$stage/lib/ucx"
    for m in "$ucxdir"/libuct_cma.so.0; do  # IB/RDMA modules need verbs: nothing to use there
      [[ -e "$m" ]] || continue
      cp -L "$m" "$stage/lib/ucx/"
      scan "$m"
    done
  fi
fi
# Dependencies of the copied libraries themselves (ldd of the binaries already lists the
# transitive closure; this catches libraries ldd reported through another path).
for l in "$stage"/lib/*.so*; do scan "$l"; done

if ((${#missing[@]})); then
  printf 'pack.sh: WARNING: not found here: %s\n' "${missing[@]}" >&2
fi

# --- env.sh ----------------------------------------------------------------------------
# scripts/gpu/env.sh: the library path for the packed programs, found without python.
cp "$root/scripts/gpu/env.sh" "$stage/env.sh"

{
  echo "megac GPU pack, built $(date -u +%Y-%m-%dT%H:%MZ) from $(git rev-parse --short HEAD 2>/dev/null || echo '?')" \
       "(working tree $(git status --porcelain 2>/dev/null | wc -l) changed files)"
  echo "nvcc: $("$nvcc" --version | tail -1)"
  echo "binaries:"; (cd "$stage" && ls -l bin | tail -n +2)
  echo "packed libraries:"; (cd "$stage/lib" && find . -type f | sort | sed 's|^\./|  |')
  echo "left to the GPU machine:"; printf '%s\n' "${left[@]}" | sort -u | sed 's/^/  /'
  # The oldest C library / C++ runtime the GPU machine may have (newest symbol versions needed).
  echo "needs at least: $(for f in "$stage"/bin/* "$stage"/lib/*.so* "$stage"/lib/ucx/*; do
      objdump -T "$f" 2>/dev/null | grep -oE '(GLIBC|GLIBCXX|CXXABI)_[0-9.]+'; done |
      sort -uV | awk -F_ '{v[$1] = $0} END {for (k in v) printf "%s ", v[k]}')"
  if ((${#missing[@]})); then echo "not found here:"; printf '  %s\n' "${missing[@]}"; fi
} > "$stage/MANIFEST.txt"

# --- the tar.xz ------------------------------------------------------------------------
mkdir -p "$pack"
rm -f "$pack"/megac-gpu.tar.xz.tmp
# xz, because gzip makes the pack twice as large (~40 MB for the libraries alone, against the
# 64 MiB carry limit of the whole working tree). A minimal root may lack the xz program (and
# python3's lzma), so the decoder travels too, uncompressed: gpu-pack/xz/ holds this machine's
# xz and its liblzma.so.5 (~0.3 MB; glibc only). selfcheck.sh tries the machine's xz, then
# that one, then python3's tarfile.
tar -C "$stage" -cf - bin lib env.sh MANIFEST.txt | xz -T0 -6 > "$pack/megac-gpu.tar.xz.tmp"
mv "$pack/megac-gpu.tar.xz.tmp" "$pack/megac-gpu.tar.xz"
cp "$stage/MANIFEST.txt" "$pack/MANIFEST.txt"
rm -rf "$pack/unpacked" "$pack/xz"  # a stale unpack must not travel
mkdir -p "$pack/xz"
cp -L "$(command -v xz)" "$pack/xz/xz"
lzma=$(ldd "$(command -v xz)" | awk '$1 ~ /^liblzma\.so/ {print $3}')
[[ -n "$lzma" ]] && cp -L "$lzma" "$pack/xz/"
LD_LIBRARY_PATH="$pack/xz" "$pack/xz/xz" -t "$pack/megac-gpu.tar.xz" ||
  die "the carried xz (gpu-pack/xz/) cannot read the pack"

raw=$(du -sb "$stage" | awk '{print $1}')
size=$(($(stat -c %s "$pack/megac-gpu.tar.xz") + $(du -sb "$pack/xz" | awk '{print $1}')))
nlib=$(find "$stage/lib" -type f | wc -l)
awk -v n="${#bins[@]}" -v l="$nlib" -v r="$raw" -v s="$size" -v lim="$limit_mib" 'BEGIN {
  printf "pack.sh: gpu-pack/megac-gpu.tar.xz: %d binaries, %d libraries, %.1f MiB raw, " \
         "%.1f MiB packed with the carried xz (%d bytes; carry limit %d MiB)\n", n, l, r / 1048576, s / 1048576, s, lim }'
((size < limit_mib * 1048576 * 3 / 4)) ||
  echo "pack.sh: WARNING: the pack takes over 3/4 of the carry limit" >&2
echo "pack.sh: carry 'gpu-pack' and run 'bash scripts/gpu/selfcheck.sh' (scripts/gpu/README.md)"
