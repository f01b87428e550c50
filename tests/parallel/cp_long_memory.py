#!/usr/bin/env python3
"""tests/parallel/cp_long_memory.py: issue 27's "done when": a long sequence split over CP 4.

Trains a tiny model (1 layer, C = 32, flash attention, dropout on) at T = 8192, micro-batch 1,
2 iterations, on one rank (CP 1) and on 4 ranks with --context-parallel-size 4 (the ring,
p2p), and checks:
  * every CP 4 rank's "activations in flight" (the start-up memory table) is at most 35 % of
    the CP 1 run's (the rows fall to B T / 4; the K/V exchange buffer is in the workspace,
    printed next to it, not checked: it holds max(4, 2 CP + 1) x (N, 3C) for either comm type);
  * the losses and grad norms of every iteration equal the CP 1 run's to 1e-5 (relative).
usage: cp_long_memory.py MPIEXEC MEGAC
"""
import json, os, re, subprocess, sys, tempfile

T, CP = 8192, 4
base = ["--mock-data", "--mock-vocab-size", "64", "--train-iters", "2", "--eval-iters", "0",
        "--num-threads", "1", "--num-layers", "1", "--hidden-size", "32", "--num-attention-heads", "2",
        "--seq-length", str(T), "--micro-batch-size", "1", "--global-batch-size", "1",
        "--use-flash-attn", "--log-interval", "1"]


def run(mpiexec, megac, cp, d):
    log = os.path.join(d, f"cp{cp}.jsonl")
    cmd = [mpiexec, "-n", str(cp), megac, "train"] + base + ["--context-parallel-size", str(cp),
                                                             "--log-json", log]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
    if p.returncode != 0:
        sys.exit(f"FAIL: CP {cp}: exit {p.returncode}\n{p.stdout[-3000:]}")
    # rank r: parameters | gradients | optimizer | without ZeRO-1 | activations | workspace (MiB)
    mem = {int(r): [float(x) for x in cols.split("|")]
           for r, cols in re.findall(r"^\s+rank\s+(\d+):(.*)$", p.stdout, re.M)}
    if len(mem) != cp:
        sys.exit(f"FAIL: CP {cp}: {len(mem)} rows in the memory table, expected {cp}\n{p.stdout[-3000:]}")
    rows = [r for r in map(json.loads, open(log)) if "iteration" in r]
    return mem, rows


def main():
    mpiexec, megac = sys.argv[1], sys.argv[2]
    with tempfile.TemporaryDirectory() as d:
        mem1, rows1 = run(mpiexec, megac, 1, d)
        memc, rowsc = run(mpiexec, megac, CP, d)
    fails = 0
    act1, ws1 = mem1[0][4], mem1[0][5]
    for r, cols in sorted(memc.items()):
        ratio = cols[4] / act1
        ok = ratio <= 0.35
        fails += not ok
        print(f"rank {r}: activations {cols[4]:.2f} MiB = {100 * ratio:.1f} % of CP 1's {act1:.2f} MiB "
              f"(<= 35 %: {'ok' if ok else 'FAIL'}); workspace {cols[5]:.2f} MiB (CP 1: {ws1:.2f})")
    if len(rows1) != len(rowsc) or not rows1:
        sys.exit(f"FAIL: {len(rows1)} iterations at CP 1, {len(rowsc)} at CP {CP}")
    worst = 0.0
    for a, b in zip(rows1, rowsc):
        for k in ("lm_loss", "grad_norm"):
            rel = abs(a[k] - b[k]) / max(abs(a[k]), 1e-30)
            worst = max(worst, rel)
            print(f"iteration {a['iteration']} {k}: CP 1 {a[k]:.9g}, CP {CP} {b[k]:.9g} (rel {rel:.2e})")
    fails += worst > 1e-5
    print(f"largest relative difference {worst:.2e} (tolerance 1e-5)")
    sys.exit(1 if fails else 0)


main()
