#!/usr/bin/env bash
# tests/parallel_state/test_layout_cli.sh: `megac layout` prints the worked example, valid
# JSON with the documented keys, the groups spanning CP when --context-parallel-size > 1, the
# expert groups when --expert-model-parallel-size > 1 or --expert-tensor-parallel-size != TP,
# and rejects bad layouts with one line (naming every factor) and exit code 2.
set -u
megac="$1"
fail=0
check() { if ! eval "$1"; then echo "FAIL: $2"; fail=1; fi; }

out=$("$megac" layout --world-size 16 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 4)
check '[[ $? -eq 0 ]]' "layout exit code"
check 'grep -q "tensor-parallel groups (8 of 2): \[0,1\] \[2,3\] \[4,5\]" <<<"$out"' "tp groups"
check 'grep -q "pipeline-parallel groups (4 of 4): \[0,4,8,12\] \[1,5,9,13\]" <<<"$out"' "pp groups"
check 'grep -q "data-parallel groups (8 of 2): \[0,2\] \[1,3\] \[4,6\]" <<<"$out"' "dp groups"

json=$("$megac" layout --world-size 16 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 4 --json)
check 'python3 - "$json" <<"PY"
import json, sys
d = json.loads(sys.argv[1])
assert (d["world_size"], d["tp"], d["pp"], d["dp"]) == (16, 2, 4, 2)
assert d["tp_groups"][:3] == [[0, 1], [2, 3], [4, 5]]
assert d["pp_groups"][:2] == [[0, 4, 8, 12], [1, 5, 9, 13]]
assert d["dp_groups"][:3] == [[0, 2], [1, 3], [4, 6]]
assert d["model_parallel_groups"][0] == [0, 1, 4, 5, 8, 9, 12, 13]
assert d["embedding_groups"] == [[0, 12], [1, 13], [2, 14], [3, 15]]
assert d["ranks"][6] == {"rank": 6, "tp_rank": 0, "pp_rank": 1, "dp_rank": 1}
PY' "json content"

# The whole output of a small layout, byte for byte as before the grid became N-dimensional
# (CP = 1 prints no context-parallel column, factor or group).
want_text='world size 4 = tensor-parallel 2 x data-parallel 1 x pipeline-parallel 2
order: rank = tp_rank + 2 * (dp_rank + 1 * pp_rank)

  rank  tp_rank  dp_rank  pp_rank
     0        0        0        0
     1        1        0        0
     2        0        0        1
     3        1        0        1

tensor-parallel groups (2 of 2): [0,1] [2,3]
data-parallel groups (4 of 1): [0] [1] [2] [3]
pipeline-parallel groups (2 of 2): [0,2] [1,3]
model-parallel groups (1 of 4): [0,1,2,3]
embedding groups (2 of 2): [0,2] [1,3]'
want_json='{"world_size":4,"tp":2,"pp":2,"dp":1,"tp_groups":[[0,1],[2,3]],"dp_groups":[[0],[1],[2],[3]],"pp_groups":[[0,2],[1,3]],"model_parallel_groups":[[0,1,2,3]],"embedding_groups":[[0,2],[1,3]],"ranks":[{"rank":0,"tp_rank":0,"pp_rank":0,"dp_rank":0},{"rank":1,"tp_rank":1,"pp_rank":0,"dp_rank":0},{"rank":2,"tp_rank":0,"pp_rank":1,"dp_rank":0},{"rank":3,"tp_rank":1,"pp_rank":1,"dp_rank":0}]}'
small=(layout --world-size 4 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2)
check '[[ "$("$megac" "${small[@]}")" == "$want_text" ]]' "text output of world 4, TP 2, PP 2 changed"
check '[[ "$("$megac" "${small[@]}" --json)" == "$want_json" ]]' "JSON output of world 4, TP 2, PP 2 changed"
check '[[ "$("$megac" "${small[@]}" --context-parallel-size 1 --json)" == "$want_json" ]]' "--context-parallel-size 1 changed the JSON"

