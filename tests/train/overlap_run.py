"""tests/train/overlap_run.py: what the overlap tests share (overlap_trace.py for
--overlap-grad-reduce, overlap_gather_trace.py for --overlap-param-gather): a tiny 4-layer
model's flags (PP 2, many small buckets), a run on 4 ranks with --trace and --log-json, and
the trace's events per rank.
"""
import json, os, subprocess, sys


def flags(iters):
    """The flags of every run: mock data, `iters` iterations, PP 2, 2000-element buckets."""
    return ["--mock-data", "--train-iters", str(iters), "--num-layers", "4", "--hidden-size", "64",
            "--num-attention-heads", "4", "--seq-length", "32", "--micro-batch-size", "2",
            "--global-batch-size", "8", "--log-interval", "1", "--eval-iters", "0", "--num-threads", "1",
            "--pipeline-model-parallel-size", "2", "--ddp-bucket-size", "2000"]


def run(megac, mpiexec, d, args):
    """`megac train` on 4 ranks with args, --trace and --log-json into folder d (replaced);
    exits with FAIL on a non-zero exit. Returns (trace events, JSON iteration records, stdout)."""
    trace, log = os.path.join(d, "trace.json"), os.path.join(d, "log.jsonl")
    for f in (trace, log):
        if os.path.exists(f):
            os.remove(f)
    cmd = [mpiexec, "-n", "4", megac, "train", "--trace", trace, "--log-json", log] + args
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        sys.exit(f"FAIL: {' '.join(cmd)} exited {p.returncode}\n{p.stdout[-2000:]}{p.stderr[-2000:]}")
    events = json.load(open(trace))["traceEvents"]
    rows = [r for r in map(json.loads, open(log)) if "iteration" in r]
    return events, rows, p.stdout


def ranks(events):
    """The trace's ranks (process ids), sorted."""
    return sorted({e["pid"] for e in events if "pid" in e})


def of(events, pid, cat):
    """Rank pid's events of category cat."""
    return [e for e in events if e.get("pid") == pid and e.get("cat") == cat]


def exposed_ok(rows, stdout, iters, key, label, printed):
    """The exposed-time figures `key` of every JSON record (all present and >= 0, `iters` of
    them) and how often the log printed `label` (want `printed`). Returns (ok, figures)."""
    exposed = [r.get(key) for r in rows]
    ok = len(rows) == iters and all(x is not None and x >= 0 for x in exposed)
    return ok and stdout.count(label) == printed, exposed
