#!/usr/bin/env python3
"""plan/ablate.py: `megac ablate`: run a sweep of layouts and report it (see docs/ablate.md).

  megac ablate --grid "tp=1,2 cp=1,2 ep=1,2 pp=1,2 mbs=1,2 schedule=1f1b,gpipe sp=0,1 zero=0,1,2,3 recompute=none,full,selective vpp=1,2" \\
      --world-size 8 --output DIR [--launcher mpiexec|slurm] [--hardware h100|h200|FILE] \\
      [--vocab-size V] [--slurm-args "..."] [--max-parallel K] [--no-wait] -- <megac train flags>
  megac ablate collect DIR     (--launcher slurm --no-wait: record the finished points, report)
  megac ablate report DIR

zero (or zero1, its older name): 0 DDP, 1 ZeRO-1, 2 ZeRO-2, 3 ZeRO-3 (train's
--data-parallel-sharding-strategy no_shard / optim / optim_grads / optim_grads_params).
vpp: model chunks per pipeline rank (interleaved 1F1B, train's --virtual-pipeline-model-
parallel-size; 1: none); a point the schedule cannot run is skipped with the plan's reason.
cp: context-parallel size (train's --context-parallel-size; --use-flash-attn is added to a
cp > 1 point when the train flags lack it; --cp-comm-type after -- reaches plan and train).
ep: expert-parallel size (train's --expert-model-parallel-size; needs --num-experts after --);
a point whose DP x CP (or --num-experts) ep does not divide is skipped with the plan's reason.
Expands the grid; asks `megac plan --json` about each point (an invalid point is skipped
with the plan's reason, a valid one gets its predictions); runs each valid point through
megac-mpiexec with --log-json (--launcher slurm: all of them as one Slurm job array,
plan/ablate_slurm.py); records layout, measured and predicted values in
DIR/records.jsonl (one line per point, appended as it ends, so an interrupted sweep resumes
where it stopped) and DIR/records.csv; then writes DIR/REPORT.md with plots
(plan/ablate_report.py). A point that fails is recorded with its reason; the sweep goes on.
Bad input (unknown key, a value that cannot divide the world size, no valid point): one
line on stderr and exit 2 before anything runs.
"""
import itertools, json, os, re, shlex, shutil, subprocess, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ablate_report  # noqa: E402
import ablate_slurm  # noqa: E402

KEYS = {"tp": int, "cp": int, "ep": int, "pp": int, "mbs": int, "schedule": str, "sp": int, "zero1": int, "zero": int, "recompute": str,
        "vpp": int}
SHARDING = ["no_shard", "optim", "optim_grads", "optim_grads_params"]  # by ZeRO stage
# grid values of recompute -> the flags of train and plan
RECOMPUTE = {"none": [], "full": ["--recompute-granularity", "full"], "selective": ["--recompute-activations"]}
# train flags that `megac plan` understands too: flag -> takes a value
PLAN_FLAGS = {"--num-layers": 1, "--hidden-size": 1, "--num-attention-heads": 1, "--ffn-hidden-size": 1,
              "--seq-length": 1, "--max-position-embeddings": 1, "--make-vocab-size-divisible-by": 1,
              "--decoder-first-pipeline-num-layers": 1, "--decoder-last-pipeline-num-layers": 1,
              "--global-batch-size": 1, "--ddp-bucket-size": 1, "--device": 1, "--use-flash-attn": 0,
              "--bf16": 0, "--fp16": 0, "--no-tf32": 0, "--init-method-std": 1, "--recompute-granularity": 1,
              "--recompute-method": 1, "--recompute-num-layers": 1, "--recompute-activations": 0,
              "--cp-comm-type": 1, "--attention-dropout": 1, "--attention-backend": 1,
              # mixture of experts (expert parallelism: the grid's ep)
              "--num-experts": 1, "--moe-router-topk": 1, "--moe-ffn-hidden-size": 1, "--moe-layer-freq": 1,
              "--moe-router-load-balancing-type": 1, "--moe-expert-capacity-factor": 1,
              "--moe-pad-expert-input-to-capacity": 0, "--moe-token-drop-policy": 1,
              "--expert-tensor-parallel-size": 1}
