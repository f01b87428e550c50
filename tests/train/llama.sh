#!/usr/bin/env bash
# tests/train/llama.sh MPIEXEC MEGAC: a Llama-style model (--normalization RMSNorm --swiglu
# --position-embedding-type rope --group-query-attention --disable-bias-linear, untied).
#   it learns (the loss on a repeated batch falls over 8 iterations);
#   a checkpoint written at TP 2 x PP 2 x DP 2 (sequence parallel) resumes at one rank with
#   the same losses as a run that never stopped;
#   a GPT-2 run, or one with other query groups, refuses it with one line, exit 2;
#   bad Llama flags are refused with one line, exit 2.
set -uo pipefail
mpiexec="$1" megac="$2"
wd=$(mktemp -d); trap 'rm -rf "$wd"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
gpt=(--mock-data --mock-samples 8 --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32
     --micro-batch-size 2 --global-batch-size 8 --lr 3e-3 --log-interval 100 --eval-iters 0
     --num-threads 1 --lr-decay-style constant)
flags=("${gpt[@]}" --normalization RMSNorm --swiglu --position-embedding-type rope
       --group-query-attention --num-query-groups 2 --disable-bias-linear
       --untie-embeddings-and-output-weights)
losses() { python3 -c 'import json,sys; print(" ".join("%.9g" % r["lm_loss"] for r in map(json.loads, open(sys.argv[1])) if "iteration" in r))' "$1"; }
"$mpiexec" -n 1 "$megac" train "${flags[@]}" --train-iters 8 --log-json "$wd/ref.jsonl" > "$wd/ref.txt" 2>&1 \
  || { tail "$wd/ref.txt"; fail "llama run"; }
python3 - "$wd/ref.jsonl" <<'PY' || fail "the loss does not fall"
import json, sys
l = [r["lm_loss"] for r in map(json.loads, open(sys.argv[1])) if "iteration" in r]
print(f"llama-style: loss {l[0]:.4f} -> {l[-1]:.4f} over {len(l)} iterations")
sys.exit(0 if len(l) == 8 and l[-1] < l[0] - 0.1 else 1)
PY
"$mpiexec" -n 8 "$megac" train "${flags[@]}" --train-iters 4 --tensor-model-parallel-size 2 \
  --pipeline-model-parallel-size 2 --sequence-parallel --save "$wd/ck" > "$wd/s.txt" 2>&1 \
  || { tail "$wd/s.txt"; fail "llama save at 2,2,2"; }
"$mpiexec" -n 1 "$megac" train "${flags[@]}" --train-iters 8 --load "$wd/ck" \
  --log-json "$wd/resumed.jsonl" > "$wd/r.txt" 2>&1 || { tail "$wd/r.txt"; fail "llama resume"; }
python3 - "$wd/ref.jsonl" "$wd/resumed.jsonl" <<'PY' || fail "resumed losses differ"
import json, sys
a = {r["iteration"]: r["lm_loss"] for r in map(json.loads, open(sys.argv[1])) if "iteration" in r}
b = {r["iteration"]: r["lm_loss"] for r in map(json.loads, open(sys.argv[2])) if "iteration" in r}
worst = max(abs(b[i] - a[i]) / abs(a[i]) for i in b)
print(f"resumed at one rank from TP 2 x PP 2 x DP 2: iterations {sorted(b)}, largest relative difference {worst:.2e}")
sys.exit(0 if sorted(b) == [5, 6, 7, 8] and worst < 1e-5 else 1)
PY
expect2() {  # expect2 WHAT PATTERN CMD...: exit 2 and one line on stderr matching PATTERN
  local what="$1" pat="$2"; shift 2
  out=$("$@" 2>&1 >/dev/null); rc=$?
  ((rc == 2)) && grep -q -- "$pat" <<<"$out" || fail "$what: exit $rc: $out"
  [[ $(grep -c . <<<"$out") -eq 1 ]] || fail "$what: not one line: $out"
  echo "refused ($what): $out"
}
expect2 "GPT-2 run loading a Llama checkpoint" "normalization RMSNorm 1 (this run 0)" \
  "$mpiexec" -n 1 "$megac" train "${gpt[@]}" --untie-embeddings-and-output-weights --train-iters 8 --load "$wd/ck"
expect2 "other query groups" "num-query-groups 2 (this run 1)" \
  "$mpiexec" -n 1 "$megac" train "${flags[@]}" --num-query-groups 1 --train-iters 8 --load "$wd/ck"
expect2 "unknown normalization" "--normalization must be LayerNorm or RMSNorm" \
  "$megac" train "${gpt[@]}" --normalization BatchNorm
expect2 "unknown position type" "--position-embedding-type must be learned_absolute or rope" \
  "$megac" train "${gpt[@]}" --position-embedding-type alibi
expect2 "swiglu default F of 0" "give --ffn-hidden-size" \
  "$megac" train "${gpt[@]}" --swiglu --hidden-size 16
expect2 "TP not dividing the query groups" "must divide num-query-groups 2" \
  "$mpiexec" -n 4 "$megac" train "${flags[@]}" --tensor-model-parallel-size 4
expect2 "query groups not dividing the heads" "num-query-groups 3 must be positive and divide" \
  "$megac" train "${gpt[@]}" --group-query-attention --num-query-groups 3
expect2 "fewer than 2 rotary channels" "rotary-percent 0.1" \
  "$megac" train "${gpt[@]}" --position-embedding-type rope --rotary-percent 0.1
echo "llama: ok"
