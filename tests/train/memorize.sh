#!/usr/bin/env bash
# tests/train/memorize.sh MEGAC: on a tiny repeated batch (4 distinct samples, one global
# batch) a small GPT memorises: the training loss falls below 0.1 within 150 iterations.
set -uo pipefail
megac="$1"
log=$(mktemp); trap 'rm -f "$log"' EXIT
"$megac" train --mock-data --mock-samples 4 --global-batch-size 4 --micro-batch-size 2 \
  --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 --train-iters 150 \
  --lr 3e-3 --lr-decay-style constant --weight-decay 0 --eval-iters 0 --log-interval 50 \
  --num-threads 1 --log-json "$log" | grep "^ \[[^]]*\] iteration" | cut -c1-160 || exit 1
python3 - "$log" <<'PY'
import json, sys
rows = [r for r in map(json.loads, open(sys.argv[1])) if "iteration" in r]  # not the run record
first, last = rows[0]["lm_loss"], rows[-1]["lm_loss"]
print(f"loss {first:.4f} at iteration 1 -> {last:.5f} at iteration {rows[-1]['iteration']}")
assert last < 0.1, "the model did not memorise the repeated batch"
print("memorize: ok")
PY
