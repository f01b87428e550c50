#!/usr/bin/env bash
# tests/plan/test_ablate.sh MEGAC: `megac ablate` end to end on 8 ranks (tiny model):
# an 8-point sweep writes one record per point (JSON Lines and CSV), REPORT.md with the
# table, equal final losses and valid PNGs; an interrupted sweep resumes (only the missing
# point runs); `megac ablate report DIR` rebuilds the report; a point that dies is recorded
# as failed with its reason and the sweep goes on; a recompute=none,full,selective sweep; a
# zero=0,1,2,3 sweep (DDP, ZeRO-1, 2, 3); a vpp=1,2 sweep (interleaved 1F1B); cp=1,2 sweeps
# (context parallelism, both comm types); a mixture-of-experts sweep; an ep=2 sweep (expert
# parallelism, a point whose DP it does not divide skipped);
# bad grids exit 2 before anything runs.
set -u
megac="$1"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
train=(--mock-data --train-iters 3 --eval-iters 0 --num-threads 1 --num-layers 4 --hidden-size 64
       --num-attention-heads 8 --seq-length 32 --global-batch-size 16)
grid="tp=1,2 pp=1,2 mbs=1 zero1=0,1"
HAVE_GNUPLOT=$(command -v gnuplot > /dev/null && echo 1 || echo 0)
export HAVE_GNUPLOT
out="$tmp/sweep"

"$megac" ablate --grid "$grid" --world-size 8 --output "$out" -- "${train[@]}" > "$tmp/log" 2>&1 \
  || { fail "sweep exit $?"; cat "$tmp/log"; }
cat "$tmp/log"
python3 - "$out" <<'PY' || fails=$((fails + 1))
import csv, json, sys, os
d = sys.argv[1]
recs = [json.loads(l) for l in open(os.path.join(d, "records.jsonl"))]
assert len(recs) == 8 and all(r["status"] == "ok" for r in recs), [(r["id"], r["status"]) for r in recs]
for r in recs:
    m, p = r["measured"], r["predicted"]
    assert m["bytes"] == p["bytes"], (r["id"], m["bytes"], p["bytes"])  # exact, as plan_vs_run checks
    assert m["tokens_per_s"] > 0 and m["peak_memory_per_rank"] > 0, r
    assert m["run"]["world_size"] == 8 and m["run"]["git_revision"], m["run"]  # from the log's run record
    assert abs(m["peak_memory_per_rank"] - p["peak_memory_per_rank"]) <= 0.1 * p["peak_memory_per_rank"], r["id"]
rows = list(csv.DictReader(open(os.path.join(d, "records.csv"))))
assert len(rows) == 8 and "measured_tokens_per_s" in rows[0] and "predicted_ms_per_iter" in rows[0]
report = open(os.path.join(d, "REPORT.md")).read()
assert report.count("\n| tp") == 8 and "all agree within" in report, report
pngs = ("throughput.png", "memory.png", "traffic.png", "predicted_vs_measured.png")
if os.environ.get("HAVE_GNUPLOT") == "1":
    for png in pngs:
        head = open(os.path.join(d, png), "rb").read(8)
        assert head == b"\x89PNG\r\n\x1a\n", (png, head)
        assert f"![{png}]({png})" in report
else:
    assert "gnuplot is not installed" in report
print("ok   sweep: 8 records, CSV, report, equal losses, bytes equal to the plan's, "
      + ("4 PNGs" if os.environ.get("HAVE_GNUPLOT") == "1" else "no gnuplot: no PNGs"))
PY

# resume: drop the last record, run again: only that point runs
head -n 7 "$out/records.jsonl" > "$tmp/r" && mv "$tmp/r" "$out/records.jsonl"
"$megac" ablate --grid "$grid" --world-size 8 --output "$out" -- "${train[@]}" > "$tmp/log2" 2>&1 || fail "resume exit $?"
[[ $(grep -c "recorded already" "$tmp/log2") -eq 7 && $(wc -l < "$out/records.jsonl") -eq 8 ]] \
  && echo "ok   resume: 7 points kept, 1 run" || { fail "resume"; cat "$tmp/log2"; }
rm "$out/REPORT.md"
"$megac" ablate report "$out" > /dev/null && grep -q "all agree within" "$out/REPORT.md" \
  && echo "ok   report rebuilt from the records" || fail "ablate report"

# a point that dies (test hook: rank 0 killed at iteration 2) is recorded; the sweep goes on
MEGAC_TEST_DIE_AT_ITER=0:2 "$megac" ablate --grid "tp=1,2 mbs=1" --world-size 2 --output "$tmp/dies" \
  -- "${train[@]}" > "$tmp/log3" 2>&1 || fail "sweep with dying points exit $?"
