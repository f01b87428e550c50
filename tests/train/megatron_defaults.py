#!/usr/bin/env python3
"""tests/train/megatron_defaults.py: megac train's defaults against Megatron-LM's, and the
learning rate each iteration applies.

1. Every flag megac shares with Megatron-LM has Megatron's default, read from `megac train
   --help`, or its help line says "(Megatron: X)" with X Megatron's value (a deliberate
   difference, documented where users look); the flags of SAME_AS_MEGATRON (what the model
   trains) allow no difference.
2. The learning rate of iteration k is Megatron's: its scheduler steps after the update, so
   iteration k uses the schedule after k - 1 steps (warm-up starts at 0; decay starts at lr).

The table was read from megatron/training/arguments.py (Megatron-LM, the 2024 core_r0.x
argument parser). Flags whose Megatron default is None (required, or derived from others)
are not listed.

usage: megatron_defaults.py MEGAC MPIEXEC
"""
import json, math, os, re, subprocess, sys, tempfile

MEGATRON = {
    "--make-vocab-size-divisible-by": 128,
    "--tensor-model-parallel-size": 1,
    "--pipeline-model-parallel-size": 1,
    "--lr-decay-style": "linear",
    "--min-lr": 0.0,
    "--lr-warmup-iters": 0,
    "--init-method-std": 0.02,
    "--hidden-dropout": 0.1,
    "--attention-dropout": 0.1,
    "--weight-decay": 0.01,
    "--adam-beta1": 0.9,
    "--adam-beta2": 0.999,
    "--adam-eps": 1e-8,
    "--clip-grad": 1.0,
    "--seed": 1234,
    "--eval-interval": 1000,
    "--eval-iters": 100,
    "--log-interval": 100,
    "--initial-loss-scale": 2.0 ** 32,
    "--min-loss-scale": 1.0,
    "--loss-scale-window": 1000,
    "--hysteresis": 2,
    "--distributed-timeout-minutes": 10,
    "--exit-signal-handler": "off",
    "--use-flash-attn": "off",
    "--sequence-parallel": "off",
    "--bf16": "off",
    "--fp16": "off",
    "--recompute-activations": "off",
    "--overlap-grad-reduce": "off",
    "--overlap-param-gather": "off",
    "--use-distributed-optimizer": "off",
    "--untie-embeddings-and-output-weights": "off",
    "--normalization": "LayerNorm",
    "--swiglu": "off",
    "--position-embedding-type": "learned_absolute",
    "--rotary-base": 10000,
    "--rotary-percent": 1.0,
    "--group-query-attention": "off",
    "--num-query-groups": 1,
    "--disable-bias-linear": "off",
}
# megac's 0 means "Megatron's derived default" for these (0.02 for --init-method-std).
ZERO_MEANS_DEFAULT = {"--init-method-std"}
# No documented difference accepted: the model a run without these flags trains (issue 14).
SAME_AS_MEGATRON = {"--hidden-dropout", "--attention-dropout"}


def same(a, b):
    if isinstance(b, str):
        return str(a) == b
    try:
        return math.isclose(float(a), float(b), rel_tol=1e-6, abs_tol=0)
    except ValueError:
        return False


def main():
    megac, mpiexec = sys.argv[1], sys.argv[2]
    out = subprocess.run([megac, "train", "--help"], stdout=subprocess.PIPE, text=True, check=True).stdout
    help_lines = {}
    for line in out.splitlines():
        m = re.match(r"\s+(--[\w-]+)\s+(.*)\[(.*)\]\s*$", line)
        if m:
            help_lines[m.group(1)] = (m.group(2), m.group(3))
    bad = []
    print(f"{'flag':38} {'megac':>12} {'Megatron':>12}  note")
    for flag, want in MEGATRON.items():
        if flag not in help_lines:
            bad.append(f"{flag}: not in megac train --help")
            continue
        text, got = help_lines[flag]
        if flag in ZERO_MEANS_DEFAULT and same(got, 0) and "0.02" in text:
            got = want
        note = ""
        if not same(got, want) and flag in SAME_AS_MEGATRON:
            bad.append(f"{flag}: megac default {got}, Megatron's {want} (no difference allowed)")
        elif not same(got, want):
            m = re.search(r"\(Megatron: ([^;)]+)", text)
            if not m or not same(m.group(1).strip(), want if isinstance(want, str) else want):
                bad.append(f"{flag}: megac default {got}, Megatron's {want}, and --help does not say "
                           f"'(Megatron: {want})'")
            note = "differs, documented in --help"
        print(f"{flag:38} {got:>12} {str(want):>12}  {note}")

    # 2. The learning rate per iteration (10 iterations, lr 1e-3, cosine; then warm-up 2).
    tiny = ["--mock-data", "--num-layers", "1", "--hidden-size", "32", "--num-attention-heads", "2",
            "--seq-length", "16", "--micro-batch-size", "2", "--global-batch-size", "2",
            "--train-iters", "10", "--lr", "1e-3", "--lr-decay-style", "cosine", "--eval-iters", "0",
            "--num-threads", "1"]
    with tempfile.TemporaryDirectory() as wd:
        for warm in (0, 2):
            log = os.path.join(wd, f"lr{warm}.jsonl")
            subprocess.run([mpiexec, "-n", "1", megac, "train", *tiny, "--lr-warmup-iters", str(warm),
                            "--log-json", log], stdout=subprocess.DEVNULL, check=True)
            recs = [r for r in map(json.loads, open(log)) if "iteration" in r]
            for r in recs:
                k = r["iteration"] - 1  # optimizer steps before iteration k + 1
                if warm and k <= warm:
                    want = 1e-3 * k / warm
                else:
                    ratio = (k - warm) / (10 - warm)
                    want = 0.5 * (math.cos(math.pi * ratio) + 1) * 1e-3
                if not math.isclose(r["lr"], want, rel_tol=1e-6, abs_tol=1e-12):
                    bad.append(f"warm-up {warm}: iteration {r['iteration']} lr {r['lr']:.6g}, Megatron's {want:.6g}")
            print(f"learning rates, warm-up {warm}: " + " ".join(f"{r['lr']:.4g}" for r in recs[:4]) + " ...")
    if bad:
        print("\n".join("FAIL: " + b for b in bad))
        sys.exit(1)
    print("megatron_defaults: ok")


if __name__ == "__main__":
    main()