# flags the grid owns: given after --, they would contradict it
GRID_FLAGS = {"--tensor-model-parallel-size", "--pipeline-model-parallel-size", "--micro-batch-size",
              "--pipeline-schedule", "--sequence-parallel", "--no-distributed-optimizer",
              "--use-distributed-optimizer", "--data-parallel-sharding-strategy", "--log-json",
              "--virtual-pipeline-model-parallel-size", "--num-layers-per-virtual-pipeline-stage",
              "--context-parallel-size", "--expert-model-parallel-size"}


def usage_error(msg):
    print(f"megac ablate: {msg}", file=sys.stderr)
    sys.exit(2)


def parse_grid(text, world):
    # left out: TP = CP = PP = 1, 1F1B, no SP, ZeRO-1 where DP x CP > 1 (train's defaults)
    grid = {"tp": [1], "cp": [1], "ep": [1], "pp": [1], "mbs": [None], "schedule": ["1f1b"], "sp": [0], "zero1": [None],
            "recompute": ["none"], "vpp": [1]}
    for item in text.split():
        key, _, vals = item.partition("=")
        key = "zero1" if key == "zero" else key  # one axis, two names
        if key not in KEYS or not vals:
            usage_error(f"grid item '{item}': expected KEY=v1,v2,... with KEY one of {', '.join(KEYS)}")
        try:
            values = [KEYS[key](v) for v in vals.split(",")]
        except ValueError:
            usage_error(f"grid item '{item}': values of {key} must be integers")
        for v in values:
            if key in ("tp", "cp", "ep", "pp") and (v <= 0 or world % v):
                usage_error(f"grid: {key}={v} does not divide the world size {world}")
            if key == "mbs" and v <= 0:
                usage_error(f"grid: mbs={v} must be > 0")
            if key == "schedule" and v not in ("1f1b", "gpipe"):
                usage_error(f"grid: schedule={v}: must be 1f1b or gpipe")
            if key == "sp" and v not in (0, 1):
                usage_error(f"grid: {key}={v}: must be 0 or 1")
            if key == "zero1" and v not in (0, 1, 2, 3):
                usage_error(f"grid: zero={v}: must be 0 (DDP), 1, 2 or 3 (ZeRO stage)")
            if key == "vpp" and v <= 0:
                usage_error(f"grid: vpp={v} must be > 0 (1: no interleaving)")
            if key == "recompute" and v not in RECOMPUTE:
                usage_error(f"grid: recompute={v}: must be none, full or selective")
        grid[key] = values
    points = [dict(zip(grid, combo)) for combo in itertools.product(*grid.values())]
    for p in points:
        if p["zero1"] is None:
            p["zero1"] = int(world // (p["tp"] * p["pp"]) > 1)  # DP x CP > 1: ZeRO shards over both
    return points


def point_dp(p, world):
    n = p["tp"] * p.get("cp", 1) * p["pp"]
    return world // n if world % n == 0 else 0


def point_id(p, world):
    dp = point_dp(p, world)
    rc = "" if p.get("recompute", "none") == "none" else f"_rc{p['recompute']}"  # ids of sweeps without it stay
    v = "" if p.get("vpp", 1) == 1 else f"_v{p['vpp']}"
    cp = "" if p.get("cp", 1) == 1 else f"_cp{p['cp']}"  # (as rc and v: earlier ids stay)
    cp += "" if p.get("ep", 1) == 1 else f"_ep{p['ep']}"
    return (f"tp{p['tp']}{cp}_pp{p['pp']}_dp{dp}_mbs{p['mbs']}_{p['schedule']}_sp{p['sp']}_zero{p['zero1']}{rc}{v}")


def layout_flags(p, for_plan, given=()):
    """The flags of point p for plan (for_plan) or train; given: the flags the user passed."""
    f = ["--tensor-model-parallel-size", str(p["tp"]), "--pipeline-model-parallel-size", str(p["pp"]),
         "--micro-batch-size", str(p["mbs"])]
    cp = p.get("cp", 1)
    if for_plan or cp > 1:  # the plan enumerates CP when free: fix it
        f += ["--context-parallel-size", str(cp)]
    if cp > 1 and "--use-flash-attn" not in given:  # CP needs it
        f.append("--use-flash-attn")
    if p.get("ep", 1) > 1:
        f += ["--expert-model-parallel-size", str(p["ep"])]
    if for_plan or p["pp"] > 1:
        f += ["--pipeline-schedule", p["schedule"]]
    if p["sp"]:
        f.append("--sequence-parallel")
    elif for_plan:
        f.append("--no-sequence-parallel")
    if p["zero1"] >= 2:  # ZeRO-2/3: train's and plan's sharding flag
        f += ["--data-parallel-sharding-strategy", SHARDING[p["zero1"]]]
    else:
        f.append("--use-distributed-optimizer" if p["zero1"] else "--no-distributed-optimizer")
    if p.get("vpp", 1) > 1:
        f += ["--virtual-pipeline-model-parallel-size", str(p["vpp"])]
    return f + RECOMPUTE[p["recompute"]]


def plan_flags(train_flags, vocab):
    out, i = [], 0
    while i < len(train_flags):
        flag = train_flags[i]
        n = PLAN_FLAGS.get(flag)
        if n is not None:
            out += train_flags[i:i + 1 + n]
        elif flag == "--mock-vocab-size" and vocab is None:
            vocab = train_flags[i + 1]
        i += 1
    out += ["--vocab-size", str(vocab or 257)]
    if "--device" not in out:
        out += ["--device", "cpu"]  # megac train's default device
    return out


def predict(megac, world, p, args, pflags):
    """The plan's one layout for point p, or (None, reason)."""
    cmd = [megac, "plan", "--world-size", str(world), "--json", "--hardware", args.hardware] + pflags + \
          layout_flags(p, True, pflags)
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        return None, (r.stderr.strip().splitlines() or ["megac plan failed"])[-1].removeprefix("megac: ")
    doc = json.loads(r.stdout)
    if len(doc["layouts"]) != 1:
        return None, f"plan gave {len(doc['layouts'])} layouts"
    doc["layouts"][0]["peak_tflops"] = doc["hardware"]["peak_tflops"]
    return doc["layouts"][0], None


def measure(out_text, log_path):
    # iteration records only (the run record and validation records have "event" instead)
    recs = [json.loads(l) for l in open(log_path) if l.strip()]
    rows = [r for r in recs if "iteration" in r and "elapsed_ms" in r]
    starts = [r for r in recs if r.get("event") == "run_start"]
    run = {k: starts[-1].get(k) for k in ("megac_version", "git_revision", "backend", "precision", "hosts",
                                          "world_size", "time")} if starts else None
    if not rows:
        raise ValueError(f"{log_path}: no iteration record")
    steady = rows[1:] or rows
    ms = sum(r["elapsed_ms"] for r in steady) / len(steady)
    mem = {}
    for m in re.finditer(r"^\s+rank\s+(\d+):((?:\s+[\d.]+\s*\|?)+)$", out_text, re.M):
        mem[int(m.group(1))] = [float(x) * 2**20 for x in m.group(2).replace("|", " ").split()]
    cats = ["parameters", "gradients", "optimizer_state", "optimizer_unsharded", "activations", "workspace"]
    by_cat = {c: max(v[i] for v in mem.values()) for i, c in enumerate(cats)} if mem else {}
    peak = max(sum(v[i] for i in (0, 1, 2, 4, 5)) for v in mem.values()) if mem else None
    bubbles = [float(x) for x in re.findall(r"stage \d+: measured bubble ([\d.]+)", out_text)]
    last = rows[-1]
    return {"ms_per_iter": ms, "tokens_per_s": sum(r["tokens_per_s"] for r in steady) / len(steady),
            "tflops_per_rank": sum(r["gflops_per_rank"] for r in steady) / len(steady) / 1e3,
            "peak_memory_per_rank": peak, "memory": by_cat, "bubble": bubbles,
            "bytes": {g: last.get(f"{g}_bytes", 0) for g in ablate_report.GROUPS},
            "final_loss": last["lm_loss"], "iterations": len(rows), "run": run}


def predicted(lay):
    stages = lay["stages"]
    return {"ms_per_iter": lay["step_s"] * 1e3, "tokens_per_s": lay["tokens_per_s"], "mfu": lay["mfu"],
            "peak_tflops": lay["peak_tflops"],
            # the categories the run's start-up table shows (communication buffers are not in it)
            "peak_memory_per_rank": max(sum(s["memory"][c] for c in ablate_report.MEM) for s in stages),
            "memory": {c: max(s["memory"][c] for s in stages) for c in stages[0]["memory"]},
            "bytes": {g: stages[0]["traffic"][g]["bytes"] for g in ablate_report.GROUPS},
            "bubble": [s["bubble"] for s in stages]}


def result_of(rc, text, log):
    """A run's exit status and output -> (measured values, None) or (None, the reason it failed)."""
    if rc == 0:
        try:
            return measure(text, log), None
        except (OSError, ValueError, KeyError) as e:
            return None, f"cannot read the run's records: {e!r}"
    lines = text.splitlines()
    said = [l.strip() for l in lines if l.startswith("megac:") or "] megac:" in l or "EXIT STRING" in l]
    return None, f"exit {rc}: " + (said[-1] if said else (lines[-1].strip() if lines else "no message"))


def run_point(megac, launcher, world, p, train_flags, log_dir, pid):
    log = os.path.join(log_dir, pid + ".jsonl")
    cmd = [launcher, "-n", str(world), megac, "train"] + train_flags + layout_flags(p, False, train_flags) + \
        ["--log-json", log]
    with open(os.path.join(log_dir, pid + ".cmd"), "w") as f:
        f.write(shlex.join(cmd) + "\n")
    r = subprocess.run(cmd, capture_output=True, text=True)
    with open(os.path.join(log_dir, pid + ".out"), "w") as f:
        f.write(r.stdout + r.stderr)
    return result_of(r.returncode, r.stdout + "\n" + r.stderr, log)


def say(rec):
    print(f"{rec['id']}: {rec['status']}" + (f" ({rec['reason']})" if rec.get("reason") else
          f" {rec['measured']['ms_per_iter']:.1f} ms/iter, loss {rec['measured']['final_loss']:.6f}"), flush=True)


def append(rec_path, recs):
    with open(rec_path, "a") as f:
        for rec in recs:
            say(rec)
            f.write(json.dumps(rec) + "\n")


def collect(out_dir):
    """Records the finished points of a Slurm array; returns the ids still pending."""
    done, left = ablate_slurm.collect(out_dir, result_of)
    append(os.path.join(out_dir, "records.jsonl"), done)
    if left:
        job = (ablate_slurm.load_pending(out_dir) or {}).get("job")
        print(f"{len(left)} point(s) still queued or running in job {job}: "
              f"megac ablate collect {shlex.quote(out_dir)} once it has ended", flush=True)
    return left


def sweep(argv):
    import argparse
    if "--" in argv:
        cut = argv.index("--")
        argv, train_flags = argv[:cut], argv[cut + 1:]
    else:
        train_flags = []
    ap = argparse.ArgumentParser(prog="megac ablate", description=__doc__.split("\n\n")[0])
    ap.add_argument("--grid", required=True)
    ap.add_argument("--world-size", type=int, required=True)
    ap.add_argument("--output", required=True)
    ap.add_argument("--launcher", default="mpiexec", choices=["mpiexec", "slurm"])
    ap.add_argument("--hardware", default="h100")
    ap.add_argument("--vocab-size", type=int)
    ap.add_argument("--slurm-args", default="", help="more sbatch flags for the array (--launcher slurm)")
    ap.add_argument("--max-parallel", type=int, default=0, help="--launcher slurm: array tasks at once (0: all)")
    ap.add_argument("--no-wait", action="store_true",
                    help="--launcher slurm: return after submitting; `megac ablate collect DIR` records the results")
    try:
        args = ap.parse_args(argv)
    except SystemExit as e:
        sys.exit(0 if e.code == 0 else 2)
    if args.launcher == "slurm" and not shutil.which("sbatch"):
        usage_error("--launcher slurm: sbatch is not on PATH (apt-get install slurm-wlm, or run with --launcher mpiexec)")
    if args.max_parallel < 0:
        usage_error(f"--max-parallel must be >= 0, got {args.max_parallel}")
    if args.world_size <= 0:
        usage_error(f"--world-size must be > 0, got {args.world_size}")
    clash = sorted(GRID_FLAGS & set(train_flags))
    if "recompute=" in args.grid:
        clash += sorted({"--recompute-granularity", "--recompute-activations"} & set(train_flags))
    if clash:
        usage_error(f"train flags {' '.join(clash)} are set by the grid or by ablate: leave them out")
    megac = os.environ.get("MEGAC_BIN", "megac")
    launcher = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(megac))), "scripts", "megac-mpiexec")
    if not os.access(launcher, os.X_OK):
        launcher = "mpiexec"
    points = parse_grid(args.grid, args.world_size)
    pflags = plan_flags(train_flags, args.vocab_size)
    plans = []
    for p in points:
        if p["mbs"] is None:
            usage_error("the grid needs mbs=... (micro-batch sizes)")
        plans.append(predict(megac, args.world_size, p, args, pflags))
    if not any(lay for lay, _ in plans):
        usage_error(f"no valid point in the grid: {plans[-1][1]}")
    # megac checked the folder (core/outpath.h: new, empty, or an earlier sweep's); sweep.json,
    # the mark of a sweep's folder, is written first, whole, so a resumed sweep is let in
    try:
        os.makedirs(args.output, exist_ok=True)
        if not os.access(args.output, os.W_OK):
            raise PermissionError(13, "Permission denied")
        ablate_report.write_whole(os.path.join(args.output, "sweep.json"), json.dumps(
            {"grid": args.grid, "world_size": args.world_size, "hardware": args.hardware,
             "train_flags": train_flags}, indent=1))
        os.makedirs(os.path.join(args.output, "runs"), exist_ok=True)
    except OSError as e:
        usage_error(f"cannot write --output {args.output}: {e.strerror or e}")
    rec_path = os.path.join(args.output, "records.jsonl")
    left = collect(args.output) if ablate_slurm.load_pending(args.output) else []
    done = ablate_report.load_records(args.output)
    done_ids = {r["id"] for r in done if r["status"] in ("ok", "failed", "skipped")} | set(left)
    todo = []  # --launcher slurm: (id, train flags, record) of the array's points
    for p, (lay, why) in zip(points, plans):
        pid = point_id(p, args.world_size)
        if pid in done_ids:
            print(f"{pid}: {'pending in Slurm' if pid in left else 'recorded already'} (resume)")
            continue
        rec = {"id": pid, "layout": dict(p, dp=point_dp(p, args.world_size))}
        if lay is None:
            rec.update(status="skipped", reason=why)
        elif args.launcher == "slurm":
            rec["predicted"] = predicted(lay)
            todo.append((pid, train_flags + layout_flags(p, False, train_flags), rec))
            continue
        else:
            rec["predicted"] = predicted(lay)
            meas, err = run_point(megac, launcher, args.world_size, p, train_flags,
                                  os.path.join(args.output, "runs"), pid)
            rec.update(status="ok" if meas else "failed", reason=err, measured=meas)
        append(rec_path, [rec])
    if todo:
        ablate_slurm.submit(args.output, args.world_size, todo, megac, device_of(train_flags), args.slurm_args,
                            args.max_parallel, not args.no_wait)
        if args.no_wait:
            print(f"the sweep runs in Slurm: megac ablate collect {shlex.quote(args.output)} records the "
                  "finished points and writes the report", flush=True)
            return
        if collect(args.output):
            return
    ablate_report.write_report(args.output)
    print(f"wrote {os.path.join(args.output, 'REPORT.md')}")


