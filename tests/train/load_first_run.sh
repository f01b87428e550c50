#!/usr/bin/env bash
# tests/train/load_first_run.sh MPIEXEC MEGAC: Megatron's first-run idiom `--save X --load X`
# with X missing or empty starts from scratch with one line (as Megatron-LM does); the second
# run resumes from what the first saved; a directory holding anything else (here an iter_
# folder without `latest`, or a plain file) is still refused with exit 2 before training.
set -uo pipefail
mpiexec="$1" megac="$2"
wd=$(mktemp -d)
trap 'rm -rf "$wd"' EXIT
fail() { echo "FAIL: $*"; tail -5 "$wd/out.txt" 2>/dev/null; exit 1; }
flags=(--num-threads 1 --mock-data --num-layers 2 --hidden-size 64 --num-attention-heads 4
       --seq-length 32 --micro-batch-size 2 --global-batch-size 4 --lr 1e-3 --log-interval 1 --eval-iters 0)
run() { timeout 60 "$mpiexec" -n 2 "$megac" train "${flags[@]}" "$@" >"$wd/out.txt" 2>&1; }

run --train-iters 2 --save "$wd/ck" --load "$wd/ck" --log-json "$wd/log.jsonl" || fail "first run, missing dir"
grep -qF -- "--load $wd/ck: no checkpoint there yet: starting from scratch" "$wd/out.txt" || fail "no notice"
grep -q '"event":"run_start","start_iteration":0,"resumed":0,' "$wd/log.jsonl" || fail "run_start not fresh"
[[ $(cat "$wd/ck/latest_checkpointed_iteration.txt") == 2 ]] || fail "nothing saved"
run --train-iters 4 --save "$wd/ck" --load "$wd/ck" || fail "second run"
grep -q "loaded checkpoint .* at iteration 2" "$wd/out.txt" || fail "the second run did not resume"
grep -q "no checkpoint there yet" "$wd/out.txt" && fail "notice on a resume"
mkdir "$wd/empty"
run --train-iters 1 --load "$wd/empty" || fail "empty --load dir"
grep -q "no checkpoint there yet" "$wd/out.txt" || fail "no notice for an empty dir"
mkdir -p "$wd/damaged/iter_0000002"
run --train-iters 1 --load "$wd/damaged"; rc=$?
[[ $rc == 2 ]] || fail "damaged dir: exit $rc, want 2"
grep -q "latest_checkpointed_iteration.txt: No such file or directory" "$wd/out.txt" || fail "damaged: no reason"
! grep -q "^ \[[^]]*\] iteration" "$wd/out.txt" || fail "damaged: trained"
touch "$wd/file"
run --train-iters 1 --load "$wd/file"; rc=$?
[[ $rc == 2 ]] || fail "a file as --load: exit $rc, want 2"
echo "ok: --load of a missing or empty dir starts from scratch; damaged ones refused"
