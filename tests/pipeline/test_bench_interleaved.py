#!/usr/bin/env python3
"""tests/pipeline/test_bench_interleaved.py MPIEXEC BENCH_PIPELINE: bench_pipeline times the
interleaved schedule (PP = 2, v = 2, tiny model, one repetition) and prints, per m, the
step against its ideal t_mb x (m + (PP-1)/v), the theoretical bubble (PP-1)/(v*m+PP-1) and a
measured bubble in [0, 1) for each stage."""
import re, subprocess, sys

mpiexec, bench = sys.argv[1], sys.argv[2]
cmd = [mpiexec, "-n", "2", bench, "--num-layers", "4", "--hidden-size", "64", "--seq-length", "32",
       "--micro", "2,4", "--reps", "1", "--virtual-pipeline-model-parallel-size", "2"]
p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
print(p.stdout[-2000:])
if p.returncode != 0:
    sys.exit(f"FAIL: exit {p.returncode}")
if "(interleaved), PP = 2, v = 2" not in p.stdout:
    sys.exit("FAIL: no interleaved header")
rows = {int(r[0]): r for r in re.findall(r"^\s*(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+) ([\d.]+)$",
                                         p.stdout, re.M)}
for m, theory in ((2, 1 / 5), (4, 1 / 9)):
    if m not in rows:
        sys.exit(f"FAIL: no row for m = {m}")
    r = rows[m]
    if abs(float(r[5]) - theory) > 5e-4:
        sys.exit(f"FAIL: m = {m}: theory {r[5]}, expected {theory:.3f}")
    if not all(0 <= float(b) < 1 for b in r[6:]) or float(r[2]) <= 0 or float(r[1]) <= 0:
        sys.exit(f"FAIL: m = {m}: row {r}")
print("bench_pipeline (interleaved): ok")
