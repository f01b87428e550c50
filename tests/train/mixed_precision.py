#!/usr/bin/env python3
"""tests/train/mixed_precision.py: --bf16 / --fp16 training on --device cuda (the emulator in
CI; --device cpu: the CPU backend's 16-bit activations) against the CPU run of the same tiny
model, fp32 or (--ref-precision) the same precision.

  vs_cpu     the same run in the given precision stays within --tol (loss) and --gnorm-tol
             (grad norm) of the CPU run in --ref-precision (default fp32), relative, every
             iteration (fp16: static loss scale 1024, on both sides).
  learns     8 samples seen again and again at a high rate: the loss falls by 0.5 (no step
             skipped with bf16).
  overflow   --fp16 starting at a loss scale that overflows: the first steps are skipped,
             each skip halves the scale (--hysteresis 1), then training proceeds and the
             loss falls; the log lines show the scale and the skipped count.
  resume     checkpoints cross precisions: a --bf16 run's checkpoint resumed in fp32 on the
             CPU, and a CPU fp32 checkpoint resumed with --bf16, both continue within --tol of
             the uninterrupted fp32 run.
  scale_resume  --fp16 with a dynamic scale, saved at the half and resumed: the resumed
             iterations log the uninterrupted run's loss scales (the checkpoint keeps the
             scaler's state).

usage: mixed_precision.py --megac BIN --mpiexec MPIEXEC --mode MODE [--precision bf16|fp16]
                          [--device cuda|cpu] [--ref-precision fp32|bf16|fp16]
                          [--layout TP,PP,DP] [--tol X] [--gnorm-tol X] [--iters N]
                          [--override="FLAGS"] -- <megac train flags>
"""
import argparse, json, os, re, subprocess, sys, tempfile


def train(args, flags, log, ranks=1):
    cmd = [args.mpiexec, "-n", str(ranks), args.megac, "train", "--log-json", log,
           "--num-threads", "1"] + args.train + flags
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=1200)
    if p.returncode != 0:
        print(p.stdout[-4000:])
        sys.exit(f"FAIL: exited {p.returncode}: {' '.join(cmd)}")
    return [r for r in map(json.loads, open(log)) if "iteration" in r], p.stdout  # not run/validation records


def rel(a, b):
    return abs(a - b) / max(abs(b), 1e-12)


def compare(name, got, ref, tol, gtol, first=1):
    ref = {r["iteration"]: r for r in ref}
    dl = dg = 0.0
    for g in got:
        r = ref[g["iteration"]]
        if g["iteration"] < first:
            continue
        dl = max(dl, rel(g["lm_loss"], r["lm_loss"]))
        if g["grad_norm"] is None or r["grad_norm"] is None:  # an overflow step (inf: null)
            dg = dg if g["grad_norm"] is r["grad_norm"] else float("inf")
        else:
            dg = max(dg, rel(g["grad_norm"], r["grad_norm"]))
    print(f"{name:<40} iterations {len(got):>3}  max rel diff loss {dl:.3e} (tol {tol:g})  "
          f"grad norm {dg:.3e} (tol {gtol:g})")
    if dl > tol or dg > gtol:
        sys.exit(f"FAIL: {name} differs from the fp32 CPU run")


def mode_vs_cpu(args, wd):
    tp, pp, dp = (int(x) for x in args.layout.split(","))
    # fp16 with a static scale: the dynamic one would skip the first steps (see overflow)
    rp = args.ref_precision
    ref, _ = train(args, ([] if rp == "fp32" else [f"--{rp}"]) + (["--loss-scale", "1024"] if rp == "fp16" else []),
                   os.path.join(wd, "cpu.jsonl"))
    scale = ["--loss-scale", "1024"] if args.precision == "fp16" else []
    got, out = train(args, scale + ["--device", args.device, f"--{args.precision}", "--tensor-model-parallel-size",
                            str(tp), "--pipeline-model-parallel-size", str(pp)],
                     os.path.join(wd, "mixed.jsonl"), tp * pp * dp)
    if args.precision not in out:
        sys.exit("FAIL: the start-up log does not name the precision")
    if any(g["skipped"] for g in got) and args.precision == "bf16":
        sys.exit("FAIL: a --bf16 step was skipped")
    compare(f"--{args.precision} {args.device} layout {args.layout} vs CPU {rp}", got, ref, args.tol,
            args.gnorm_tol)


