#!/usr/bin/env bash
# tests/train/eod_mask_loss.sh: --eod-mask-loss (targets equal to the data's end-of-document
# id weigh 0; a micro-batch's loss is the mean over its other tokens).
#   One rank, TP 2, DP 2 and PP 2 (and TP 2 x PP 2 with sequence parallelism) give the same
#   losses and grad norms (parity.py, fp32 round-off) on short documents, where about one
#   target in 20 is masked; the flag changes the loss; on a Megatron prefix whose documents
#   hold no EOD, nothing is masked and the losses are bitwise those without the flag;
#   --mock-data (no end-of-document id) is refused with one line, exit 2. The fused classifier
#   gives bitwise the losses and grad norms of MEGAC_NO_FUSED_CLASSIFIER=1 (TP 1, TP 2 x PP 2).
#   Context parallelism (each rank counts its chunks of a sequence, the CP group sums the
#   counts): CP 2 and 4, TP 2 x CP 2 with sequence parallelism, PP 2 x CP 2 and DP 2 x CP 2
#   agree with one rank, with and without --calculate-per-token-loss.
#   --calculate-per-token-loss: see its block below.
# usage: eod_mask_loss.sh MPIEXEC MEGAC PARITY_PY
set -uo pipefail
mpiexec=$1 megac=$2 parity=$3
source "$(dirname "$0")/../lib.sh"
lib_tmpdir eodmask

lib_corpus "$tmp" 3 300 8 30 "abcdef "
lib_megatron_prefix "$tmp/c.jsonl" "$tmp/raw"  # the same text, no EOD
"$megac" preprocess --input "$tmp/c.jsonl" --output "$tmp/c.h5" >/dev/null || fail "preprocess"

tiny=(--train-iters 6 --num-layers 4 --hidden-size 32 --num-attention-heads 4 --seq-length 32
      --micro-batch-size 2 --global-batch-size 8 --lr 3e-3 --log-interval 100 --eval-iters 0
      --split 1,0,0 --data-path "$tmp/c.h5")
python3 "$parity" --megac "$megac" --mpiexec "$mpiexec" --tol 1e-5 \
  --layouts 1,1,1 2,1,1 1,1,2 1,2,1 2,2,1 -- "${tiny[@]}" --eod-mask-loss || fail "parity with --eod-mask-loss"
python3 "$parity" --megac "$megac" --mpiexec "$mpiexec" --tol 1e-5 --extra=--sequence-parallel \
  --layouts 1,1,1 2,2,1 -- "${tiny[@]}" --eod-mask-loss || fail "parity with --eod-mask-loss, sequence parallel"
# context parallelism: a sequence's unmasked targets are counted over the CP group's chunks
for pt in "" --calculate-per-token-loss; do
  python3 "$parity" --megac "$megac" --mpiexec "$mpiexec" --tol 1e-5 \
    --layouts 1,1,1 1,1,1,2 1,1,1,4 1,2,1,2 1,1,2,2 -- "${tiny[@]}" --use-flash-attn --eod-mask-loss $pt ||
    fail "parity with --eod-mask-loss $pt, context parallel"
  python3 "$parity" --megac "$megac" --mpiexec "$mpiexec" --tol 1e-5 --extra=--sequence-parallel \
    --layouts 1,1,1 2,1,1,2 -- "${tiny[@]}" --use-flash-attn --eod-mask-loss $pt ||
    fail "parity with --eod-mask-loss $pt, TP 2 x CP 2, sequence parallel"
done
# the fused classifier (the weighted dscale in the forward's pass): bitwise the backward's
python3 "$parity" --megac "$megac" --mpiexec "$mpiexec" --tol 0 --paired \
  --ref-env MEGAC_NO_FUSED_CLASSIFIER=1 --layouts 1,1,1 2,2,1 -- "${tiny[@]}" --eod-mask-loss ||
  fail "--eod-mask-loss: the fused classifier is not bitwise the unfused one"

losses() {  # losses NAME ARGS...: the lm_loss values of a one-rank run
  "$megac" train --num-threads 1 "${tiny[@]}" --log-json "$tmp/$1.jsonl" "${@:2}" > "$tmp/$1.out" 2>&1 ||
    fail "$1: $(tail -3 "$tmp/$1.out")"
  grep -oE '"lm_loss":[^,}]*' "$tmp/$1.jsonl" > "$tmp/$1.loss"
  [[ -s "$tmp/$1.loss" ]] || fail "$1: no losses"
}
losses plain
losses masked --eod-mask-loss
cmp -s "$tmp/plain.loss" "$tmp/masked.loss" && fail "--eod-mask-loss did not change the loss"
losses raw --data-path "$tmp/raw" --vocab-size 256
losses raw_masked --data-path "$tmp/raw" --vocab-size 256 --eod-mask-loss
cmp -s "$tmp/raw.loss" "$tmp/raw_masked.loss" || fail "no EOD in the data, yet --eod-mask-loss changed the loss"

