#!/usr/bin/env python3
"""tests/pipeline/test_trace_interleaved.py MPIEXEC MEGAC: `--trace FILE` with the interleaved
schedule at PP = 2, v = 2 (4 layers, m = 4).

Checks that each rank's timeline holds, per step, m*v forwards and m*v backwards named
F<micro>.<chunk> / B<micro>.<chunk> in Megatron's interleaved order (warm-up
(PP - r - 1)*2 + (v - 1)*PP forwards, then 1F1B pairs, then the cool-down), never
overlapping, with the ring's exchanges between them; and that the run printed the measured
bubble per stage beside (PP-1)/(v*m+PP-1) and Megatron's (PP-1)/(v*m).
"""
import json, os, re, subprocess, sys, tempfile

mpiexec, megac = sys.argv[1], sys.argv[2]
PP, V, M, ITERS = 2, 2, 4, 3


def fail(msg, out=""):
    print(out[-3000:])
    sys.exit("FAIL: " + msg)


def megatron_order(r):
    """Megatron's interleaved order on rank r, as F<micro>.<chunk> names."""
    total = M * V
    w = min((PP - r - 1) * 2 + (V - 1) * PP, total)

    def step(k, fwd):
        c = (k % (PP * V)) // PP
        return (k // (PP * V)) * PP + k % PP, c if fwd else V - 1 - c
    names = []
    for j in range(total + w):
        if j < total:
            names.append("F%d.%d" % step(j, True))
        if j >= w:
            names.append("B%d.%d" % step(j - w, False))
    return names


with tempfile.TemporaryDirectory() as wd:
    path = os.path.join(wd, "trace.json")
    cmd = [mpiexec, "-n", str(PP), megac, "train", "--pipeline-model-parallel-size", str(PP),
           "--virtual-pipeline-model-parallel-size", str(V), "--num-threads", "1", "--mock-data",
           "--train-iters", str(ITERS), "--num-layers", "4", "--hidden-size", "64",
           "--num-attention-heads", "4", "--seq-length", "32", "--micro-batch-size", "2",
           "--global-batch-size", str(2 * M), "--eval-iters", "1", "--trace", path]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
    if p.returncode != 0:
        fail(f"exit {p.returncode}", p.stdout)
    merged = json.load(open(path))["traceEvents"]
    for r in range(PP):
        ev = sorted((e for e in merged if e["pid"] == r and e["ph"] == "X" and e["tid"] == 0),
                    key=lambda e: e["ts"])
        for a, b in zip(ev, ev[1:]):
            if b["ts"] < a["ts"] + a["dur"] - 1.0:  # 1 us of rounding
                fail(f"rank {r}: {a['name']} and {b['name']} overlap")
        steps = [e for e in merged if e["pid"] == r and e["name"] == "step"]
        if len(steps) != ITERS:
            fail(f"rank {r}: {len(steps)} step spans, expected {ITERS}")
        s0 = steps[0]
        in_step = [e for e in ev if s0["ts"] <= e["ts"] < s0["ts"] + s0["dur"]]
        fb = [e["name"] for e in in_step if re.fullmatch(r"[FB]\d+\.\d+", e["name"])]
        if fb != megatron_order(r):
            fail(f"rank {r}: step 1 ran {fb}, expected {megatron_order(r)}")
        if any(e["args"]["chunk"] != int(e["name"].split(".")[1]) for e in in_step if e["name"] in fb):
            fail(f"rank {r}: a span's chunk argument differs from its name")
        p2p = {e["name"] for e in in_step if e["name"] not in fb}
        if not p2p & {"send_forward", "send_forward_recv_forward"}:
            fail(f"rank {r}: no forward sends among {sorted(p2p)}")
    theory = f"{(PP - 1) / (V * M + PP - 1):.3f}"
    if f"theory (PP-1)/(v*m+PP-1) = {theory} of the step, bubble/compute (PP-1)/(v*m) = " \
       f"{(PP - 1) / (V * M):.3f}" not in p.stdout:
        fail("no interleaved bubble report with the theoretical value " + theory, p.stdout)
    bubbles = re.findall(r"stage (\d): measured bubble (\d\.\d+)", p.stdout)
    if [int(s) for s, _ in bubbles] != list(range(PP)) or not all(0 <= float(b) < 1 for _, b in bubbles):
        fail(f"bubble lines {bubbles}", p.stdout)
    print(f"trace (interleaved): ok ({len(merged)} events; bubbles {bubbles}, theory {theory})")
