"""plan/ablate_slurm.py: `megac ablate --launcher slurm`: the sweep's points as one Slurm job
array (scripts/slurm/ablate_array.sbatch, array task i runs point i, each in its own files
DIR/runs/ID.*), then either waiting for the array (`sbatch --wait`) and collecting it, or
returning at once with the command that collects it later (`megac ablate collect DIR`).

DIR/slurm/pending.json holds the submitted points (with their predictions) until their
records are written: a point whose task wrote DIR/runs/ID.rc is recorded (ok or failed); a
point whose task is gone without one (cancelled, a time limit, a node failure) is recorded
as failed; a point still queued or running stays pending.
"""
import json, os, shlex, subprocess, sys

import ablate_report  # write_whole

SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                      "scripts", "slurm", "ablate_array.sbatch")


def pending_path(out_dir):
    return os.path.join(out_dir, "slurm", "pending.json")


def load_pending(out_dir):
    p = pending_path(out_dir)
    return json.load(open(p)) if os.path.isfile(p) else None


def submit(out_dir, world, todo, megac, device, slurm_args, max_parallel, wait):
    """todo: [(point id, megac train flags, record without results)]. Writes the points,
    submits one array of len(todo) tasks of `world` ranks; with wait, returns when the
    array has ended. Returns the job id; exits 1 when sbatch refuses the job."""
    sdir, runs = os.path.join(out_dir, "slurm"), os.path.join(out_dir, "runs")
    os.makedirs(sdir, exist_ok=True)
    with open(os.path.join(sdir, "points.txt"), "w") as f:
        f.write("".join(pid + "\n" for pid, _, _ in todo))
    for pid, argv, _ in todo:
        with open(os.path.join(runs, pid + ".args"), "w") as f:
            f.write("".join(a + "\n" for a in argv))
        for ext in (".rc", ".jsonl", ".out"):  # results of an earlier try of this point
            if os.path.exists(os.path.join(runs, pid + ext)):
                os.remove(os.path.join(runs, pid + ext))
    array = f"0-{len(todo) - 1}" + (f"%{max_parallel}" if max_parallel else "")
    cmd = ["sbatch", "--parsable", f"--array={array}", f"--ntasks={world}", "--job-name=megac-ablate",
           "--output=" + os.path.join(os.path.abspath(sdir), "%A_%a.out")] + shlex.split(slurm_args)
    cmd += (["--wait"] if wait else []) + [SCRIPT]
    env = dict(os.environ, ABLATE_DIR=os.path.abspath(out_dir), MEGAC_BIN=os.path.abspath(megac),
               MEGAC_DEVICE=device)
    with open(os.path.join(sdir, "sbatch.cmd"), "w") as f:
        f.write(shlex.join(cmd) + "\n")
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    job = p.stdout.readline().strip().split(";")[0]  # printed at submission, before --wait waits
    if not job:
        err = p.stderr.read().strip()
        p.wait()
        print(f"megac ablate: sbatch refused the array (exit {p.returncode}): {err}", file=sys.stderr)
        sys.exit(1)
    ablate_report.write_whole(pending_path(out_dir), json.dumps(
        {"job": job, "world_size": world, "points": [rec for _, _, rec in todo]}, indent=1))
    print(f"submitted job array {job}: {len(todo)} point(s) of {world} ranks"
          + (" (waiting for it)" if wait else ""), flush=True)
    if wait:
        p.communicate()  # sbatch --wait: the array's highest exit code; each point is read alone
    else:
        p.stdout.close()
        p.stderr.close()
    return job


def job_active(job):
    """Whether any task of the array is still queued or running (squeue knows it)."""
    r = subprocess.run(["squeue", "-h", "-j", job, "-o", "%i"], capture_output=True, text=True)
    return r.returncode == 0 and r.stdout.strip() != ""


def collect(out_dir, result_of):
    """Reads the results of the pending points: returns (finished records, ids still pending).
    result_of(rc, text, log path) -> (measured, None) or (None, reason)."""
    pend = load_pending(out_dir)
    if not pend:
        return [], []
    runs, done, left = os.path.join(out_dir, "runs"), [], []
    active = None
    for rec in pend["points"]:
        pid = rec["id"]
        rc_path = os.path.join(runs, pid + ".rc")
        if os.path.isfile(rc_path):
            rc = int(open(rc_path).read().strip() or 1)
            out = os.path.join(runs, pid + ".out")
            text = open(out, errors="replace").read() if os.path.isfile(out) else ""
            meas, err = result_of(rc, text, os.path.join(runs, pid + ".jsonl"))
        else:
            active = job_active(pend["job"]) if active is None else active
            if active:
                left.append(rec)
                continue
            meas, err = None, (f"job {pend['job']} ended without a result for this point (cancelled, a time "
                               f"limit or a node failure: see {os.path.join(out_dir, 'slurm')})")
        done.append(dict(rec, status="ok" if meas else "failed", reason=err, measured=meas))
    if left:
        ablate_report.write_whole(pending_path(out_dir), json.dumps(dict(pend, points=left), indent=1))
    else:
        os.remove(pending_path(out_dir))
    return done, [r["id"] for r in left]