# CP > 1 (pgrid.h's second example): the cp column and factor, and the groups spanning CP.
cp=(layout --world-size 16 --tensor-model-parallel-size 2 --context-parallel-size 2 --pipeline-model-parallel-size 2)
out=$("$megac" "${cp[@]}")
check 'grep -q "^world size 16 = tensor-parallel 2 x context-parallel 2 x data-parallel 2 x pipeline-parallel 2$" <<<"$out"' "cp header"
check 'grep -q "^order: rank = tp_rank + 2 \* (cp_rank + 2 \* (dp_rank + 2 \* pp_rank))$" <<<"$out"' "cp order"
check 'grep -q "^     6        0        1        1        0$" <<<"$out"' "rank 6 = (tp 0, cp 1, dp 1, pp 0)"
check 'grep -q "^context-parallel groups (8 of 2): \[0,2\] \[1,3\] \[4,6\]" <<<"$out"' "cp groups"
check 'grep -q "^data-parallel groups (8 of 2): \[0,4\] \[1,5\]" <<<"$out"' "dp groups with cp"
check 'grep -q "^data x context-parallel groups (4 of 4): \[0,2,4,6\] \[1,3,5,7\] \[8,10,12,14\] \[9,11,13,15\]$" <<<"$out"' "dp x cp groups"
check 'grep -q "^tensor x context-parallel groups (4 of 4): \[0,1,2,3\] \[4,5,6,7\]" <<<"$out"' "tp x cp groups"
check 'grep -q "^model-parallel groups (4 of 4): \[0,1,8,9\] \[2,3,10,11\]" <<<"$out"' "model groups with cp"
json=$("$megac" "${cp[@]}" --json)
check 'python3 - "$json" <<"PY"
import json, sys
d = json.loads(sys.argv[1])
assert (d["world_size"], d["tp"], d["cp"], d["dp"], d["pp"]) == (16, 2, 2, 2, 2)
assert d["dp_cp_groups"] == [[0, 2, 4, 6], [1, 3, 5, 7], [8, 10, 12, 14], [9, 11, 13, 15]]
assert d["cp_groups"][:2] == [[0, 2], [1, 3]] and d["tp_cp_groups"][1] == [4, 5, 6, 7]
assert d["ranks"][6] == {"rank": 6, "tp_rank": 0, "pp_rank": 0, "dp_rank": 1, "cp_rank": 1}
PY' "cp json content"

# Experts (pgrid.h's expert examples, Megatron-Core's expert rank generator): 16 ranks as TP 2
# x PP 2 with EP 2 and ETP 1, then ETP 2. Without them (EP 1, ETP = TP) nothing is added.
ex=(layout --world-size 16 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --expert-model-parallel-size 2)
out=$("$megac" "${ex[@]}" --expert-tensor-parallel-size 1)
check 'grep -q "^world size 16 = tensor-parallel 2 x data-parallel 4 x pipeline-parallel 2$" <<<"$out"' "dense header with experts"
check 'grep -q "^expert layers: world size 16 = expert-tensor-parallel 1 x expert-model-parallel 2 x expert-data-parallel 4 x pipeline-parallel 2$" <<<"$out"' "expert header"
check 'grep -q "^order: rank = etp_rank + 1 \* (ep_rank + 2 \* (edp_rank + 4 \* pp_rank))$" <<<"$out"' "expert order"
check 'grep -q "^  rank  tp_rank  dp_rank  pp_rank etp_rank  ep_rank edp_rank$" <<<"$out"' "expert columns"
check 'grep -q "^     6        0        3        0        0        0        3$" <<<"$out"' "rank 6 = (etp 0, ep 0, edp 3)"
check 'grep -q "^expert-model-parallel groups (8 of 2): \[0,1\] \[2,3\] \[4,5\]" <<<"$out"' "ep groups, etp 1"
check 'grep -q "^expert-data-parallel groups (4 of 4): \[0,2,4,6\] \[1,3,5,7\] \[8,10,12,14\] \[9,11,13,15\]$" <<<"$out"' "edp groups, etp 1"
check 'grep -q "^expert-tensor-parallel groups (16 of 1): \[0\] \[1\]" <<<"$out"' "etp groups, etp 1"
out=$("$megac" "${ex[@]}")  # ETP defaults to TP, as in Megatron
check 'grep -q "^expert-model-parallel groups (8 of 2): \[0,2\] \[1,3\] \[4,6\] \[5,7\]" <<<"$out"' "ep groups, etp 2"
check 'grep -q "^expert-tensor x expert-model-parallel groups (4 of 4): \[0,1,2,3\] \[4,5,6,7\]" <<<"$out"' "etp x ep groups"
check 'grep -q "^expert-data-parallel groups (8 of 2): \[0,4\] \[1,5\] \[2,6\] \[3,7\] \[8,12\]" <<<"$out"' "edp groups, etp 2"
check 'grep -q "^expert-tensor x expert-model x pipeline-parallel groups (2 of 8): \[0,1,2,3,8,9,10,11\] \[4,5,6,7,12,13,14,15\]$" <<<"$out"' "etp x ep x pp groups"
json=$("$megac" "${ex[@]}" --expert-tensor-parallel-size 2 --json)
check 'python3 - "$json" <<"PY"
import json, sys
d = json.loads(sys.argv[1])
assert (d["world_size"], d["tp"], d["dp"], d["pp"], d["etp"], d["ep"], d["edp"]) == (16, 2, 4, 2, 2, 2, 2)
assert d["ep_groups"][:4] == [[0, 2], [1, 3], [4, 6], [5, 7]]
assert d["etp_groups"] == d["tp_groups"] and d["etp_ep_groups"][1] == [4, 5, 6, 7]
assert d["edp_groups"][:2] == [[0, 4], [1, 5]] and len(d["edp_groups"]) == 8
assert d["etp_ep_pp_groups"] == [[0, 1, 2, 3, 8, 9, 10, 11], [4, 5, 6, 7, 12, 13, 14, 15]]
assert d["ranks"][6] == {"rank": 6, "tp_rank": 0, "pp_rank": 0, "dp_rank": 3, "etp_rank": 0, "ep_rank": 1, "edp_rank": 1}
PY' "expert json content"
check '[[ "$("$megac" "${small[@]}" --expert-model-parallel-size 1 --expert-tensor-parallel-size 2)" == "$want_text" ]]' "EP 1, ETP = TP changed the text"
check '[[ "$("$megac" "${small[@]}" --expert-model-parallel-size 1 --json)" == "$want_json" ]]' "EP 1 changed the JSON"

