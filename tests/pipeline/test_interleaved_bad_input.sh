#!/usr/bin/env bash
# tests/pipeline/test_interleaved_bad_input.sh MPIEXEC MEGAC: interleaved-schedule flags that
# cannot work (Megatron's rules, and combinations megac does not support with it) end every
# rank with exit code 2 and one line naming both flags or the numbers, before any work.
set -u
mpiexec="$1"; megac="$2"
base="--mock-data --train-iters 2 --num-layers 8 --hidden-size 64 --num-attention-heads 4 --seq-length 32 --micro-batch-size 2 --global-batch-size 8 --num-threads 1"
fail=0
expect2() {  # ranks, expected text, flags...
  local n="$1" want="$2"; shift 2
  local out rc lines
  out=$(timeout 30 "$mpiexec" -n "$n" "$megac" train $base "$@" 2>&1); rc=$?
  lines=$(grep -c "megac:" <<<"$out")
  if [[ $rc -ne 2 || $lines -ne 1 ]] || ! grep -q -- "$want" <<<"$out" || grep -q "^ \[[^]]*\] iteration" <<<"$out"; then
    echo "FAIL (rc $rc, $lines message lines, want '$want'): $*"; echo "$out" | tail -5; fail=1
  else
    echo "ok: $(grep 'megac:' <<<"$out")"
  fi
}
vpp="--virtual-pipeline-model-parallel-size"
expect2 2 "num-layers 8 is not divisible by pipeline-model-parallel-size 2 x --virtual-pipeline-model-parallel-size 3" \
  --pipeline-model-parallel-size 2 $vpp 3
expect2 2 "num-layers 8 is not divisible by pipeline-model-parallel-size 2 x --num-layers-per-virtual-pipeline-stage 3" \
  --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 3
expect2 1 "needs --pipeline-model-parallel-size >= 2, got 1" $vpp 2
expect2 2 "gives 2 model chunks per pipeline rank, but --virtual-pipeline-model-parallel-size is 4" \
  --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 2 $vpp 4
# m = 8 / (2 x DP 1) = 4 is not a multiple of PP 4... at PP 4 and global 12: m = 6
expect2 4 "number of micro-batches per step (6) to be a multiple of pipeline-model-parallel-size 4" \
  --pipeline-model-parallel-size 4 $vpp 2 --global-batch-size 12
expect2 2 "does not support --pipeline-schedule gpipe yet" --pipeline-model-parallel-size 2 $vpp 2 --pipeline-schedule gpipe
# an uneven first/last rank: v must split each rank's layers; only v, not layers per chunk
expect2 2 "does not divide the 3 layers of pipeline rank 0" \
  --pipeline-model-parallel-size 2 $vpp 2 --decoder-first-pipeline-num-layers 3
expect2 2 "give --virtual-pipeline-model-parallel-size (model chunks per rank) instead" \
  --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1 --decoder-first-pipeline-num-layers 2
expect2 2 "must be > 0" --pipeline-model-parallel-size 2 $vpp -1
[[ $fail -eq 0 ]] && echo "interleaved_bad_input: ok"
exit $fail
