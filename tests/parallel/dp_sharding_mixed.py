#!/usr/bin/env python3
"""tests/parallel/dp_sharding_mixed.py: ZeRO-2 and ZeRO-3 (--data-parallel-sharding-strategy
optim_grads / optim_grads_params) in mixed precision (--bf16 / --fp16 on the CUDA emulator) and
with --grad-reduce-in-bf16 (any device), against ZeRO-1 with the same flags.

  parity    TP = PP = 1, DP 2, one micro-batch per rank per step: every iteration's loss and
            grad norm equal ZeRO-1's within --tol (0: bitwise; the per-element arithmetic is
            the same: fp32 main gradients averaged over 2 ranks, AdamW on fp32 masters, the
            same 16-bit weight copies; the grad norm's double sum runs per unit instead of per
            slice, so it may differ by a few double ulps), and the memory per category and the bytes moved in DP
            equal the formulas below, and `megac plan`'s prediction, to the byte.
  prefetch  ZeRO-3 with --overlap-param-gather (the next layer's gather started before the
            current layer computes) against ZeRO-3 without, in the layout --flags give on
            --ranks ranks: every loss and grad norm bitwise equal, and the same memory and
            bytes per group (a prefetch replaces a gather, it adds none).
  resume    ZeRO-3 4 iterations straight vs 2, saved (the fp32 master shards), and 2 resumed
            (--load, --lr-decay-iters fixed): the resumed iterations bitwise equal.
  overflow  --fp16 with a dynamic loss scale that starts at 2^23 (hysteresis 1; 2^21 still overflows here): ZeRO-3 skips
            the same steps as ZeRO-1, logs the same scales and losses (within --tol), and at
            least 3 steps are taken after the skips.

Formulas (bytes; Psi parameters, Psi_pad padded to 16 DP, w = 2 bytes per 16-bit weight, g =
bytes per reduced gradient element: 4, or 2 with --grad-reduce-in-bf16; units, per, S, S_e,
S_l as in dp_sharding_memory_traffic.py; m micro-batches per step):

  strategy            params                            grads                               optimizer  DP bytes per step
  optim               4 Psi + w Psi_pad                 4 Psi_pad                           8 Psi_pad/DP  (DP-1)/DP (g + 4) Psi_pad
  optim_grads         4 Psi + w Psi_pad                 4 (S + DP S_e + DP per_l + per_max) 8 S        (DP-1) S (m g + 4)
  optim_grads_params  4 S + w (DP S_e + 2 DP per_l)     as optim_grads                      8 S        (DP-1) (m g S + w S_e + 2 m w S_l)

(fp32 runs: no w Psi_pad copies for optim / optim_grads, and ZeRO-3 gathers fp32: w = 4. The
gradients are megac's fp32 main gradients, 4 bytes, where the ZeRO paper counts 2.)
usage: dp_sharding_mixed.py --megac BIN --mpiexec MPIEXEC --mode parity|prefetch|resume|overflow [--tol X]
                            [--flags='...'] [--layers L] [--ranks N]
"""
import argparse, json, os, shlex, subprocess, sys, tempfile

C, VP, T, MICRO = 64, 384, 32, 2


def run(args, strategy, flags, wd, dp=2, global_batch=4, iters=4):
    run.count = getattr(run, "count", 0) + 1  # a fresh log per run (--log-json appends)
    log = os.path.join(wd, f"{strategy}{run.count}.jsonl")
    cmd = [args.mpiexec, "-n", str(dp), args.megac, "train", "--mock-data", "--train-iters", str(iters),
           "--num-layers", str(args.layers), "--hidden-size", str(C), "--num-attention-heads", "4",
           "--seq-length", str(T), "--micro-batch-size", str(MICRO), "--global-batch-size", str(global_batch),
           "--lr", "1e-3", "--log-interval", "100", "--eval-iters", "0", "--num-threads", "1",
           "--log-json", log, "--data-parallel-sharding-strategy", strategy] + flags
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=1200)
    if p.returncode != 0:
        print(p.stdout[-4000:])
        sys.exit(f"FAIL: exited {p.returncode}: {' '.join(cmd)}")
    return [r for r in map(json.loads, open(log)) if "iteration" in r]


