#!/usr/bin/env bash
# tests/hf/kv_cache.sh MEGAC TEST_HF_KV [MODEL FLAGS]: `megac generate`'s key/value cache on a
# tiny model (GPT-2, or as MODEL FLAGS say, e.g. Llama-style)
# trained 20 iterations: the cached logits of every position equal the full forward's
# (test_hf_kv, relative 1e-5), and greedy and sampled generation give the same tokens with
# and without the cache, also past the full context (T = 48, 80 new tokens).
set -uo pipefail
megac="$1" kvtest="$2"
shift 2
wd=$(mktemp -d); trap 'rm -rf "$wd"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
"$megac" train --mock-data --mock-vocab-size 300 --mock-samples 4 --num-layers 2 --hidden-size 64 \
  --num-attention-heads 4 --seq-length 48 --micro-batch-size 2 --global-batch-size 4 --lr 3e-3 \
  --train-iters 20 --eval-iters 0 --num-threads 1 "$@" --save "$wd/ck" > "$wd/train.txt" 2>&1 \
  || { tail "$wd/train.txt"; fail "train"; }
"$kvtest" "$wd/ck" || fail "cached logits differ from the full forward"
for flags in "--temperature 0" "--temperature 0.8 --top-k 40 --seed 3"; do
  gen=("$megac" generate --load "$wd/ck" --prompt-ids 1,2,3,4,5 --max-new-tokens 80 --ignore-eos $flags)
  a=$("${gen[@]}") && b=$("${gen[@]}" --no-kv-cache) || fail "generate $flags"
  [[ "$a" == "$b" ]] || fail "generate $flags: with the cache '$a', without '$b'"
  echo "generate $flags: the same 80 tokens with and without the cache"
done
echo "kv_cache: ok"
