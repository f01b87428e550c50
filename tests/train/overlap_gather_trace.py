#!/usr/bin/env python3
"""tests/train/overlap_gather_trace.py: what ZeRO-1 --overlap-param-gather shows
(distributed/dist_sync_hook.c).

Trains a tiny 4-layer model on 4 ranks (PP 2 x DP 2, ZeRO-1, many small buckets) with --trace
and --log-json, with and without the flag, and checks:
  * with the flag, every rank has one param_gather span per bucket and step (but the last
    step's, settled at exit); each starts before a forward span (the next step's) and ends
    at or after that forward's start: the gather runs into the forward that waits for it;
    without the flag, there are none;
  * every JSON iteration record has param_gather_exposed_ms >= 0 (0 without the flag), and
    the log line prints "param-gather exposed (ms)" with the flag only.
usage: overlap_gather_trace.py MEGAC MPIEXEC
"""
import sys, tempfile
from overlap_run import exposed_ok, flags, of, ranks, run  # (this folder)

megac, mpiexec = sys.argv[1], sys.argv[2]
ITERS = 4


def spans_vs_forward(events):
    """Per rank: (gather spans, how many run from before a forward's start to at least it)."""
    out = {}
    for pid in ranks(events):
        fw = sorted(e["ts"] for e in of(events, pid, "forward"))
        g = of(events, pid, "param_gather")
        n_ok = 0
        for e in g:
            nxt = [s for s in fw if s >= e["ts"]]
            n_ok += bool(nxt) and e["ts"] + e["dur"] >= nxt[0] - 1e-3
        out[pid] = (len(g), n_ok)
    return out


def main():
    fails = 0
    with tempfile.TemporaryDirectory() as d:
        for overlap in (0, 1):
            extra = ["--overlap-param-gather", "--overlap-grad-reduce"] if overlap else []
            events, rows, stdout = run(megac, mpiexec, d, flags(ITERS) + extra)
            for pid, (n, n_ok) in spans_vs_forward(events).items():
                ok = (n > 0 and n % (ITERS - 1) == 0 and n_ok == n) if overlap else n == 0
                print(f"overlap={overlap} rank {pid}: {n} gather spans, {n_ok} run into the next forward: "
                      f"{'ok' if ok else 'FAIL'}")
                fails += not ok
            ok, exposed = exposed_ok(rows, stdout, ITERS, "param_gather_exposed_ms", "param-gather exposed (ms):",
                                     ITERS if overlap else 0)
            ok = ok and (overlap or all(x == 0 for x in exposed))
            print(f"overlap={overlap}: exposed param-gather ms per step {exposed}: {'ok' if ok else 'FAIL'}")
            fails += not ok
    if fails:
        sys.exit(f"FAIL: {fails} check(s)")
    print("overlap_gather_trace: ok")


main()