[[ $(grep -c '"status": "failed"' "$tmp/dies/records.jsonl") -eq 2 ]] && grep -q "killed" "$tmp/dies/REPORT.md" \
  && echo "ok   failed points recorded with their reason" || { fail "failed points"; cat "$tmp/log3"; }

# the recompute key: none, full and selective on TP 2 (the recomputed forward repeats its
# TP collectives: bytes still equal the plan's; activation memory shrinks as predicted)
"$megac" ablate --grid "tp=2 mbs=2 recompute=none,full,selective" --world-size 2 --output "$tmp/rc" \
  -- "${train[@]}" > "$tmp/log4" 2>&1 || fail "recompute sweep exit $?"
python3 - "$tmp/rc" <<'PY' && echo "ok   recompute=none,full,selective: bytes equal the plan's, activations as predicted" \
  || { fail "recompute sweep"; cat "$tmp/log4"; }
import json, os, sys
recs = {r["layout"]["recompute"]: r for r in map(json.loads, open(os.path.join(sys.argv[1], "records.jsonl")))}
assert sorted(recs) == ["full", "none", "selective"] and all(r["status"] == "ok" for r in recs.values()), recs
for r in recs.values():
    m, p = r["measured"], r["predicted"]
    assert m["bytes"] == p["bytes"], (r["id"], m["bytes"], p["bytes"])
    a_m, a_p = m["memory"]["activations"], p["memory"]["activations"]
    assert abs(a_m - a_p) <= 0.1 * a_p + 0.01 * 2**20, (r["id"], a_m, a_p)
assert recs["full"]["measured"]["bytes"]["tp"] > recs["none"]["measured"]["bytes"]["tp"]
assert recs["full"]["measured"]["memory"]["activations"] < recs["selective"]["measured"]["memory"]["activations"] \
    < recs["none"]["measured"]["memory"]["activations"]
PY

# the zero key: DDP, ZeRO-1, 2, 3 at DP 4 and PP 2 x DP 2: bytes equal the plan's, memory per
# category within 10 % of it; at DP 4 ZeRO-2 holds fewer gradient bytes than ZeRO-1, ZeRO-3 fewer parameter bytes
"$megac" ablate --grid "pp=1,2 mbs=1 zero=0,1,2,3" --world-size 4 --output "$tmp/zero" \
  -- "${train[@]}" > "$tmp/log5" 2>&1 || fail "zero sweep exit $?"
python3 - "$tmp/zero" <<'PY' && echo "ok   zero=0,1,2,3: bytes equal the plan's, memory as predicted, each stage shards more" \
  || { fail "zero sweep"; cat "$tmp/log5"; }
import json, os, sys
recs = [json.loads(l) for l in open(os.path.join(sys.argv[1], "records.jsonl"))]
assert len(recs) == 8 and all(r["status"] == "ok" for r in recs), [(r["id"], r["status"]) for r in recs]
by = {(r["layout"]["pp"], r["layout"]["zero1"]): r for r in recs}
for r in recs:
    m, p = r["measured"], r["predicted"]
    assert m["bytes"] == p["bytes"], (r["id"], m["bytes"], p["bytes"])
    for k in ("parameters", "gradients", "optimizer_state"):
        assert abs(m["memory"][k] - p["memory"][k]) <= 0.1 * p["memory"][k] + 0.01 * 2**20, (r["id"], k)
for pp in (1, 2):
    mem = lambda z, k: by[(pp, z)]["measured"]["memory"][k]
    assert mem(1, "optimizer_state") < mem(0, "optimizer_state"), pp
    # ZeRO-2/3 add transient (gradients) and gathered (parameters) buffers of the whole edge and
    # one or two layers: fewer bytes at DP 4; at PP 2 x DP 2 the first stage's wte buffers
    # outweigh what sharding saves on this tiny model
    assert pp == 2 or (mem(2, "gradients") < mem(1, "gradients") and mem(3, "parameters") < mem(2, "parameters")), pp
PY

# the vpp key: interleaved 1F1B at PP 2 x DP 2 (m = 4) beside plain 1F1B and a PP 1 point the
# plan refuses; bytes (v times the pipeline transfers) equal the plan's, activations as predicted
"$megac" ablate --grid "pp=1,2 mbs=2 vpp=1,2" --world-size 4 --output "$tmp/vpp" \
  -- "${train[@]}" > "$tmp/log6" 2>&1 || fail "vpp sweep exit $?"
python3 - "$tmp/vpp" <<'PY' && echo "ok   vpp=1,2: interleaved bytes equal the plan's, memory as predicted, PP 1 x v 2 skipped" \
  || { fail "vpp sweep"; cat "$tmp/log6"; }
