#!/usr/bin/env bash
# tests/hf/run_transformers.sh MEGAC [ARGS]: runs hf_transformers.py in the Hugging Face
# test environment (tests/hf/setup_venv.sh); exit 77 (meson: SKIP) when it is missing.
venv="${MEGAC_HF_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/megac/hf-venv}"
if ! "$venv/bin/python" -c 'import torch, transformers, safetensors' 2>/dev/null; then
  echo "SKIP: no transformers environment in $venv (scripts/setup.sh or tests/hf/setup_venv.sh makes it)"
  exit 77
fi
exec "$venv/bin/python" "$(dirname "$0")/hf_transformers.py" "$@"
