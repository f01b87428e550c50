#!/usr/bin/env bash
# tests/train/safe_outputs.sh MPIEXEC MEGAC: nothing a run writes destroys what came before,
# and odd files fail at once with one line (exit 2) instead of hanging or crashing:
#   --log-json appends (a resumed run adds a run_start record; records beyond the loaded
#     iteration are counted as superseded, never deleted);
#   --save refuses to move `latest` back (starting from scratch into newer checkpoints)
#     unless --overwrite-newer-checkpoints; a live lock holder is named, a stale lock taken over;
#   FIFOs as --data-path, as `latest` or as a checkpoint file are refused before opening;
#   --log-json / --trace naming the data file or a checkpoint, or an unwritable --trace, are
#     refused at start-up (before any iteration) and leave the file untouched;
#   --num-threads 100000, --hidden-size 2000000000, --num-layers 10^9: one usage line; --split 100,0,0
#     trains without --eval-iters 0; the banner names the data;
#   a full disk during --save (a 2 MiB tmpfs, root only): one line naming the rank, the file
#     and "No space left on device", exit 1 on every rank, no partial file, `latest` and the
#     previous checkpoint intact (it loads); the same at 4 ranks (TP 2 x DP 2), with no
#     launcher kill page; `megac preprocess` onto a full disk likewise.
set -uo pipefail
mpiexec="$1" megac="$2"
wd=$(mktemp -d); mnt=""
cleanup() { [[ -n "$mnt" ]] && umount "$mnt" 2>/dev/null; rm -rf "$wd"; }
trap cleanup EXIT
fail() { echo "FAIL: $*"; tail -5 "$wd/out.txt" 2>/dev/null; exit 1; }
flags=(--num-threads 1 --mock-data --num-layers 2 --hidden-size 64 --num-attention-heads 4
       --seq-length 32 --micro-batch-size 2 --global-batch-size 4 --lr 1e-3 --log-interval 1 --eval-iters 0)
run() { timeout 60 "$mpiexec" -n 2 "$megac" train "${flags[@]}" "$@" >"$wd/out.txt" 2>&1; }
# expect CODE MESSAGE ARGS...: exit CODE, MESSAGE on a line of its own output, no iteration run.
expect() {
  local code="$1" msg="$2"; shift 2
  run "$@"; local rc=$?
  [[ $rc -eq $code ]] || fail "exit $rc, want $code: $*"
  grep -qF -- "$msg" "$wd/out.txt" || fail "no '$msg' for: $*"
  if ((code == 2)); then ! grep -q "^ \[[^]]*\] iteration" "$wd/out.txt" || fail "trained before refusing: $*"; fi
}
records() { python3 -c "import json,sys; print(sum(1 for l in open(sys.argv[1]) if 'iteration' in json.loads(l)))" "$1"; }

# Logs: 6 iterations, then resume to 10 into the same log: 10 records and one run_start.
run --train-iters 6 --save "$wd/ck" --save-interval 3 --log-json "$wd/log.jsonl" || fail "first run"
cp -r "$wd/ck" "$wd/ck6"
run --train-iters 10 --save "$wd/ck" --load "$wd/ck" --save-interval 5 --log-json "$wd/log.jsonl" || fail "resume"
[[ $(records "$wd/log.jsonl") == 10 ]] || fail "log: $(records "$wd/log.jsonl") iteration records, want 10"
grep -q '^{"event":"run_start","start_iteration":6,"resumed":1,"superseded_records":0,' "$wd/log.jsonl" \
  || fail "log: no run_start record at 6"
# Resuming from the copy at 6 again (into another --save): records 7-10 stay, marked superseded.
run --train-iters 8 --save "$wd/ck_b" --load "$wd/ck6" --log-json "$wd/log.jsonl" || fail "second resume"
[[ $(records "$wd/log.jsonl") == 12 ]] || fail "log: records 7-10 of the first resume were lost"
grep -q '^{"event":"run_start","start_iteration":6,"resumed":1,"superseded_records":4,' "$wd/log.jsonl" \
  || fail "log: the second run_start does not count 4 superseded records"
echo "ok: --log-json appends across resumes; run_start records mark where each run starts"

