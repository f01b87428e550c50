#!/usr/bin/env python3
"""tests/train/offload.py: --optimizer-cpu-offload (optim/optim_offload.c, docs/offload.md).

Modes:
  parity   at one layout (TP,PP,DP[,CP,EP]): a run without offload, then one per
           --fractions value with --optimizer-cpu-offload: every iteration's loss, grad norm,
           skip (fp16 overflow, NaN) and loss scale bitwise equal to the run without, and the memory proof from rank 0's JSON
           record: the device memory in use (the emulator's cudaMalloc accounting) is lower by
           exactly the optimizer state moved off the device, fraction 1 leaves no optimizer
           state on the device, and the pinned host bytes are logged. With --overlap, each
           fraction also with --overlap-cpu-optimizer-d2h-h2d (the copies on the copy stream),
           bitwise alike.
  trace    DP 2 ZeRO-1 (bf16 + --flags) with --overlap-cpu-optimizer-d2h-h2d under the
           emulator's stream trace (MEGAC_EMU_TRACE, backend/cuda/emu/emu_trace.c): in every
           step of every rank, each gradient copy down (D2H) runs on a stream other than the
           compute stream, right after waiting for an event the compute stream recorded after
           its own bucket's reduce-scatter and before the next bucket's; one copy per bucket;
           no host synchronisation between the step's first and last copy (with
           --overlap-grad-reduce in --flags: none for the copies; the trainer's read of the
           loss waits for the compute stream while reductions are in flight). Prints which
           compute-stream work each copy may overlap (issued after it, before the host waits).
  resume   4 iterations straight without offload; 2 with offload, saved, 2 resumed without;
           2 without, saved, 2 resumed with: the resumed iterations bitwise the straight run.
  params   --offload-params (ZeRO-3 flags): a run without offload, one with --optimizer-cpu-offload
           (fraction 1), one with --offload-params too: every iteration bitwise equal to the
           run without, and the device memory in use (the emulator's accounting) lower than the
           optimizer-offload run by exactly its parameter bytes' drop: the master shard less
           the one-layer staging buffer, at least half the shard (rank 0's JSON record).
           With --mode resume --offload-params the resume legs use --offload-params too.
  refuse   the flags' refusals (exit 2 and the reason): the CPU backend, fractions outside
           [0, 1], --overlap-cpu-optimizer-d2h-h2d alone.

usage: offload.py --megac BIN --mpiexec MPIEXEC --mode parity|params|resume|refuse|trace [--layout T,P,D]
                  [--fractions 1.0 0.5] [--flags='...'] [--iters 4] [--offload-params] [--overlap]
"""
import argparse, glob, json, os, shlex, subprocess, sys, tempfile

TINY = ["--mock-data", "--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4",
        "--seq-length", "32", "--micro-batch-size", "2", "--global-batch-size", "8", "--lr", "1e-3",
        "--log-interval", "100", "--eval-iters", "0", "--num-threads", "1", "--device", "cuda"]


def launch(args, flags, layout, wd, iters, env=None):
    """Runs megac train at layout; returns (exit code, output, the iteration records)."""
    tp, pp, dp = layout[:3]
    cp = layout[3] if len(layout) > 3 else 1
    ep = layout[4] if len(layout) > 4 else 1
    launch.count = getattr(launch, "count", 0) + 1  # a fresh log per run (--log-json appends)
    log = os.path.join(wd, f"log{launch.count}.jsonl")
    cmd = [args.mpiexec, "-n", str(tp * pp * dp * cp), args.megac, "train", "--train-iters", str(iters),
           "--tensor-model-parallel-size", str(tp), "--pipeline-model-parallel-size", str(pp),
           "--context-parallel-size", str(cp), "--expert-model-parallel-size", str(ep),
           "--log-json", log] + TINY + flags
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=1200,
                       env=env)
    recs = [r for r in map(json.loads, open(log)) if "iteration" in r] if os.path.exists(log) else []
    return p.returncode, p.stdout, recs, cmd


def run(args, flags, layout, wd, iters=4, env=None):
    rc, out, recs, cmd = launch(args, flags, layout, wd, iters, env)
    if rc != 0:
        print(out[-4000:])
        sys.exit(f"FAIL: exited {rc}: {' '.join(cmd)}")
    return recs, out


KEYS = ("lm_loss", "grad_norm", "skipped", "loss_scale")


