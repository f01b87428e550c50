#!/usr/bin/env bash
# tests/grid3d/kill_resume.sh MPIEXEC MEGAC: a rank killed with SIGKILL at a random moment
# ends the whole job within 30 s with a line naming the lost rank, and resuming from the
# last checkpoint reproduces the uninterrupted run's losses and grad norms bit for bit.
# Layout (TP, PP, DP) = (2, 2, 2); checkpoints every 2 iterations. The victim rank and the
# moment (after iteration 4 or later is logged, plus 0-0.5 s) come from SEED (printed).
set -uo pipefail
mpiexec="$1" megac="$2"
seed="${SEED:-$RANDOM}"
RANDOM=$seed
victim=$((RANDOM % 8)); delay_ms=$((RANDOM % 500)); after_iter=$((4 + RANDOM % 8))
echo "seed $seed: kill rank $victim $delay_ms ms after iteration $after_iter is logged"
wd=$(mktemp -d)
trap 'rm -rf "$wd"' EXIT
fail() { echo "FAIL: $*"; tail -20 "$wd/killed.txt" 2>/dev/null; exit 1; }
flags=(--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --num-threads 1 --mock-data
       --train-iters 30 --num-layers 4 --hidden-size 64 --num-attention-heads 4 --seq-length 32
       --micro-batch-size 2 --global-batch-size 8 --lr 1e-3 --log-interval 1 --eval-iters 0)

"$mpiexec" -n 8 "$megac" train "${flags[@]}" --log-json "$wd/straight.jsonl" >/dev/null 2>&1 \
  || fail "the uninterrupted run failed"

"$mpiexec" -n 8 "$megac" train "${flags[@]}" --save "$wd/ckpt" --save-interval 2 \
  >"$wd/killed.txt" 2>&1 &
job=$!
for _ in $(seq 600); do  # wait (at most 60 s) for the chosen iteration
  grep -q "^ \[[^]]*\] iteration *$after_iter/" "$wd/killed.txt" && break
  sleep 0.1
done
grep -q "^ \[[^]]*\] iteration *$after_iter/" "$wd/killed.txt" || fail "the run never reached iteration $after_iter"
pid=$(grep -m1 "process ids" "$wd/killed.txt" | grep -o " $victim:[0-9]*" | cut -d: -f2)
[[ -n "$pid" ]] || fail "no pid for rank $victim"
sleep "$(printf '0.%03d' "$delay_ms")"
kill -9 "$pid"
t0=$(date +%s)
for _ in $(seq 300); do kill -0 "$job" 2>/dev/null || break; sleep 0.1; done
kill -0 "$job" 2>/dev/null && { kill -9 "$job"; fail "the job still runs 30 s after rank $victim was killed"; }
wait "$job"; rc=$?
ended=$(( $(date +%s) - t0 ))
[[ $rc -ne 0 ]] || fail "the job exited 0 although rank $victim was killed"
line=$(grep -o -m1 "\[rank $victim\] megac: rank process $pid killed by signal 9.*" "$wd/killed.txt")
[[ -n "$line" ]] || fail "no line naming rank $victim"
echo "ok: the job ended ${ended} s after the kill (exit $rc): $line"
last=$(cat "$wd/ckpt/latest_checkpointed_iteration.txt")
echo "last complete checkpoint: iteration $last"

"$mpiexec" -n 8 "$megac" train "${flags[@]}" --load "$wd/ckpt" --log-json "$wd/resumed.jsonl" \
  >"$wd/resumed.txt" 2>&1 || { cat "$wd/resumed.txt"; fail "the resumed run failed"; }
python3 - "$wd/straight.jsonl" "$wd/resumed.jsonl" "$last" <<'PY' || fail "resumed losses differ"
import json, sys
straight = {r["iteration"]: r for r in map(json.loads, open(sys.argv[1])) if "iteration" in r}
resumed = [r for r in map(json.loads, open(sys.argv[2])) if "iteration" in r]  # not the run record
first = int(sys.argv[3]) + 1
assert resumed and resumed[0]["iteration"] == first, f"resumed at {resumed[0]['iteration']}, want {first}"
for r in resumed:
    s = straight[r["iteration"]]
    assert (r["lm_loss"], r["grad_norm"]) == (s["lm_loss"], s["grad_norm"]), (r, s)
print(f"ok: iterations {first}..{resumed[-1]['iteration']} after resuming equal the uninterrupted run bit for bit")
PY
