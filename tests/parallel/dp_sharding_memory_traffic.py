#!/usr/bin/env python3
"""tests/parallel/dp_sharding_memory_traffic.py: what each --data-parallel-sharding-strategy
holds per rank and moves per step, from --log-json, against the formulas of distributed/dist_sync_units.c.

A 4-layer model (C 64, F 256, V padded 384, T 32) at TP = PP = 1, DP = 2 and 4, m micro-batches
per step. Units: wte, wpe, the final LayerNorm's weight and bias (the edge) and one per layer
(12 C^2 + 13 C floats); a unit of len floats is sharded in per = ceil(len / DP) rounded up to 16
floats per rank; S = sum of per (S_e: edge units, S_l: layers). Exact checks, in bytes:

  strategy   params                         grads                                  optimizer  DP traffic per step
  no_shard   4 Psi                          4 Psi_pad                              8 Psi_pad  2 (DP-1)/DP 4 Psi_pad
  optim      4 Psi                          4 Psi_pad                              8 Psi_pad/DP  the same
  optim_grads  4 Psi                        4 (S + DP S_e + DP per_l + per_max)    8 S        (m+1) (DP-1) 4 S
  optim_grads_params  4 (S + DP S_e + 2 DP per_l)  as optim_grads                 8 S        (DP-1) 4 ((m+1) S_e + 3 m S_l)

(Psi: parameters, Psi_pad: padded to 16 DP; the transient gradient buffers hold the whole edge
and one layer; ZeRO-3 gathers every layer twice per micro-batch, the edge once per step.)
Then TP 2 x PP 2 x DP 2 with sequence parallelism: the tied-wte sum over the embedding group
moves only the shard (1/DP of ZeRO-1's bytes) and the TP/PP bytes of ZeRO-2 and ZeRO-3 agree
(no more than ZeRO-1's: the LayerNorm sums of sequence parallelism cover the shard only); a
PP > 1 stage keeps one transient gradient buffer (the larger of edge and layer), not both.
usage: dp_sharding_memory_traffic.py MPIEXEC MEGAC
"""
import json, os, subprocess, sys, tempfile

mpiexec, megac = sys.argv[1], sys.argv[2]
L, C, F, VP, T = 4, 64, 256, 384, 32
MODEL = ["--mock-data", "--train-iters", "2", "--num-layers", str(L), "--hidden-size", str(C),
         "--num-attention-heads", "4", "--seq-length", str(T), "--micro-batch-size", "2",
         "--global-batch-size", "16", "--num-threads", "1", "--eval-iters", "0"]
STRATEGIES = ["no_shard", "optim", "optim_grads", "optim_grads_params"]


def run(layout, strategy, extra=()):
    tp, pp, dp = layout
    with tempfile.TemporaryDirectory() as d:
        log = os.path.join(d, "log.jsonl")
        subprocess.run([mpiexec, "-n", str(tp * pp * dp), megac, "train", "--tensor-model-parallel-size",
                        str(tp), "--pipeline-model-parallel-size", str(pp), "--log-json", log,
                        "--data-parallel-sharding-strategy", strategy] + MODEL + list(extra),
                       check=True, stdout=subprocess.DEVNULL)
        return [r for r in map(json.loads, open(log)) if "iteration" in r][-1]


