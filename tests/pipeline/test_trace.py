#!/usr/bin/env python3
"""tests/pipeline/test_trace.py MPIEXEC MEGAC: `--trace FILE` at PP = 2.

Checks that every rank wrote FILE.rank<R>.json and rank 0 merged them into FILE (valid
Chrome trace-event JSON, one process row per rank); that each rank's timeline has, per
step, m forwards and m backwards in 1F1B order with its p2p waits between them, never
overlapping; that the optimizer and gradient sync appear; and that the run printed the
measured bubble per stage beside the theoretical (PP-1)/(m+PP-1).
"""
import json, os, re, subprocess, sys, tempfile

mpiexec, megac = sys.argv[1], sys.argv[2]
PP, M, ITERS = 2, 4, 3


def fail(msg, out=""):
    print(out[-3000:])
    sys.exit("FAIL: " + msg)


with tempfile.TemporaryDirectory() as wd:
    path = os.path.join(wd, "trace.json")
    cmd = [mpiexec, "-n", str(PP), megac, "train", "--pipeline-model-parallel-size", str(PP),
           "--num-threads", "1", "--mock-data", "--train-iters", str(ITERS), "--num-layers", "2",
           "--hidden-size", "64", "--num-attention-heads", "4", "--seq-length", "32",
           "--micro-batch-size", "2", "--global-batch-size", str(2 * M), "--eval-iters", "1",
           "--trace", path]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
    if p.returncode != 0:
        fail(f"exit {p.returncode}", p.stdout)
    merged = json.load(open(path))["traceEvents"]
    for r in range(PP):
        own = json.load(open(f"{path}.rank{r}.json"))["traceEvents"]
        if {e["pid"] for e in own} != {r}:
            fail(f"rank {r}'s file holds other ranks' events")
    if {e["pid"] for e in merged} != set(range(PP)):
        fail(f"merged trace has processes {sorted({e['pid'] for e in merged})}")
    for r in range(PP):
        ev = sorted((e for e in merged if e["pid"] == r and e["ph"] == "X" and e["tid"] == 0),
                    key=lambda e: e["ts"])
        for a, b in zip(ev, ev[1:]):
            if b["ts"] < a["ts"] + a["dur"] - 1.0:  # 1 us of rounding
                fail(f"rank {r}: {a['name']} and {b['name']} overlap")
        names = [e["name"] for e in ev]
        steps = [e for e in merged if e["pid"] == r and e["name"] == "step"]
        if len(steps) != ITERS:
            fail(f"rank {r}: {len(steps)} step spans, expected {ITERS}")
        s0 = steps[0]
        in_step = [e["name"] for e in ev if s0["ts"] <= e["ts"] < s0["ts"] + s0["dur"]]
        fb = [n for n in in_step if re.fullmatch(r"[FB]\d+", n)]
        w = min(PP - r - 1, M)
        want = [f"F{i}" for i in range(w)]
        for i in range(M - w):
            want += [f"F{w + i}", f"B{i}"]
        want += [f"B{i}" for i in range(M - w, M)]
        if fb != want:
            fail(f"rank {r}: step 1 ran {fb}, expected {want}")
        p2p = [n for n in in_step if not re.fullmatch(r"[FB]\d+", n)]
        if r == 0 and "send_forward_recv_backward" not in p2p:
            fail(f"rank 0: no send_forward_recv_backward in {p2p}")
        if r == PP - 1 and "send_backward_recv_forward" not in p2p:
            fail(f"rank {r}: no send_backward_recv_forward in {p2p}")
        for n in ("optimizer", "grad_sync"):
            if names.count(n) != ITERS:
                fail(f"rank {r}: {names.count(n)} '{n}' spans, expected {ITERS}")
    theory = f"{(PP - 1) / (M + PP - 1):.3f}"
    if f"(theory (PP-1)/(m+PP-1) = {theory})" not in p.stdout:
        fail("no bubble report with the theoretical value " + theory, p.stdout)
    bubbles = re.findall(r"stage (\d): measured bubble (\d\.\d+)", p.stdout)
    if [int(s) for s, _ in bubbles] != list(range(PP)) or not all(0 <= float(b) < 1 for _, b in bubbles):
        fail(f"bubble lines {bubbles}", p.stdout)
    print(f"trace: ok ({len(merged)} events; bubbles {bubbles}, theory {theory})")
