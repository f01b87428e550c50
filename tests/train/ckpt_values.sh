#!/usr/bin/env bash
# tests/train/ckpt_values.sh MPIEXEC MEGAC TAMPER: every checkpoint attribute a run reads back
# is range-checked and every tensor it loads is finite (issue 30). A hand-edited or damaged
# file (adam_step -1 or 2^63-1 used to load and turn the run NaN two iterations later, exit 0)
# is refused before any iteration with one line naming the attribute or the dataset, exit 2,
# on every rank; the untouched checkpoint still resumes.
set -uo pipefail
mpiexec="$1" megac="$2" tamper="$3"
wd=$(mktemp -d); trap 'rm -rf "$wd"' EXIT
fail() { echo "FAIL: $*"; tail -4 "$wd/out.txt" 2>/dev/null; exit 1; }
flags=(--num-threads 1 --mock-data --num-layers 1 --hidden-size 32 --num-attention-heads 2
       --seq-length 16 --micro-batch-size 2 --global-batch-size 4 --lr 1e-3 --log-interval 1 --eval-iters 0)
timeout 60 "$mpiexec" -n 2 "$megac" train "${flags[@]}" --train-iters 2 --save "$wd/ck" \
  >"$wd/out.txt" 2>&1 || fail "the first run"
file=iter_0000002/checkpoint.h5
# refused WHAT MESSAGE TAMPER-ARGS...: a copy tampered so (TAMPER-ARGS, then those of
# $also, if any: "attr NAME VALUE" triples), resumed: exit 2, MESSAGE, no iteration.
also=()
refused() {
  local what="$1" msg="$2"; shift 2
  rm -rf "$wd/bad"; cp -r "$wd/ck" "$wd/bad"
  "$tamper" "$wd/bad/$file" "$@" >/dev/null || fail "$what: ckpt_tamper $*"
  for ((i = 0; i < ${#also[@]}; i += 3)); do
    "$tamper" "$wd/bad/$file" "${also[@]:i:3}" >/dev/null || fail "$what: ckpt_tamper ${also[*]:i:3}"
  done
  timeout 60 "$mpiexec" -n 2 "$megac" train "${flags[@]}" --train-iters 4 --load "$wd/bad" \
    >"$wd/out.txt" 2>&1; local rc=$?
  ((rc == 2)) || fail "$what: exit $rc, want 2"
  grep -qF -- "$msg" "$wd/out.txt" || fail "$what: no '$msg'"
  ! grep -q "^ \[[^]]*\] iteration" "$wd/out.txt" || fail "$what: trained before refusing"
  echo "ok: $what: $(grep -m1 -F -- "$msg" "$wd/out.txt")"
}
refused "adam_step -1" "attribute 'adam_step' is -1, out of range [0, 9007199254740992]" attr adam_step -1
refused "adam_step 2^63-1" "attribute 'adam_step' is 9223372036854775807, out of range" attr adam_step 9223372036854775807
refused "global_batch_size 0" "attribute 'global_batch_size' is 0, out of range [1, 2147483647]" attr global_batch_size 0
refused "saved_tp 1000000000" "attribute 'saved_tp' is 1000000000, out of range [1, 1048576]" attr saved_tp 1000000000
refused "nan_iterations -1" "attribute 'nan_iterations' is -1, out of range" attr nan_iterations -1
# the fp16 loss-scale state (a CPU run saves none: added, as an --fp16 run on a GPU writes it)
also=(attr fp16_loss_scale 1024 attr fp16_loss_scale_overflows_left 2)
refused "fp16_loss_scale_good_steps -7" "attribute 'fp16_loss_scale_good_steps' is -7, out of range" \
  attr fp16_loss_scale_good_steps -7
also=()
refused "a NaN in /model/wte" "dataset /model/wte holds a NaN or Inf (local element 0): refusing non-finite values" nan /model/wte
refused "a NaN in an Adam moment" "dataset /optim/exp_avg_sq/wte holds a NaN or Inf" nan /optim/exp_avg_sq/wte
refused "a negative second moment" "dataset /optim/exp_avg_sq/wte holds a negative second moment (local element 0): refusing it" \
  neg /optim/exp_avg_sq/wte
# generate and export read the model tensors too: a NaN is refused there as well (exit 2).
rm -rf "$wd/bad"; cp -r "$wd/ck" "$wd/bad"; "$tamper" "$wd/bad/$file" nan /model/wte >/dev/null || fail "tamper"
for cmd in "generate --load $wd/bad --prompt-ids 1,2 --max-new-tokens 2 --tokenizer byte" \
           "export --load $wd/bad --output $wd/hf"; do
  timeout 60 "$megac" $cmd >"$wd/out.txt" 2>&1; rc=$?
  ((rc == 2)) || fail "$cmd with a NaN: exit $rc, want 2"
  grep -qF "dataset /model/wte holds a NaN or Inf (element 0): refusing non-finite values" "$wd/out.txt" \
    || fail "$cmd with a NaN: no line naming it"
done
[[ ! -e "$wd/hf" ]] || fail "export wrote a folder from a checkpoint holding a NaN"
echo "ok: generate and export refuse a NaN in /model/wte"
timeout 60 "$mpiexec" -n 2 "$megac" train "${flags[@]}" --train-iters 4 --load "$wd/ck" \
  >"$wd/out.txt" 2>&1 || fail "the untouched checkpoint does not resume"
echo "ok: the untouched checkpoint resumes"
