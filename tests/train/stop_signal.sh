#!/usr/bin/env bash
# tests/train/stop_signal.sh MPIEXEC MEGAC: a stop signal (SIGTERM from scancel or a time
# limit, SIGUSR1 from Slurm's --signal, SIGINT from Ctrl-C) at a random moment, including
# during a checkpoint save, makes every rank stop at the next iteration boundary, save a
# checkpoint there and exit 0 with one line naming the iteration and the signal. The resumed
# run continues exactly there: it appends to the same --log-json (a run_start record, no
# record lost) and reproduces the uninterrupted run's losses bit for bit. Then
# --exit-interval and --exit-duration-in-mins stop the same way, and --no-exit-signal-handler
# lets SIGTERM end the run at once. The signal, its target (mpiexec, which forwards it, or
# one rank) and the moment come from SEED (printed).
set -uo pipefail
mpiexec="$1" megac="$2"
seed="${SEED:-$RANDOM}"
RANDOM=$seed
sigs=(TERM USR1 INT); sig=${sigs[RANDOM % 3]}
target=$((RANDOM % 3))  # 0: mpiexec, 1: rank 0, 2: rank 1
after_iter=$((3 + RANDOM % 10)); delay_ms=$((RANDOM % 300))
echo "seed $seed: SIG$sig to $( ((target == 0)) && echo mpiexec || echo "rank $((target - 1))") $delay_ms ms after iteration $after_iter is logged"
wd=$(mktemp -d); trap 'rm -rf "$wd"' EXIT
fail() { echo "FAIL: $*"; tail -8 "$wd/out.txt" 2>/dev/null; exit 1; }
flags=(--tensor-model-parallel-size 2 --num-threads 1 --mock-data --train-iters 40 --num-layers 2
       --hidden-size 64 --num-attention-heads 4 --seq-length 32 --micro-batch-size 2
       --global-batch-size 4 --lr 1e-3 --log-interval 1 --eval-iters 0)

"$mpiexec" -n 4 "$megac" train "${flags[@]}" --log-json "$wd/straight.jsonl" >/dev/null 2>&1 \
  || fail "the uninterrupted run failed"

# Saves every 2 iterations: the signal often lands during a save.
"$mpiexec" -n 4 "$megac" train "${flags[@]}" --save "$wd/ckpt" --save-interval 2 \
  --log-json "$wd/log.jsonl" >"$wd/out.txt" 2>&1 &
job=$!
for _ in $(seq 600); do
  grep -q "^ \[[^]]*\] iteration *$after_iter/" "$wd/out.txt" && break
  sleep 0.1
done
grep -q "^ \[[^]]*\] iteration *$after_iter/" "$wd/out.txt" || fail "the run never reached iteration $after_iter"
pid=$job
if ((target > 0)); then
  pid=$(grep -m1 "process ids" "$wd/out.txt" | grep -o " $((target - 1)):[0-9]*" | cut -d: -f2)
  [[ -n "$pid" ]] || fail "no pid for rank $((target - 1))"
fi
sleep "$(printf '0.%03d' "$delay_ms")"
kill -"$sig" "$pid"
for _ in $(seq 300); do kill -0 "$job" 2>/dev/null || break; sleep 0.1; done
kill -0 "$job" 2>/dev/null && { kill -9 "$job"; fail "the job still runs 30 s after SIG$sig"; }
wait "$job"; rc=$?
[[ $rc -eq 0 ]] || fail "exit code $rc after SIG$sig, want 0"
line=$(grep -m1 "^megac train: stopped at iteration" "$wd/out.txt")
[[ "$line" =~ ^megac\ train:\ stopped\ at\ iteration\ ([0-9]+)\ of\ 40\ \(SIG$sig\ received\)\;\ checkpoint\ (saved|already)\ at\ iteration\ ([0-9]+)\ in\ $wd/ckpt\;\ resume\ with\ --load\ $wd/ckpt$ ]] \
  || fail "no stop line naming the iteration and SIG$sig: '$line'"
stop=${BASH_REMATCH[1]}
((stop >= after_iter && stop < 40)) || fail "stopped at iteration $stop, signalled after $after_iter"
[[ "$(cat "$wd/ckpt/latest_checkpointed_iteration.txt")" == "$stop" ]] || fail "latest is not $stop"
[[ -f "$wd/ckpt/iter_$(printf %07d "$stop")/checkpoint.h5" ]] || fail "no checkpoint file at $stop"
[[ -z "$(find "$wd/ckpt" -name '*.tmp')" ]] || fail "a temporary file was left: $(find "$wd/ckpt" -name '*.tmp')"
[[ ! -e "$wd/ckpt/.megac-save.lock" ]] || fail "the save lock was left behind"
echo "ok: $line"

"$mpiexec" -n 4 "$megac" train "${flags[@]}" --save "$wd/ckpt" --load "$wd/ckpt" --save-interval 2 \
  --log-json "$wd/log.jsonl" >"$wd/out.txt" 2>&1 || fail "the resumed run failed"
