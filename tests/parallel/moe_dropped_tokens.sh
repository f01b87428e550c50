#!/usr/bin/env bash
# tests/parallel/moe_dropped_tokens.sh MPIEXEC MEGAC: the dropped-token count that the log line
# and the --log-json record report with --moe-expert-capacity-factor (issue 40 item 5). Each
# expert keeps at most cap = ceil(n K / E x factor) of a micro-batch's n K choices, so at most
# E cap are kept: with the factor 0.25 every expert overflows (cap 8 of 128 choices, 32 on
# average) and exactly n K - E cap are dropped per micro-batch and MoE layer, the same at one
# rank, DP 2 and EP 2; with the factor E no expert can overflow and none is dropped.
set -uo pipefail
mpiexec="$1" megac="$2"
wd=$(mktemp -d)
trap 'rm -rf "$wd"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=1; }
L=2 T=32 MB=2 GB=8 E=4 K=2
base=(--mock-data --num-layers $L --hidden-size 64 --num-attention-heads 4 --seq-length $T
      --micro-batch-size $MB --global-batch-size $GB --lr 1e-3 --log-interval 1 --train-iters 2
      --eval-iters 0 --num-threads 1 --num-experts $E --moe-router-topk $K)
n=$((MB * T)) micro=$((GB / MB))
cap=$(( (n * K * 25 + E * 100 - 1) / (E * 100) ))  # ceil(n K / E x 0.25)
want=$(( L * micro * (n * K - E * cap) ))
for layout in "1" "2" "2 --expert-model-parallel-size 2"; do
  np=${layout%% *} extra=${layout#"$np"}
  # shellcheck disable=SC2086
  timeout 60 "$mpiexec" -n "$np" "$megac" train "${base[@]}" --moe-expert-capacity-factor 0.25 $extra \
    --log-json "$wd/d.jsonl" > "$wd/out.txt" 2>&1 || { fail "layout -n $layout: exit $?"; tail -3 "$wd/out.txt"; continue; }
  got=$(grep -o '"moe_dropped_tokens":[0-9]*' "$wd/d.jsonl" | cut -d: -f2 | sort -u | paste -sd,)
  [[ "$got" == "$want" ]] || fail "-n $layout: dropped $got per step, want $want"
  grep -q "dropped tokens: $want |" "$wd/out.txt" || fail "-n $layout: log line: $(grep -o 'dropped tokens: [0-9]*' "$wd/out.txt" | head -1)"
  echo "ok   -n $layout: $want dropped per step (L $L x $micro micro-batches x ($n x $K - $E x $cap))"
done
timeout 60 "$mpiexec" -n 1 "$megac" train "${base[@]}" --moe-expert-capacity-factor $E --log-json "$wd/z.jsonl" \
  > "$wd/out.txt" 2>&1 || fail "factor $E: exit $?"
got=$(grep -o '"moe_dropped_tokens":[0-9]*' "$wd/z.jsonl" | cut -d: -f2 | sort -u | paste -sd,)
[[ "$got" == 0 ]] && echo "ok   factor $E: none dropped" || fail "factor $E: dropped $got, want 0"
exit $fails
