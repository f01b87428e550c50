#!/usr/bin/env bash
# tests/plan/test_plan_cli.sh MEGAC: `megac plan` output and bad input.
# The table, --json (valid JSON, one entry per layout, restrictions honoured), the built-in
# and file hardware profiles, train's recomputation and interleaved-schedule flags; bad input is one line naming the problem and exit code 2.
set -u
megac="$1"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
model=(--num-layers 4 --hidden-size 64 --num-attention-heads 8 --seq-length 32 --vocab-size 257)

ok() {  # ok NAME CMD...: must exit 0
  local name="$1"; shift
  if "$@" > "$tmp/out" 2> "$tmp/err"; then echo "ok   $name"; else
    echo "FAIL $name: exit $?"; cat "$tmp/err"; fails=$((fails + 1)); fi
}
bad() {  # bad NAME PATTERN CMD...: must exit 2 with PATTERN on stderr
  local name="$1" pat="$2"; shift 2
  "$@" > "$tmp/out" 2> "$tmp/err"
  local rc=$?
  if [[ $rc -eq 2 ]] && grep -q -- "$pat" "$tmp/err"; then echo "ok   $name: $(head -1 "$tmp/err")"; else
    echo "FAIL $name: exit $rc, stderr: $(cat "$tmp/err")"; fails=$((fails + 1)); fi
}

ok table "$megac" plan --world-size 8 "${model[@]}" --global-batch-size 16
grep -q "assumptions:" "$tmp/out" && grep -q "fastest first" "$tmp/out" || { echo "FAIL table text"; fails=$((fails + 1)); }
# the fused attention's kernels as train picks them: megac's with attention dropout, else cuDNN
hs64=(--num-layers 2 --hidden-size 256 --num-attention-heads 4 --seq-length 32 --vocab-size 257 --bf16 --use-flash-attn)
ok attn_megac "$megac" plan --world-size 2 "${hs64[@]}"
grep -q "flash attention (megac's kernels)" "$tmp/out" || { echo "FAIL attn_megac header: $(head -1 "$tmp/out")"; fails=$((fails + 1)); }
ok attn_cudnn "$megac" plan --world-size 2 "${hs64[@]}" --attention-dropout 0
grep -q "flash attention (cuDNN)" "$tmp/out" || { echo "FAIL attn_cudnn header: $(head -1 "$tmp/out")"; fails=$((fails + 1)); }
ok attn_flash "$megac" plan --world-size 2 "${hs64[@]}" --attention-dropout 0 --attention-backend flash
grep -q "flash attention (megac's kernels)" "$tmp/out" || { echo "FAIL attn_flash header: $(head -1 "$tmp/out")"; fails=$((fails + 1)); }
ok attn_cp2 "$megac" plan --world-size 2 "${hs64[@]}" --attention-dropout 0 --context-parallel-size 2
grep -q "flash attention (megac's kernels)" "$tmp/out" || { echo "FAIL attn_cp2 header (CP's blocks are windows): $(head -1 "$tmp/out")"; fails=$((fails + 1)); }
bad attn_dropout_range "--attention-dropout 1: a dropout probability must be in" \
  "$megac" plan --world-size 2 "${hs64[@]}" --attention-dropout 1
ok json "$megac" plan --world-size 8 "${model[@]}" --global-batch-size 16 --json --hardware h200
python3 - "$tmp/out" <<'PY' || fails=$((fails + 1))
import json, sys
d = json.load(open(sys.argv[1]))
L = d["layouts"]
assert L and all(l["tp"] * l["pp"] * l["dp"] == 8 for l in L), "layouts multiply to 8"
assert all(len(l["stages"]) == l["pp"] for l in L), "one entry per stage"
assert d["hardware"]["memory_gb"] == 141, d["hardware"]
keys = {(l["tp"], l["pp"], l["micro_batch"], l["schedule"], l["sequence_parallel"], l["zero1"]) for l in L}
assert len(keys) == len(L), "no layout twice"
print(f"ok   json: {len(L)} layouts")
PY
ok restricted "$megac" plan --world-size 8 "${model[@]}" --global-batch-size 16 --json \
  --tensor-model-parallel-size 2 --micro-batch-size 2 --sequence-parallel --no-distributed-optimizer