def bitwise(got, ref):
    """The iterations whose loss, grad norm, skip or loss scale differ (empty: bitwise equal)."""
    if len(got) != len(ref):
        return [("iterations", len(got), len(ref))]
    return [(g["iteration"],) + tuple((g[k], r[k]) for k in KEYS if g[k] != r[k])
            for g, r in zip(got, ref) if any(g[k] != r[k] for k in KEYS)]


def mode_parity(args, flags, layout, wd):
    ref, _ = run(args, flags, layout, wd, args.iters)
    fails = 0
    variants = [(f, ov) for f in args.fractions for ov in ([[], ["--overlap-cpu-optimizer-d2h-h2d"]]
                                                           if args.overlap else [[]])]
    for f, ov in variants:
        got, out = run(args, flags + ["--optimizer-cpu-offload", "--optimizer-offload-fraction", f] + ov, layout,
                       wd, args.iters)
        bad = bitwise(got, ref)
        r0, g0 = ref[-1], got[-1]
        moved = r0["optimizer_state_bytes"] - g0["optimizer_state_bytes"]
        freed = r0["device_memory_bytes"] - g0["device_memory_bytes"]
        host = g0.get("optimizer_host_bytes", 0)
        mem_ok = moved > 0 and freed == moved and host >= 2 * moved and "optimizer in host memory" in out
        if float(f) == 1.0:
            mem_ok = mem_ok and g0["optimizer_state_bytes"] == 0
        skips = sum(r["skipped"] for r in ref)
        print(f"layout {layout} {' '.join(flags)} fraction {f}{' overlapped' if ov else ''}: {len(ref)} iterations ({skips} skipped): losses, grad norms, skips, scales "
              f"{'bitwise equal' if not bad else 'DIFFER ' + str(bad[:3])}; optimizer state on the device "
              f"{r0['optimizer_state_bytes']} -> {g0['optimizer_state_bytes']} bytes, device in use "
              f"{r0['device_memory_bytes']} -> {g0['device_memory_bytes']} (freed {freed}), pinned host {host}: "
              f"{'ok' if mem_ok else 'MISMATCH'}")
        fails += bool(bad) + (not mem_ok)
    return fails


PARAMS = ["--optimizer-cpu-offload", "--optimizer-offload-fraction", "1", "--offload-params"]


def mode_params(args, flags, layout, wd):
    ref, _ = run(args, flags, layout, wd, args.iters)
    opt, _ = run(args, flags + PARAMS[:3], layout, wd, args.iters)
    got, out = run(args, flags + PARAMS, layout, wd, args.iters)
    bad, bad_opt = bitwise(got, ref), bitwise(opt, ref)
    o0, g0 = opt[-1], got[-1]
    shard = g0["optimizer_host_bytes"] // 4  # (fp32 masters, moments, gradients: the shard 4 times)
    moved = o0["param_memory_bytes"] - g0["param_memory_bytes"]
    freed = o0["device_memory_bytes"] - g0["device_memory_bytes"]
    mem_ok = freed == moved and 2 * moved >= shard > 0 and moved < shard
    print(f"layout {layout} {' '.join(flags)}: {len(ref)} iterations: --offload-params "
          f"{'bitwise equal' if not bad else 'DIFFER ' + str(bad[:3])} to no offload, --optimizer-cpu-offload "
          f"{'bitwise equal' if not bad_opt else 'DIFFER ' + str(bad_opt[:3])}; parameters on the device "
          f"{o0['param_memory_bytes']} -> {g0['param_memory_bytes']} bytes (shard {shard}), device in use "
          f"{o0['device_memory_bytes']} -> {g0['device_memory_bytes']} (freed {freed}): "
          f"{'ok' if mem_ok else 'MISMATCH'}")
    return bool(bad) + bool(bad_opt) + (not mem_ok)