# No rollback: from scratch into ck (latest 10) is refused; with the flag it runs.
expect 2 "--save $wd/ck already holds checkpoints up to iteration 10 (latest_checkpointed_iteration.txt) but this run starts at iteration 0" \
  --train-iters 4 --save "$wd/ck"
[[ $(cat "$wd/ck/latest_checkpointed_iteration.txt") == 10 ]] || fail "latest moved"
run --train-iters 4 --save "$wd/ck" --overwrite-newer-checkpoints || fail "--overwrite-newer-checkpoints refused"
grep -q "warning: --save $wd/ck holds checkpoints up to iteration 10" "$wd/out.txt" || fail "no warning when overwriting"
[[ $(cat "$wd/ck/latest_checkpointed_iteration.txt") == 4 ]] || fail "--overwrite-newer-checkpoints: latest is not 4"
echo "ok: a run that would move latest back is refused unless --overwrite-newer-checkpoints"

# Lock: a live holder (this shell) is named; a dead one's lock is taken over and removed at the end.
echo "$$ $(hostname) 99 1700000000" > "$wd/ck/.megac-save.lock"
expect 2 "--save $wd/ck is in use by another run: process $$ on host $(hostname) (Slurm job 99, since 2023-11-14T22:13:20Z)" \
  --train-iters 6 --save "$wd/ck" --load "$wd/ck"
dead=$(sh -c 'echo $$')  # a process that has ended
echo "$dead $(hostname) - 1700000000" > "$wd/ck/.megac-save.lock"
run --train-iters 6 --save "$wd/ck" --load "$wd/ck" || fail "a stale lock was not taken over"
grep -q "taking over the stale lock $wd/ck/.megac-save.lock of process $dead" "$wd/out.txt" || fail "no take-over line"
[[ ! -e "$wd/ck/.megac-save.lock" ]] || fail "the lock was left behind"
echo "ok: a live lock holder is named (exit 2); a stale lock is taken over"

# FIFOs: refused before opening (no hang).
mkfifo "$wd/fifo.h5"
flags_data=()
for f in "${flags[@]}"; do [[ "$f" != --mock-data ]] && flags_data+=("$f"); done
timeout 30 "$mpiexec" -n 2 "$megac" train "${flags_data[@]}" --data-path "$wd/fifo.h5" --train-iters 2 >"$wd/out.txt" 2>&1
rc=$?; ((rc == 2)) || fail "FIFO --data-path: exit $rc, want 2"
grep -q "$wd/fifo.h5: not a regular file" "$wd/out.txt" || fail "FIFO --data-path: no message"
mkdir -p "$wd/cf/iter_0000003"; echo 3 > "$wd/cf/latest_checkpointed_iteration.txt"; mkfifo "$wd/cf/iter_0000003/checkpoint.h5"
expect 2 "$wd/cf/iter_0000003/checkpoint.h5: not a regular file (a FIFO): refusing to open it" --train-iters 4 --load "$wd/cf"
rm "$wd/cf/latest_checkpointed_iteration.txt"; mkfifo "$wd/cf/latest_checkpointed_iteration.txt"
expect 2 "$wd/cf/latest_checkpointed_iteration.txt: not a regular file (a FIFO)" --train-iters 4 --load "$wd/cf"
echo "ok: FIFOs as --data-path, checkpoint file and latest are refused at once"

# Outputs naming inputs, or unwritable: refused at start-up, inputs untouched.
ckfile="$wd/ck/iter_0000006/checkpoint.h5"
sum=$(md5sum < "$ckfile")
expect 2 "--log-json $ckfile is the same file as --load's $ckfile" --train-iters 8 --load "$wd/ck" --log-json "$ckfile"
expect 2 "--trace $wd/ck/latest_checkpointed_iteration.txt is the same file as --load's" \
  --train-iters 8 --save "$wd/ck" --load "$wd/ck" --trace "$wd/ck/latest_checkpointed_iteration.txt"
expect 2 "--log-json $wd/ck/latest_checkpointed_iteration.txt is the same file as --save's" \
  --train-iters 8 --save "$wd/ck" --log-json "$wd/ck/latest_checkpointed_iteration.txt"