python3 - "$wd/straight.jsonl" "$wd/log.jsonl" "$stop" <<'PY' || fail "the resumed run lost or changed iterations"
import json, sys
straight = [r for r in map(json.loads, open(sys.argv[1])) if "iteration" in r]  # not the run record
log = [json.loads(l) for l in open(sys.argv[2])]
stop = int(sys.argv[3])
assert log[0].get("event") == "run_start" and log[0]["resumed"] == 0, log[0]  # the first run's record
starts = [i for i, r in enumerate(log) if r.get("event") == "run_start" and r["resumed"]]
assert len(starts) == 1, f"{len(starts)} resumed run_start records, want 1"
s = log[starts[0]]
assert s["start_iteration"] == stop and s["resumed"] == 1 and s["superseded_records"] == 0, s
its = [r["iteration"] for r in log if "iteration" in r]
assert its == list(range(1, 41)), f"iterations in the log: {its}"
recs = [r for r in log if "iteration" in r]
for r, ref in zip(recs, straight):
    assert (r["lm_loss"], r["grad_norm"]) == (ref["lm_loss"], ref["grad_norm"]), (r, ref)
print(f"ok: one log holds iterations 1..40 (run_start at {stop}); the resumed run equals the uninterrupted one bit for bit")
PY

# --exit-interval 3: stop at iteration 3 (the first multiple of 3 this run reaches), save, exit 0.
rm -rf "$wd/c2"
"$mpiexec" -n 4 "$megac" train "${flags[@]}" --exit-interval 3 --train-iters 20 --save "$wd/c2" \
  --save-interval 6 >"$wd/out.txt" 2>&1 || fail "--exit-interval: exit code $?"
grep -q "^megac train: stopped at iteration 3 of 20 (--exit-interval 3 reached); checkpoint saved at iteration 3" "$wd/out.txt" \
  || fail "--exit-interval 3: no stop at iteration 3"
[[ "$(cat "$wd/c2/latest_checkpointed_iteration.txt")" == 3 ]] || fail "--exit-interval: latest is not 3"
echo "ok: --exit-interval 3 stopped at iteration 3 with a checkpoint"

# --exit-duration-in-mins 0.03 (1.8 s from set-up) of a run far too long for it: exit 0,
# a checkpoint at the iteration the stop line names.
"$mpiexec" -n 4 "$megac" train "${flags[@]}" --train-iters 100000 --exit-duration-in-mins 0.03 \
  --save "$wd/c3" >"$wd/out.txt" 2>&1 || fail "--exit-duration-in-mins: exit code $?"
line=$(grep -m1 "^megac train: stopped at iteration" "$wd/out.txt")
[[ "$line" =~ stopped\ at\ iteration\ ([1-9][0-9]*)\ of\ 100000\ \(--exit-duration-in-mins\ 0.03\ reached\) ]] \
  || fail "--exit-duration-in-mins: no stop line: '$line'"
[[ "$(cat "$wd/c3/latest_checkpointed_iteration.txt")" == "${BASH_REMATCH[1]}" ]] || fail "--exit-duration-in-mins: latest"
echo "ok: --exit-duration-in-mins 0.03 stopped the run at iteration ${BASH_REMATCH[1]} with a checkpoint"

# A stop during a long validation (--eval-iters far past any time limit) cuts it short at
# the next batch, agreed by every rank, logs no loss, then stops, saving as above.
rm -rf "$wd/c4"
"$mpiexec" -n 4 "$megac" train "${flags[@]}" --eval-iters 100000000 --eval-interval 2 \
  --save "$wd/c4" >"$wd/out.txt" 2>&1 &
job=$!
for _ in $(seq 600); do grep -q "^ \[[^]]*\] iteration *2/" "$wd/out.txt" && break; sleep 0.1; done
sleep 1
kill -TERM "$job"
for _ in $(seq 300); do kill -0 "$job" 2>/dev/null || break; sleep 0.1; done
kill -0 "$job" 2>/dev/null && { kill -9 "$job"; fail "a long validation: the job still runs 30 s after SIGTERM"; }
wait "$job" || fail "a long validation: exit code $? after SIGTERM, want 0"
grep -q "^megac train: validation stopped after [0-9]* of 100000000 batches (SIGTERM received): no loss logged" \
  "$wd/out.txt" || fail "a long validation: no line saying it was cut short"
grep -q "^megac train: stopped at iteration 2 of 40 (SIGTERM received); checkpoint saved at iteration 2" \
  "$wd/out.txt" || fail "a long validation: no stop with a checkpoint at iteration 2"
! grep -q "validation loss" "$wd/out.txt" || fail "a long validation: a partial loss was logged"
[[ "$(cat "$wd/c4/latest_checkpointed_iteration.txt")" == 2 ]] || fail "a long validation: latest is not 2"
echo "ok: SIGTERM during a long validation stopped it and saved iteration 2"

# --no-exit-signal-handler: SIGTERM to a rank ends the job at once, non-zero, no checkpoint.
"$mpiexec" -n 4 "$megac" train "${flags[@]}" --no-exit-signal-handler --train-iters 100000 \
  >"$wd/out.txt" 2>&1 &
job=$!
for _ in $(seq 600); do grep -q "^ \[[^]]*\] iteration *2/" "$wd/out.txt" && break; sleep 0.1; done
pid=$(grep -m1 "process ids" "$wd/out.txt" | grep -o " 1:[0-9]*" | cut -d: -f2)
kill -TERM "$pid"
for _ in $(seq 300); do kill -0 "$job" 2>/dev/null || break; sleep 0.1; done
kill -0 "$job" 2>/dev/null && { kill -9 "$job"; fail "--no-exit-signal-handler: the job still runs"; }
wait "$job"; rc=$?
((rc != 0)) || fail "--no-exit-signal-handler: exit 0 after SIGTERM"
grep -q "stopped at iteration" "$wd/out.txt" && fail "--no-exit-signal-handler: stopped gracefully"
echo "ok: --no-exit-signal-handler: SIGTERM ended the run at once (exit $rc)"