python3 -c "
import json, sys
L = json.load(open('$tmp/out'))['layouts']
assert L and all(l['tp'] == 2 and l['micro_batch'] == 2 and l['sequence_parallel'] == 1 and l['zero1'] == 0 for l in L), L
" || { echo "FAIL restrictions"; fails=$((fails + 1)); }
# --data-parallel-sharding-strategy: ZeRO-3 layouts hold 1/DP of the fp32 masters + gathered bf16
# weights (less than ZeRO-1's full masters + copies) and gather per layer (plan_vs_run: exact bytes)
ok zero1_bf16 "$megac" plan --world-size 8 "${model[@]}" --global-batch-size 16 --json --bf16 --data-parallel-sharding-strategy optim
cp "$tmp/out" "$tmp/zero1.json"
ok zero3_bf16 "$megac" plan --world-size 8 "${model[@]}" --global-batch-size 16 --json --bf16 --data-parallel-sharding-strategy optim_grads_params
python3 - "$tmp/zero1.json" "$tmp/out" <<'PY' || fails=$((fails + 1))
import json, sys
key = lambda l: (l["tp"], l["pp"], l["dp"], l["micro_batch"], l["schedule"], l["sequence_parallel"])
z1 = {key(l): l for l in json.load(open(sys.argv[1]))["layouts"]}
z3 = json.load(open(sys.argv[2]))["layouts"]
assert z3 and all(l["zero"] == 3 and l["zero1"] == 1 and l["dp"] > 1 for l in z3), "ZeRO-3 layouts only"
for l in z3:
    a, b = l["stages"][0], z1[key(l)]["stages"][0]
    assert a["memory"]["parameters"] < b["memory"]["parameters"], (key(l), a["memory"], b["memory"])
    assert a["traffic"]["dp"]["all_gather"]["calls"] > b["traffic"]["dp"]["all_gather"]["calls"], key(l)
print(f"ok   zero3: {len(z3)} layouts, less parameter memory and more DP gathers than ZeRO-1")
PY
printf 'name = two-GPU box\ngpus_per_node = 2\nmemory_gb = 24\ninter_node_gbps = 12.5\n' > "$tmp/box.hw"
ok hardware_file "$megac" plan --world-size 8 "${model[@]}" --global-batch-size 16 --hardware "$tmp/box.hw"
grep -q "two-GPU box" "$tmp/out" || { echo "FAIL profile name not shown"; fails=$((fails + 1)); }
ok recompute "$megac" plan --world-size 8 "${model[@]}" --global-batch-size 16 --json --recompute-granularity full \
  --recompute-method block --recompute-num-layers 1 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2
python3 -c "
import json
d = json.load(open('$tmp/out'))
m = d['model']
assert (m['recompute_granularity'], m['recompute_method'], m['recompute_num_layers']) == ('full', 'block', 1), m
assert all(l['hardware_flops'] > l['model_flops'] and all(s['recomputed_layers'] == 1 for s in l['stages'])
           for l in d['layouts']), 'recomputation'
" && "$megac" plan --world-size 8 "${model[@]}" --global-batch-size 16 --recompute-activations | head -1 \
  | grep -q "| recompute selective$" && echo "ok   recompute flags reach the plan (JSON, header)" \
  || { echo "FAIL recompute in the plan"; fails=$((fails + 1)); }
# interleaved 1F1B, both of train's spellings: every layout PP >= 2 with v = 2 (ilv2 in the
# table), the same layouts either way, v times the pipeline bytes of plain 1F1B
ok interleaved "$megac" plan --world-size 8 "${model[@]}" --global-batch-size 16 --json --virtual-pipeline-model-parallel-size 2
cp "$tmp/out" "$tmp/v2.json"
ok interleaved_layers "$megac" plan --world-size 8 "${model[@]}" --global-batch-size 16 --json \
  --num-layers-per-virtual-pipeline-stage 1 --pipeline-model-parallel-size 2