def mode_learns(args, wd):
    got, _ = train(args, ["--device", args.device, f"--{args.precision}", "--lr", "1e-2", "--mock-samples", "8"],
                   os.path.join(wd, "learn.jsonl"))
    if args.precision == "bf16" and any(g["skipped"] for g in got):
        sys.exit("FAIL: a --bf16 step was skipped")
    ok = [g for g in got if not g["skipped"]]
    if len(ok) < 3 or not ok[-1]["lm_loss"] < ok[0]["lm_loss"] - 0.5:
        sys.exit(f"FAIL: --{args.precision} on {args.device}: the loss did not fall: "
                 f"{[round(g['lm_loss'], 4) for g in ok]}")
    print(f"--{args.precision} on {args.device}: loss {ok[0]['lm_loss']:.4f} -> {ok[-1]['lm_loss']:.4f} "
          f"over {len(ok)} steps ({len(got) - len(ok)} skipped)")


def mode_overflow(args, wd):
    # 8 samples seen again and again at a high rate: the loss must fall once steps are taken
    got, out = train(args, ["--device", args.device, "--fp16", "--initial-loss-scale", "268435456",
                            "--hysteresis", "1", "--lr", "1e-2", "--mock-samples", "8"],
                     os.path.join(wd, "fp16.jsonl"))
    skipped = [g for g in got if g["skipped"]]
    if not skipped or not got[0]["skipped"]:
        sys.exit("FAIL: a loss scale of 2^28 should overflow fp16 at the first step")
    scale = 2.0 ** 28
    for g in got:
        if g["skipped"]:
            scale /= 2
            if g["loss_scale"] != scale:
                sys.exit(f"FAIL: iteration {g['iteration']}: scale {g['loss_scale']}, expected {scale}")
    ok = [g for g in got if not g["skipped"]]
    if len(ok) < 3:
        sys.exit(f"FAIL: only {len(ok)} steps were taken after the overflows")
    if not ok[-1]["lm_loss"] < ok[0]["lm_loss"] - 0.5:
        sys.exit(f"FAIL: the loss did not fall after the scale settled: {ok[0]['lm_loss']} -> {ok[-1]['lm_loss']}")
    # Megatron's counts are per log interval: their sum over the interval lines is the run's
    # (the extra line at a run's first iteration does not end an interval: Megatron's too)
    every = int(args.train[args.train.index("--log-interval") + 1]) if "--log-interval" in args.train else 100
    lines = [l for l in out.splitlines() if re.match(r" \[[^]]*\] iteration ", l) and "loss scale:" in l]
    its = [int(re.search(r"iteration +(\d+)/", l).group(1)) for l in lines]
    lines = [l for l, i in zip(lines, its) if i % every == 0 or i == max(its)]
    counts = [int(m.group(1)) for l in lines for m in [re.search(r"number of skipped iterations: +(\d+)", l)] if m]
    if not counts or sum(counts) != len(skipped):
        sys.exit(f"FAIL: the log lines count {sum(counts)} skipped iterations, not {len(skipped)}")
    print(f"fp16 overflow: {len(skipped)} steps skipped, scale 2^28 -> {ok[-1]['loss_scale']:g}, "
          f"loss {got[0]['lm_loss']:.4f} -> {ok[-1]['lm_loss']:.4f}: ok")


def mode_resume(args, wd):
    iters = int(args.train[args.train.index("--train-iters") + 1])
    half = iters // 2
    base = [a for a in args.train] + ["--lr-decay-iters", str(iters)]  # one schedule for all
    args.train = base
    ref, _ = train(args, [], os.path.join(wd, "ref.jsonl"))
    bf = ["--device", "cuda", f"--{args.precision}"]
    for name, first, second in [(f"{args.precision} -> fp32 cpu", bf, []), (f"fp32 cpu -> {args.precision}", [], bf)]:
        ck = os.path.join(wd, "ck_" + str(len(first)))
        args.train = base[:base.index("--train-iters") + 1] + [str(half)] + base[base.index("--train-iters") + 2:]
        train(args, first + ["--save", ck], os.path.join(wd, f"a{len(first)}.jsonl"))
        args.train = base
        got, _ = train(args, second + ["--load", ck], os.path.join(wd, f"b{len(first)}.jsonl"))
        got = [g for g in got if g["iteration"] > half]
        if len(got) != iters - half:
            sys.exit(f"FAIL: {name}: resumed run logged {len(got)} iterations, expected {iters - half}")
        compare(f"resume {name}", got, ref, args.tol, args.gnorm_tol)


