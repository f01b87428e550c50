#!/usr/bin/env python3
"""tests/train/dropout_eval.py: dropout (Megatron's defaults, 0.1 each) acts in training steps
only; evaluation sees the whole model.

A tiny model whose weights do not move (--lr 1e-30: every AdamW update is below fp32's
resolution of the weights) trains 4 iterations with validation after iterations 2 and 4,
once with the default dropout and once with --hidden-dropout 0 --attention-dropout 0, at one
rank and at TP 2 x PP 2 (sequence parallel, fused attention: the forward-only pipeline
schedule of evaluation). Checks:
  * the run records carry the probabilities (0.1 / 0.1 by default, 0 / 0), and the start-up
    banner names the dropout only when it is on;
  * the training losses differ at every iteration (the defaults drop);
  * every validation loss is bitwise the same in both runs: evaluation has no dropout.
usage: dropout_eval.py MEGAC MPIEXEC
"""
import json, os, socket, subprocess, sys, tempfile

FLAGS = ["--mock-data", "--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4",
         "--seq-length", "32", "--micro-batch-size", "2", "--global-batch-size", "4",
         "--train-iters", "4", "--lr", "1e-30", "--lr-decay-style", "constant",
         "--eval-interval", "2", "--eval-iters", "2", "--log-interval", "100", "--num-threads", "1"]
OFF = ["--hidden-dropout", "0", "--attention-dropout", "0"]
LAYOUTS = {"one rank": (1, []),
           "TP 2 x PP 2, SP, flash": (4, ["--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size",
                                          "2", "--sequence-parallel", "--use-flash-attn"])}


def train(megac, mpiexec, n, extra, log):
    p = subprocess.run([mpiexec, "-n", str(n), megac, "train", *FLAGS, *extra, "--log-json", log],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
    if p.returncode:
        sys.exit(f"FAIL: train {' '.join(extra)} exited {p.returncode}:\n{p.stdout[-3000:]}")
    recs = [json.loads(l) for l in open(log)]
    run = next(r for r in recs if r.get("event") == "run_start")
    steps = [r["lm_loss"] for r in recs if "iteration" in r]
    valid = [(r["after_iteration"], r["lm_loss"]) for r in recs if r.get("event") == "validation"]
    return p.stdout, run, steps, valid


def main():
    megac, mpiexec = sys.argv[1:3]
    bad = []
    with tempfile.TemporaryDirectory() as wd:
        for name, (n, lay) in LAYOUTS.items():
            out_on, run_on, steps_on, valid_on = train(megac, mpiexec, n, lay, os.path.join(wd, f"on{n}.jsonl"))
            out_off, run_off, steps_off, valid_off = train(megac, mpiexec, n, lay + OFF,
                                                           os.path.join(wd, f"off{n}.jsonl"))
            probs = [(r["hidden_dropout"], r["attention_dropout"]) for r in (run_on, run_off)]
            if probs != [(0.1, 0.1), (0, 0)]:
                bad.append(f"{name}: run records say {probs}, want [(0.1, 0.1), (0, 0)]")
            host = socket.gethostname()[:31]  # (train_log_process_ids keeps 31 bytes of a name)
            if run_on["hosts"] != [host]:  # every rank on this one host, named once
                bad.append(f"{name}: run record hosts {run_on['hosts']}, want [{host!r}]")
            if "dropout: hidden 0.1, attention 0.1" not in out_on or "dropout:" in out_off:
                bad.append(f"{name}: the start-up banner does not name the dropout (only) when it is on")
            if len(steps_on) != 4 or any(a == b for a, b in zip(steps_on, steps_off)):
                bad.append(f"{name}: training losses {steps_on} with dropout, {steps_off} without: "
                           "want 4, each different")
            if len(valid_on) != 2 or valid_on != valid_off:
                bad.append(f"{name}: validation {valid_on} with dropout, {valid_off} without: want 2, equal")
            print(f"{name:>24}: training loss {steps_on[0]:.6f} (dropout) vs {steps_off[0]:.6f}; "
                  f"validation {' '.join(f'{v:.9g}' for _, v in valid_on)} (both runs)")
    if bad:
        print("\n".join("FAIL: " + b for b in bad))
        sys.exit(1)
    print("dropout_eval: ok")


if __name__ == "__main__":
    main()