import csv, json, os, sys
recs = {(r["layout"]["pp"], r["layout"]["vpp"]): r for r in map(json.loads, open(os.path.join(sys.argv[1], "records.jsonl")))}
assert recs[(1, 2)]["status"] == "skipped" and "PP >= 2" in recs[(1, 2)]["reason"], recs[(1, 2)]
for k in ((1, 1), (2, 1), (2, 2)):
    r = recs[k]
    assert r["status"] == "ok", (k, r["status"], r.get("reason"))
    m, p = r["measured"], r["predicted"]
    assert m["bytes"] == p["bytes"], (r["id"], m["bytes"], p["bytes"])
    a_m, a_p = m["memory"]["activations"], p["memory"]["activations"]
    assert abs(a_m - a_p) <= 0.1 * a_p + 0.01 * 2**20, (r["id"], a_m, a_p)
assert recs[(2, 2)]["measured"]["bytes"]["pp"] == 3 * recs[(2, 1)]["measured"]["bytes"]["pp"]  # 2v - 1 sends
assert recs[(2, 2)]["id"].endswith("_v2") and not recs[(2, 1)]["id"].endswith("_v1")
rows = list(csv.DictReader(open(os.path.join(sys.argv[1], "records.csv"))))
assert sorted(r["vpp"] for r in rows) == ["1", "1", "2", "2"], [r["vpp"] for r in rows]
assert "| sched | v |" in open(os.path.join(sys.argv[1], "REPORT.md")).read()
PY

# the cp key: CP 1 and 2 (ring and all_gather: --cp-comm-type after -- reaches plan and train) on
# 2 ranks; ablate adds --use-flash-attn to the CP 2 point; bytes (cp: the K/V exchange, dp over
# DP x CP) equal the plan's, activations within 5 % of it and under half of CP 1's, losses equal
for ct in p2p all_gather; do
  "$megac" ablate --grid "cp=1,2 mbs=2" --world-size 2 --output "$tmp/cp_$ct" \
    -- "${train[@]}" --cp-comm-type "$ct" > "$tmp/log7" 2>&1 || fail "cp sweep ($ct) exit $?"
  python3 - "$tmp/cp_$ct" <<'PY' && echo "ok   cp=1,2 ($ct): bytes equal the plan's, activations as predicted, under half" \
    || { fail "cp sweep ($ct)"; cat "$tmp/log7"; }
import json, os, sys
d = sys.argv[1]
recs = {r["layout"]["cp"]: r for r in map(json.loads, open(os.path.join(d, "records.jsonl")))}
assert sorted(recs) == [1, 2] and all(r["status"] == "ok" for r in recs.values()), recs
for r in recs.values():
    m, p = r["measured"], r["predicted"]
    assert m["bytes"] == p["bytes"], (r["id"], m["bytes"], p["bytes"])
    a_m, a_p = m["memory"]["activations"], p["memory"]["activations"]
    assert abs(a_m - a_p) <= 0.05 * a_p + 0.01 * 2**20, (r["id"], a_m, a_p)
one, two = recs[1]["measured"], recs[2]["measured"]
assert two["bytes"]["cp"] > 0 == one["bytes"]["cp"] and recs[2]["layout"]["dp"] == 1, (one["bytes"], two["bytes"])
# (the CP 1 point runs without flash attention: its probabilities make the ratio below one half)
assert two["memory"]["activations"] / one["memory"]["activations"] < 0.55
assert recs[2]["id"].startswith("tp1_cp2_pp1_dp1") and recs[1]["id"].startswith("tp1_pp1_dp2")
cmd = open(os.path.join(d, "runs", recs[2]["id"] + ".cmd")).read()
assert "--context-parallel-size 2" in cmd and "--use-flash-attn" in cmd, cmd
report = open(os.path.join(d, "REPORT.md")).read()
assert "| TP | CP | PP |" in report and "all agree within" in report, report
PY
done

# mixture of experts (--num-experts after -- reaches plan and train): TP 1 x DP 2, TP 2 and
# TP 2 with SP on 2 ranks; bytes equal the plan's, activations within 1 % of it
"$megac" ablate --grid "tp=1,2 sp=0,1 mbs=1" --world-size 2 --output "$tmp/moe" -- "${train[@]}" \
  --num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 32 > "$tmp/log8" 2>&1 || fail "moe sweep exit $?"
python3 - "$tmp/moe" <<'PY' && echo "ok   MoE tp=1,2 sp=0,1: bytes equal the plan's, activations as predicted" \
  || { fail "moe sweep"; cat "$tmp/log8"; }
import json, os, sys
recs = [json.loads(l) for l in open(os.path.join(sys.argv[1], "records.jsonl"))]
ok = [r for r in recs if r["status"] == "ok"]
assert len(ok) == 3, [(r["id"], r["status"], r.get("reason")) for r in recs]
for r in ok:
    m, p = r["measured"], r["predicted"]
    assert m["bytes"] == p["bytes"], (r["id"], m["bytes"], p["bytes"])
    a_m, a_p = m["memory"]["activations"], p["memory"]["activations"]
    assert abs(a_m - a_p) <= 0.01 * a_p + 0.01 * 2**20, (r["id"], a_m, a_p)