printf 'one document\n%%\nanother one\n' > "$wd/d.txt"
"$megac" preprocess --input "$wd/d.txt" --output "$wd/d.h5" --doc-separator % >/dev/null || fail "preprocess"
dsum=$(md5sum < "$wd/d.h5")
timeout 30 "$mpiexec" -n 2 "$megac" train "${flags_data[@]}" --data-path "$wd/d.h5" --seq-length 4 \
  --train-iters 2 --split 100,0,0 --eval-iters 10 --eval-interval 1 >"$wd/out.txt" 2>&1 || fail "--split 100,0,0 with evaluation on"
grep -qx "data: --data-path, cut by --split 100,0,0, seed 1234" "$wd/out.txt" &&
  grep -q "^  train weight 1.0000  $wd/d.h5: " "$wd/out.txt" || fail "the banner does not name the data"
grep -q "validation loss" "$wd/out.txt" && fail "--split 100,0,0 evaluated"
timeout 30 "$mpiexec" -n 2 "$megac" train "${flags_data[@]}" --data-path "$wd/d.h5" --seq-length 4 \
  --train-iters 2 --log-json "$wd/d.h5" >"$wd/out.txt" 2>&1
rc=$?; ((rc == 2)) || fail "--log-json naming --data-path: exit $rc, want 2"
grep -qF "megac: --log-json $wd/d.h5 is the same file as --data-path's $wd/d.h5: refusing to overwrite an input" "$wd/out.txt" \
  || fail "--log-json naming --data-path: no message"
[[ $(md5sum < "$wd/d.h5") == "$dsum" && $(md5sum < "$ckfile") == "$sum" && $(cat "$wd/ck/latest_checkpointed_iteration.txt") == 6 ]] || fail "an input was changed"
expect 2 "cannot write --trace /nonexistent/dir/t.json: No such file or directory" --train-iters 2 --trace /nonexistent/dir/t.json
expect 2 "cannot write --log-json $wd: it is a directory" --train-iters 2 --log-json "$wd"
echo "ok: outputs naming an input, a directory or an unwritable path are refused before training"

expect 2 "--num-threads 100000: at most 1024 CPU threads per rank" --num-threads 100000
expect 2 "--hidden-size 2000000000 is too large: the default --ffn-hidden-size (4 x hidden = 8000000000)" --hidden-size 2000000000
expect 2 "num-layers 1000000000 is too large (at most 1048576)" --num-layers 1000000000
expect 2 "model too large: 4.8e+15 parameters (at most 2^50" --num-layers 1000000 --hidden-size 20000
echo "ok: --num-threads 100000, --hidden-size 2000000000, --num-layers 10^9 and a 10^15-parameter model give one usage line"

# Permissions (root runs them as nobody, as root reads everything): "Permission denied",
# not "not an HDF5 file".
if [[ $(id -u) -eq 0 ]] && command -v runuser >/dev/null && runuser -u nobody -- test -x "$megac"; then
  chmod 755 "$wd"; cp "$wd/d.h5" "$wd/locked.h5"; chmod 000 "$wd/locked.h5"
  runuser -u nobody -- "$megac" train --data-path "$wd/locked.h5" --seq-length 4 --train-iters 1 >"$wd/out.txt" 2>&1
  rc=$?; ((rc == 2)) || fail "unreadable --data-path: exit $rc, want 2"
  grep -qx "megac: $wd/locked.h5: Permission denied" "$wd/out.txt" || fail "unreadable --data-path: no message"
  chmod 000 "$ckfile"
  runuser -u nobody -- "$megac" train "${flags[@]}" --train-iters 8 --load "$wd/ck" >"$wd/out.txt" 2>&1
  rc=$?; ((rc == 2)) || fail "unreadable checkpoint: exit $rc, want 2"
  grep -qx "megac: $ckfile: Permission denied" "$wd/out.txt" || fail "unreadable checkpoint: no message"
  chmod 644 "$ckfile"
  echo "ok: unreadable data and checkpoint files: Permission denied"
fi

# Full disk (root: a 2 MiB tmpfs holds one checkpoint of this model, 1.4 MB, not two).
mnt="$wd/mnt"; mkdir -p "$mnt"
if ! mount -t tmpfs -o size=2m tmpfs "$mnt" 2>/dev/null; then
  mnt=""; echo "skip: full-disk cases need root (mount -t tmpfs)"; exit 0
