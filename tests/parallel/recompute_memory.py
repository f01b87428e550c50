#!/usr/bin/env python3
"""tests/parallel/recompute_memory.py: activation recomputation stores less, as predicted.

Runs one iteration of a 4-layer model on one rank without recomputation, with
--recompute-activations (selective) and with --recompute-granularity full (uniform, chunks of
1 and of 2 layers, and block), and reads the start-up table's "activations in flight" and
"backward workspace" columns. Checks, per micro-batch slot, against the buffer sizes:
  none       every layer's ~ (9 C + 3 C + 2 F) N floats + the (NH, T, T) probabilities;
  selective  the probabilities move to one shared workspace buffer;
  full k     a layer keeps only its output when it ends a chunk: L/k outputs (N, C), the
             rest lives in one chunk-sized shared workspace.
usage: recompute_memory.py MPIEXEC MEGAC
"""
import re, subprocess, sys

B, T, C, NH, L, V = 2, 64, 64, 4, 4, 256
F = 4 * C
base = ["--mock-data", "--mock-vocab-size", str(V), "--train-iters", "1", "--num-layers", str(L),
        "--hidden-size", str(C), "--num-attention-heads", str(NH), "--seq-length", str(T),
        "--micro-batch-size", str(B), "--global-batch-size", str(B), "--eval-iters", "0",
        "--num-threads", "1"]


def mem(mpiexec, megac, extra):
    p = subprocess.run([mpiexec, "-n", "1", megac, "train"] + base + extra, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=120)
    if p.returncode != 0:
        sys.exit(f"FAIL: {extra}: exit {p.returncode}\n{p.stdout[-2000:]}")
    m = re.search(r"rank +0: (.*)", p.stdout)
    cols = [float(x) for x in m.group(1).split("|")]
    return cols[4] * 2**20, cols[5] * 2**20, p.stdout


def main():
    mpiexec, megac = sys.argv[1], sys.argv[2]
    N = B * T
    probs = B * NH * T * T * 4
    res3 = N * C * 4
    runs = {"none": [], "selective": ["--recompute-activations"],
            "full k=1": ["--recompute-granularity", "full"],
            "full k=2": ["--recompute-granularity", "full", "--recompute-num-layers", "2"],
            "full block 1": ["--recompute-granularity", "full", "--recompute-method", "block",
                             "--recompute-num-layers", "1"]}
    got = {k: mem(mpiexec, megac, v) for k, v in runs.items()}
    for k, (act, ws, _) in got.items():
        print(f"{k:<14} activations {act / 2**20:8.3f} MiB  workspace {ws / 2**20:8.3f} MiB")
    a0, w0, _ = got["none"]
    per_layer = (a0 - got["full k=1"][0]) / L + res3  # what one layer stores in full
    checks = [
        ("selective saves the probabilities of every layer", got["selective"][0], a0 - L * probs, 0.01),
        ("selective adds one probabilities buffer to the workspace", got["selective"][1], w0 + probs, 0.01),
        ("full k=2 keeps half the layer outputs of k=1", got["full k=2"][0], got["full k=1"][0] - 2 * res3, 0.01),
        ("full k=1 workspace holds one layer", got["full k=1"][1], w0 + per_layer, 0.02),
        ("full k=2 workspace holds two layers", got["full k=2"][1], w0 + 2 * per_layer, 0.02),
        ("block 1 recomputes one layer per stage", got["full block 1"][0], a0 - per_layer + res3, 0.01),
    ]
    bad = 0
    for name, g, want, tol in checks:
        ok = abs(g - want) <= tol * want + 0.006 * 2**20  # the table prints 2 decimals (MiB)
        bad += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {name}: {g / 2**20:.3f} MiB, predicted {want / 2**20:.3f}")
    if not "recompute full (uniform, 2 layers per chunk)" in got["full k=2"][2]:
        bad += 1
        print("FAIL: the start-up line does not say the recomputation")
    if bad:
        sys.exit(f"FAIL: {bad} check(s)")
    print("recompute memory: ok")


if __name__ == "__main__":
    main()