def per(n, dp):
    return ((n + dp - 1) // dp + 15) // 16 * 16


def expected(strategy, dp):
    m = 16 // (2 * dp)
    edge = [VP * C, T * C, C, C]
    layer = 12 * C * C + 13 * C
    psi = sum(edge) + L * layer
    psi_pad = (psi + 16 * dp - 1) // (16 * dp) * (16 * dp)
    s_e, p_l = sum(per(n, dp) for n in edge), per(layer, dp)
    s = s_e + L * p_l
    per_max = max([p_l] + [per(n, dp) for n in edge])
    if strategy in ("no_shard", "optim"):
        return {"param_memory_bytes": 4 * psi, "grad_memory_bytes": 4 * psi_pad,
                "optimizer_state_bytes": 8 * psi_pad // (dp if strategy == "optim" else 1),
                "dp_bytes": 2 * (dp - 1) * 4 * psi_pad // dp}
    want = {"grad_memory_bytes": 4 * (s + dp * s_e + dp * p_l + per_max), "optimizer_state_bytes": 8 * s,
            "dp_shard_edge_bytes": 4 * s_e}
    if strategy == "optim_grads":
        want.update(param_memory_bytes=4 * psi, dp_bytes=(m + 1) * (dp - 1) * 4 * s)
    else:
        want.update(param_memory_bytes=4 * (s + dp * s_e + 2 * dp * p_l),
                    dp_bytes=(dp - 1) * 4 * ((m + 1) * s_e + 3 * m * L * p_l))
    return want


fails = 0
mib = 1 / (1 << 20)
print(f"{'DP':>3} {'strategy':>19} | {'params MiB':>10} {'grads MiB':>10} {'optim MiB':>10} | {'DP MB/step':>10}")
for dp in (2, 4):
    for strategy in STRATEGIES:
        r = run((1, 1, dp), strategy)
        want = expected(strategy, dp)
        bad = {k: (r.get(k), v) for k, v in want.items() if r.get(k) != v}
        fails += bool(bad)
        print(f"{dp:>3} {strategy:>19} | {r['param_memory_bytes'] * mib:>10.3f} {r['grad_memory_bytes'] * mib:>10.3f} "
              f"{r['optimizer_state_bytes'] * mib:>10.3f} | {r['dp_bytes'] / 1e6:>10.3f}  "
              f"{'ok' if not bad else 'MISMATCH (got, want): ' + str(bad)}")

# 3D with sequence parallelism: embedding and TP/PP traffic
wte_tp = 512 // 2 * C  # V padded to 128 x TP = 512 rows, half per TP rank
got = {s: run((2, 2, 2), s, ["--sequence-parallel"]) for s in ("optim", "optim_grads", "optim_grads_params")}
emb_want = {"optim": 4 * wte_tp, "optim_grads": 4 * per(wte_tp, 2), "optim_grads_params": 4 * per(wte_tp, 2)}
for s, r in got.items():
    ok = r["embedding_bytes"] == emb_want[s]
    fails += not ok
    print(f"TP2 PP2 DP2 SP {s:>19}: embedding {r['embedding_bytes']} B (want {emb_want[s]}), tp {r['tp_bytes']} B, "
          f"pp {r['pp_bytes']} B, dp {r['dp_bytes']} B {'ok' if ok else 'MISMATCH'}")
# rank 0 is the first stage (wte, wpe, layers 0-1 at TP 2): edge and layer gradients never live
# at once on a PP > 1 stage, so the two transient buffers are one (the larger)
edge3, layer3 = [wte_tp, T * C], 12 * C * C // 2 + 2 * C + 3 * C // 2 + C + 2 * C + F // 2 + C
s3 = sum(per(n, 2) for n in edge3) + 2 * per(layer3, 2)
g3 = 4 * (s3 + max(2 * sum(per(n, 2) for n in edge3), 2 * per(layer3, 2)) + per(layer3, 2))
for s in ("optim_grads", "optim_grads_params"):
    ok = got[s]["grad_memory_bytes"] == g3
    fails += not ok
    print(f"TP2 PP2 DP2 SP {s:>19}: rank 0 gradients {got[s]['grad_memory_bytes']} B (want {g3}: one shared "
          f"transient buffer) {'ok' if ok else 'MISMATCH'}")
z2, z3 = got["optim_grads"], got["optim_grads_params"]
if (z2["tp_bytes"], z2["pp_bytes"]) != (z3["tp_bytes"], z3["pp_bytes"]) or z2["tp_bytes"] > got["optim"]["tp_bytes"]:
    fails += 1
    print("MISMATCH: ZeRO-2 and ZeRO-3 should move the same TP/PP bytes, no more TP bytes than ZeRO-1 "
          "(the SP LayerNorm sums cover the shard only; rank 0's shard holds every LayerNorm here)")
sys.exit(1 if fails else 0)
