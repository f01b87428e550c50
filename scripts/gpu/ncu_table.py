#!/usr/bin/env python3
"""scripts/gpu/ncu_table.py CSV: GPU time per kernel from an `ncu --csv --metrics
gpu__time_duration.sum` log (selfcheck.sh step g), as a markdown table, largest first.

Kernels are grouped by name without their argument list (template arguments stay: a bf16
and an fp32 instance are different rows). The last line is machine-readable:
TOTAL_KERNEL_MS=... KERNELS=... TOP=name:share,name:share,name:share
"""
import collections
import csv
import sys

TO_US = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3,
         "second": 1e6, "s": 1e6}


def kernel_times(path):
    """{kernel name: (launches, total microseconds)} from ncu's CSV (other lines skipped)."""
    with open(path, errors="replace") as f:
        rows = [line for line in f if line.startswith('"')]
    total, count = collections.defaultdict(float), collections.Counter()
    for r in csv.DictReader(rows):
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        name = r.get("Kernel Name", "?").split("(")[0].strip()
        if name.startswith("void "):
            name = name[5:]
        try:
            value = float(r.get("Metric Value", "0").replace(",", ""))
        except ValueError:
            continue
        total[name] += value * TO_US.get(r.get("Metric Unit", "usecond"), 1.0)
        count[name] += 1
    return {k: (count[k], total[k]) for k in total}


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: ncu_table.py NCU_CSV")
    times = kernel_times(sys.argv[1])
    all_us = sum(t for _, t in times.values())
    if not times or all_us <= 0:
        print("no kernel times in %s" % sys.argv[1])
        print("TOTAL_KERNEL_MS=0 KERNELS=0 TOP=")
        return
    ranked = sorted(times.items(), key=lambda kv: -kv[1][1])
    print("| kernel | launches | GPU ms | share |")
    print("| --- | ---: | ---: | ---: |")
    for name, (n, us) in ranked[:25]:
        print("| %s | %d | %.2f | %.1f%% |" % (name[:90], n, us / 1e3, 100 * us / all_us))
    top = ",".join("%s:%.0f%%" % (name[:40], 100 * us / all_us) for name, (_, us) in ranked[:3])
    print("TOTAL_KERNEL_MS=%.1f KERNELS=%d TOP=%s" % (all_us / 1e3, sum(n for n, _ in times.values()), top))


if __name__ == "__main__":
    main()
