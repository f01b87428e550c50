#!/usr/bin/env bash
# tests/train/lock_host.sh MPIEXEC MEGAC: a --save lock left by a run on another host (its
# process cannot be probed from here) is judged by its heartbeat, the lock file's mtime,
# which a live holder refreshes at least every minute: younger than 2 x
# --distributed-timeout-minutes, the run is refused with one line naming the holder (exit
# 2); older, the lock is taken over with a line saying so, and removed at the end.
set -uo pipefail
mpiexec="$1" megac="$2"
wd=$(mktemp -d)
trap 'rm -rf "$wd"' EXIT
fail() { echo "FAIL: $*"; tail -5 "$wd/out.txt" 2>/dev/null; exit 1; }
flags=(--num-threads 1 --mock-data --num-layers 2 --hidden-size 64 --num-attention-heads 4
       --seq-length 32 --micro-batch-size 2 --global-batch-size 4 --lr 1e-3 --eval-iters 0
       --train-iters 2 --save "$wd/ck" --distributed-timeout-minutes 10)
run() { timeout 60 "$mpiexec" -n 2 "$megac" train "${flags[@]}" "$@" >"$wd/out.txt" 2>&1; }
mkdir -p "$wd/ck"
lock="$wd/ck/.megac-save.lock"
echo "4242 node-elsewhere-7 1234 1700000000" > "$lock"
touch -d '-5 minutes' "$lock"   # a heartbeat 5 minutes ago: alive (limit 2 x 10 minutes)
run; rc=$?
((rc == 2)) || fail "a live lock from another host: exit $rc, want 2"
grep -q "^megac: --save $wd/ck is in use by another run: process 4242 on host node-elsewhere-7 (Slurm job 1234, since 2023-11-14T22:13:20Z, last heartbeat 3[0-9][0-9] s ago) holds $lock (if that run is gone, delete the file; a lock from another host is taken over after 20 minutes without a heartbeat)$" "$wd/out.txt" \
  || fail "no one-line message naming the other host's holder"
grep -q "^ \[[^]]*\] iteration" "$wd/out.txt" && fail "trained despite the lock"
[[ -f "$lock" ]] || fail "the other host's lock was removed"
echo "ok: a lock from another host with a recent heartbeat is respected"
touch -d '-25 minutes' "$lock"  # no heartbeat for 25 minutes: stale
run || fail "a stale lock from another host was not taken over"
grep -q "^ taking over the stale lock $lock of process 4242 on host node-elsewhere-7 .*last heartbeat 1[45][0-9][0-9] s ago" "$wd/out.txt" \
  || fail "no take-over line"
[[ ! -e "$lock" && $(cat "$wd/ck/latest_checkpointed_iteration.txt") == 2 ]] || fail "lock left or no checkpoint"
echo "ok: a lock from another host without a heartbeat for 2 x --distributed-timeout-minutes is taken over"
