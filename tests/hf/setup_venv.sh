#!/usr/bin/env bash
# tests/hf/setup_venv.sh [DIR]: the Python environment of the Hugging Face tests (suite 'hf'):
# a virtual environment over Debian's python3 (which has python3-torch, installed by
# scripts/setup.sh) with `transformers` and `safetensors` from the package registry,
# `tensorboard` (tests/train/tensorboard_events.py) and `sentencepiece`
# (tests/data/spm_tokenizers.py).
# DIR: $MEGAC_HF_VENV, else ~/.cache/megac/hf-venv. Idempotent: an environment that already
# imports both is kept. Without network the tests that need it skip; this never fails the
# set-up (exit 0 with one line saying what is missing).
set -uo pipefail
venv="${1:-${MEGAC_HF_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/megac/hf-venv}}"
py=/usr/bin/python3  # Debian's interpreter: python3-torch is built for it
probe='import torch, transformers, safetensors'
# tests/train/tensorboard_events.py reads megac's event files back with the tensorboard package.
tb_probe='from tensorboard.backend.event_processing.event_accumulator import EventAccumulator'
add_tensorboard() {  # into the environment, when it exists; never fails
  [[ -x "$venv/bin/python" ]] || return 0
  "$venv/bin/python" -c "$tb_probe" 2>/dev/null && return 0
  if "$venv/bin/pip" install -q --disable-pip-version-check "tensorboard>=2.10" >>"$venv.log" 2>&1 &&
     "$venv/bin/python" -c "$tb_probe" 2>/dev/null; then
    echo "setup: tensorboard installed in $venv"
  else
    echo "setup: could not install tensorboard into $venv (see $venv.log): the TensorBoard test will skip"
  fi
}
# tests/data/megatron_order.py compares megac's .bin/.idx sample order with Megatron-Core's.
mcore_probe='import glob, os, numpy, megatron
assert glob.glob(os.path.join(list(megatron.__path__)[0], "core/datasets/helpers_cpp*.so"))'
add_megatron_core() {  # into the environment, when it exists; never fails
  [[ -x "$venv/bin/python" ]] || return 0
  "$venv/bin/python" -c "$mcore_probe" 2>/dev/null && return 0
  if "$venv/bin/pip" install -q --disable-pip-version-check --no-deps "megatron-core==0.16.1" >>"$venv.log" 2>&1 &&
     "$venv/bin/python" -c "$mcore_probe" 2>/dev/null; then
    echo "setup: megatron-core installed in $venv"
  else
    echo "setup: could not install megatron-core into $venv (see $venv.log): the Megatron sample-order test will skip"
  fi
}
# tests/data/spm_tokenizers.py trains SentencePiece models with the sentencepiece package.
add_sentencepiece() {  # into the environment, when it exists; never fails
  [[ -x "$venv/bin/python" ]] || return 0
  "$venv/bin/python" -c 'import sentencepiece' 2>/dev/null && return 0
  if "$venv/bin/pip" install -q --disable-pip-version-check "sentencepiece>=0.1.99" >>"$venv.log" 2>&1 &&
     "$venv/bin/python" -c 'import sentencepiece' 2>/dev/null; then
    echo "setup: sentencepiece installed in $venv"
  else
    echo "setup: could not install sentencepiece into $venv (see $venv.log): the SentencePiece test will skip"
  fi
}
if [[ -x "$venv/bin/python" ]] && "$venv/bin/python" -c "$probe" 2>/dev/null; then
  echo "setup: Hugging Face test environment present ($venv)"; add_tensorboard; add_megatron_core; add_sentencepiece; exit 0
fi
if ! "$py" -c 'import torch' 2>/dev/null; then
  echo "setup: python3-torch is not installed: the Hugging Face tests will skip"; exit 0
fi
t0=$(date +%s)
# transformers 4.46 is the last release that supports Debian 12's torch 1.13.
if "$py" -m venv --system-site-packages "$venv" >/dev/null 2>&1 &&
   "$venv/bin/pip" install -q --disable-pip-version-check "transformers>=4.40,<4.47" "safetensors>=0.4" \
     >"$venv.log" 2>&1 && "$venv/bin/python" -c "$probe" 2>/dev/null; then
  echo "setup: Hugging Face test environment ready in $(( $(date +%s) - t0 )) s ($venv)"
else
  echo "setup: could not install transformers + safetensors into $venv (no network? see $venv.log):" \
       "the Hugging Face tests will skip"
fi
add_tensorboard
add_megatron_core
add_sentencepiece
exit 0
