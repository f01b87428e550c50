#!/usr/bin/env bash
# tests/pipeline/test_pp_bad_input.sh MPIEXEC MEGAC: pipeline layouts and flags that cannot
# work end every rank with exit code 2 and one line naming the numbers, before any work.
set -u
mpiexec="$1"; megac="$2"
base="--mock-data --train-iters 2 --num-layers 4 --hidden-size 64 --num-attention-heads 4 --seq-length 32 --micro-batch-size 2 --global-batch-size 8 --num-threads 1"
fail=0
expect2() {  # ranks, expected text, flags...
  local n="$1" want="$2"; shift 2
  local out rc lines
  out=$(timeout 30 "$mpiexec" -n "$n" "$megac" train $base "$@" 2>&1); rc=$?
  lines=$(grep -c "megac:" <<<"$out")
  if [[ $rc -ne 2 || $lines -ne 1 ]] || ! grep -q -- "$want" <<<"$out"; then
    echo "FAIL (rc $rc, $lines message lines, want '$want'): $*"; echo "$out" | tail -5; fail=1
  else
    echo "ok: $(grep 'megac:' <<<"$out")"
  fi
}
expect2 3 "world size 3 is not divisible by tensor-model-parallel-size 1 x pipeline-model-parallel-size 2 = 2" \
  --pipeline-model-parallel-size 2
expect2 2 "world size 2 is not divisible by tensor-model-parallel-size 1 x pipeline-model-parallel-size 4 = 4" \
  --pipeline-model-parallel-size 4
expect2 4 "num-layers 6 is not divisible by pipeline-model-parallel-size 4" \
  --pipeline-model-parallel-size 4 --num-layers 6
expect2 2 "num-layers 1 is not divisible by pipeline-model-parallel-size 2" \
  --pipeline-model-parallel-size 2 --num-layers 1
expect2 1 "pipeline-schedule must be 1f1b or gpipe, got 'interleaved'" --pipeline-schedule interleaved
[[ $fail -eq 0 ]] && echo "pp_bad_input: ok"
exit $fail
