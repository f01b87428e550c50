#!/usr/bin/env python3
"""tests/train/tensorboard_events.py MEGAC MPIEXEC: --tensorboard-dir writes real TensorBoard event
files (issue 29, item 7). A short CPU run (mock data, TP 2 x PP 2 on 4 ranks, so that the
loss comes from the last pipeline stage to rank 0) with --log-json; the events are read back
with the `tensorboard` package's own reader (EventAccumulator, which checks every record's
CRC32C) and must hold Megatron's tags with the JSON log's values (as float32): by iteration
and "vs samples"; iteration-time and throughput at each --log-interval; memory; validation
loss and PPL. A resumed run adds a second event file to the same folder, and a folder
holding another program's files is refused. Exit 77 (skip) without the package: it lives
in the test environment of tests/hf/setup_venv.sh (scripts/setup.sh makes it)."""
import glob
import json
import math
import os
import struct
import subprocess
import sys
import tempfile

try:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
except ImportError as e:
    why = str(e)
    venv = os.environ.get("MEGAC_HF_VENV") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "megac", "hf-venv")
    py = os.path.join(venv, "bin", "python")
    if os.path.exists(py) and os.path.realpath(sys.prefix) != os.path.realpath(venv):
        os.execv(py, [py] + sys.argv)  # the test environment has it
    print(f"SKIP: the tensorboard package does not import ({why}; {sys.prefix}; tests/hf/setup_venv.sh "
          f"installs it in {venv})")
    sys.exit(77)

megac, mpiexec = sys.argv[1], sys.argv[2]
FLAGS = ["--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "2", "--num-threads", "1",
         "--mock-data", "--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4",
         "--seq-length", "32", "--micro-batch-size", "2", "--global-batch-size", "4", "--lr", "1e-3",
         "--log-interval", "2", "--eval-interval", "3", "--eval-iters", "2", "--log-throughput",
         "--log-timers-to-tensorboard", "--log-memory-to-tensorboard", "--log-validation-ppl-to-tensorboard"]
fails = 0


def check(ok, what):
    global fails
    print(("ok: " if ok else "FAIL: ") + what)
    fails += not ok


def f32(x):
    return struct.unpack("f", struct.pack("f", x))[0]


def run(args, code=0):
    out = subprocess.run([mpiexec, "-n", "4", megac, "train"] + FLAGS + args, capture_output=True, text=True,
                         timeout=120)
    if out.returncode != code:
        sys.exit(f"FAIL: exit {out.returncode} (want {code}): {args}\n{out.stdout[-3000:]}{out.stderr[-3000:]}")
    return out


def scalars(path):
    ea = EventAccumulator(path, size_guidance={"scalars": 0})
    ea.Reload()
    return {t: [(e.step, e.value) for e in ea.Scalars(t)] for t in ea.Tags()["scalars"]}


with tempfile.TemporaryDirectory() as wd:
    tb, log = os.path.join(wd, "tb"), os.path.join(wd, "run.jsonl")
    run(["--train-iters", "6", "--tensorboard-dir", tb, "--log-json", log, "--save", os.path.join(wd, "ckpt")])
    rows = [json.loads(l) for l in open(log)]
    its = [r for r in rows if "iteration" in r]
    val = [r for r in rows if r.get("event") == "validation"]
    files = glob.glob(os.path.join(tb, "events.out.tfevents.*"))
    check(len(files) == 1, f"one event file: {[os.path.basename(f) for f in files]}")
    got = scalars(files[0])
    per_it = {"lm loss": "lm_loss", "learning-rate": "lr", "grad-norm": "grad_norm", "loss-scale": "loss_scale",
              "batch-size": "global_batch_size", "mem-allocated-bytes": "memory_bytes"}
    for tag, key in per_it.items():
        want = [(r["iteration"], f32(r[key])) for r in its]
        check(got.get(tag) == want, f"'{tag}' by iteration = the JSON log's {key}: {got.get(tag)}")
    for tag, key in [("lm loss vs samples", "lm_loss"), ("learning-rate vs samples", "lr"),
                     ("grad-norm vs samples", "grad_norm")]:
        want = [(r["consumed_samples"], f32(r[key])) for r in its]
        check(got.get(tag) == want, f"'{tag}' by consumed samples = the JSON log's {key}")
    want = [(r["after_iteration"], f32(r["lm_loss"])) for r in val]
    check(len(val) == 2 and got.get("lm loss validation") == want,
          f"'lm loss validation' at iterations 3 and 6 = the JSON log's: {got.get('lm loss validation')}")
    want = [(r["after_iteration"], f32(math.exp(min(20, r["lm_loss"])))) for r in val]
    check(got.get("lm loss validation ppl") == want, "'lm loss validation ppl' = exp(min(20, L))")
    # iteration-time (s) and throughput (TFLOP/s/GPU) per log interval: iterations 1-2 (the first
    # iteration's line does not reset the interval), 3-4, 5-6; JSON's ms and GFLOP/s are rounded
    ok_t = [s for s, _ in got.get("iteration-time", [])] == [2, 4, 6] and \
           [s for s, _ in got.get("throughput", [])] == [2, 4, 6]
    for k, (step, t) in enumerate(got.get("iteration-time", [])):
        rs = its[2 * k:2 * k + 2]
        ms = sum(r["elapsed_ms"] for r in rs) / 2
        tput = sum(r["gflops_per_rank"] * r["elapsed_ms"] for r in rs) / sum(r["elapsed_ms"] for r in rs) / 1e3
        ok_t &= abs(t * 1e3 - ms) <= 1e-3 + 1e-6 * ms
        ok_t &= abs(got["throughput"][k][1] - tput) <= 1e-3 * tput + 1e-6
    check(ok_t, f"iteration-time and throughput per log interval: {got.get('iteration-time')} {got.get('throughput')}")

    # A resumed run writes a second file in the same folder; its events start after the load.
    run(["--train-iters", "8", "--tensorboard-dir", tb, "--load", os.path.join(wd, "ckpt")])
    files = sorted(glob.glob(os.path.join(tb, "events.out.tfevents.*")), key=os.path.getmtime)
    check(len(files) == 2, f"a resumed run adds its own event file: {len(files)} files")
    if len(files) == 2:
        check([s for s, _ in scalars(files[1]).get("lm loss", [])] == [7, 8], "the resumed run's events: 7, 8")

    # The output guard: another program's files, the --save folder, a file.
    other = os.path.join(wd, "other")
    os.makedirs(other)
    open(os.path.join(other, "notes.txt"), "w").write("mine\n")
    out = run(["--train-iters", "2", "--tensorboard-dir", other], code=2)
    check("--tensorboard-dir " + other + " is not empty (it holds notes.txt" in out.stdout + out.stderr,
          "a folder of another program's files is refused")
    out = run(["--train-iters", "2", "--tensorboard-dir", log], code=2)
    check("is a file, not a folder" in out.stdout + out.stderr, "a file is refused")
if fails:
    sys.exit(f"FAIL: {fails} check(s)")
print("tensorboard: ok")
