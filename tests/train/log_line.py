#!/usr/bin/env python3
"""tests/train/log_line.py MEGAC MPIEXEC: the log line means what Megatron's means (issue 29,
item 6), checked on a short CPU run (mock data, 2 ranks at TP 2, 6 iterations,
--log-interval 2) against the same run's --log-json records (this iteration's values):
  - a line at the first iteration (Megatron's, not resetting the sums) and every 2nd;
  - "lm loss" = the mean of the interval's iterations' losses, NaN/Inf steps left out;
  - "elapsed time per iteration (ms)" = the mean of the interval's step times;
  - skipped and NaN iteration counts per interval (a NaN injected at iteration 3 with the
    test hook MEGAC_TEST_NAN_AT_ITER counts in the line of iteration 4 only);
  - the timestamp prefix, --log-throughput's field, and the validation block with its
    '-' rules one longer than the middle line and PPL = exp(min(20, L))."""
import json
import math
import os
import re
import subprocess
import sys
import tempfile

megac, mpiexec = sys.argv[1], sys.argv[2]
FLAGS = ["--tensor-model-parallel-size", "2", "--num-threads", "1", "--mock-data", "--num-layers", "2",
         "--hidden-size", "64", "--num-attention-heads", "4", "--seq-length", "32", "--micro-batch-size", "2",
         "--global-batch-size", "4", "--lr", "1e-3", "--train-iters", "6", "--log-interval", "2",
         "--eval-interval", "4", "--eval-iters", "2", "--log-throughput"]
LINE = re.compile(r"^ \[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{6})\] iteration +(\d+)/ +6 \| consumed samples: +(\d+) \| "
                  r"elapsed time per iteration \(ms\): ([0-9.]+) \| throughput per GPU \(TFLOP/s/GPU\): [0-9.]+ \| "
                  r"learning rate: (\S+) \| global batch size: +4 \| lm loss: (\S+) \| loss scale: 1\.0 \| "
                  r"grad norm: (\S+) \| number of skipped iterations: +(\d+) \| number of nan iterations: +(\d+) \| "
                  r"tokens/s: ")
fails = 0


def check(ok, what):
    global fails
    print(("ok: " if ok else "FAIL: ") + what)
    fails += not ok


def run(wd, name, env_extra):
    log = os.path.join(wd, name + ".jsonl")
    env = dict(os.environ, **env_extra)
    out = subprocess.run([mpiexec, "-n", "2", megac, "train"] + FLAGS + ["--log-json", log], env=env,
                         capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        sys.exit(f"FAIL: {name}: exit {out.returncode}\n{out.stdout[-3000:]}{out.stderr[-3000:]}")
    recs = {r["iteration"]: r for r in map(json.loads, open(log)) if "iteration" in r}
    lines = {int(m.group(2)): m for m in map(LINE.match, out.stdout.splitlines()) if m}
    evals = [r for r in map(json.loads, open(log)) if r.get("event") == "validation"]
    return out.stdout, recs, lines, evals


def interval_checks(name, recs, lines, nan_at):
    check(sorted(lines) == [1, 2, 4, 6], f"{name}: lines at iterations {sorted(lines)} (want 1, 2, 4, 6)")
    starts = {1: 1, 2: 1, 4: 3, 6: 5}  # the first line does not reset the sums
    for it, m in sorted(lines.items()):
        its = range(starts[it], it + 1)
        ok_its = [i for i in its if i not in nan_at]
        want_loss = sum(recs[i]["lm_loss"] for i in ok_its) / max(1, len(ok_its))
        want_ms = sum(recs[i]["elapsed_ms"] for i in its) / len(its)
        n_nan = sum(i in nan_at for i in its)
        check(m.group(6) == f"{want_loss:.6E}",
              f"{name}: iteration {it}: lm loss {m.group(6)} = mean of iterations {list(ok_its)}'s JSON "
              f"losses {want_loss:.6E}")
        check(abs(float(m.group(4)) - want_ms) <= 0.051,
              f"{name}: iteration {it}: elapsed time per iteration {m.group(4)} ms = mean {want_ms:.3f}")
        check(int(m.group(8)) == n_nan and int(m.group(9)) == n_nan,
              f"{name}: iteration {it}: skipped {m.group(8)}, nan {m.group(9)} (want {n_nan} each, per interval)")
        check(m.group(5) == f"{recs[it]['lr']:.6E}" and int(m.group(3)) == recs[it]["consumed_samples"],
              f"{name}: iteration {it}: learning rate and consumed samples of that iteration")


def validation_checks(stdout, evals):
    lines = stdout.splitlines()
    mids = [i for i, l in enumerate(lines) if l.startswith(" validation loss at iteration ")]
    check(len(mids) == 2, f"{len(mids)} validation blocks (want 2: iterations 4 and 6)")
    for i, e in zip(mids, evals):
        mid = lines[i]
        m = re.fullmatch(r" validation loss at iteration \d+ \| lm loss value: (\S+) \| lm loss PPL: (\S+) \| ", mid)
        rule = "-" * (len(mid) + 1)
        check(m is not None and lines[i - 1] == rule and lines[i + 1] == rule,
              f"validation block: '{mid}' between rules of {len(rule)} '-'")
        L = e["lm_loss"]
        check(m is not None and m.group(1) == f"{L:.6E}" and m.group(2) == f"{math.exp(min(20, L)):.6E}",
              f"validation loss and PPL = exp(min(20, L)) of the JSON record's L {L!r}")


with tempfile.TemporaryDirectory() as wd:
    stdout, recs, lines, evals = run(wd, "plain", {})
    interval_checks("plain", recs, lines, set())
    validation_checks(stdout, evals)
    _, recs, lines, _ = run(wd, "nan3", {"MEGAC_TEST_NAN_AT_ITER": "3"})
    check(recs[3]["skipped"] == 1, "nan3: iteration 3 was skipped (JSON)")
    interval_checks("nan3", recs, lines, {3})
if fails:
    sys.exit(f"FAIL: {fails} check(s)")
print("log_line: ok")