fi
run --train-iters 4 --save "$mnt/ck" --save-interval 2
rc=$?; ((rc == 1)) || fail "full disk: exit $rc, want 1"
grep -qE "^megac: \[rank [01]\] cannot save the checkpoint of iteration 4: $mnt/ck/iter_0000004/checkpoint.h5.tmp: No space left on device \(.*\); the partial file was removed, \`latest\` still names iteration 2$" "$wd/out.txt" \
  || fail "full disk: no one-line message"
(($(wc -l < "$wd/out.txt") < 20)) || fail "full disk: $(wc -l < "$wd/out.txt") lines of output"
grep -q "HDF5-DIAG\|fatal signal\|Segmentation" "$wd/out.txt" && fail "full disk: HDF5 stack or crash"
[[ -z "$(find "$mnt" -name '*.tmp')" && ! -e "$mnt/ck/iter_0000004" && ! -e "$mnt/ck/.megac-save.lock" ]] \
  || fail "full disk: left behind: $(ls -a "$mnt/ck" "$mnt/ck/"*)"
[[ $(cat "$mnt/ck/latest_checkpointed_iteration.txt") == 2 ]] || fail "full disk: latest is not 2"
run --train-iters 3 --load "$mnt/ck" || fail "full disk: the previous checkpoint does not load"
grep -q "loaded checkpoint $mnt/ck/iter_0000002" "$wd/out.txt" || fail "full disk: checkpoint 2 not loaded"
echo "ok: a full disk during --save: one line, exit 1, partial file removed, checkpoint 2 intact and loadable"
rm -rf "$mnt/ck"
# At 4 ranks (TP 2 x DP 2) every rank leaves with 1: hydra used to SIGKILL the others after
# the first exit ("Killed (signal 9)", exit 9). Three tries: it was a race.
for try in 1 2 3; do
  timeout 60 "$mpiexec" -n 4 "$megac" train "${flags[@]}" --tensor-model-parallel-size 2 --train-iters 4 \
    --save "$mnt/ck" --save-interval 2 >"$wd/out.txt" 2>&1
  rc=$?; ((rc == 1)) || fail "full disk at 4 ranks (try $try): exit $rc, want 1"
  grep -qE "^megac: \[rank [0-3]\] cannot save the checkpoint of iteration 4: $mnt/ck/iter_0000004/checkpoint.h5.tmp: No space left on device \(.*\); the partial file was removed, \`latest\` still names iteration 2$" "$wd/out.txt" \
    || fail "full disk at 4 ranks: no one-line message"
  grep -q "signal 9\|BAD TERMINATION\|HDF5-DIAG" "$wd/out.txt" && fail "full disk at 4 ranks: the launcher's kill page"
  [[ -z "$(find "$mnt" -name '*.tmp')" && ! -e "$mnt/ck/iter_0000004" && ! -e "$mnt/ck/.megac-save.lock" &&
     $(cat "$mnt/ck/latest_checkpointed_iteration.txt") == 2 ]] || fail "full disk at 4 ranks: left behind or latest moved"
  rm -rf "$mnt/ck"
done
echo "ok: a full disk during --save at 4 ranks (TP 2 x DP 2): exit 1 everywhere, one line, no kill page"
head -c 3000000 /dev/urandom | base64 > "$wd/big.txt"
"$megac" preprocess --input "$wd/big.txt" --output "$mnt/d.h5" >"$wd/out.txt" 2>&1
rc=$?; ((rc == 1)) || fail "preprocess onto a full disk: exit $rc, want 1"
grep -qE "^megac: $mnt/d.h5.tmp.[0-9]+: cannot write: No space left on device \(nothing written: the partial file was removed\)$" "$wd/out.txt" \
  || fail "preprocess onto a full disk: no one-line message"
(($(wc -l < "$wd/out.txt") <= 2)) || fail "preprocess onto a full disk: $(wc -l < "$wd/out.txt") lines"
[[ -z "$(ls -A "$mnt")" ]] || fail "preprocess left files: $(ls -A "$mnt")"
echo "ok: preprocess onto a full disk: one line, exit 1, nothing left"
