#!/usr/bin/env python3
"""tests/train/rampup.py: Megatron's --rampup-batch-size and sample-based runs.

1. The global batch of every iteration follows Megatron's rule (START + INCR x the number of
   SAMPLES / ((G - START) / INCR) steps consumed, G once more than SAMPLES are consumed), the
   run ends once --train-samples are consumed, and the learning rate counts samples.
2. The ramp-up trains the same model on one rank and on PP 2 x DP 2 and TP 2 x DP 2
   (tests/train/parity.py; DP must divide every batch of the ramp).
3. A resume with another --global-batch-size continues at the consumed samples (Megatron
   allows it): the first resumed batch starts where the checkpoint stopped, and the losses
   equal those of a run that used the same batches without stopping.
4. Bad ramp-ups: one line, exit 2.
5. Megatron's --step-batch-size-schedule (thresholds in tokens, K/M/B/T suffixes, entries in
   one word or several, as a shell array's unquoted expansion gives them): each iteration's
   batch is the entry reached by the tokens consumed before it; an iteration-based run; the
   same model on one rank and DP 2; bad schedules refused.
6. The interleaved schedule (PP 2 x 2 model chunks) plans again for each batch of a ramp-up
   or a step schedule: the same model as one rank, also at PP 2 x DP 2; a batch whose
   micro-batches are not a multiple of PP is refused with one line, exit 2.

usage: rampup.py MEGAC MPIEXEC PARITY_PY
"""
import json, math, os, subprocess, sys, tempfile

TINY = ["--mock-data", "--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4",
        "--seq-length", "32", "--micro-batch-size", "2", "--lr", "1e-3", "--log-interval", "100",
        "--eval-iters", "0", "--num-threads", "1"]


