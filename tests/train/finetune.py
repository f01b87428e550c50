#!/usr/bin/env python3
"""tests/train/finetune.py: Megatron's --finetune, --no-load-optim and --no-load-rng.

A tiny model trains 6 iterations on 4 repeating mock samples and saves. Then, on 2 ranks:
  --no-load-rng    resumes exactly as a plain resume (bitwise losses: megac keeps no RNG state);
  --no-load-optim  resumes at iteration 7 with the loaded weights (the first loss equals the
                   plain resume's: the forward sees the same model) but fresh AdamW moments
                   (the next losses differ);
  --finetune       starts at iteration 1 from the first sample with the loaded weights: its
                   first loss is far below a fresh model's on the same batch.
usage: finetune.py MEGAC MPIEXEC
"""
import json, os, subprocess, sys, tempfile

FLAGS = ["--mock-data", "--mock-samples", "4", "--num-layers", "2", "--hidden-size", "64",
         "--num-attention-heads", "4", "--seq-length", "32", "--micro-batch-size", "2",
         "--global-batch-size", "4", "--lr", "3e-3", "--lr-decay-style", "constant",
         "--log-interval", "100", "--eval-iters", "0", "--num-threads", "1"]


def train(megac, mpiexec, extra, log):
    p = subprocess.run([mpiexec, "-n", "2", megac, "train", *FLAGS, *extra, "--log-json", log],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode:
        sys.exit(f"FAIL: train {' '.join(extra)} exited {p.returncode}:\n{p.stdout[-3000:]}")
    return p.stdout, [r for r in map(json.loads, open(log)) if "iteration" in r]


def main():
    megac, mpiexec = sys.argv[1:3]
    bad = []
    with tempfile.TemporaryDirectory() as wd:
        ck = os.path.join(wd, "ck")
        train(megac, mpiexec, ["--train-iters", "6", "--save", ck], os.path.join(wd, "a.jsonl"))
        _, fresh = train(megac, mpiexec, ["--train-iters", "3"], os.path.join(wd, "f.jsonl"))
        _, plain = train(megac, mpiexec, ["--train-iters", "9", "--load", ck], os.path.join(wd, "p.jsonl"))
        _, rng = train(megac, mpiexec, ["--train-iters", "9", "--load", ck, "--no-load-rng"],
                       os.path.join(wd, "r.jsonl"))
        out, opt = train(megac, mpiexec, ["--train-iters", "9", "--load", ck, "--no-load-optim"],
                         os.path.join(wd, "o.jsonl"))
        out2, ft = train(megac, mpiexec, ["--train-iters", "3", "--load", ck, "--finetune"],
                         os.path.join(wd, "t.jsonl"))
        losses = lambda recs: [r["lm_loss"] for r in recs]
        if losses(rng) != losses(plain):
            bad.append(f"--no-load-rng: {losses(rng)} differs from the plain resume {losses(plain)}")
        if [r["iteration"] for r in opt] != [7, 8, 9] or opt[0]["lm_loss"] != plain[0]["lm_loss"] \
                or opt[1]["lm_loss"] == plain[1]["lm_loss"]:
            bad.append(f"--no-load-optim: iterations {[r['iteration'] for r in opt]}, losses {losses(opt)} "
                       f"vs plain resume {losses(plain)} (want 7..9, the first equal, the second not)")
        if "--no-load-optim: the model only (fresh AdamW state)" not in out:
            bad.append("--no-load-optim: the start-up line is missing")
        if [r["iteration"] for r in ft] != [1, 2, 3] or [r["consumed_samples"] for r in ft] != [4, 8, 12] \
                or not ft[0]["lm_loss"] < 0.8 * fresh[0]["lm_loss"]:
            bad.append(f"--finetune: iterations {[r['iteration'] for r in ft]}, consumed "
                       f"{[r['consumed_samples'] for r in ft]}, first loss {ft[0]['lm_loss']:.4f} vs a fresh "
                       f"model's {fresh[0]['lm_loss']:.4f} (want 1..3, 4..12, well below)")
        if "training starts at iteration 0" not in out2:
            bad.append("--finetune: the start-up line is missing")
        print(f"plain resume losses {[round(x, 5) for x in losses(plain)]}; --no-load-optim "
              f"{[round(x, 5) for x in losses(opt)]}; --finetune first loss {ft[0]['lm_loss']:.4f} "
              f"(fresh model {fresh[0]['lm_loss']:.4f})")
    if bad:
        print("\n".join("FAIL: " + b for b in bad))
        sys.exit(1)
    print("finetune: ok")


if __name__ == "__main__":
    main()
