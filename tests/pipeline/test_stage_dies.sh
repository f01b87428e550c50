#!/usr/bin/env bash
# tests/pipeline/test_stage_dies.sh MPIEXEC MEGAC: a pipeline stage that dies mid-run must
# not leave the other stages waiting forever.
#
# Rank 1 of a PP = 4 job kills itself at the start of iteration 3 (the test hook
# MEGAC_TEST_DIE_AT_ITER=RANK:ITER[:abort], see core/fault.h) while ranks 0, 2 and 3 are
# inside the step, blocked on p2p with it. Two deaths:
#   abort   (SIGABRT, like a failed assert or a segfault): megac's crash report prints
#           "[rank 1] megac: fatal signal 6"; the launcher ends the job.
#   SIGKILL (like the OOM killer): the rank can print nothing, but its guard process
#           (core/rank_guard.h) prints "[rank 1] megac: rank process P killed by signal 9"
#           and exits, and MPICH's hydra ends the job.
#   stop    (SIGSTOP: a hung rank, alive but silent): the neighbours' pipeline waits time
#           out (--distributed-timeout-minutes 0.05 = 3 s) with "[rank r] ... send_recv on
#           group pp (global ranks ...) did not complete within 3 s" and MPI_Abort the job.
# All: non-zero exit within 30 s, iteration 3 never completes.
set -uo pipefail
mpiexec="$1" megac="$2"
out=$(mktemp)
trap 'rm -f "$out"' EXIT

run() {  # hook value, extra mpiexec flags...
  local hook="$1"; shift
  local start; start=$(date +%s)
  MEGAC_TEST_DIE_AT_ITER="$hook" timeout 60 "$mpiexec" "$@" -n 4 "$megac" train \
    --pipeline-model-parallel-size 4 --num-threads 1 --mock-data --train-iters 50 \
    --num-layers 4 --hidden-size 64 --num-attention-heads 4 --seq-length 32 \
    --micro-batch-size 2 --global-batch-size 8 --lr 1e-3 --log-interval 1 \
    --distributed-timeout-minutes 0.05 >"$out" 2>&1
  rc=$?
  elapsed=$(( $(date +%s) - start ))
  [[ $rc -ne 0 ]] || fail "$hook: the job exited 0 although rank 1 died"
  [[ $rc -ne 124 ]] || fail "$hook: the job hung: still running after 60 s"
  (( elapsed <= 30 )) || fail "$hook: the job took $elapsed s to end (limit 30 s)"
  grep -q "iteration        2/" "$out" || fail "$hook: the run did not reach iteration 2"
  if grep -q "iteration        3/" "$out"; then fail "$hook: iteration 3 completed without rank 1"; fi
}
fail() { cat "$out"; echo "FAIL: $*"; exit 1; }

run 1:3:abort
grep -q "\[rank 1\] megac: fatal signal 6" "$out" || fail "abort: no line naming rank 1"
echo "ok: rank 1 aborted: the job ended in ${elapsed} s, exit code $rc: $(grep '^\[rank 1\]' "$out")"

run 1:3
line=$(grep -o -m1 "\[rank 1\] megac: rank process [0-9]* killed by signal 9.*" "$out")
[[ -n "$line" ]] || fail "SIGKILL: no line naming rank 1"
echo "ok: rank 1 killed: the job ended in ${elapsed} s, exit code $rc: $line"

run 1:3:stop
line=$(grep -m1 "send_recv on group pp (global ranks 0,1,2,3; .*) did not complete within 3 s" "$out")
[[ -n "$line" ]] || fail "stop: no timeout message from the stuck rank's neighbours"
echo "ok: rank 1 stopped: the job ended in ${elapsed} s, exit code $rc: $line"