def per(n, dp):
    return ((n + dp - 1) // dp + 15) // 16 * 16


def expected(strategy, flags, layers, dp, m):
    half = "--bf16" in flags or "--fp16" in flags
    w = 2 if half else 4          # bytes of a gathered (ZeRO-3) weight
    copies = 2 if half else 0     # bytes of the 16-bit weight copy per element (ZeRO-1/2)
    g = 2 if "--grad-reduce-in-bf16" in flags else 4
    edge = [VP * C, T * C, C, C]
    layer = 12 * C * C + 13 * C
    psi = sum(edge) + layers * layer
    psi_pad = (psi + 16 * dp - 1) // (16 * dp) * (16 * dp)
    s_e, p_l = sum(per(n, dp) for n in edge), per(layer, dp)
    s, s_l = s_e + layers * p_l, layers * p_l
    per_max = max([p_l] + [per(n, dp) for n in edge])
    if strategy == "optim":
        return {"param_memory_bytes": 4 * psi + copies * psi_pad, "grad_memory_bytes": 4 * psi_pad,
                "optimizer_state_bytes": 8 * psi_pad // dp, "dp_bytes": (dp - 1) * (g + 4) * psi_pad // dp}
    want = {"grad_memory_bytes": 4 * (s + dp * s_e + dp * p_l + per_max), "optimizer_state_bytes": 8 * s}
    if strategy == "optim_grads":
        want.update(param_memory_bytes=4 * psi + copies * psi_pad, dp_bytes=(dp - 1) * s * (m * g + 4))
    else:
        want.update(param_memory_bytes=4 * s + w * (dp * s_e + 2 * dp * p_l),
                    dp_bytes=(dp - 1) * (m * g * s + w * s_e + 2 * m * w * s_l))
    return want


def plan_stage0(args, strategy, flags):
    """`megac plan --json`'s stage 0 for the parity runs' layout (DP 2, one micro-batch per rank)."""
    cmd = [args.megac, "plan", "--world-size", "2", "--json", "--vocab-size", "257", "--tensor-model-parallel-size", "1",
           "--pipeline-model-parallel-size", "1", "--micro-batch-size", str(MICRO), "--global-batch-size", "4",
           "--num-layers", str(args.layers), "--hidden-size", str(C), "--num-attention-heads", "4", "--seq-length",
           str(T), "--data-parallel-sharding-strategy", strategy] + [f for f in flags if f in ("--bf16", "--fp16")]
    if "--device" not in flags:
        cmd += ["--device", "cpu"]
    return json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)["layouts"][0]["stages"][0]


NORM_ORDER_TOL = 1e-13  # relative: a few double ulps


def rel(a, b):
    return abs(a - b) / max(abs(b), 1e-300)


def mode_parity(args, flags, wd):
    ref = None
    fails = 0
    for strategy in ("optim", "optim_grads", "optim_grads_params"):
        got = run(args, strategy, flags, wd)
        ref = ref or got
        dl = max(rel(a["lm_loss"], b["lm_loss"]) for a, b in zip(got, ref))
        dg = max(rel(a["grad_norm"], b["grad_norm"]) for a, b in zip(got, ref))
        want = expected(strategy, flags, args.layers, 2, 1)
        bad = {k: (got[-1].get(k), v) for k, v in want.items() if got[-1].get(k) != v}
        if "--grad-reduce-in-bf16" not in flags:  # megac plan: the same bytes (it has no such flag)
            st = plan_stage0(args, strategy, flags)
            planned = {"param_memory_bytes": st["memory"]["parameters"], "grad_memory_bytes": st["memory"]["gradients"],
                       "optimizer_state_bytes": st["memory"]["optimizer_state"], "dp_bytes": st["traffic"]["dp"]["bytes"]}
            bad.update({"plan " + k: (got[-1].get(k), v) for k, v in planned.items() if got[-1].get(k) != v})
        # The grad norm is a double sum of squares taken per ZeRO-1 slice or per ZeRO-2/3 unit:
        # the same fp32 gradients, added in another order, may round one double ulp apart.
        ok = dl <= args.tol and dg <= max(args.tol, NORM_ORDER_TOL) and not bad and len(got) == len(ref)
        fails += not ok
        print(f"{strategy:>19} {' '.join(flags):<40} loss {dl:.2e} grad norm {dg:.2e} (tol {args.tol:g}, norm {max(args.tol, NORM_ORDER_TOL):g}) | "
              f"params {got[-1]['param_memory_bytes']} grads {got[-1]['grad_memory_bytes']} "
              f"optim {got[-1]['optimizer_state_bytes']} dp {got[-1]['dp_bytes']} B "
              f"{'ok' if ok else 'MISMATCH (got, want): ' + str(bad)}")
    return fails


def mode_prefetch(args, flags, wd):
    runs = [run(args, "optim_grads_params", flags + extra, wd, dp=args.ranks, global_batch=8)
            for extra in ([], ["--overlap-param-gather"])]
    keys = ["lm_loss", "grad_norm", "param_memory_bytes", "grad_memory_bytes", "tp_bytes", "pp_bytes",
            "dp_bytes", "embedding_bytes"]
    bad = [(a["iteration"], k, a.get(k), b.get(k)) for a, b in zip(*runs) for k in keys if a.get(k) != b.get(k)]
    ok = not bad and len(runs[0]) == len(runs[1]) > 0
    # rank 0's gathers served by a prefetch, of its 2 m L (forward, backward; + m per recomputed layer)
    served = runs[1][-1].get("zero_prefetched_gathers", 0)
    if args.min_prefetched and served < args.min_prefetched or runs[0][-1].get("zero_prefetched_gathers"):
        ok = False
        print(f"MISMATCH: {served} gathers served by a prefetch (at least {args.min_prefetched}), "
              f"{runs[0][-1].get('zero_prefetched_gathers')} without --overlap-param-gather")
    print(f"ZeRO-3 --overlap-param-gather vs without, {args.ranks} ranks {' '.join(flags)}: {len(runs[1])} "
          f"iterations, losses, grad norms, memory and bytes {'bitwise equal' if not bad else 'DIFFER: ' + str(bad[:6])}; "
          f"{served} gathers per step prefetched {'ok' if ok else 'FAIL'}")
    return 0 if ok else 1


def mode_resume(args, flags, wd):
    f = flags + ["--lr-decay-iters", "4"]
    ref = run(args, "optim_grads_params", f, wd, iters=4)
    ck = os.path.join(wd, "ck")
    run(args, "optim_grads_params", f + ["--save", ck], wd, iters=2)
    got = run(args, "optim_grads_params", f + ["--load", ck], wd, iters=4)
    got = [g for g in got if g["iteration"] > 2]
    bad = [(g["iteration"], g["lm_loss"], r["lm_loss"], g["grad_norm"], r["grad_norm"]) for g, r in zip(got, ref[2:])
           if (g["lm_loss"], g["grad_norm"]) != (r["lm_loss"], r["grad_norm"])]
    ok = len(got) == 2 and not bad
    print(f"ZeRO-3 {' '.join(flags)}: 2 + save + resume 2 vs 4 straight: "
          f"{'bitwise equal: ok' if ok else 'DIFFER: ' + str(bad or got)}")
    return 0 if ok else 1


def mode_overflow(args, flags, wd):
    fp16 = flags + ["--fp16", "--initial-loss-scale", "8388608", "--hysteresis", "1", "--lr", "1e-2",
                    "--mock-samples", "8"]
    ref = run(args, "optim", fp16, wd, iters=8)
    got = run(args, "optim_grads_params", fp16, wd, iters=8)
    fails = 0
    if [g["skipped"] for g in got] != [r["skipped"] for r in ref] or not got[0]["skipped"]:
        fails += 1
        print("MISMATCH: skipped steps", [g["skipped"] for g in got], "ZeRO-1", [r["skipped"] for r in ref])
    if [g["loss_scale"] for g in got] != [r["loss_scale"] for r in ref]:
        fails += 1
        print("MISMATCH: loss scales", [g["loss_scale"] for g in got], "ZeRO-1", [r["loss_scale"] for r in ref])
    dl = max(rel(a["lm_loss"], b["lm_loss"]) for a, b in zip(got, ref))
    taken = [g for g in got if not g["skipped"]]
    if dl > args.tol or len(taken) < 3 or not taken[-1]["lm_loss"] < taken[0]["lm_loss"]:
        fails += 1
    print(f"fp16 ZeRO-3 vs ZeRO-1: {sum(g['skipped'] for g in got)} steps skipped alike, scale 2^23 -> "
          f"{got[-1]['loss_scale']:g}, loss {taken[0]['lm_loss'] if taken else 0:.4f} -> "
          f"{taken[-1]['lm_loss'] if taken else 0:.4f}, max rel loss diff {dl:.2e} (tol {args.tol:g}) "
          f"{'ok' if not fails else 'FAIL'}")
    return fails


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--megac", required=True)
    ap.add_argument("--mpiexec", default="mpiexec")
    ap.add_argument("--mode", choices=["parity", "prefetch", "resume", "overflow"], required=True)
    ap.add_argument("--ranks", type=int, default=2, help="prefetch: ranks (TP x PP x DP from --flags)")
    ap.add_argument("--min-prefetched", type=int, default=1, help="prefetch: rank 0's gathers per step served by a prefetch")
    ap.add_argument("--tol", type=float, default=0.0)
    ap.add_argument("--flags", default="", help="megac train flags of every run")
    ap.add_argument("--layers", type=int, default=2)
    args = ap.parse_args()
    flags = shlex.split(args.flags)
    with tempfile.TemporaryDirectory() as wd:
        modes = {"parity": mode_parity, "prefetch": mode_prefetch, "resume": mode_resume, "overflow": mode_overflow}
        fails = modes[args.mode](args, flags, wd)
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
