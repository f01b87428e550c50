#!/usr/bin/env bash
# tests/train/faults.sh LAUNCHER MEGAC: the fault-injection harness (issue 30, "nothing
# lost"): hostile events at random moments never cost a checkpoint or a log line. Each case
# asserts the exit code, one line saying what happened, that the newest checkpoint is
# complete (`latest` names it, no .tmp, no lock left), and that --log-json holds every
# record once with no cut line:
#   Ctrl-C twice 100 ms apart to the launcher (megac-mpiexec): hydra's force-abort is not
#     reached, the stop's checkpoint is written, exit 0;
#   SIGHUP (a closed terminal) to the launcher and to a single-process run: a stop like SIGTERM;
#   stdout closed (`| head`) under the launcher and without it: the run completes, exit 0;
#   --log-json on a full disk (/dev/full; a 16 kB tmpfs as root): exit 1, one line, a
#     checkpoint of the last iteration, no cut record; a cut last line is removed on resume;
#   a disk that fills after the save's room check (a 2 MiB tmpfs as root, 4 ranks): the
#     reservation fails first, exit 1, one line, the previous checkpoint kept;
#   `ulimit -n 16`, `ulimit -f 1000` (MPI's shared memory): one line saying what is needed, exit 2;
#   `ulimit -f` (SIGXFSZ) while saving: exit 1 with "File too large", no partial file;
#     while logging: exit 1, the log ends on a whole record.
# SEED (printed) picks the signal moments.
set -uo pipefail
launcher="$1" megac="$2"
seed="${SEED:-$RANDOM}"; RANDOM=$seed
echo "seed $seed"
wd=$(mktemp -d); mnt=""
cleanup() { [[ -n "$mnt" ]] && umount "$mnt" 2>/dev/null; rm -rf "$wd"; }
trap cleanup EXIT
fail() { echo "FAIL: $*"; tail -6 "$wd/out.txt" 2>/dev/null; exit 1; }
flags=(--num-threads 1 --mock-data --num-layers 2 --hidden-size 64 --num-attention-heads 4
       --seq-length 32 --micro-batch-size 2 --global-batch-size 4 --lr 1e-3 --log-interval 1 --eval-iters 0)