def mode_resume(args, flags, layout, wd):
    f = flags + ["--lr-decay-iters", "4"]
    off = ["--optimizer-cpu-offload", "--optimizer-offload-fraction", args.fractions[-1]]
    if args.offload_params:
        off = PARAMS
    ref, _ = run(args, f, layout, wd, iters=4)
    fails = 0
    for i, (name, first, second) in enumerate((("offload -> none", off, []), ("none -> offload", [], off))):
        ck = os.path.join(wd, f"ck{i}")
        run(args, f + first + ["--save", ck], layout, wd, iters=2)
        got, _ = run(args, f + second + ["--load", ck], layout, wd, iters=4)
        got = [g for g in got if g["iteration"] > 2]
        bad = bitwise(got, ref[2:])
        print(f"layout {layout} {' '.join(flags)}: 2 saved ({name}) + 2 resumed vs 4 straight: "
              f"{'bitwise equal' if not bad else 'DIFFER ' + str(bad)}")
        fails += bool(bad)
    return fails


def mode_refuse(args, flags, layout, wd):
    z3 = ["--data-parallel-sharding-strategy", "optim_grads_params"]
    cases = [(["--device", "cpu", "--optimizer-cpu-offload"], "already in host memory"),
             (["--device", "cpu"] + z3 + ["--offload-params"], "parameters are already in host memory"),
             (PARAMS, "needs ZeRO-3"),
             (z3 + ["--offload-params"], "--optimizer-offload-fraction 1"),
             (z3 + PARAMS[:2] + ["0.5", "--offload-params"], "--optimizer-offload-fraction 1"),
             (["--optimizer-cpu-offload", "--optimizer-offload-fraction", "1.5"], "in [0, 1]"),
             (["--optimizer-cpu-offload", "--optimizer-offload-fraction", "-0.25"], "in [0, 1]"),
             (["--overlap-cpu-optimizer-d2h-h2d"], "needs --optimizer-cpu-offload")]
    fails = 0
    for extra, why in cases:
        rc, out, _, _ = launch(args, flags + extra, (1, 1, 1), wd, 1)
        ok = rc == 2 and why in out
        print(f"{' '.join(extra)}: exit {rc}, {'says' if why in out else 'does NOT say'} '{why}': "
              f"{'ok' if ok else 'FAIL'}")
        if not ok:
            print(out[-2000:])
        fails += not ok
    return fails


def parse_trace(path):
    """The trace's lines as (seq, stream, kind, detail) (emu_trace.c's format)."""
    out = []
    for line in open(path):
        seq, stream, kind, *rest = line.split()
        out.append((int(seq), stream, kind, " ".join(rest)))
    return out


def done_point(ops, comp, j):
    """Where the compute stream comp's later work is ordered after operation j: j itself when on
    comp, else the first wait of comp for the event j's stream records next, or the host's
    successful query of it (comm_test: the reduction is then complete; the emulator's queries
    always succeed). None: never."""
    if ops[j][1] == comp:
        return j
    ev = next((o[3] for o in ops[j + 1:] if o[1] == ops[j][1] and o[2] == "record"), None)
    return next((i for i in range(j + 1, len(ops)) if ops[i][3] == ev and (ops[i][1], ops[i][2]) in
                 ((comp, "wait"), ("s-", "query"))), None)


