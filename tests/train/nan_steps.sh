#!/usr/bin/env bash
# tests/train/nan_steps.sh MPIEXEC MEGAC: a NaN/Inf gradient norm skips the step (counted,
# logged, no update) and training goes on; more than --max-nan-iters in a row stops the run
# (exit 3, one clear line) and the last checkpoint stays loadable. NaNs are injected with the
# test hook MEGAC_TEST_NAN_AT_ITER (core/fault.h) on 2 ranks (TP 2).
set -uo pipefail
mpiexec="$1" megac="$2"
wd=$(mktemp -d); trap 'rm -rf "$wd"' EXIT
fail() { echo "FAIL: $*"; cat "$wd/out.txt" 2>/dev/null | tail -15; exit 1; }
flags=(--tensor-model-parallel-size 2 --num-threads 1 --mock-data --num-layers 2 --hidden-size 64
       --num-attention-heads 4 --seq-length 32 --micro-batch-size 2 --global-batch-size 4
       --lr 1e-3 --log-interval 1 --eval-iters 0 --max-nan-iters 3)

# One NaN step: skipped, counted, training goes on to the end.
MEGAC_TEST_NAN_AT_ITER=3 "$mpiexec" -n 2 "$megac" train "${flags[@]}" --train-iters 8 \
  --log-json "$wd/nan.jsonl" >"$wd/out.txt" 2>&1 || fail "a single NaN step ended the run"
grep -q "iteration 3: NaN or Inf .*step skipped" "$wd/out.txt" || fail "no skip message"
# Megatron's counts per log interval (here 1): iteration 3's line counts it, the next does not
grep -q "iteration        3/ .*number of skipped iterations:   1 | number of nan iterations:   1 |" \
  "$wd/out.txt" || fail "not counted"
grep -q "iteration        4/ .*number of skipped iterations:   0 | number of nan iterations:   0 |" \
  "$wd/out.txt" || fail "counted in the next interval too"
"$mpiexec" -n 2 "$megac" train "${flags[@]}" --train-iters 8 --log-json "$wd/ref.jsonl" >/dev/null 2>&1
python3 - "$wd/nan.jsonl" "$wd/ref.jsonl" <<'PY' || fail "the skipped step changed the model"
import json, sys
nan = [r for r in map(json.loads, open(sys.argv[1])) if "iteration" in r]  # not the run record
ref = [r for r in map(json.loads, open(sys.argv[2])) if "iteration" in r]
assert nan[2]["skipped"] == 1 and all(r["skipped"] == 0 for i, r in enumerate(nan) if i != 2)
# Iterations 1-2 are unchanged; iteration 4 sees the parameters of iteration 3's start,
# so its loss is not the reference's iteration 4 loss (that model had one more update).
assert [r["lm_loss"] for r in nan[:2]] == [r["lm_loss"] for r in ref[:2]]
assert nan[3]["lm_loss"] != ref[3]["lm_loss"]
PY
echo "ok: a NaN step at iteration 3 was skipped and counted; training went on to iteration 8"

# NaN at 3..7 with --max-nan-iters 3: the third in a row (iteration 5) stops the run; the save
# due at iteration 4 falls inside the streak and is skipped, so `latest` stays at 2.
MEGAC_TEST_NAN_AT_ITER=3,4,5,6,7 "$mpiexec" -n 2 "$megac" train "${flags[@]}" --train-iters 10 \
  --save "$wd/ckpt" --save-interval 2 >"$wd/out.txt" 2>&1
rc=$?
[[ $rc -eq 3 ]] || fail "exit code $rc, want 3"
grep -q "megac: 3 NaN/Inf iterations in a row (limit --max-nan-iters 3): stopping" "$wd/out.txt" || fail "no stop message"
grep -q "iteration 4: inside a NaN/Inf streak (2 in a row): checkpoint not saved" "$wd/out.txt" \
  || fail "the save inside the NaN streak was not skipped with a message"
[[ "$(cat "$wd/ckpt/latest_checkpointed_iteration.txt")" == 2 ]] || fail "latest checkpoint is not iteration 2"
[[ ! -e "$wd/ckpt/iter_0000004" ]] || fail "a checkpoint was written inside the NaN streak"
"$mpiexec" -n 2 "$megac" train "${flags[@]}" --train-iters 6 --load "$wd/ckpt" >"$wd/out.txt" 2>&1 \
  || fail "the last checkpoint does not load"
grep -q "iteration        6/" "$wd/out.txt" || fail "resumed run did not train"
grep -q "iteration        3/" "$wd/out.txt" || fail "the resumed run did not start at iteration 3"
echo "ok: 3 NaN steps in a row stopped the run (exit 3) at --max-nan-iters 3; the save at iteration 4 (inside the streak) was skipped; checkpoint 2 loads and training resumes"

# A stop (here --exit-interval 4) inside a NaN streak (iterations 3, 4) saves nothing: the
# stop line says so once and `latest` stays at the last good checkpoint, iteration 2.
MEGAC_TEST_NAN_AT_ITER=3,4 "$mpiexec" -n 2 "$megac" train "${flags[@]}" --train-iters 10 \
  --exit-interval 4 --save "$wd/ckpt2" --save-interval 2 >"$wd/out.txt" 2>&1 || fail "the stop failed"
grep -q "stopped at iteration 4 of 10 .*inside a NaN/Inf streak: not saved, the last checkpoint stays" \
  "$wd/out.txt" || fail "no stop line naming the NaN streak"
[[ $(grep -c "checkpoint not saved" "$wd/out.txt") -eq 1 ]] || fail "the skipped save is not reported once"
[[ "$(cat "$wd/ckpt2/latest_checkpointed_iteration.txt")" == 2 ]] || fail "latest is not iteration 2"
echo "ok: a stop inside a NaN streak kept checkpoint 2 as latest"