python3 - "$tmp/v2.json" "$tmp/out" <<'PY' || fails=$((fails + 1))
import json, sys
v2, by_layers = (json.load(open(p))["layouts"] for p in sys.argv[1:])
assert v2 and all(l["virtual_pipeline_size"] == 2 and l["pp"] == 2 and l["schedule"] == "1f1b" for l in v2), v2
assert sorted(json.dumps(l, sort_keys=True) for l in by_layers) == sorted(json.dumps(l, sort_keys=True) for l in v2)
print(f"ok   interleaved: {len(v2)} layouts, PP 2 x v 2 (PP 4 and 8 cannot split 4 layers in 2 chunks), both flags agree")
PY
"$megac" plan --world-size 8 "${model[@]}" --global-batch-size 16 --virtual-pipeline-model-parallel-size 2 | grep -q " ilv2 " \
  && echo "ok   interleaved table: ilv2" || { echo "FAIL interleaved table"; fails=$((fails + 1)); }
# an uneven first stage (--decoder-first-pipeline-num-layers) is checked per layout: 3 of 5
# layers on the first stage leave 2 for the others, which of world 8's PP 1, 2, 4, 8 only
# PP 2 takes (it refused every plan before)
ok uneven "$megac" plan --world-size 8 --num-layers 5 --hidden-size 64 --num-attention-heads 8 \
  --seq-length 32 --vocab-size 257 --global-batch-size 16 --json --decoder-first-pipeline-num-layers 3
python3 -c "
import json
ls = json.load(open('$tmp/out'))['layouts']
assert ls and all(l['pp'] == 2 for l in ls), sorted({l['pp'] for l in ls})
" && echo "ok   uneven first stage: PP 2 only" || { echo "FAIL uneven first stage"; fails=$((fails + 1)); }
# context parallelism: CP 1 unless asked; --context-parallel-size 0 tries every CP whose chunks
# T / (2 CP) keep 128 positions (T = 1024: CP 1, 2, 4); its CP 1 layouts are those of a plan
# without the flag; CP 2 halves the activations of a slot; the ring moves K/V by send/recv,
# all_gather by collectives
long=(--num-layers 4 --hidden-size 64 --num-attention-heads 8 --seq-length 1024 --vocab-size 257)
ok cp_free "$megac" plan --world-size 8 "${long[@]}" --global-batch-size 16 --json --use-flash-attn --context-parallel-size 0
cp "$tmp/out" "$tmp/cpfree.json"
ok cp_one "$megac" plan --world-size 8 "${long[@]}" --global-batch-size 16 --json --use-flash-attn
cp "$tmp/out" "$tmp/cp1.json"
ok cp_all_gather "$megac" plan --world-size 8 "${long[@]}" --global-batch-size 16 --json --use-flash-attn \
  --context-parallel-size 2 --cp-comm-type all_gather
python3 - "$tmp/cpfree.json" "$tmp/cp1.json" "$tmp/out" <<'PY' || fails=$((fails + 1))
import json, sys
free, one, ag = (json.load(open(p))["layouts"] for p in sys.argv[1:])
assert {l["cp"] for l in free} == {1, 2, 4}, sorted({l["cp"] for l in free})
assert all(l["tp"] * l["cp"] * l["pp"] * l["dp"] == 8 for l in free)
strip = lambda L: sorted(json.dumps({k: v for k, v in l.items() if k != "position"}, sort_keys=True) for l in L)
assert strip([l for l in free if l["cp"] == 1]) == strip(one), "CP 1 layouts as without --context-parallel-size"
pick = lambda cp: [l for l in free if (l["cp"], l["tp"], l["pp"], l["micro_batch"], l["zero"]) == (cp, 1, 1, 1, 1)][0]
l2, l1 = pick(2), pick(1)
r = l2["stages"][0]["memory"]["activations"] / l1["stages"][0]["memory"]["activations"]
assert 0.45 < r < 0.55, r
t = l2["stages"][0]["traffic"]["cp"]
assert t["send"]["calls"] > 0 and t["all_gather"]["calls"] == 0 and l1["stages"][0]["traffic"]["cp"]["bytes"] == 0, t
assert ag and all(l["cp"] == 2 and l["cp_comm_type"] == "all_gather" for l in ag)
t = ag[0]["stages"][0]["traffic"]["cp"]
assert t["all_gather"]["calls"] > 0 and t["reduce_scatter"]["calls"] > 0 and t["send"]["calls"] == 0, t
print(f"ok   context parallelism: {len(free)} layouts (CP 1, 2, 4), CP 1 unchanged, CP 2 activations x {r:.3f}")
PY
"$megac" plan --world-size 8 "${model[@]}" --global-batch-size 16 --use-flash-attn --context-parallel-size 2 \
  | grep -q "#  TP  CP  PP" && echo "ok   cp table: CP column" || { echo "FAIL cp table"; fails=$((fails + 1)); }