def check_trace(ops, n_buckets, allow_compute_sync):
    """Failures of one rank's trace, and the overlap report's lines."""
    kernels = {}
    for _, st, kind, _ in ops:
        if kind == "kernel":
            kernels[st] = kernels.get(st, 0) + 1
    comp = max(kernels, key=kernels.get)  # the compute stream: most kernels
    copy = {st for _, st, kind, d in ops if kind == "memcpy" and d.startswith("D2H") and st != comp}
    if len(copy) != 1:
        return [f"D2H copies off the compute stream {comp} on streams {sorted(copy)} (want one)"], []
    copy = copy.pop()
    steps, cur = [], []  # the D2H copies of each step: split where the host waits for the copy stream
    for i, (_, st, kind, d) in enumerate(ops):
        if st == copy and kind == "memcpy" and d.startswith("D2H"):
            cur.append(i)
        elif st == copy and kind == "sync" and cur:
            steps.append((cur, i))
            cur = []
    fails, report = [], []
    if not steps:
        return [f"no gradient copies down on stream {copy}"], []
    prev_end = 0
    for n, (copies, join) in enumerate(steps):
        rs = [i for i in range(prev_end, join) if ops[i][2] == "nccl" and ops[i][3] == "ncclReduceScatter"]
        if len(copies) != n_buckets or len(rs) != n_buckets:
            fails.append(f"step {n + 1}: {len(copies)} copies down, {len(rs)} reduce-scatters (want {n_buckets})")
            break
        for b, c in enumerate(copies):
            prior = [i for i in range(c) if ops[i][1] == copy]  # the copy stream's previous op
            wait = ops[prior[-1]] if prior else None
            ev = wait[3] if wait and wait[2] == "wait" else None
            rec = [i for i in range(prior[-1] if prior else 0) if ops[i][2] == "record" and ops[i][3] == ev]
            r = rec[-1] if rec else -1
            mine, nxt = done_point(ops, comp, rs[b]), done_point(ops, comp, rs[b + 1]) if b + 1 < len(rs) else None
            if not ev or r < 0 or ops[r][1] != comp or mine is None or not (mine < r) or (nxt is not None and nxt < r):
                fails.append(f"step {n + 1} copy {b} (seq {ops[c][0]}): not ordered by an event recorded on "
                             f"stream {comp} after its own bucket's reduce-scatter and before the next's")
        syncs = [ops[i] for i in range(copies[0], copies[-1]) if ops[i][2] == "sync"]
        held = [x for x in syncs if x[1] != comp] if allow_compute_sync else syncs
        if held:
            fails.append(f"step {n + 1}: host synchronisation between the first and last copy: {held[0]}")
        elif syncs:
            report.append(f"  step {n + 1}: the host waited {len(syncs)} time(s) for the compute stream between the "
                          f"copies (the trainer's loss read), never for the copies")
        if n == len(steps) - 1:  # the last step: what each copy may overlap on a GPU
            for b, c in enumerate(copies):
                work = {}
                for i in range(c + 1, join):
                    if ops[i][1] == comp and ops[i][2] in ("kernel", "nccl"):
                        work[ops[i][3]] = work.get(ops[i][3], 0) + 1
                report.append(f"  copy down {b} ({ops[c][3].split()[1]} bytes, seq {ops[c][0]}) may overlap: " +
                              ", ".join(f"{k} x{v}" for k, v in work.items()))
        prev_end = join
    return fails, [f"compute stream {comp}, copy stream {copy}, {len(steps)} steps of {n_buckets} copies"] + report


def mode_trace(args, flags, layout, wd):
    env = dict(os.environ, MEGAC_EMU_TRACE=os.path.join(wd, "trace.%p"))
    off = ["--optimizer-cpu-offload", "--optimizer-offload-fraction", "1.0", "--overlap-cpu-optimizer-d2h-h2d"]
    recs, out = run(args, flags + off, layout, wd, args.iters, env)
    ref, _ = run(args, flags, layout, wd, args.iters)
    fails = len(bitwise(recs, ref)) > 0
    print(f"{' '.join(flags)}: offload overlapped vs none: {'bitwise equal' if not fails else 'DIFFER'}")
    files = sorted(glob.glob(os.path.join(wd, "trace.*")))
    n_buckets = args.buckets
    if len(files) != layout[2]:
        print(f"FAIL: {len(files)} trace files, want {layout[2]}")
        return 1
    for f in files:
        bad, report = check_trace(parse_trace(f), n_buckets, "--overlap-grad-reduce" in flags)
        print(f"trace of pid {f.rsplit('.', 1)[1]}: {'ok' if not bad else 'FAIL'}")
        for line in bad + report:
            print(line if line.startswith("  ") else "  " + line)
        fails += len(bad)
    return fails


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--megac", required=True)
    ap.add_argument("--mpiexec", default="mpiexec")
    ap.add_argument("--mode", choices=["parity", "params", "resume", "refuse", "trace"], required=True)
    ap.add_argument("--layout", default="1,1,1")
    ap.add_argument("--fractions", nargs="+", default=["1.0", "0.5"])
    ap.add_argument("--flags", default="")
    ap.add_argument("--iters", type=int, default=4)
    ap.add_argument("--offload-params", action="store_true")
    ap.add_argument("--overlap", action="store_true")
    ap.add_argument("--buckets", type=int, default=4, help="trace: the buckets each step reduces")
    args = ap.parse_args()
    layout = tuple(int(x) for x in args.layout.split(","))
    mode = {"parity": mode_parity, "params": mode_params, "resume": mode_resume,
            "refuse": mode_refuse, "trace": mode_trace}[args.mode]
    with tempfile.TemporaryDirectory() as wd:
        fails = mode(args, shlex.split(args.flags), layout, wd)
    print("PASS" if not fails else f"FAIL: {fails} check(s)")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
