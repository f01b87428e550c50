#!/usr/bin/env bash
# tests/plan/test_ablate_slurm.sh MEGAC LOCAL_CLUSTER: `megac ablate --launcher slurm` on the
# one-machine Slurm cluster of the tests (scripts/slurm/local_cluster.sh, started in a
# temporary folder and stopped on exit): a 4-point sweep on 4 ranks is one job array
# (scripts/slurm/ablate_array.sbatch, one task per point, 2 at a time); `sbatch --wait`
# returns, every point is recorded with its measurements (bytes equal to the plan's), the
# report is written. Then --no-wait: the command returns at once naming `megac ablate collect
# DIR`, which records the points once the array has ended; a point whose task dies is
# recorded as failed with its reason.
# Exit 77 (meson: SKIP) without slurm-wlm and munge, or not root.
set -uo pipefail
megac="$(realpath "$1")" local_cluster="$(realpath "$2")"
for p in sbatch squeue slurmctld slurmd munged; do
  command -v "$p" >/dev/null || { echo "SKIP: $p not installed (apt-get install slurm-wlm munge)"; exit 77; }
done
[[ $(id -u) -eq 0 ]] || { echo "SKIP: the local Slurm cluster runs its daemons as root"; exit 77; }
tmp=$(mktemp -d)
chmod 0711 "$tmp"  # munged (user munge) must reach $tmp/cluster/munge
trap '"$local_cluster" stop "$tmp/cluster" >/dev/null 2>&1; rm -rf "$tmp"' EXIT
trap 'exit 1' INT TERM  # meson's timeout: still stop the cluster
fails=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
"$local_cluster" start "$tmp/cluster"
rc=$?; ((rc == 77)) && exit 77
((rc == 0)) || { tail -n 20 "$tmp"/cluster/log/*.log; echo "FAIL the local cluster did not start"; exit 1; }
export SLURM_CONF="$tmp/cluster/slurm.conf"

train=(--mock-data --train-iters 3 --eval-iters 0 --num-threads 1 --num-layers 2 --hidden-size 32
       --num-attention-heads 4 --seq-length 16 --global-batch-size 8)
slurm=(--slurm-args "--nodes=1 --cpus-per-task=1 --oversubscribe --time=3")
out="$tmp/sweep"
timeout 240 "$megac" ablate --launcher slurm --max-parallel 2 "${slurm[@]}" --grid "tp=1,2 pp=1,2 mbs=1" \
  --world-size 4 --output "$out" -- "${train[@]}" > "$tmp/log" 2>&1 || fail "sweep exit $?"
cat "$tmp/log"
python3 - "$out" <<'PY' || fails=$((fails + 1))
import json, os, sys
d = sys.argv[1]
recs = [json.loads(l) for l in open(os.path.join(d, "records.jsonl"))]
assert len(recs) == 4 and all(r["status"] == "ok" for r in recs), [(r["id"], r["status"], r.get("reason")) for r in recs]
for r in recs:
    assert r["measured"]["bytes"] == r["predicted"]["bytes"], r["id"]
    log = [json.loads(l) for l in open(os.path.join(d, "runs", r["id"] + ".jsonl"))]
    head = log[0]
    assert head["event"] == "run_start" and head["world_size"] == 4, head  # the run record first
    assert (head["tensor_model_parallel_size"], head["pipeline_model_parallel_size"]) == (r["layout"]["tp"], r["layout"]["pp"])
losses = {r["measured"]["final_loss"] for r in recs}
assert max(losses) - min(losses) <= 1e-4 * max(losses), losses
assert not os.path.exists(os.path.join(d, "slurm", "pending.json"))
report = open(os.path.join(d, "REPORT.md")).read()
assert report.count("\n| tp") == 4 and "all agree within" in report
print("ok   array sweep: 4 points recorded from one job array, bytes equal to the plan's, equal losses, report")
PY
grep -q "^submitted job array [0-9]*: 4 point(s) of 4 ranks" "$tmp/log" || fail "no submission line"

# --no-wait, one point killed at iteration 2 (test hook): returns at once, collect records both
MEGAC_TEST_DIE_AT_ITER=0:2 timeout 60 "$megac" ablate --launcher slurm --no-wait "${slurm[@]}" \
  --grid "tp=1,2 mbs=1" --world-size 2 --output "$tmp/nw" -- "${train[@]}" > "$tmp/log2" 2>&1 || fail "--no-wait exit $?"
cat "$tmp/log2"
grep -q "megac ablate collect" "$tmp/log2" && [[ -f "$tmp/nw/slurm/pending.json" ]] || fail "--no-wait: no collect command or pending file"
for _ in $(seq 600); do [[ -z "$(squeue -h -o %i)" ]] && break; sleep 0.1; done
"$megac" ablate collect "$tmp/nw" > "$tmp/log3" 2>&1 || fail "collect exit $?"
cat "$tmp/log3"
[[ $(grep -c '"status": "failed"' "$tmp/nw/records.jsonl") -eq 2 && ! -e "$tmp/nw/slurm/pending.json" ]] \
  && grep -q "killed\|exit" "$tmp/nw/REPORT.md" && echo "ok   --no-wait + collect: 2 dying points recorded as failed" \
  || { fail "--no-wait + collect"; cat "$tmp/nw/records.jsonl"; }
if ((fails)); then echo "test_ablate_slurm: $fails failure(s)"; exit 1; fi
echo "test_ablate_slurm: ok"