def train(megac, mpiexec, n, flags, log):
    p = subprocess.run([mpiexec, "-n", str(n), megac, "train", *TINY, *flags, "--log-json", log],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode:
        sys.exit(f"FAIL: megac train {' '.join(flags)} exited {p.returncode}:\n{p.stdout[-3000:]}")
    return [r for r in map(json.loads, open(log)) if "iteration" in r]


def megatron_batch(consumed, start, incr, samples, G):
    if consumed > samples:
        return G
    per = samples / ((G - start) // incr)
    return start + int(consumed / per) * incr


def main():
    megac, mpiexec, parity = sys.argv[1:4]
    bad = []
    ramp = ["--train-samples", "200", "--global-batch-size", "16", "--rampup-batch-size", "4", "4", "64"]
    with tempfile.TemporaryDirectory() as wd:
        # 1. batch sizes, length, learning rate in samples
        recs = train(megac, mpiexec, 1, ramp, os.path.join(wd, "r.jsonl"))
        consumed, want = 0, []
        while consumed < 200:
            b = megatron_batch(consumed, 4, 4, 64, 16)
            want.append((b, consumed))
            consumed += b
        got = [(r["global_batch_size"], r["consumed_samples"] - r["global_batch_size"]) for r in recs]
        if got != want:
            bad.append(f"batch sizes {[g[0] for g in got]}, Megatron's {[w[0] for w in want]}")
        for r in recs:
            c = r["consumed_samples"] - r["global_batch_size"]  # before this step
            lr = 0.5 * (math.cos(math.pi * c / 200) + 1) * 1e-3
            if not math.isclose(r["lr"], lr, rel_tol=1e-6):
                bad.append(f"iteration {r['iteration']}: lr {r['lr']:.6g}, by samples {lr:.6g}")
                break
        print(f"ramp-up: {len(recs)} iterations, batches {[g[0] for g in got]}, "
              f"{recs[-1]['consumed_samples'] if recs else 0} samples")

        # 3. resume with another global batch: 5 iterations of 8, then batches of 16
        ck = os.path.join(wd, "ck")
        fixed = ["--train-iters", "5", "--global-batch-size", "8"]
        train(megac, mpiexec, 2, fixed + ["--save", ck], os.path.join(wd, "a.jsonl"))
        res = train(megac, mpiexec, 2, ["--train-iters", "8", "--global-batch-size", "16", "--load", ck],
                    os.path.join(wd, "b.jsonl"))
        starts = [r["consumed_samples"] - r["global_batch_size"] for r in res]
        if [r["iteration"] for r in res] != [6, 7, 8] or starts != [40, 56, 72]:
            bad.append(f"resume with G=16: iterations {[r['iteration'] for r in res]}, batch starts {starts} "
                       f"(want 6..8 at 40, 56, 72)")
        # the same batches without a stop: a ramp whose batch is 8 for 40 samples, then 16
        same = ["--train-samples", "88", "--global-batch-size", "16", "--rampup-batch-size", "8", "8", "39",
                "--lr-decay-style", "constant"]
        ref = train(megac, mpiexec, 2, same, os.path.join(wd, "c.jsonl"))
        ck2 = os.path.join(wd, "ck2")
        first = ["--train-samples", "40", "--global-batch-size", "8", "--lr-decay-style", "constant"]
        train(megac, mpiexec, 2, first + ["--save", ck2], os.path.join(wd, "d.jsonl"))
        cont = train(megac, mpiexec, 2, ["--train-samples", "88", "--global-batch-size", "16",
                                         "--lr-decay-style", "constant", "--load", ck2],
                     os.path.join(wd, "e.jsonl"))
        pairs = list(zip([r for r in ref if r["iteration"] > 5], cont))
        if len(cont) != 3 or len(pairs) != 3 or any(a["lm_loss"] != b["lm_loss"] for a, b in pairs):
            bad.append("resumed with G=16: losses differ from the unstopped run: "
                       f"{[(a['lm_loss'], b['lm_loss']) for a, b in pairs]}")
        print(f"resume with another global batch: batch starts {starts}; "
              f"{len(pairs)} losses equal the unstopped run's")

    # 2. layouts
    p = subprocess.run([sys.executable, parity, "--megac", megac, "--mpiexec", mpiexec, "--tol", "1e-5",
                        "--layouts", "1,1,1", "1,2,2", "2,1,2", "--", *TINY[:-2],
                        *ramp], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    print(p.stdout[-1500:])
    if p.returncode:
        bad.append("ramp-up parity across layouts")

    # 5. step schedule: 32 tokens per sample; 0.128K tokens = 4 samples, 384 = 12 samples
    sched = ["--train-iters", "6", "--step-batch-size-schedule", "0:4 0.128K:8", "384:12"]
    with tempfile.TemporaryDirectory() as wd:
        recs = train(megac, mpiexec, 1, sched, os.path.join(wd, "s.jsonl"))
        got = [r["global_batch_size"] for r in recs]
        consumed, want = 0, []
        for _ in range(6):
            b = 12 if consumed >= 12 else 8 if consumed >= 4 else 4
            want.append(b)
            consumed += b
        if got != want:
            bad.append(f"step schedule: batches {got}, want {want}")
        print(f"step schedule: batches {got}")
    p = subprocess.run([sys.executable, parity, "--megac", megac, "--mpiexec", mpiexec, "--tol", "1e-5",
                        "--layouts", "1,1,1", "1,1,2", "--", *TINY[:-2], *sched],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    print(p.stdout[-800:])
    if p.returncode:
        bad.append("step schedule parity across layouts")

    # 6. the interleaved schedule: micro-batches per step 2, 4, 6, 8 (ramp), 2, 4, 6 (steps)
    tiny4 = [w if w != "2" or TINY[i - 1] != "--num-layers" else "4" for i, w in enumerate(TINY[:-2])]
    ramp8 = ramp[:-3] + ["8", "8", "64"]  # at DP 2: 2, 4 micro-batches
    for flags, layouts in ((ramp, ["1,2,1"]), (ramp8, ["1,2,2"]), (sched, ["1,2,1"])):
        p = subprocess.run([sys.executable, parity, "--megac", megac, "--mpiexec", mpiexec, "--tol", "1e-5",
                            "--layouts", "1,1,1", *layouts, "--extra=--num-layers-per-virtual-pipeline-stage 1",
                            "--", *tiny4, *flags], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        print(p.stdout[-800:])
        if p.returncode:
            bad.append(f"interleaved schedule: {' '.join(flags)}: parity across layouts")
    ilv = ["--pipeline-model-parallel-size", "2", "--num-layers-per-virtual-pipeline-stage", "1"]
    p = subprocess.run([mpiexec, "-n", "2", megac, "train", *tiny4, *ilv, "--train-samples", "64",
                        "--global-batch-size", "16", "--rampup-batch-size", "2", "2", "64"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    needle = "micro-batches per step (1) to be a multiple of pipeline-model-parallel-size 2"
    if p.returncode != 2 or needle not in p.stdout or "--rampup-batch-size: batch 2" not in p.stdout or \
            sum(l.startswith("megac:") for l in p.stdout.splitlines()) != 1:
        bad.append(f"interleaved ramp-up of 1 micro-batch: exit {p.returncode}, output {p.stdout[-400:]!r}")

    # 4. bad input
    for flags, needle, n in (
            (["--step-batch-size-schedule", "4:4", "64:8"], "thresholds must start at 0", 1),
            (["--step-batch-size-schedule", "0:4", "x:8"], "'x:8' is not TOKENS:BATCH", 1),
            (["--step-batch-size-schedule", "0:4 64:8", "--global-batch-size", "16"],
             "--global-batch-size 16 differs from the last batch of --step-batch-size-schedule, 8", 1),
            (["--step-batch-size-schedule", "0:2 64:8"], "batch 2 is not divisible by --micro-batch-size 2 x data-parallel size 2", 2),
            (["--train-iters", "10", "--global-batch-size", "16", "--rampup-batch-size", "4", "4", "64"],
             "--rampup-batch-size needs --train-samples", 1),
            (["--train-samples", "64", "--global-batch-size", "16", "--rampup-batch-size", "4", "4"],
             "--rampup-batch-size takes three whole numbers", 1),
            (["--train-samples", "64", "--global-batch-size", "16", "--rampup-batch-size", "4", "5", "64"],
             "(16 - START) divisible by INCR", 1),
            (["--train-samples", "64", "--global-batch-size", "16", "--rampup-batch-size", "2", "2", "64"],
             "START and INCR must be multiples of --micro-batch-size 2 x data-parallel size 2", 2),
            (["--train-samples", "64", "--lr-warmup-iters", "3"], "--lr-warmup-samples", 1)):
        p = subprocess.run([mpiexec, "-n", str(n), megac, "train", *TINY, *flags], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
        if p.returncode != 2 or needle not in p.stdout:
            bad.append(f"{' '.join(flags)}: exit {p.returncode}, output {p.stdout[-400:]!r}, want 2 and {needle!r}")
    if bad:
        print("\n".join("FAIL: " + b for b in bad))
        sys.exit(1)
    print("rampup: ok")


if __name__ == "__main__":
    main()