def device_of(train_flags):
    """The --device of the train flags (megac train's default: cpu)."""
    i = len(train_flags) - 1 - train_flags[::-1].index("--device") if "--device" in train_flags else -1
    return train_flags[i + 1] if 0 <= i < len(train_flags) - 1 else "cpu"


def main(argv):
    if argv[:1] == ["collect"]:
        if len(argv) != 2 or not os.path.isdir(argv[1]):
            usage_error("usage: megac ablate collect DIR (the --output of a --launcher slurm sweep)")
        if not ablate_slurm.load_pending(argv[1]):
            print(f"{argv[1]}: no Slurm points pending")
        elif collect(argv[1]):
            return
        ablate_report.write_report(argv[1])
        print(f"wrote {os.path.join(argv[1], 'REPORT.md')}")
        return
    if argv[:1] == ["report"]:
        if len(argv) != 2 or not os.path.isfile(os.path.join(argv[1], "records.jsonl")):
            usage_error("usage: megac ablate report DIR (a directory holding records.jsonl)")
        ablate_report.write_report(argv[1])
        print(f"wrote {os.path.join(argv[1], 'REPORT.md')}")
        return
    sweep(argv)


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except ablate_report.AblateError as e:  # a damaged records.jsonl: one line, not a traceback
        usage_error(str(e))
    except OSError as e:  # an unwritable --output, a full disk
        usage_error(f"{e.filename or ''}: {e.strerror or e}" if e.filename else str(e))
