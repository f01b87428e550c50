#!/usr/bin/env bash
# tests/data/megatron_order.sh MEGAC: megac's sample order on Megatron .bin/.idx data against
# Megatron-Core's own dataset builder (megatron_order.py). Needs megatron-core (with its
# compiled helpers) and numpy in the Hugging Face test environment (tests/hf/setup_venv.sh);
# exit 77 (meson: SKIP) without them.
set -uo pipefail
venv="${MEGAC_HF_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/megac/hf-venv}"
# (megatron/core/__init__.py cannot be imported under torch 1.13: look for the helpers' file)
probe='import glob, os, numpy, torch, megatron
assert glob.glob(os.path.join(list(megatron.__path__)[0], "core/datasets/helpers_cpp*.so"))'
if ! "$venv/bin/python" -c "$probe" 2>/dev/null; then
  echo "SKIP: no Python with megatron-core and numpy in $venv (tests/hf/setup_venv.sh installs megatron-core)"
  exit 77
fi
source "$(dirname "$0")/../lib.sh"
lib_tmpdir morder
"$venv/bin/python" "$(dirname "$0")/megatron_order.py" "$1" "$tmp"
