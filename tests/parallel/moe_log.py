#!/usr/bin/env python3
"""tests/parallel/moe_log.py: the mixture-of-experts statistics in the log (train/train_moe.c).

The JSON records' load_balancing_loss, z_loss and moe_tokens_per_expert, and the text line's
"load_balancing_loss: ... | z_loss: ... | tokens per expert min/mean/max: ..." are the same at
one rank and at TP 2 x PP 2 x DP 2 with sequence parallelism (micro-batches on other ranks,
layers on other stages, rows split over TP); every MoE layer routes G T K tokens per step;
the load-balancing loss of a perfectly balanced router would be 1 (E sum f_i P_i), so a
freshly initialised one is near 1; with the aux coefficient 0 the field is null.
usage: moe_log.py MPIEXEC MEGAC"""
import json, os, re, subprocess, sys, tempfile

mpiexec, megac = sys.argv[1], sys.argv[2]
G, T, K, E = 8, 32, 2, 4
TINY = ["--mock-data", "--train-iters", "4", "--num-layers", "4", "--hidden-size", "64",
        "--num-attention-heads", "4", "--seq-length", str(T), "--micro-batch-size", "2",
        "--global-batch-size", str(G), "--lr", "1e-3", "--log-interval", "1", "--eval-iters", "0",
        "--num-threads", "1", "--num-experts", str(E), "--moe-router-topk", str(K),
        "--moe-layer-freq", "[1,0,1,1]", "--moe-aux-loss-coeff", "1e-2", "--moe-z-loss-coeff", "1e-3"]


def run(n, flags, wd, tag):
    log = os.path.join(wd, tag + ".jsonl")
    p = subprocess.run([mpiexec, "-n", str(n), megac, "train"] + TINY + flags + ["--log-json", log],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    if p.returncode:
        sys.exit(f"FAIL: {tag} exited {p.returncode}\n{p.stdout[-3000:]}")
    recs = [r for r in map(json.loads, open(log)) if "iteration" in r]
    lines = [l for l in p.stdout.splitlines() if re.search(r"\] iteration +\d+/", l)]
    return recs, lines


fails = 0
with tempfile.TemporaryDirectory() as wd:
    one, one_lines = run(1, [], wd, "one")
    par, par_lines = run(8, ["--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "2",
                             "--sequence-parallel"], wd, "par")
    off, _ = run(1, ["--moe-aux-loss-coeff", "0"], wd, "off")
    for a, b in zip(one, par):
        for k in ["load_balancing_loss", "z_loss"]:
            if abs(a[k] - b[k]) > 1e-5 * abs(a[k]):
                print(f"FAIL: iteration {a['iteration']} {k}: one rank {a[k]}, 8 ranks {b[k]}"); fails += 1
        if a["moe_tokens_per_expert"] != b["moe_tokens_per_expert"]:
            print(f"FAIL: iteration {a['iteration']} tokens per expert differ"); fails += 1
        if len(a["moe_tokens_per_expert"]) != 3 or any(sum(l) != G * T * K for l in a["moe_tokens_per_expert"]):
            print(f"FAIL: tokens per expert {a['moe_tokens_per_expert']}: 3 layers of {G * T * K}"); fails += 1
    if not 0.9 < one[0]["load_balancing_loss"] < 1.5:
        print(f"FAIL: the first load_balancing_loss {one[0]['load_balancing_loss']} is not near 1"); fails += 1
    if off[0]["load_balancing_loss"] is not None or off[0]["z_loss"] is None:
        print(f"FAIL: aux coefficient 0: load_balancing_loss {off[0]['load_balancing_loss']}"); fails += 1
    if len(one_lines) != 4 or len(par_lines) != 4:
        print(f"FAIL: {len(one_lines)} and {len(par_lines)} iteration lines, want 4"); fails += 1
    for l in one_lines + par_lines:
        if not re.search(r"load_balancing_loss: \S+ \| z_loss: \S+ \| tokens per expert min/mean/max: \d+/\d+\.\d/\d+ \|", l):
            print(f"FAIL: log line without the MoE fields: {l}"); fails += 1
    print(f"first step: load_balancing_loss {one[0]['load_balancing_loss']:.6f}, z_loss "
          f"{one[0]['z_loss']:.6f}, tokens {one[0]['moe_tokens_per_expert']}")
print("moe_log: " + ("FAILED" if fails else "ok"))
sys.exit(1 if fails else 0)
