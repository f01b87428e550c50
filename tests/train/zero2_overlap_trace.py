#!/usr/bin/env python3
"""tests/train/zero2_overlap_trace.py: what --overlap-grad-reduce shows with ZeRO-2
(distributed/dist_sync_queue.c).

Trains a tiny 4-layer model on 4 ranks (PP 2 x DP 2, ZeRO-2, 2 micro-batches per step) with
--trace and --log-json, with and without the flag, and checks:
  * with the flag, every rank's trace has one grad_bucket span per reduce-scatter: a multiple
    of the iterations, at least (its layers) x (micro-batches) per step, and some start inside
    one of its backward spans; without it there are none (the reductions are inside the hook);
  * both runs log the same losses and grad norms (bitwise) and the same DP bytes per step (the
    same collectives); with the flag the gradient memory is larger (ring buffer, queue);
  * every record has grad_sync_exposed_ms >= 0 and the log line prints it.
usage: zero2_overlap_trace.py MEGAC MPIEXEC
"""
import sys, tempfile

from overlap_run import exposed_ok, of, ranks, run

megac, mpiexec = sys.argv[1], sys.argv[2]
ITERS, LAYERS_PER_STAGE, MICRO = 3, 2, 2
FLAGS = ["--mock-data", "--train-iters", str(ITERS), "--num-layers", "4", "--hidden-size", "64",
         "--num-attention-heads", "4", "--seq-length", "32", "--micro-batch-size", "2",
         "--global-batch-size", str(2 * 2 * MICRO), "--log-interval", "1", "--eval-iters", "0",
         "--num-threads", "1", "--pipeline-model-parallel-size", "2",
         "--data-parallel-sharding-strategy", "optim_grads"]


def spans_per_rank(events):
    """Per rank: (grad_bucket spans, how many start inside one of that rank's backward spans)."""
    out = {}
    for pid in ranks(events):
        bw = [(e["ts"], e["ts"] + e["dur"]) for e in of(events, pid, "backward")]
        bk = of(events, pid, "grad_bucket")
        out[pid] = (len(bk), sum(any(a < e["ts"] < b for a, b in bw) for e in bk))
    return out


def main():
    fails = 0
    with tempfile.TemporaryDirectory() as d:
        got = {ov: run(megac, mpiexec, d, FLAGS + (["--overlap-grad-reduce"] if ov else [])) for ov in (0, 1)}
    for ov, (events, rows, stdout) in got.items():
        for pid, (n, n_in) in spans_per_rank(events).items():
            ok = (n == 0) if not ov else (n % ITERS == 0 and n >= LAYERS_PER_STAGE * MICRO * ITERS and n_in > 0)
            print(f"overlap={ov} rank {pid}: {n} reduce-scatter spans, {n_in} start inside a backward span: "
                  f"{'ok' if ok else 'FAIL'}")
            fails += not ok
        ok, exposed = exposed_ok(rows, stdout, ITERS, "grad_sync_exposed_ms", "grad-sync exposed (ms):", ITERS)
        print(f"overlap={ov}: exposed grad-sync ms per step {exposed}: {'ok' if ok else 'FAIL'}")
        fails += not ok
    plain, over = got[0][1], got[1][1]
    for key in ("lm_loss", "grad_norm", "dp_bytes"):
        a, b = [r[key] for r in plain], [r[key] for r in over]
        ok = a == b
        print(f"{key}: without {a}, with {b}: {'ok (equal)' if ok else 'FAIL'}")
        fails += not ok
    ga, gb = plain[-1]["grad_memory_bytes"], over[-1]["grad_memory_bytes"]
    ok = gb > ga
    print(f"grad_memory_bytes (rank 0): without {ga}, with {gb}: {'ok' if ok else 'FAIL'}")
    fails += not ok
    if fails:
        sys.exit(f"FAIL: {fails} check(s)")
    print("zero2_overlap_trace: ok")


main()