# CP > 1 implies the fused attention (as train): the same plan with or without --use-flash-attn
cmp <("$megac" plan --world-size 8 "${model[@]}" --context-parallel-size 2 --json) \
    <("$megac" plan --world-size 8 "${model[@]}" --context-parallel-size 2 --use-flash-attn --json) >/dev/null &&
  echo "ok   cp implies flash attention" || { echo "FAIL cp implies flash attention"; fails=$((fails + 1)); }
bad cp_seq "2 x 32 dividing --seq-length 32" "$megac" plan --world-size 64 "${model[@]}" --use-flash-attn \
  --context-parallel-size 32
bad cp_world "--context-parallel-size 3" "$megac" plan --world-size 8 "${model[@]}" --use-flash-attn --context-parallel-size 3
bad cp_comm_type "--cp-comm-type must be p2p, all_gather or a2a, got 'a2a+p2p'" "$megac" plan --world-size 8 \
  "${model[@]}" --use-flash-attn --context-parallel-size 2 --cp-comm-type a2a+p2p

# expert parallelism: every layout has EP; DP x CP it does not divide refused; the expert
# region shrinks by EP, the ep and edp groups appear (ZeRO-2/3 too: per-layer expert units)
moe=(--num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 32)
ok ep_json "$megac" plan --world-size 8 "${model[@]}" "${moe[@]}" --global-batch-size 16 --micro-batch-size 2 --json \
  --expert-model-parallel-size 2
cp "$tmp/out" "$tmp/ep2.json"
"$megac" plan --world-size 8 "${model[@]}" "${moe[@]}" --global-batch-size 16 --micro-batch-size 2 --json > "$tmp/ep1.json"
python3 - "$tmp/ep2.json" "$tmp/ep1.json" <<'PY' || fails=$((fails + 1))
import json, sys
ep2, ep1 = (json.load(open(f))["layouts"] for f in sys.argv[1:])
assert ep2 and all(l["ep"] == 2 and l["dp"] * l["cp"] % 2 == 0 for l in ep2), "EP 2 layouts"
assert all(l["ep"] == 1 and l["stages"][0]["traffic"]["ep"]["bytes"] == 0 for l in ep1), "EP 1: no ep bytes"
key = lambda l: (l["tp"], l["pp"], l["dp"], l["micro_batch"], l["schedule"], l["sequence_parallel"], l["zero"])
one = {key(l): l for l in ep1}
for l in ep2:
    a, b = l["stages"][0], one[key(l)]["stages"][0]
    t = a["traffic"]["ep"]  # the default allgather dispatcher: all-gathers and reduce-scatters
    assert a["parameters"] < b["parameters"] and t["all_gather"]["calls"] > 0, key(l)
    assert t["reduce_scatter"]["calls"] > 0 and t["all_to_all"]["calls"] == 0, key(l)
    assert (a["traffic"]["edp"]["bytes"] > 0) == (l["dp"] * l["cp"] > 2), key(l)
print(f"ok   expert parallelism: {len(ep2)} EP 2 layouts of {len(ep1)}, fewer parameters, ep and edp traffic")
PY
"$megac" plan --world-size 8 "${model[@]}" "${moe[@]}" --global-batch-size 16 --expert-model-parallel-size 2 \
  | grep -q "  DP  EP  mbs" && echo "ok   ep table: EP column" || { echo "FAIL ep table"; fails=$((fails + 1)); }
bad ep_no_experts "expert-model-parallel-size 2 needs --num-experts" "$megac" plan --world-size 8 "${model[@]}" \
  --expert-model-parallel-size 2
