#!/usr/bin/env bash
# tests/train/model_flags.sh MPIEXEC MEGAC ATTR EXPORT FLAG...: a Megatron model flag set (FLAG...)
#   and its checkpoint attribute (ATTR, as the refusal names it, e.g. kv-channels):
#   the flags change the losses of the default model;
#   a checkpoint written at TP 2 x PP 2 resumes at one rank with the same losses as a run that
#   never stopped;
#   a run without the flags refuses that checkpoint with one line naming ATTR, exit 2;
#   EXPORT: `refused` (megac export refuses the checkpoint with one line naming ATTR, exit 2),
#   `ok` (it writes a Hugging Face folder), `same` (ok, and the folder imported as a plain model
#   gives the checkpoint's first-iteration loss, --finetune, to 1e-6) or `-` (not checked).
set -uo pipefail
mpiexec="$1" megac="$2" attr="$3" export="$4"
shift 4
extra=("$@")
wd=$(mktemp -d); trap 'rm -rf "$wd"' EXIT
fail() { echo "FAIL ($attr): $*"; exit 1; }
flags=(--mock-data --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32
       --micro-batch-size 2 --global-batch-size 8 --lr 1e-3 --log-interval 100 --eval-iters 0
       --num-threads 1 --lr-decay-style cosine --lr-warmup-iters 2 --min-lr 1e-4)
losses() { python3 -c 'import json,sys; print(" ".join("%.9g" % r["lm_loss"] for r in map(json.loads, open(sys.argv[1])) if "iteration" in r))' "$1"; }
"$mpiexec" -n 1 "$megac" train "${flags[@]}" --train-iters 6 --log-json "$wd/plain.jsonl" >/dev/null 2>&1 || fail "plain run"
"$mpiexec" -n 1 "$megac" train "${flags[@]}" "${extra[@]}" --train-iters 6 \
  --log-json "$wd/full.jsonl" > "$wd/f.txt" 2>&1 || { tail "$wd/f.txt"; fail "run with ${extra[*]}"; }
[[ "$(losses "$wd/plain.jsonl")" != "$(losses "$wd/full.jsonl")" ]] || fail "${extra[*]}: the losses equal the default model's"
"$mpiexec" -n 4 "$megac" train "${flags[@]}" "${extra[@]}" --train-iters 3 \
  --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --save "$wd/ck" > "$wd/s.txt" 2>&1 \
  || { tail "$wd/s.txt"; fail "save at TP 2 x PP 2"; }
"$mpiexec" -n 1 "$megac" train "${flags[@]}" "${extra[@]}" --train-iters 6 \
  --load "$wd/ck" --log-json "$wd/resumed.jsonl" > "$wd/r.txt" 2>&1 || { tail "$wd/r.txt"; fail "resume"; }
python3 - "$wd/full.jsonl" "$wd/resumed.jsonl" "$attr" <<'PY' || fail "resumed losses differ"
import json, sys
a = {r["iteration"]: r["lm_loss"] for r in map(json.loads, open(sys.argv[1])) if "iteration" in r}
b = {r["iteration"]: r["lm_loss"] for r in map(json.loads, open(sys.argv[2])) if "iteration" in r}
worst = max(abs(b[i] - a[i]) / abs(a[i]) for i in b)
print(f"{sys.argv[3]}: resumed at one rank from TP 2 x PP 2: iterations {sorted(b)}, largest relative difference {worst:.2e}")
sys.exit(0 if sorted(b) == [4, 5, 6] and worst < 1e-5 else 1)
PY
out=$("$mpiexec" -n 1 "$megac" train "${flags[@]}" --train-iters 6 --load "$wd/ck" 2>&1); rc=$?
((rc == 2)) && grep -q -- "$attr" <<<"$out" || fail "a run without ${extra[*]} loading the checkpoint: exit $rc: $out"
echo "refused without the flags: $(grep -- "$attr" <<<"$out" | head -1)"
if [[ "$export" != - ]]; then
  out=$("$megac" export --load "$wd/ck" --output "$wd/hf" 2>&1); rc=$?
  if [[ "$export" == refused ]]; then
    ((rc == 2)) && grep -q -- "$attr" <<<"$out" || fail "export: exit $rc: $out"
    echo "export refused: $out"
  else
    ((rc == 0)) && [[ -f "$wd/hf/config.json" ]] || fail "export: exit $rc: $out"
  fi
  if [[ "$export" == same ]]; then
    "$megac" import --hf "$wd/hf" --output "$wd/imported" --seq-length 32 --global-batch-size 8 >/dev/null \
      || fail "import of the export"
    "$mpiexec" -n 1 "$megac" train "${flags[@]}" --train-iters 1 --load "$wd/imported" \
      --log-json "$wd/imp.jsonl" > "$wd/i.txt" 2>&1 || { tail "$wd/i.txt"; fail "train from the import"; }
    "$mpiexec" -n 1 "$megac" train "${flags[@]}" "${extra[@]}" --train-iters 1 --load "$wd/ck" --finetune \
      --log-json "$wd/ft.jsonl" > "$wd/t.txt" 2>&1 || { tail "$wd/t.txt"; fail "--finetune from the checkpoint"; }
    a=$(losses "$wd/imp.jsonl") b=$(losses "$wd/ft.jsonl")
    python3 -c 'import sys; a, b = map(float, sys.argv[1:]); sys.exit(abs(a - b) > 1e-6 * abs(b))' "$a" "$b" \
      || fail "the exported model's loss $a, the checkpoint's $b"
    echo "exported as a plain model: first loss $a, the checkpoint's $b"
  fi
fi
echo "model flags ($attr): ok"
