#!/usr/bin/env python3
"""tests/parallel/tp_traffic.py: tensor-parallel all-reduce count and bytes per iteration,
read from the Comm counters (--log-json), against the formula.

Per micro-batch and TP rank (PP = 1, no sequence parallelism):
  4 all-reduces of B*T*C floats per layer (g forward and f backward, attention and MLP),
  1 for the embedding output (B*T*C), 1 for the output layer's input gradient (B*T*C),
  2 for the vocab-parallel cross-entropy (row max: B*T; sum of exps + target logit: 2*B*T).
Ring traffic: each all-reduce moves 2 (tp-1)/tp of its buffer.
usage: tp_traffic.py MPIEXEC MEGAC
"""
import json, subprocess, sys, tempfile, os

mpiexec, megac = sys.argv[1], sys.argv[2]
L, C, T, mb, gb = 2, 64, 32, 2, 8
fails = 0
for tp in (2, 4):
    with tempfile.TemporaryDirectory() as d:
        log = os.path.join(d, "log.jsonl")
        cmd = [mpiexec, "-n", str(tp), megac, "train", "--tensor-model-parallel-size", str(tp),
               "--mock-data", "--train-iters", "3", "--num-layers", str(L), "--hidden-size", str(C),
               "--num-attention-heads", "4", "--seq-length", str(T), "--micro-batch-size", str(mb),
               "--global-batch-size", str(gb), "--num-threads", "1", "--log-json", log]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        rows = [r for r in map(json.loads, open(log)) if "iteration" in r]  # not the run record
    m, N = gb // mb, mb * T
    calls = m * (4 * L + 1 + 1 + 2)
    floats = m * ((4 * L + 2) * N * C + N + 2 * N)
    bytes_ = floats * 4 * 2 * (tp - 1) // tp
    for r in rows:
        ok = r["tp_all_reduce_calls"] == calls and r["tp_all_reduce_bytes"] == bytes_
        fails += not ok
        print(f"tp={tp} iteration {r['iteration']}: all-reduce calls {r['tp_all_reduce_calls']} "
              f"(formula {calls}), bytes {r['tp_all_reduce_bytes']} (formula {bytes_}) "
              f"{'ok' if ok else 'MISMATCH'}")
sys.exit(1 if fails else 0)