bad ep_not_dividing "EP 4 must divide --num-experts 4 and DP x CP = 2 x 1 = 2" "$megac" plan --world-size 8 \
  "${model[@]}" "${moe[@]}" --expert-model-parallel-size 4 --tensor-model-parallel-size 4 --pipeline-model-parallel-size 1
# ZeRO-3 at EP 2: the expert units reduce and gather over EDP (plan_vs_run_ep: exact bytes)
ok ep_zero3 "$megac" plan --world-size 8 "${model[@]}" "${moe[@]}" --global-batch-size 16 --json \
  --expert-model-parallel-size 2 --data-parallel-sharding-strategy optim_grads_params --tensor-model-parallel-size 1 \
  --pipeline-model-parallel-size 1
python3 - "$tmp/out" <<'PY' || fails=$((fails + 1))
import json, sys
ls = json.load(open(sys.argv[1]))["layouts"]
assert ls and all(l["zero"] == 3 for l in ls), "ZeRO-3 layouts only"
t = ls[0]["stages"][0]["traffic"]
assert t["edp"]["reduce_scatter"]["bytes"] > 0 and t["edp"]["all_gather"]["bytes"] > 0, t["edp"]
print("ok   ep_zero3: EDP 4 reduce-scatters and gathers the expert units")
PY
# --expert-tensor-parallel-size 1: EP over TP x DP x CP (EP 4 at TP 2 x DP 2 here), SP only
ok ep_etp1 "$megac" plan --world-size 4 "${model[@]}" "${moe[@]}" --global-batch-size 16 --json \
  --expert-model-parallel-size 4 --expert-tensor-parallel-size 1 --tensor-model-parallel-size 2 \
  --pipeline-model-parallel-size 1
python3 - "$tmp/out" <<'PY' || fails=$((fails + 1))
import json, sys
ls = json.load(open(sys.argv[1]))["layouts"]
assert ls and all(l["etp"] == 1 and l["ep"] == 4 and l["sequence_parallel"] for l in ls), "ETP 1 layouts"
assert all(l["stages"][0]["traffic"]["edp"]["bytes"] == 0 for l in ls), "EDP 1"
print(f"ok   ep_etp1: {len(ls)} layouts, all with SP, EDP 1")
PY
bad ep_etp1_no_sp "needs --sequence-parallel" "$megac" plan --world-size 4 "${model[@]}" "${moe[@]}" \
  --global-batch-size 16 --expert-model-parallel-size 4 --expert-tensor-parallel-size 1 \
  --tensor-model-parallel-size 2 --pipeline-model-parallel-size 1 --no-sequence-parallel
bad ep_etp_not_tp "--expert-tensor-parallel-size 2 must be 1 or TP" "$megac" plan --world-size 8 "${model[@]}" \
  "${moe[@]}" --expert-model-parallel-size 2 --expert-tensor-parallel-size 2

bad no_world "world-size" "$megac" plan "${model[@]}"
bad tp_not_dividing "not divisible by --tensor-model-parallel-size 3" "$megac" plan --world-size 8 "${model[@]}" --tensor-model-parallel-size 3
bad unknown_hardware "not a built-in profile" "$megac" plan --world-size 8 "${model[@]}" --hardware a100
printf 'gpus_per_node = eight\n' > "$tmp/bad.hw"
bad bad_hardware_file "line 1: 'eight' is not a number" "$megac" plan --world-size 8 "${model[@]}" --hardware "$tmp/bad.hw"
bad no_valid_layout "no valid layout" "$megac" plan --world-size 8 --num-layers 3 --hidden-size 63 \
  --num-attention-heads 3 --seq-length 32 --global-batch-size 3
bad contradiction "contradict" "$megac" plan --world-size 8 "${model[@]}" --sequence-parallel --no-sequence-parallel
bad schedule "must be 1f1b or gpipe" "$megac" plan --world-size 8 "${model[@]}" --pipeline-schedule interleaved
bad heads "not divisible by num-attention-heads" "$megac" plan --world-size 8 --hidden-size 60 --num-attention-heads 8
bad unknown_flag "unknown" "$megac" plan --world-size 8 --gpus 8
bad recompute_granularity "must be full or selective" "$megac" plan --world-size 8 "${model[@]}" --recompute-granularity some
bad recompute_contradiction "contradicts" "$megac" plan --world-size 8 "${model[@]}" --recompute-activations \
  --recompute-granularity full
