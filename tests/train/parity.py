#!/usr/bin/env python3
"""tests/train/parity.py: train the same tiny model under several (TP, PP, DP) layouts and
check every iteration's loss and grad norm, and with mixture-of-experts layers the
load-balancing and z losses, against the first layout's (the reference, normally one rank). Prints a table and the largest relative difference; exits 1 if it is
above --tol.

usage: parity.py --megac BIN --mpiexec MPIEXEC --layouts 1,1,1 2,1,1 ... [--tol 1e-4]
                 [--extra '--sequence-parallel'] [--ref-env NAME=VALUE --paired]
                 -- <megac train flags>
A layout is TP,PP,DP or TP,PP,DP,CP (context parallelism) or TP,PP,DP,CP,EP (expert
parallelism, over the DP x CP ranks); the job runs TP*PP*DP*CP ranks. --ref-env sets a
variable in the reference run's environment only; --paired: every layout against its own
reference run in that layout (a switch checked layout by layout, normally with --tol 0).
"""
import argparse, json, os, subprocess, sys, tempfile


def run(args, layout, extra, workdir, env=None):
    tp, pp, dp = layout[:3]
    cp = layout[3] if len(layout) > 3 else 1
    ep = layout[4] if len(layout) > 4 else 1
    n = tp * pp * dp * cp
    run.count = getattr(run, "count", 0) + 1  # a fresh log per run (--log-json appends)
    log = os.path.join(workdir, f"log{run.count}_{tp}_{pp}_{dp}_{cp}_{ep}.jsonl")
    cmd = [args.mpiexec, "-n", str(n), args.megac, "train",
           "--tensor-model-parallel-size", str(tp), "--pipeline-model-parallel-size", str(pp),
           "--log-json", log, "--num-threads", "1"] + (["--context-parallel-size", str(cp)] if cp > 1 else []) \
          + (["--expert-model-parallel-size", str(ep)] if ep > 1 else []) \
          + args.train + extra
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=args.timeout,
                       env=dict(os.environ, **env) if env else None)
    if p.returncode != 0:
        print(p.stdout[-4000:])
        sys.exit(f"FAIL: layout {layout} exited {p.returncode}: {' '.join(cmd)}")
    return [r for r in map(json.loads, open(log)) if "iteration" in r]  # not run/validation records


def gnorm_diff(g, r):
    """Relative difference of two grad norms; null (an --fp16 step skipped on overflow) must
    meet null."""
    if g is None or r is None:
        return 0.0 if g is None and r is None else float("inf")
    return abs(g - r) / max(abs(r), 1e-12)


def moe_losses_diff(got, ref, lay):
    """The largest relative difference of the load-balancing and z losses (the ones the
    reference logs, null when their coefficient is 0); None when it logs neither."""
    keys = [k for k in ("load_balancing_loss", "z_loss") if ref and ref[0].get(k) is not None]
    if not keys:
        return None
    d = 0.0
    for g, r in zip(got, ref):
        for k in keys:
            if g.get(k) is None:
                sys.exit(f"FAIL: layout {lay}: no {k} in an iteration record")
            d = max(d, abs(g[k] - r[k]) / max(abs(r[k]), 1e-12))
    return d


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--megac", required=True)
    ap.add_argument("--mpiexec", default="mpiexec")
    ap.add_argument("--layouts", nargs="+", required=True)
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--extra", action="append", default=[],
                    help="flags added to every non-reference run (repeatable)")
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--ref-env", action="append", default=[],
                    help="NAME=VALUE in the reference run's environment only (repeatable)")
    ap.add_argument("--paired", action="store_true",
                    help="every layout against its own reference run in that layout")
    ap.add_argument("train", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    if args.train and args.train[0] == "--":
        args.train = args.train[1:]
    layouts = [tuple(int(x) for x in l.split(",")) for l in args.layouts]
    extra = sum((e.split() for e in args.extra), [])
    ref_env = dict(e.split("=", 1) for e in args.ref_env)
    worst = 0.0
    with tempfile.TemporaryDirectory() as wd:
        ref = None if args.paired else run(args, layouts[0], [], wd, ref_env)
        print(f"{'layout (tp,pp,dp[,cp])':>22} {'iters':>5} {'max rel diff loss':>18} {'max rel diff gnorm':>19}"
              f" {'max rel diff moe losses':>24}")
        for lay in layouts if args.paired else layouts[1:]:
            if args.paired:
                ref = run(args, lay, [], wd, ref_env)
            got = run(args, lay, extra, wd)
            if len(got) != len(ref):
                sys.exit(f"FAIL: layout {lay}: {len(got)} iterations, reference {len(ref)}")
            dl = max(abs(g["lm_loss"] - r["lm_loss"]) / abs(r["lm_loss"]) for g, r in zip(got, ref))
            dg = max(gnorm_diff(g.get("grad_norm"), r.get("grad_norm")) for g, r in zip(got, ref))
            dm = moe_losses_diff(got, ref, lay)
            worst = max(worst, dl, dg, dm if dm is not None else 0.0)
            moe = f"{dm:>24.3e}" if dm is not None else f"{'-':>24}"
            print(f"{str(lay):>22} {len(got):>5} {dl:>18.3e} {dg:>19.3e} {moe}")
    print(f"largest relative difference: {worst:.3e} (tolerance {args.tol:g})")
    if worst > args.tol:
        sys.exit("FAIL: layouts disagree")
    print("parity: ok")


if __name__ == "__main__":
    main()
