#!/usr/bin/env bash
# tests/data/spm_tokenizers.sh MEGAC: runs spm_tokenizers.py in the Hugging Face test environment
# (tests/hf/setup_venv.sh adds `sentencepiece`; `tokenizers` comes with transformers); exit 77
# (meson: SKIP) without them.
venv="${MEGAC_HF_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/megac/hf-venv}"
if ! "$venv/bin/python" -c 'import sentencepiece, tokenizers, numpy' 2>/dev/null; then
  echo "SKIP: no Python with sentencepiece and tokenizers in $venv (tests/hf/setup_venv.sh makes it)"
  exit 77
fi
command -v h5dump >/dev/null || { echo "SKIP: h5dump (hdf5-tools) not installed"; exit 77; }
exec "$venv/bin/python" "$(dirname "$0")/spm_tokenizers.py" "$@"