bad sharding_name "must be no_shard, optim, optim_grads or optim_grads_params" "$megac" plan --world-size 8 \
  "${model[@]}" --data-parallel-sharding-strategy zero3
bad sharding_contradiction "no-distributed-optimizer contradicts --data-parallel-sharding-strategy optim_grads" \
  "$megac" plan --world-size 8 "${model[@]}" --no-distributed-optimizer --data-parallel-sharding-strategy optim_grads
bad vpp_both "not both" "$megac" plan --world-size 8 "${model[@]}" --virtual-pipeline-model-parallel-size 2 \
  --num-layers-per-virtual-pipeline-stage 1
bad vpp_gpipe "does not support --pipeline-schedule gpipe" "$megac" plan --world-size 8 "${model[@]}" \
  --virtual-pipeline-model-parallel-size 2 --pipeline-schedule gpipe --pipeline-model-parallel-size 2
ok vpp_zero3 "$megac" plan --world-size 8 "${model[@]}" --json \
  --virtual-pipeline-model-parallel-size 2 --data-parallel-sharding-strategy optim_grads_params --pipeline-model-parallel-size 2 \
  --tensor-model-parallel-size 1
python3 -c "
import json
ls = json.load(open('$tmp/out'))['layouts']
assert ls and all(l['zero'] == 3 and l['virtual_pipeline_size'] == 2 for l in ls), ls
" && echo "ok   interleaved ZeRO-3 layouts" || { echo "FAIL interleaved ZeRO-3 layouts"; fails=$((fails + 1)); }
bad vpp_pp1 "needs PP >= 2" "$megac" plan --world-size 8 "${model[@]}" --virtual-pipeline-model-parallel-size 2 \
  --pipeline-model-parallel-size 1
bad vpp_m "multiple of" "$megac" plan --world-size 8 "${model[@]}" --virtual-pipeline-model-parallel-size 2 \
  --pipeline-model-parallel-size 2 --global-batch-size 4 --micro-batch-size 1 --tensor-model-parallel-size 1
bad vpp_negative "must be 0 to 64" "$megac" plan --world-size 8 "${model[@]}" --virtual-pipeline-model-parallel-size -1
# issue 30: the inputs are bounded (a world of 2^31-1 ranks divided by zero after 49 s) and
# the enumeration visits divisors only, its cost per layout independent of --num-layers
bad world_huge "--world-size must be in \[1, 1048576\], got 2147483647" timeout 10 "$megac" plan \
  --world-size 2147483647 "${model[@]}" --global-batch-size 16
bad batch_huge "--global-batch-size must be at most 16777216" timeout 10 "$megac" plan --world-size 8 \
  "${model[@]}" --global-batch-size 2000000000
t0=$(date +%s%N)
ok world_2_20 timeout 20 "$megac" plan --world-size 1048576 --num-layers 64 --hidden-size 8192 \
  --num-attention-heads 64 --seq-length 2048 --global-batch-size 4096 --top 1
ok world_2_20_cp timeout 20 "$megac" plan --world-size 1048576 --num-layers 64 --hidden-size 8192 \
  --num-attention-heads 64 --seq-length 2048 --global-batch-size 4096 --top 1 --use-flash-attn --context-parallel-size 0
ok layers_10_6 timeout 20 "$megac" plan --world-size 8 --num-layers 1000000 --hidden-size 1024 \
  --num-attention-heads 16 --seq-length 1024 --global-batch-size 8 --top 1
echo "     (world 2^20, with CP free, and 10^6 layers: $(( ($(date +%s%N) - t0) / 1000000 )) ms together)"
# issue 30, case 11: a vocabulary whose padded size wraps an int is refused by name (train
# printed "cannot allocate 18446743523954179072 bytes" for --mock-vocab-size 2147483647)
bad vocab_wraps "vocab size 2147483647, padded to a multiple of make-vocab-size-divisible-by 128" \
  "$megac" plan --world-size 1 --num-layers 1 --hidden-size 16 --num-attention-heads 2 --seq-length 8 \
  --vocab-size 2147483647 --global-batch-size 1
