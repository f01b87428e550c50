#!/usr/bin/env bash
# tests/train/untie.sh MPIEXEC MEGAC: --untie-embeddings-and-output-weights.
#   untied and tied models differ (the output layer is its own weight from the first update);
#   an untied checkpoint written at TP 2 x PP 2 x DP 2 resumes at one rank with the same losses
#   as a run that never stopped (the output layer travels in the checkpoint);
#   a tied run refuses an untied checkpoint (and the reverse) with one line, exit 2;
#   `megac export` refuses an untied checkpoint (Hugging Face's GPT-2 ties them), exit 2.
set -uo pipefail
mpiexec="$1" megac="$2"
wd=$(mktemp -d); trap 'rm -rf "$wd"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
flags=(--mock-data --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32
       --micro-batch-size 2 --global-batch-size 8 --lr 1e-3 --log-interval 100 --eval-iters 0
       --num-threads 1 --lr-decay-style constant)
losses() { python3 -c 'import json,sys; print(" ".join("%.9g" % r["lm_loss"] for r in map(json.loads, open(sys.argv[1])) if "iteration" in r))' "$1"; }
"$mpiexec" -n 1 "$megac" train "${flags[@]}" --train-iters 6 --log-json "$wd/tied.jsonl" >/dev/null 2>&1 || fail "tied run"
"$mpiexec" -n 1 "$megac" train "${flags[@]}" --untie-embeddings-and-output-weights --train-iters 6 \
  --log-json "$wd/untied.jsonl" > "$wd/u.txt" 2>&1 || { tail "$wd/u.txt"; fail "untied run"; }
[[ "$(losses "$wd/tied.jsonl")" != "$(losses "$wd/untied.jsonl")" ]] || fail "untied losses equal the tied ones"
"$mpiexec" -n 8 "$megac" train "${flags[@]}" --untie-embeddings-and-output-weights --train-iters 3 \
  --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --save "$wd/ck" > "$wd/s.txt" 2>&1 \
  || { tail "$wd/s.txt"; fail "untied save at 2,2,2"; }
"$mpiexec" -n 1 "$megac" train "${flags[@]}" --untie-embeddings-and-output-weights --train-iters 6 \
  --load "$wd/ck" --log-json "$wd/resumed.jsonl" > "$wd/r.txt" 2>&1 || { tail "$wd/r.txt"; fail "untied resume"; }
python3 - "$wd/untied.jsonl" "$wd/resumed.jsonl" <<'PY' || fail "resumed losses differ"
import json, sys
a = {r["iteration"]: r["lm_loss"] for r in map(json.loads, open(sys.argv[1])) if "iteration" in r}
b = {r["iteration"]: r["lm_loss"] for r in map(json.loads, open(sys.argv[2])) if "iteration" in r}
worst = max(abs(b[i] - a[i]) / abs(a[i]) for i in b)
print(f"resumed at one rank from TP 2 x PP 2 x DP 2: iterations {sorted(b)}, largest relative difference {worst:.2e}")
sys.exit(0 if sorted(b) == [4, 5, 6] and worst < 1e-5 else 1)
PY
out=$("$mpiexec" -n 1 "$megac" train "${flags[@]}" --train-iters 6 --load "$wd/ck" 2>&1); rc=$?
((rc == 2)) && grep -q "untie-embeddings-and-output-weights 1 (this run 0)" <<<"$out" || fail "tied run loading an untied checkpoint: exit $rc: $out"
out=$("$megac" export --load "$wd/ck" --output "$wd/hf" 2>&1); rc=$?
((rc == 2)) && grep -q "untie_embeddings_and_output_weights" <<<"$out" || fail "export of an untied checkpoint: exit $rc: $out"
echo "untie: ok"
