#!/usr/bin/env bash
# tests/data/hf_tokenizers.sh MEGAC: runs hf_tokenizers.py in the Hugging Face test environment
# (tests/hf/setup_venv.sh; `tokenizers` comes with transformers); exit 77 (meson: SKIP) without it.
venv="${MEGAC_HF_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/megac/hf-venv}"
if ! "$venv/bin/python" -c 'import tokenizers, numpy' 2>/dev/null; then
  echo "SKIP: no Python with tokenizers in $venv (scripts/setup.sh or tests/hf/setup_venv.sh makes it)"
  exit 77
fi
command -v h5dump >/dev/null || { echo "SKIP: h5dump (hdf5-tools) not installed"; exit 77; }
exec "$venv/bin/python" "$(dirname "$0")/hf_tokenizers.py" "$@"