def mode_scale_resume(args, wd):
    # --fp16 with a dynamic scale that overflows at first and grows every 2 clean steps: a
    # run saved at the half and resumed continues with the saved scale, clean-step count and
    # hysteresis (Megatron saves its grad scaler), so every resumed iteration logs the same
    # scale as the uninterrupted run (without them it would restart at 2^24 and skip again).
    iters = int(args.train[len(args.train) - 1 - args.train[::-1].index("--train-iters") + 1])  # the last wins
    half = iters // 2
    fp16 = ["--device", "cuda", "--fp16", "--initial-loss-scale", "16777216", "--hysteresis", "2",
            "--loss-scale-window", "2", "--lr-decay-iters", str(iters)]
    ref, _ = train(args, fp16, os.path.join(wd, "ref.jsonl"))
    ck = os.path.join(wd, "ck")
    train(args, fp16 + ["--save", ck, "--train-iters", str(half)], os.path.join(wd, "a.jsonl"))
    got, out = train(args, fp16 + ["--load", ck], os.path.join(wd, "b.jsonl"))
    m = re.search(r"fp16 loss scale restored: (\S+) \((-?\d+) clean steps, (-?\d+) overflows left", out)
    if not m:
        print(out[-3000:])
        sys.exit("FAIL: the resumed run did not restore the loss scale")
    want = {r["iteration"]: r for r in ref}
    if rel(float(m.group(1)), want[half]["loss_scale"]) > 1e-5:  # the log line prints %g
        sys.exit(f"FAIL: restored scale {m.group(1)}, the run had {want[half]['loss_scale']} at {half}")
    got = [g for g in got if g["iteration"] > half]
    for g in got:
        r = want[g["iteration"]]
        if (g["loss_scale"], g["skipped"]) != (r["loss_scale"], r["skipped"]):
            sys.exit(f"FAIL: iteration {g['iteration']}: scale {g['loss_scale']} skipped {g['skipped']}, "
                     f"uninterrupted {r['loss_scale']} {r['skipped']}")
    compare("fp16 resume (dynamic loss scale)", got, ref, args.tol, args.gnorm_tol)
    print(f"fp16 loss scale resumed at {m.group(1)} ({m.group(2)} clean steps, {m.group(3)} overflows "
          f"left); scales of iterations {half + 1}..{iters} equal the uninterrupted run's: "
          f"{sorted(set(g['loss_scale'] for g in got))}; uninterrupted run skipped iterations "
          f"{[r['iteration'] for r in ref if r['skipped']]}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--megac", required=True)
    ap.add_argument("--mpiexec", default="mpiexec")
    ap.add_argument("--mode", required=True, choices=["vs_cpu", "overflow", "resume", "scale_resume", "learns"])
    ap.add_argument("--precision", default="bf16", choices=["bf16", "fp16"])
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"], help="of the run under test "
                    "(vs_cpu, overflow, learns)")
    ap.add_argument("--ref-precision", default="fp32", choices=["fp32", "bf16", "fp16"],
                    help="vs_cpu: the CPU reference run's precision")
    ap.add_argument("--layout", default="1,1,1")
    ap.add_argument("--tol", type=float, default=2e-2)
    ap.add_argument("--gnorm-tol", type=float, default=1e-1)
    ap.add_argument("--iters", type=int, default=0, help="override --train-iters (0: keep)")
    ap.add_argument("--override", default="", help="megac flags put after the others (the last "
                    "value of a flag wins): e.g. a smaller model")
    ap.add_argument("train", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    if args.train and args.train[0] == "--":
        args.train = args.train[1:]
    if args.iters:
        args.train += ["--train-iters", str(args.iters)]  # the last value of a flag wins
    args.train += args.override.split()
    with tempfile.TemporaryDirectory() as wd:
        {"vs_cpu": mode_vs_cpu, "overflow": mode_overflow, "resume": mode_resume,
         "scale_resume": mode_scale_resume, "learns": mode_learns}[args.mode](args, wd)
    print("mixed precision: ok")


if __name__ == "__main__":
    main()
