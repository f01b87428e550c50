#!/usr/bin/env python3
"""tests/train/offload.py: --optimizer-cpu-offload (optim/optim_offload.c, docs/offload.md).

Modes:
  parity   at one layout (TP,PP,DP[,CP,EP]): a run without offload, then one per
           --fractions value with --optimizer-cpu-offload: every iteration's loss, grad norm,
           skip (fp16 overflow, NaN) and loss scale bitwise equal to the run without, and the memory proof from rank 0's JSON
           record: the device memory in use (the emulator's cudaMalloc accounting) is lower by
           exactly the optimizer state moved off the device, fraction 1 leaves no optimizer
           state on the device, and the pinned host bytes are logged.
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

usage: offload.py --megac BIN --mpiexec MPIEXEC --mode parity|params|resume|refuse [--layout T,P,D]
                  [--fractions 1.0 0.5] [--flags='...'] [--iters 4] [--offload-params]
"""
import argparse, json, os, shlex, subprocess, sys, tempfile

TINY = ["--mock-data", "--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4",
        "--seq-length", "32", "--micro-batch-size", "2", "--global-batch-size", "8", "--lr", "1e-3",
        "--log-interval", "100", "--eval-iters", "0", "--num-threads", "1", "--device", "cuda"]


def launch(args, flags, layout, wd, iters):
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
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=1200)
    recs = [r for r in map(json.loads, open(log)) if "iteration" in r] if os.path.exists(log) else []
    return p.returncode, p.stdout, recs, cmd


def run(args, flags, layout, wd, iters=4):
    rc, out, recs, cmd = launch(args, flags, layout, wd, iters)
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
    for f in args.fractions:
        got, out = run(args, flags + ["--optimizer-cpu-offload", "--optimizer-offload-fraction", f], layout, wd,
                       args.iters)
        bad = bitwise(got, ref)
        r0, g0 = ref[-1], got[-1]
        moved = r0["optimizer_state_bytes"] - g0["optimizer_state_bytes"]
        freed = r0["device_memory_bytes"] - g0["device_memory_bytes"]
        host = g0.get("optimizer_host_bytes", 0)
        mem_ok = moved > 0 and freed == moved and host >= 2 * moved and "optimizer in host memory" in out
        if float(f) == 1.0:
            mem_ok = mem_ok and g0["optimizer_state_bytes"] == 0
        skips = sum(r["skipped"] for r in ref)
        print(f"layout {layout} {' '.join(flags)} fraction {f}: {len(ref)} iterations ({skips} skipped): losses, grad norms, skips, scales "
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--megac", required=True)
    ap.add_argument("--mpiexec", default="mpiexec")
    ap.add_argument("--mode", choices=["parity", "params", "resume", "refuse"], required=True)
    ap.add_argument("--layout", default="1,1,1")
    ap.add_argument("--fractions", nargs="+", default=["1.0", "0.5"])
    ap.add_argument("--flags", default="")
    ap.add_argument("--iters", type=int, default=4)
    ap.add_argument("--offload-params", action="store_true")
    args = ap.parse_args()
    layout = tuple(int(x) for x in args.layout.split(","))
    mode = {"parity": mode_parity, "params": mode_params, "resume": mode_resume,
            "refuse": mode_refuse}[args.mode]
    with tempfile.TemporaryDirectory() as wd:
        fails = mode(args, shlex.split(args.flags), layout, wd)
    print("PASS" if not fails else f"FAIL: {fails} check(s)")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
