#!/usr/bin/env python3
"""tests/parallel/moe_bias.py: aux-loss-free balancing moves the expert bias (train/train_moe.c).

Two runs of 10 iterations at one rank with a sigmoid router and no load-balancing loss, one
with --moe-router-enable-expert-bias (update rate 1e-2): the first iteration routes alike
(the bias starts at 0), later ones route differently (the bias moved and changed choices),
and the biased run ends closer to balance (the spread max - min of the tokens per expert,
summed over the layers and the last 5 iterations, is smaller). The parity of the biased run
across layouts is parity_moe_expert_bias's.
usage: moe_bias.py MPIEXEC MEGAC"""
import json, os, subprocess, sys, tempfile

mpiexec, megac = sys.argv[1], sys.argv[2]
TINY = ["--mock-data", "--train-iters", "10", "--num-layers", "2", "--hidden-size", "64",
        "--num-attention-heads", "4", "--seq-length", "32", "--micro-batch-size", "2",
        "--global-batch-size", "8", "--lr", "1e-3", "--log-interval", "1", "--eval-iters", "0",
        "--num-threads", "1", "--num-experts", "4", "--moe-router-score-function", "sigmoid",
        "--moe-router-load-balancing-type", "none"]


def run(flags, wd, tag):
    log = os.path.join(wd, tag + ".jsonl")
    p = subprocess.run([mpiexec, "-n", "1", megac, "train"] + TINY + flags + ["--log-json", log],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    if p.returncode:
        sys.exit(f"FAIL: {tag} exited {p.returncode}\n{p.stdout[-3000:]}")
    return [r["moe_tokens_per_expert"] for r in map(json.loads, open(log)) if "iteration" in r]


fails = 0
with tempfile.TemporaryDirectory() as wd:
    plain = run([], wd, "plain")
    biased = run(["--moe-router-enable-expert-bias", "--moe-router-bias-update-rate", "1e-2"], wd, "bias")
    if len(plain) != 10 or len(biased) != 10:
        sys.exit(f"FAIL: {len(plain)} and {len(biased)} records, want 10")
    if plain[0] != biased[0]:
        print(f"FAIL: iteration 1 routes differently: {plain[0]} vs {biased[0]}"); fails += 1
    moved = [i + 1 for i in range(10) if plain[i] != biased[i]]
    if not moved:
        print("FAIL: the expert bias never changed the routing in 10 iterations"); fails += 1
    spread = lambda recs: sum(max(l) - min(l) for r in recs[5:] for l in r)
    if spread(biased) >= spread(plain):
        print(f"FAIL: tokens per expert spread {spread(biased)} with the bias, {spread(plain)} without"); fails += 1
    print(f"routing differs from iteration {moved[0] if moved else '-'}; spread (last 5 iterations) "
          f"{spread(biased)} with the bias, {spread(plain)} without; last: {biased[-1]} vs {plain[-1]}")
print("moe_bias: " + ("FAILED" if fails else "ok"))
sys.exit(1 if fails else 0)
