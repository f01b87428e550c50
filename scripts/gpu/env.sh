# scripts/gpu/env.sh: packed as env.sh by scripts/gpu/pack.sh. Source it on the GPU machine
# with bash (`. /tmp/megac-gpu-pack/env.sh`; scripts/gpu/selfcheck.sh does). It runs no python:
# the pack must work where python3 is missing, broken or another one than the wheels'.
#   LD_LIBRARY_PATH  the pack's lib/ first, then CUDA's toolkit (/usr/local/cuda/lib64), then every
#                    lib/ of NVIDIA's Python wheels (site-packages/nvidia/*/lib, so nvidia/cu13/lib
#                    with cuBLAS/cuBLASLt and nvidia/nccl/lib), then the driver's folder
#   MEGAC_NCCL_DIR, MEGAC_CUBLASLT_DIR   the first folder on that path holding libnccl.so.2 and
#                    libcublasLt.so.13 (empty: not found)
#   MEGAC_TOOLS_LD_LIBRARY_PATH  only the pack's lib/ and those two folders: for programs run
#                    under ncu or compute-sanitizer, whose own libraries may clash with a wheel's
#   PATH, UCX_MODULE_DIR, MEGAC_PACK
# The wheels are found by globbing the usual python prefixes (the python3 on PATH, $VIRTUAL_ENV,
# /opt/torch/.venv, /opt/conda, /usr/local, /usr, ~/.local); only when libnccl.so.2 or
# libcublasLt.so.13 is still missing, a bounded `find` (20 s, depth 10) looks under /opt /usr
# /root /home /workspace. Overrides (tests): MEGAC_CUDA_LIB_DIRS, MEGAC_WHEEL_PREFIXES,
# MEGAC_WHEEL_FIND_ROOTS (each a space-separated list; set and empty = none).
_megac_pack="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
_megac_lp="$_megac_pack/lib"
_megac_add() {  # add a folder to _megac_lp once
  case ":$_megac_lp:" in *":$1:"*) ;; *) _megac_lp="$_megac_lp:$1" ;; esac
}
for _d in ${MEGAC_CUDA_LIB_DIRS-/usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib}; do
  [ -d "$_d" ] && _megac_add "$_d"
done
_megac_py=$(command -v python3 2>/dev/null || true)
_megac_pfx=""
if [ -n "$_megac_py" ]; then  # bin/python3 -> its prefix, and the prefix of what it links to
  _megac_pfx="$(dirname "$(dirname "$_megac_py")")"
  _megac_r=$(readlink -f "$_megac_py" 2>/dev/null || true)
  [ -n "$_megac_r" ] && _megac_pfx="$_megac_pfx $(dirname "$(dirname "$_megac_r")")"
fi
for _p in ${MEGAC_WHEEL_PREFIXES-$_megac_pfx ${VIRTUAL_ENV:-} /opt/torch/.venv /opt/conda /usr/local /usr ${HOME:-/root}/.local}; do
  for _d in "$_p"/lib/python3*/site-packages/nvidia/*/lib "$_p"/lib/python3*/dist-packages/nvidia/*/lib \
            "$_p"/lib/python3/dist-packages/nvidia/*/lib "$_p"/lib64/python3*/site-packages/nvidia/*/lib; do
    [ -d "$_d" ] && _megac_add "$_d"
  done
done
_megac_which() {  # the first folder of _megac_lp holding $1
  local d IFS=:
  for d in $_megac_lp; do [ -e "$d/$1" ] && { printf '%s' "$d"; return 0; }; done
  return 1
}
if ! _megac_which libnccl.so.2 >/dev/null || ! _megac_which libcublasLt.so.13 >/dev/null; then
  _megac_roots=""
  for _d in ${MEGAC_WHEEL_FIND_ROOTS-/opt /usr /root /home /workspace}; do
    [ -d "$_d" ] && _megac_roots="$_megac_roots $_d"
  done
  if [ -n "$_megac_roots" ]; then
    # shellcheck disable=SC2086
    for _d in $(timeout 20 find $_megac_roots -xdev -maxdepth 10 \
                  \( -name libnccl.so.2 -o -name libcublasLt.so.13 \) 2>/dev/null | head -20); do
      _megac_add "$(dirname "$_d")"
    done
  fi
fi
for _d in /usr/local/nvidia/lib64 /usr/local/nvidia/lib; do  # the driver (libcuda), if mounted there
  [ -d "$_d" ] && _megac_add "$_d"
done
MEGAC_NCCL_DIR=$(_megac_which libnccl.so.2 || true)
MEGAC_CUBLASLT_DIR=$(_megac_which libcublasLt.so.13 || true)
MEGAC_TOOLS_LD_LIBRARY_PATH="$_megac_pack/lib"
[ -n "$MEGAC_NCCL_DIR" ] && MEGAC_TOOLS_LD_LIBRARY_PATH="$MEGAC_TOOLS_LD_LIBRARY_PATH:$MEGAC_NCCL_DIR"
[ -n "$MEGAC_CUBLASLT_DIR" ] && [ "$MEGAC_CUBLASLT_DIR" != "$MEGAC_NCCL_DIR" ] &&
  MEGAC_TOOLS_LD_LIBRARY_PATH="$MEGAC_TOOLS_LD_LIBRARY_PATH:$MEGAC_CUBLASLT_DIR"
export MEGAC_NCCL_DIR MEGAC_CUBLASLT_DIR MEGAC_TOOLS_LD_LIBRARY_PATH
export LD_LIBRARY_PATH="$_megac_lp${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PATH="$_megac_pack/bin:$PATH"
# UCX (under MPICH) looks for its plug-ins in Debian's absolute path unless told.
export UCX_MODULE_DIR="$_megac_pack/lib/ucx"
export MEGAC_PACK="$_megac_pack"
unset _megac_pack _megac_lp _megac_py _megac_pfx _megac_r _megac_roots _d _p
unset -f _megac_add _megac_which