# A background job of a script ignores SIGINT, and bash cannot trap what it inherits
# ignored (nor what the test runner blocks): start it as a terminal would, SIGINT's default
# action restored and no signal blocked (exec: the background job is the launcher itself).
with_sigint() { exec python3 -c 'import os, signal, sys
signal.signal(signal.SIGINT, signal.SIG_DFL); signal.pthread_sigmask(signal.SIG_SETMASK, [])
os.execvp(sys.argv[1], sys.argv[1:])' "$@"; }
# complete DIR IT: `latest` of DIR is IT, its file is there, nothing temporary or locked left.
complete() {
  [[ "$(cat "$1/latest_checkpointed_iteration.txt" 2>/dev/null)" == "$2" ]] || fail "latest of $1 is not $2"
  [[ -f "$1/iter_$(printf %07d "$2")/checkpoint.h5" ]] || fail "no checkpoint file at $2 in $1"
  [[ -z "$(find "$1" -name '*.tmp')" ]] || fail "a temporary file was left in $1"
  [[ ! -e "$1/.megac-save.lock" ]] || fail "the save lock of $1 was left behind"
}
# records LOG FIRST LAST: every line is whole JSON; iterations FIRST..LAST, each once.
records() {
  python3 - "$@" <<'PY' || fail "log $1 is not iterations $2..$3 once each"
import json, sys
lines = open(sys.argv[1]).read().split("\n")
assert lines[-1] == "", "the last line is cut"
its = [r["iteration"] for r in map(json.loads, lines[:-1]) if "iteration" in r]
assert its == list(range(int(sys.argv[2]), int(sys.argv[3]) + 1)), its
PY
}
# signal_run NAME SIGNALS...: the launcher with 2 ranks, SIGNALS sent to it $gap s apart once
# iteration 3..8 is logged; then exit 0, the stop line, a complete checkpoint there, and a
# log holding 1..stop.
signal_run() {
  local name="$1"; shift
  local after=$((3 + RANDOM % 6)) ck="$wd/ck_$name" log="$wd/log_$name.jsonl"
  with_sigint "$launcher" -n 2 "$megac" train "${flags[@]}" --train-iters 100000 --save "$ck" \
    --log-json "$log" >"$wd/out.txt" 2>&1 &
  local job=$!
  for _ in $(seq 300); do grep -q "^ \[[^]]*\] iteration *$after/" "$wd/out.txt" && break; sleep 0.1; done
  late=0  # a signal after the job ended (a fast box saves in < 100 ms): nothing to check
  for s in "$@"; do kill -"$s" "$job" 2>/dev/null || late=1; sleep "$gap"; done
  for _ in $(seq 300); do kill -0 "$job" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$job" 2>/dev/null && { kill -9 "$job"; fail "$name: the job still runs 30 s after SIG$*"; }
  wait "$job"; local rc=$?
  ((rc == 0)) || fail "$name: exit $rc after SIG$*, want 0"
  local line; line=$(grep -m1 "^megac train: stopped at iteration" "$wd/out.txt")
  [[ "$line" =~ stopped\ at\ iteration\ ([0-9]+)\ .*checkpoint\ saved\ at\ iteration ]] || fail "$name: no stop line: $line"
  complete "$ck" "${BASH_REMATCH[1]}"
  records "$log" 1 "${BASH_REMATCH[1]}"
  echo "ok: $name: exit 0, checkpoint at ${BASH_REMATCH[1]}, log complete"
}
gap=0.02 signal_run ctrl_c_twice INT INT  # the second Ctrl-C lands during the stop's save
if ((late)); then echo "note: ctrl_c_twice: the job had ended before the second SIGINT"
else grep -q "megac-mpiexec: SIGINT: already stopping (SIGINT), please wait" "$wd/out.txt" || fail "no 'please wait'"; fi
gap=0.1 signal_run hangup HUP

# SIGHUP straight to a process run without a launcher.
"$megac" train "${flags[@]}" --train-iters 100000 --save "$wd/ck_hup1" >"$wd/out.txt" 2>&1 &
job=$!
for _ in $(seq 300); do grep -q "^ \[[^]]*\] iteration *3/" "$wd/out.txt" && break; sleep 0.1; done
kill -HUP "$job"; wait "$job"; rc=$?
((rc == 0)) || fail "SIGHUP to megac: exit $rc, want 0"
grep -q "(SIGHUP received); checkpoint saved" "$wd/out.txt" || fail "SIGHUP to megac: no stop line"
echo "ok: SIGHUP to megac itself: a stop with a checkpoint"

# stdout closed: the run goes on to the end, saving and logging.
for how in launcher single; do
  rm -rf "$wd/ck_pipe" "$wd/log_pipe.jsonl"
  cmd=("$megac" train); [[ $how == launcher ]] && cmd=("$launcher" -n 2 "$megac" train)
  "${cmd[@]}" "${flags[@]}" --train-iters 60 --save "$wd/ck_pipe" --save-interval 30 \
    --log-json "$wd/log_pipe.jsonl" 2>"$wd/out.txt" | head -2 >/dev/null
  rc=${PIPESTATUS[0]}
  ((rc == 0)) || fail "| head ($how): exit $rc, want 0"
  complete "$wd/ck_pipe" 60
  records "$wd/log_pipe.jsonl" 1 60
  echo "ok: | head ($how): the run completed (exit 0, checkpoint at 60, 60 records)"
done

# --log-json on a full disk: one line, exit 1, a checkpoint of the last iteration.
run1() { timeout 60 "$megac" train "${flags[@]}" "$@" >"$wd/out.txt" 2>&1; }
run1 --train-iters 10 --save "$wd/ck_full" --log-json /dev/full; rc=$?
((rc == 1)) || fail "--log-json /dev/full: exit $rc, want 1"
grep -q "^megac train: stopped at iteration 0 of 10 (cannot write --log-json /dev/full: No space left on device)" "$wd/out.txt" \
  || fail "--log-json /dev/full: no stop line"
echo "ok: --log-json /dev/full: exit 1 at once, one line"
if [[ $(id -u) == 0 ]] && mkdir "$wd/mnt" && mount -t tmpfs -o size=16k tmpfs "$wd/mnt" 2>/dev/null; then
  mnt="$wd/mnt"
  run1 --train-iters 200 --save "$wd/ck_full" --save-interval 100 --log-json "$mnt/log.jsonl"; rc=$?
  ((rc == 1)) || fail "--log-json on a full tmpfs: exit $rc, want 1"
  line=$(grep -m1 "^megac train: stopped at iteration" "$wd/out.txt")
  [[ "$line" =~ iteration\ ([0-9]+)\ of\ 200\ \(cannot\ write\ --log-json\ $mnt/log.jsonl:\ No\ space\ left\ on\ device\)\;\ checkpoint\ saved\ at\ iteration\ ([0-9]+) ]] \
    || fail "full tmpfs: no stop line: $line"
  stop=${BASH_REMATCH[1]}
  complete "$wd/ck_full" "$stop"
  records "$mnt/log.jsonl" 1 $((stop - 1))  # the stop iteration's record is the one that failed
  echo "ok: --log-json on a full 16 kB tmpfs: exit 1 at iteration $stop, checkpoint there, records 1..$((stop - 1)) whole"
  umount "$mnt"; mnt=""
  # The disk fills after the room check (MEGAC_TEST_SKIP_ROOM_CHECK: as if someone else took
  # the space): 4 ranks, TP 2 x DP 2, a 2 MiB tmpfs that holds one 1.6 MB checkpoint. Without
  # the reservation the second save hung inside H5Dcreate2 until the 10 min watchdog.
  mount -t tmpfs -o size=2m tmpfs "$wd/mnt" && mnt="$wd/mnt" || fail "cannot mount the 2 MiB tmpfs"
  t0=$(date +%s)
  MEGAC_TEST_SKIP_ROOM_CHECK=1 timeout -k 5 60 "$launcher" -n 4 "$megac" train "${flags[@]}" \
    --tensor-model-parallel-size 2 --train-iters 6 --save "$mnt/ck" --save-interval 3 >"$wd/out.txt" 2>&1; rc=$?
  ((rc == 1)) || fail "a disk full during the save (4 ranks): exit $rc after $(($(date +%s) - t0)) s, want 1"
  grep -q "^megac: \[rank 0\] cannot save the checkpoint of iteration 6: .*checkpoint.h5.tmp: No space left on device (reserving the checkpoint's .* MB before the collective write); the partial file was removed, \`latest\` still names iteration 3" \
    "$wd/out.txt" || fail "a disk full during the save: no line saying so"
  (($(grep -c "^megac:" "$wd/out.txt") == 1)) || fail "a disk full during the save: more than one megac: line"
  complete "$mnt/ck" 3
  [[ ! -e "$mnt/ck/iter_0000006" ]] || fail "a disk full during the save: iter_0000006 was left"
  echo "ok: a disk full during the save at 4 ranks: exit 1 in $(($(date +%s) - t0)) s, one line, iteration 3 kept"
  umount "$mnt"; mnt=""
else
  echo "skip: the tmpfs cases (need root and mount)"
fi
# A cut last line (a crash mid-record) is removed when the run resumes.
run1 --train-iters 4 --save "$wd/ck_cut" --log-json "$wd/cut.jsonl" || fail "the run before the cut"
printf '{"iteration":5,"consumed_sam' >>"$wd/cut.jsonl"
run1 --train-iters 6 --save "$wd/ck_cut" --load "$wd/ck_cut" --log-json "$wd/cut.jsonl" || fail "resume after a cut line"
grep -q "^megac train: --log-json $wd/cut.jsonl: removed its last record, cut short after 28 bytes" "$wd/out.txt" \
  || fail "no line about the cut record"
records "$wd/cut.jsonl" 1 6
echo "ok: a cut last record is removed on resume (one line), the log holds 1..6 whole"

# ulimit -f: SIGXFSZ is ignored; the save fails first with "File too large", no partial file.
(ulimit -f 100; UCX_TLS=tcp,self run1 --train-iters 20 --save "$wd/ck_big" --save-interval 5); rc=$?
((rc == 1)) || fail "ulimit -f 100 during a save: exit $rc, want 1"
grep -q "checkpoint.h5.tmp: File too large (the checkpoint needs about .* MB, ulimit -f allows 0.1 MB)" "$wd/out.txt" \
  || fail "ulimit -f: no 'File too large' line"
[[ -z "$(find "$wd/ck_big" -name '*.tmp')" ]] || fail "ulimit -f: a temporary file was left"
echo "ok: ulimit -f 100 while saving: exit 1, 'File too large', no partial file"
(ulimit -f 20; UCX_TLS=tcp,self run1 --train-iters 200 --log-json "$wd/fsz.jsonl"); rc=$?
((rc == 1)) || fail "ulimit -f 20 while logging: exit $rc, want 1"
grep -q "(cannot write --log-json $wd/fsz.jsonl: File too large)" "$wd/out.txt" || fail "ulimit -f: no log line"
python3 -c "import json,sys; [json.loads(l) for l in open(sys.argv[1])]" "$wd/fsz.jsonl" || fail "ulimit -f: a cut record"
echo "ok: ulimit -f 20 while logging: exit 1, 'File too large', the log ends on a whole record"

# ulimit -n 16: one megac line and exit 2 before MPI starts (it used to fail inside UCX).
(ulimit -n 16; run1 --train-iters 2); rc=$?
((rc == 2)) || fail "ulimit -n 16: exit $rc, want 2"
grep -q "^megac train: ulimit -n is 16 (hard limit 16): megac needs at least 256 open files" "$wd/out.txt" \
  || fail "ulimit -n 16: no line saying what is needed"
echo "ok: ulimit -n 16: one line saying what is needed, exit 2"
# ulimit -f 1000 (1 MB) under the launcher: one megac line and exit 2 before MPI starts (it
# used to fail inside UCX's shared memory with "File too large").
(ulimit -f 1000; unset UCX_TLS; timeout 60 "$launcher" -n 2 "$megac" train "${flags[@]}" --train-iters 2 >"$wd/out.txt" 2>&1); rc=$?
((rc == 2)) || fail "ulimit -f 1000: exit $rc, want 2"
grep -q "^megac train: ulimit -f is 1000 blocks (1.0 MB): MPI's shared memory needs files of at least 16 MB" "$wd/out.txt" \
  || fail "ulimit -f 1000: no line saying what is needed"
(($(wc -l < "$wd/out.txt") == 1)) || fail "ulimit -f 1000: $(wc -l < "$wd/out.txt") lines"
echo "ok: ulimit -f 1000: one line saying what is needed, exit 2"