# --calculate-per-token-loss (Megatron's): the step's loss is the sum over the global batch's
# unmasked tokens over their count, so it does not depend on how the batch is cut into
# micro-batches (the default mean of micro-batch means does): micro-batch 2 (4 per step) = 8
# (one) = 1, and every layout agrees; without EOD in the data it changes nothing, bitwise; a
# checkpoint resumes at one rank from TP 2 x PP 2 and a run without the flag is refused.
pt=(--eod-mask-loss --calculate-per-token-loss)
python3 "$parity" --megac "$megac" --mpiexec "$mpiexec" --tol 1e-5 \
  --layouts 1,1,1 2,1,1 1,1,2 1,2,1 2,2,1 -- "${tiny[@]}" "${pt[@]}" || fail "parity with ${pt[*]}"
python3 "$parity" --megac "$megac" --mpiexec "$mpiexec" --tol 1e-5 --layouts 1,1,1 1,1,1 \
  --extra="--micro-batch-size 8" -- "${tiny[@]}" "${pt[@]}" || fail "${pt[*]}: micro-batch 8 differs from 2"
python3 "$parity" --megac "$megac" --mpiexec "$mpiexec" --tol 1e-5 --layouts 1,1,1 1,1,2 \
  --extra="--micro-batch-size 1" -- "${tiny[@]}" "${pt[@]}" || fail "${pt[*]}: micro-batch 1 at DP 2 differs"
losses per_token "${pt[@]}"
cmp -s "$tmp/masked.loss" "$tmp/per_token.loss" && fail "--calculate-per-token-loss did not change the masked loss"
losses masked_mb8 --eod-mask-loss --micro-batch-size 8
losses per_token_mb8 "${pt[@]}" --micro-batch-size 8
cmp -s "$tmp/masked_mb8.loss" "$tmp/per_token_mb8.loss" ||
  fail "one micro-batch per step: the per-token loss should be bitwise the micro-batch mean"
cmp -s "$tmp/masked.loss" "$tmp/masked_mb8.loss" && fail "the default masked loss should depend on the micro-batch size"
losses raw_pt --data-path "$tmp/raw" --vocab-size 256 "${pt[@]}"
cmp -s "$tmp/raw.loss" "$tmp/raw_pt.loss" || fail "no EOD in the data, yet ${pt[*]} changed the loss"
"$mpiexec" -n 4 "$megac" train --num-threads 1 "${tiny[@]}" "${pt[@]}" --train-iters 3 --lr-decay-iters 6 \
  --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --save "$tmp/ck" > "$tmp/s.out" 2>&1 ||
  fail "save with ${pt[*]}: $(tail -3 "$tmp/s.out")"
"$megac" train --num-threads 1 "${tiny[@]}" "${pt[@]}" --load "$tmp/ck" --log-json "$tmp/resumed.jsonl" \
  > "$tmp/r.out" 2>&1 || fail "resume with ${pt[*]}: $(tail -3 "$tmp/r.out")"
python3 - "$tmp/per_token.jsonl" "$tmp/resumed.jsonl" <<'PY' || fail "resumed per-token losses differ"
import json, sys
a = {r["iteration"]: r["lm_loss"] for r in map(json.loads, open(sys.argv[1])) if "iteration" in r}
b = {r["iteration"]: r["lm_loss"] for r in map(json.loads, open(sys.argv[2])) if "iteration" in r}
worst = max(abs(b[i] - a[i]) / abs(a[i]) for i in b)
print(f"per-token loss resumed at one rank from TP 2 x PP 2: iterations {sorted(b)}, largest relative difference {worst:.2e}")
sys.exit(0 if sorted(b) == [4, 5, 6] and worst < 1e-5 else 1)
PY
out=$("$megac" train --num-threads 1 "${tiny[@]}" --eod-mask-loss --load "$tmp/ck" 2>&1); rc=$?
[[ $rc -eq 2 ]] && grep -q "calculate-per-token-loss 1 (this run 0)" <<<"$out" ||
  fail "a run without --calculate-per-token-loss loading its checkpoint: rc $rc: $out"

out=$("$megac" train --mock-data --train-iters 1 --eod-mask-loss 2>&1); rc=$?
[[ $rc -eq 2 && $(grep -c "^megac:" <<<"$out") -eq 1 ]] &&
  grep -qF -- "--eod-mask-loss needs --data-path data: --mock-data has no end-of-document id" <<<"$out" ||
  fail "--mock-data --eod-mask-loss: rc $rc: $out"

lib_done eod_mask_loss