bad vocab_wraps_train "exceeds 2147483647" "$megac" train --mock-data --mock-vocab-size 2147483647 \
  --num-layers 1 --hidden-size 16 --num-attention-heads 2 --seq-length 8 --micro-batch-size 1 \
  --global-batch-size 1 --train-iters 1 --num-threads 1
# issue 30: megac ablate's bad input is one line and exit 2, not a Python traceback
one_line() {  # one_line NAME PATTERN CMD...: exit 2, one stderr line matching PATTERN
  local name="$1" pat="$2"; shift 2
  "$@" > "$tmp/out" 2> "$tmp/err"; local rc=$?
  if [[ $rc -eq 2 && $(wc -l < "$tmp/err") -eq 1 ]] && grep -q -- "$pat" "$tmp/err"; then
    echo "ok   $name: $(cat "$tmp/err")"; else
    echo "FAIL $name: exit $rc, stderr: $(cat "$tmp/err")"; fails=$((fails + 1)); fi
}
mkdir -p "$tmp/sweep"; printf '{"id": "a", "status": "ok", "layout": {}}\ngarbage\n' > "$tmp/sweep/records.jsonl"
one_line ablate_garbage_records "records.jsonl line 2: not JSON" "$megac" ablate report "$tmp/sweep"
printf '[1, 2]\n' > "$tmp/sweep/records.jsonl"
one_line ablate_not_a_record "line 1: a record needs an \"id\"" "$megac" ablate report "$tmp/sweep"
one_line ablate_unwritable_output "cannot write --output /dev/null/x: Not a directory" "$megac" ablate \
  --grid "tp=1 mbs=1" --world-size 1 --output /dev/null/x -- --mock-data --num-layers 1 --hidden-size 16 \
  --num-attention-heads 2 --seq-length 8 --global-batch-size 2 --train-iters 1
# issue 30: ablate's folder goes through the output guard (core/outpath.h) before anything
# runs: not a file, not a checkpoint or another program's folder; an earlier sweep's is resumed
abl=(--grid "tp=1 mbs=1" --world-size 1 -- --mock-data --num-layers 1 --hidden-size 16
     --num-attention-heads 2 --seq-length 8 --global-batch-size 2 --train-iters 1)
printf '\x89HDF\r\n\x1a\nnot really' > "$tmp/checkpoint.h5"
one_line ablate_output_file "--output $tmp/checkpoint.h5 is a file, not a folder" "$megac" ablate \
  --output "$tmp/checkpoint.h5" "${abl[@]}"
mkdir -p "$tmp/ck/iter_0000001" && echo 1 > "$tmp/ck/latest_checkpointed_iteration.txt"
one_line ablate_output_checkpoint "holds .*megac does not write there" "$megac" ablate --output "$tmp/ck" "${abl[@]}"
mkdir -p "$tmp/other" && echo '{"mine": 1}' > "$tmp/other/sweep.json" && echo data > "$tmp/other/records.csv"
one_line ablate_output_foreign "its sweep.json was not written by megac" "$megac" ablate --output "$tmp/other" "${abl[@]}"
one_line ablate_output_equals "other holds another program.s files" "$megac" ablate "--output=$tmp/other" "${abl[@]}"
echo x > "$tmp/sweep/notes.txt"
one_line ablate_report_foreign "holds notes.txt" "$megac" ablate report "$tmp/sweep"
[[ $(cat "$tmp/other/sweep.json") == '{"mine": 1}' && $(cat "$tmp/ck/latest_checkpointed_iteration.txt") == 1 ]] \
  && echo "ok   ablate_untouched: the refused folders are as they were" || { echo "FAIL ablate touched a refused folder"; fails=$((fails + 1)); }
rm "$tmp/sweep/notes.txt"
[[ $fails -eq 0 ]] && echo "test_plan_cli: ok" || echo "test_plan_cli: $fails failure(s)"
exit $((fails > 0))
