#!/usr/bin/env python3
"""tests/train/overlap_trace.py: what --overlap-grad-reduce shows (distributed/dist_sync_hook.c).

Trains a tiny 4-layer model on 4 ranks (PP 2 x DP 2, ZeRO-1 and DDP, many small buckets) with
--trace and --log-json, with and without the flag, and checks:
  * the trace has one grad_bucket span per bucket and step on every rank; with the flag, on
    every rank some of them start inside a backward span (the last micro-batch's) of that rank;
    without it, none does (they all start after the schedule);
  * every JSON iteration record has grad_sync_exposed_ms >= 0, and the log line prints
    "grad-sync exposed (ms)".
usage: overlap_trace.py MEGAC MPIEXEC
"""
import sys, tempfile
from overlap_run import exposed_ok, flags, of, ranks, run  # (this folder)

megac, mpiexec = sys.argv[1], sys.argv[2]
ITERS = 3


def inside_backward(events):
    """Per rank: (bucket spans, how many start inside one of that rank's backward spans)."""
    out = {}
    for pid in ranks(events):
        bw = [(e["ts"], e["ts"] + e["dur"]) for e in of(events, pid, "backward")]
        bk = of(events, pid, "grad_bucket")
        n_in = sum(any(a < e["ts"] < b for a, b in bw) for e in bk)
        out[pid] = (len(bk), n_in)
    return out


def main():
    fails = 0
    with tempfile.TemporaryDirectory() as d:
        for name, extra in [("zero1", []), ("ddp", ["--no-distributed-optimizer"])]:
            for overlap in (0, 1):
                events, rows, stdout = run(megac, mpiexec, d, flags(ITERS) + extra +
                                           (["--overlap-grad-reduce"] if overlap else []))
                per_rank = inside_backward(events)
                for pid, (n, n_in) in per_rank.items():
                    ok = n > 0 and n % ITERS == 0 and ((n_in > 0) if overlap else (n_in == 0))
                    print(f"{name} overlap={overlap} rank {pid}: {n} bucket spans, {n_in} start inside a "
                          f"backward span: {'ok' if ok else 'FAIL'}")
                    fails += not ok
                ok, exposed = exposed_ok(rows, stdout, ITERS, "grad_sync_exposed_ms", "grad-sync exposed (ms):",
                                         ITERS)
                print(f"{name} overlap={overlap}: exposed grad-sync ms per step {exposed}: {'ok' if ok else 'FAIL'}")
                fails += not ok
    if fails:
        sys.exit(f"FAIL: {fails} check(s)")
    print("overlap_trace: ok")


main()