PY

# expert parallelism (a padded capacity: every byte exact): TP 1 x DP 2 x EP 2 runs, TP 2
# (DP 1: EP 2 cannot divide it) is skipped with the plan's reason
"$megac" ablate --grid "tp=1,2 ep=2 mbs=2" --world-size 2 --output "$tmp/ep" -- "${train[@]}" \
  --num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 32 --moe-expert-capacity-factor 1.5 \
  --moe-pad-expert-input-to-capacity > "$tmp/log9" 2>&1 || fail "ep sweep exit $?"
python3 - "$tmp/ep" <<'PY' && echo "ok   ep=2: bytes (ep, edp included) equal the plan's, the DP 1 point skipped" \
  || { fail "ep sweep"; cat "$tmp/log9"; }
import json, os, sys
recs = {r["id"]: r for r in map(json.loads, open(os.path.join(sys.argv[1], "records.jsonl")))}
ok, skip = recs["tp1_ep2_pp1_dp2_mbs2_1f1b_sp0_zero1"], recs["tp2_ep2_pp1_dp1_mbs2_1f1b_sp0_zero0"]
assert ok["status"] == "ok" and ok["layout"]["ep"] == 2, ok
assert ok["measured"]["bytes"] == ok["predicted"]["bytes"] and ok["measured"]["bytes"]["ep"] > 0, ok
assert skip["status"] == "skipped" and "EP 2 must divide" in skip["reason"], skip
report = open(os.path.join(sys.argv[1], "REPORT.md")).read()
assert "| DP | EP |" in report and "TP/PP/DP/emb/CP/EP/EDP" in report, report
PY

# --expert-tensor-parallel-size 1 after --: it reaches the plan and the run (EP 2 over TP 2 at
# DP 1, which ETP = TP would refuse); every byte but the dropless ep ones equal the plan's
"$megac" ablate --grid "tp=2 ep=2 sp=1 mbs=2" --world-size 2 --output "$tmp/etp" -- "${train[@]}" \
  --num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 32 --expert-tensor-parallel-size 1 \
  > "$tmp/log10" 2>&1 || fail "etp sweep exit $?"
python3 - "$tmp/etp" <<'PY' && echo "ok   ETP 1 after --: EP 2 over TP 2 planned and run, bytes equal (ep: expected)" \
  || { fail "etp sweep"; cat "$tmp/log10"; }
import json, os, sys
(r,) = map(json.loads, open(os.path.join(sys.argv[1], "records.jsonl")))
assert r["status"] == "ok", r
m, p = r["measured"]["bytes"], r["predicted"]["bytes"]
assert all(m[g] == p[g] for g in m if g != "ep") and m["tp"] > 0 and abs(m["ep"] - p["ep"]) <= 0.5 * p["ep"], (m, p)
PY

bad() {  # bad NAME PATTERN GRID [WORLD]: exit 2, PATTERN on stderr, nothing written
  "$megac" ablate --grid "$3" --world-size "${4:-8}" --output "$tmp/bad" -- "${train[@]}" > /dev/null 2> "$tmp/err"
  local rc=$?
  [[ $rc -eq 2 && ! -e "$tmp/bad" ]] && grep -q -- "$2" "$tmp/err" && echo "ok   $1: $(cat "$tmp/err")" \
    || fail "$1: exit $rc, stderr: $(cat "$tmp/err")"
}
bad unknown_key "KEY one of" "tp=1,2 mbs=1 layers=2"
bad not_dividing "tp=3 does not divide the world size 8" "tp=1,3 mbs=1"
bad no_valid_point "no valid point" "tp=1 sp=1 mbs=1"
bad not_integer "must be integers" "tp=one mbs=1"
bad recompute_value "must be none, full or selective" "tp=1 mbs=1 recompute=some"
bad zero_value "must be 0 (DDP), 1, 2 or 3" "tp=1 mbs=1 zero=4"
bad vpp_value "vpp=0 must be > 0" "pp=2 mbs=1 vpp=0"
bad cp_not_dividing "cp=3 does not divide the world size 8" "cp=1,3 mbs=1"
bad ep_not_dividing "ep=3 does not divide the world size 8" "ep=1,3 mbs=1"
if [[ $fails -gt 0 ]]; then echo "test_ablate: $fails failure(s)"; exit 1; fi
if [[ $HAVE_GNUPLOT != 1 ]]; then  # the plots were not checked: SKIP, not a pass
  echo "test_ablate: everything but the plots ok; gnuplot is not installed (apt-get install gnuplot-nox)"
  exit 77
fi
echo "test_ablate: ok"