for bad in "--world-size 12 --tensor-model-parallel-size 8" "--world-size 0" \
           "--world-size abc" "--world-size 8 --tensor-model-parallel-size -2" \
           "--world-size 8 --bogus 1" "--world-size" "--world-size 8 --context-parallel-size 0" \
           "--world-size 12 --context-parallel-size 8" "--world-size 8 --expert-model-parallel-size 3" \
           "--world-size 8 --tensor-model-parallel-size 4 --expert-tensor-parallel-size 2" \
           "--world-size 8 --expert-model-parallel-size 0" "--world-size 8 --expert-tensor-parallel-size -1"; do
  err=$("$megac" layout $bad 2>&1 >/dev/null); rc=$?
  check '[[ $rc -eq 2 ]]' "'$bad' exit $rc, want 2"
  check '[[ $(wc -l <<<"$err") -eq 1 ]]' "'$bad' one-line error: $err"
done
err=$("$megac" layout --world-size 12 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 4 2>&1)
check '[[ "$err" == *"world size 12 is not divisible by tensor-model-parallel-size 2 x pipeline-model-parallel-size 4 = 8" ]]' "error names factors: $err"
err=$("$megac" "${cp[@]}" --world-size 12 2>&1)
check '[[ "$err" == *"world size 12 is not divisible by tensor-model-parallel-size 2 x context-parallel-size 2 x pipeline-model-parallel-size 2 = 8" ]]' "error names CP: $err"
err=$("$megac" "${ex[@]}" --expert-model-parallel-size 8 2>&1)
check '[[ "$err" == *"world size 16 is not divisible by expert-tensor-parallel-size 2 x expert-model-parallel-size 8 x pipeline-model-parallel-size 2 = 32" ]]' "error names the expert factors: $err"
err=$("$megac" "${ex[@]}" --tensor-model-parallel-size 4 --expert-tensor-parallel-size 2 2>&1)
check '[[ "$err" == *"expert-tensor-parallel-size 2 must be 1 or tensor-model-parallel-size 4" ]]' "ETP 1 or TP: $err"
"$megac" --version | grep -q "^megac " || { echo "FAIL: --version"; fail=1; }
[[ $fail -eq 0 ]] && echo "test_layout_cli: ok"
exit $fail
