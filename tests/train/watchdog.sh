#!/usr/bin/env bash
# tests/train/watchdog.sh MPIEXEC MEGAC: --distributed-timeout-minutes also bounds start-up
# and the collective HDF5 I/O of a checkpoint save (core/watchdog.h). A rank stops itself
# with SIGSTOP (test hook MEGAC_TEST_STOP_AT=WHERE:RANK): after MPI_Init (rank 1), in the
# middle of a save (rank 1, then rank 0). The other rank times out (the watchdog's floor,
# lowered from 30 s to 10 s by the test hook MEGAC_TEST_WATCHDOG_FLOOR) and ends the job:
# non-zero exit within 60 s, one line naming the phase, no process
# left behind, and (save) `latest` still names the previous checkpoint.
set -uo pipefail
mpiexec="$1" megac="$2"
wd=$(mktemp -d)
trap 'rm -rf "$wd"' EXIT
fail() { echo "FAIL: $*"; grep -v "^ \[[^]]*\] iteration" "$wd/out.txt" | tail -8; exit 1; }
flags=(--num-threads 1 --mock-data --num-layers 2 --hidden-size 64 --num-attention-heads 4
       --seq-length 32 --micro-batch-size 2 --global-batch-size 4 --lr 1e-3 --eval-iters 0
       --distributed-timeout-minutes 0.1)
case_() {  # HOOK PHASE ARGS...
  local hook="$1" phase="$2"; shift 2
  local start; start=$(date +%s)
  MEGAC_TEST_WATCHDOG_FLOOR=10 MEGAC_TEST_STOP_AT="$hook" timeout -s KILL 120 "$mpiexec" -n 2 "$megac" train "${flags[@]}" "$@" \
    >"$wd/out.txt" 2>&1
  local rc=$? elapsed=$(( $(date +%s) - start ))
  ((rc != 0 && rc != 137)) || fail "$hook: exit $rc (137: hung until killed)"
  ((elapsed <= 60)) || fail "$hook: the job took $elapsed s to end"
  [[ $(grep -c "did not finish within" "$wd/out.txt") == 1 ]] || fail "$hook: want one timeout line"
  grep -qE "^megac: \[rank [01]\] $phase did not finish within 10 s \(--distributed-timeout-minutes\): a rank is stuck or dead; ending the job$" \
    "$wd/out.txt" || fail "$hook: no line naming '$phase'"
  local pids; pids=$(sed -n 's/^process ids (rank:pid): [^:]*: 0:\([0-9]*\) 1:\([0-9]*\)$/\1 \2/p' "$wd/out.txt")
  for p in $pids; do  # the aborting rank may take a few seconds to go
    for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.2; done
    ! kill -0 "$p" 2>/dev/null || { kill -9 "$p"; fail "$hook: rank process $p left behind"; }
  done
  echo "ok: $hook: $(grep "did not finish" "$wd/out.txt") (exit $rc after $elapsed s)"
}
case_ start:1 "start-up \(MPI_Init to the first iteration\)" --train-iters 4
for r in 1 0; do
  rm -rf "$wd/ck"
  case_ save:$r "saving the checkpoint of iteration 2 \(collective HDF5 I/O\)" --train-iters 4 \
    --save "$wd/ck" --save-interval 2
  [[ ! -e "$wd/ck/latest_checkpointed_iteration.txt" ]] || fail "save:$r: latest written by an unfinished save"
done
# The next run into the same directory takes over the dead run's lock and saves normally.
timeout 60 "$mpiexec" -n 2 "$megac" train "${flags[@]}" --train-iters 2 --save "$wd/ck" >"$wd/out.txt" 2>&1 \
  || fail "the run after a timed-out save failed"
grep -q "taking over the stale lock" "$wd/out.txt" || fail "no take-over of the dead run's lock"
[[ $(cat "$wd/ck/latest_checkpointed_iteration.txt") == 2 ]] || fail "no checkpoint after the timed-out save"
echo "ok: the next run saves normally"
