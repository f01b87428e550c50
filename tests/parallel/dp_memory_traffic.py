#!/usr/bin/env python3
"""tests/parallel/dp_memory_traffic.py: ZeRO-1 memory and traffic, from --log-json.

For DP = 2 and 4 (one bucket and several): the optimizer state per rank is 1/DP of the
unsharded state (2 moments x the padded gradient buffer), and the bytes rank 0 moves in the
DP group per step equal 2 (DP-1)/DP x gradient bytes (reduce-scatter + all-gather).
Plain DDP for contrast: full optimizer state, and the all-reduce's 2 (DP-1)/DP too.
usage: dp_memory_traffic.py MPIEXEC MEGAC
"""
import json, os, subprocess, sys, tempfile

mpiexec, megac = sys.argv[1], sys.argv[2]
fails = 0
for dp, extra in [(2, []), (4, []), (4, ["--ddp-bucket-size", "20000"]), (4, ["--no-distributed-optimizer"])]:
    with tempfile.TemporaryDirectory() as d:
        log = os.path.join(d, "log.jsonl")
        subprocess.run([mpiexec, "-n", str(dp), megac, "train", "--mock-data", "--train-iters", "2",
                        "--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4",
                        "--seq-length", "32", "--micro-batch-size", "2", "--global-batch-size", "8",
                        "--num-threads", "1", "--log-json", log] + extra, check=True, stdout=subprocess.DEVNULL)
        r = [r for r in map(json.loads, open(log)) if "iteration" in r][-1]  # not the run record
    g = r["grad_buffer_bytes"]
    zero = "--no-distributed-optimizer" not in extra
    want_state = 2 * g // dp if zero else 2 * g
    want_dp = 2 * (dp - 1) * g // dp
    ok = r["optimizer_state_bytes"] == want_state and r["dp_bytes"] == want_dp
    fails += not ok
    print(f"DP={dp} {' '.join(extra) or 'ZeRO-1'}: optimizer state {r['optimizer_state_bytes']} B "
          f"(want {want_state}), DP traffic {r['dp_bytes']} B (want 2(DP-1)/DP x {g} = {want_dp}) "
          f"{'ok' if ok else 'MISMATCH'}")
sys.exit(1 if fails else 0)
