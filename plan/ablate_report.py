"""plan/ablate_report.py: records of a `megac ablate` sweep -> records.csv, REPORT.md and
PNG plots drawn by gnuplot (headless, pngcairo): throughput by layout, memory per rank
stacked by category, traffic per group, predicted against measured (time, memory, bytes).
"""
import csv, io, json, os, shutil, statistics, subprocess

MEM = ["parameters", "gradients", "optimizer_state", "activations", "workspace"]
GROUPS = ["tp", "pp", "dp", "embedding", "cp", "ep", "edp"]  # dp: the gradient group, DP x CP;
# ep: the experts' all-to-all, edp: the expert region's gradient group (0 without experts)
LOSS_RTOL = 1e-4  # layouts of one model on the same data agree to fp32 round-off (~1e-7)


class AblateError(Exception):
    """Bad input (a damaged records.jsonl, an unusable --output): one line, exit 2."""


def write_whole(path, text):
    """Writes text to path whole or not at all, as megac's output guard (core/outpath.h) does:
    into ".NAME.tmp" beside it (a name megac ablate's guard knows), flushed and synced, then
    renamed over path. A full disk or a kill leaves the old file as it was."""
    tmp = os.path.join(os.path.dirname(path), "." + os.path.basename(path) + ".tmp")
    try:
        with open(tmp, "w", newline="") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def load_records(d):
    path = os.path.join(d, "records.jsonl")
    if not os.path.isfile(path):
        return []
    latest = {}
    for no, line in enumerate(open(path, errors="replace"), 1):
        if not line.strip():
            continue
        try:
            r = json.loads(line)
        except ValueError as e:
            raise AblateError(f"{path} line {no}: not JSON ({e.msg}): not a record of megac ablate")
        if not isinstance(r, dict) or not isinstance(r.get("id"), str) or "status" not in r \
                or not isinstance(r.get("layout"), dict):
            raise AblateError(f"{path} line {no}: a record needs an \"id\", a \"status\" and a "
                              "\"layout\": not a record of megac ablate")
        latest[r["id"]] = r  # a point rerun after a failure: the last record counts
    return list(latest.values())


def flat(r):
    row = {"id": r["id"], "status": r["status"], "reason": r.get("reason") or ""}
    row.update(r["layout"])
    m, p = r.get("measured") or {}, r.get("predicted") or {}
    for key in ("ms_per_iter", "tokens_per_s", "peak_memory_per_rank"):
        row["measured_" + key], row["predicted_" + key] = m.get(key), p.get(key)
    row["measured_tflops_per_rank"] = m.get("tflops_per_rank")
    peak = p.get("peak_tflops")
    row["measured_mfu"] = m["tflops_per_rank"] / peak if m and peak else None
    row["predicted_mfu"] = p.get("mfu")
    for c in MEM:
        row["measured_mem_" + c] = (m.get("memory") or {}).get(c)
        row["predicted_mem_" + c] = (p.get("memory") or {}).get(c)
    for g in GROUPS:
        row[f"measured_{g}_bytes"] = (m.get("bytes") or {}).get(g)
        row[f"predicted_{g}_bytes"] = (p.get("bytes") or {}).get(g)
    row["measured_bubble"] = max(m["bubble"]) if m.get("bubble") else None
    row["predicted_bubble"] = max(p["bubble"]) if p.get("bubble") else None
    row["final_loss"] = m.get("final_loss")
    return row


def loss_outliers(rows):
    losses = [r["final_loss"] for r in rows if r["final_loss"] is not None]
    if len(losses) < 2:
        return set(), None
    med = statistics.median(losses)
    return {r["id"] for r in rows if r["final_loss"] is not None and
            abs(r["final_loss"] - med) > LOSS_RTOL * abs(med)}, med


def fmt(x, scale=1.0, digits=1):
    return "" if x is None else f"{x / scale:.{digits}f}"


def plots(d, ok):
    """Draws the PNGs with gnuplot; returns their names, or a reason why none."""
    gp = shutil.which("gnuplot")
    if not gp:
        return [], "gnuplot is not installed (apt-get install gnuplot-nox): no plots"
    data = os.path.join(d, "plot_data.tsv")
    f = io.StringIO()
    f.write("id\tmeas_tok\tpred_tok\t" + "\t".join(MEM) + "\t" + "\t".join(GROUPS) +
            "\tmeas_ms\tpred_ms\tmeas_mem\tpred_mem\tmeas_bytes\tpred_bytes\n")
    for i, r in enumerate(ok):
        mem = [r["measured_mem_" + c] or 0 for c in MEM]
        byt = [r[f"measured_{g}_bytes"] or 0 for g in GROUPS]
        pmem = sum(r["predicted_mem_" + c] or 0 for c in MEM)
        pbyt = sum(r[f"predicted_{g}_bytes"] or 0 for g in GROUPS)
        f.write("\t".join([r["id"].replace("_", "-"), str(r["measured_tokens_per_s"]), str(r["predicted_tokens_per_s"])] +
                          [str(x / 2**20) for x in mem] + [str(x / 1e6) for x in byt] +
                          [str(r["measured_ms_per_iter"]), str(r["predicted_ms_per_iter"]),
                           str(sum(mem) / 2**20), str(pmem / 2**20), str(sum(byt) / 1e6), str(pbyt / 1e6)]) + "\n")
    write_whole(data, f.getvalue())
    n = len(ok)
    script = f"""set terminal pngcairo size {max(1000, 90 * n + 250)},600 noenhanced
set datafile separator "\\t"
set style data histograms
set style fill solid 0.8 border -1
set xtics rotate by -40 scale 0 font ",8"
set key outside right top
set yrange [0:*]
set bmargin 12
set grid ytics
set output "{d}/throughput.png"
set title "Throughput by layout (tokens/s)"
set style histogram clustered gap 1
plot "{data}" using 2:xtic(1) title "measured" , "" using 3 title "predicted (plan)"
set output "{d}/memory.png"
set title "Memory per rank by category, measured (MiB, largest rank)"
set style histogram rowstacked
plot for [c=4:8] "{data}" using c:xtic(1) title columnheader(c)
set output "{d}/traffic.png"
set title "Bytes per step per group, rank 0, measured (MB)"
set style histogram clustered gap 1
plot for [c=9:15] "{data}" using c:xtic(1) title columnheader(c)
set key top left inside
set yrange [*:*]
set bmargin
set terminal pngcairo size 1500,500 noenhanced
set output "{d}/predicted_vs_measured.png"
unset xtics
set xtics
set style data points
set multiplot layout 1,3 title "megac plan prediction against the run (each point a layout; line: equal)"
set logscale xy
set xlabel "predicted"
set ylabel "measured"
set title "step time (ms)"
plot "{data}" using 17:16 pt 7 notitle, x notitle lt 2
set title "memory per rank, largest (MiB)"
plot "{data}" using 19:18 pt 7 notitle, x notitle lt 2
set title "bytes per step, rank 0 (MB)"
plot "{data}" using 21:20 pt 7 notitle, x notitle lt 2
unset multiplot
"""
    write_whole(os.path.join(d, "plots.gp"), script)
    r = subprocess.run([gp, os.path.join(d, "plots.gp")], capture_output=True, text=True)
    if r.returncode != 0:
        return [], "gnuplot failed: " + r.stderr.strip().splitlines()[-1]
    return ["throughput.png", "memory.png", "traffic.png", "predicted_vs_measured.png"], None


def write_report(d):
    records = load_records(d)
    rows = [flat(r) for r in records]
    f = io.StringIO(newline="")
    names = list(dict.fromkeys(k for row in rows for k in row)) or ["id"]  # every column, first seen first
    w = csv.DictWriter(f, fieldnames=names)
    w.writeheader()
    w.writerows(rows)
    write_whole(os.path.join(d, "records.csv"), f.getvalue())
    ok = sorted((r for r in rows if r["status"] == "ok"), key=lambda r: r["measured_ms_per_iter"])
    bad_loss, med = loss_outliers(ok)
    sweep = {}
    if os.path.isfile(os.path.join(d, "sweep.json")):
        sweep = json.load(open(os.path.join(d, "sweep.json")))
    pngs, why = plots(d, ok) if ok else ([], "no point ran")
    out = ["# megac ablate report", ""]
    if sweep:
        out += [f"Grid `{sweep['grid']}`, world size {sweep['world_size']}, hardware profile "
                f"`{sweep['hardware']}`, train flags `{' '.join(sweep['train_flags'])}`.", ""]
    out += [f"{len(ok)} points ran, {sum(r['status'] == 'failed' for r in rows)} failed, "
            f"{sum(r['status'] == 'skipped' for r in rows)} skipped. Fastest first; "
            "predicted values (megac plan) next to the measured ones.", "",
            "| point | TP | CP | PP | DP | EP | mbs | sched | v | SP | ZeRO | ms/iter (plan) | tokens/s | TFLOP/s/rank | MFU (plan) "
            "| peak MiB/rank (plan) | TP/PP/DP/emb/CP/EP/EDP MB, rank 0 (plan) | bubble (plan) | final loss |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in ok:
        meas_b = "/".join(fmt(r[f"measured_{g}_bytes"], 1e6, 2) for g in GROUPS)
        pred_b = "/".join(fmt(r[f"predicted_{g}_bytes"], 1e6, 2) for g in GROUPS)
        flag = " **differs**" if r["id"] in bad_loss else ""
        out.append(f"| {r['id']} | {r['tp']} | {r.get('cp') or 1} | {r['pp']} | {r['dp']} | {r.get('ep') or 1} | {r['mbs']} | {r['schedule']} | "
                   f"{r.get('vpp') or 1} | {r['sp']} | "
                   f"{r['zero1']} | {fmt(r['measured_ms_per_iter'])} ({fmt(r['predicted_ms_per_iter'], 1, 3)}) | "
                   f"{fmt(r['measured_tokens_per_s'], 1, 0)} | {fmt(r['measured_tflops_per_rank'], 1, 4)} | "
                   f"{fmt(r['measured_mfu'], 0.01, 2)}% ({fmt(r['predicted_mfu'], 0.01, 1)}%) | "
                   f"{fmt(r['measured_peak_memory_per_rank'], 2**20, 2)} ({fmt(r['predicted_peak_memory_per_rank'], 2**20, 2)}) | "
                   f"{meas_b} ({pred_b}) | {fmt(r['measured_bubble'], 1, 3)} ({fmt(r['predicted_bubble'], 1, 3)}) | "
                   f"{r['final_loss']:.7f}{flag} |")
    out += ["", "Final loss: every point trains the same model on the same data. " +
            (f"Median {med:.7f}; " if med is not None else "") +
            (f"{len(bad_loss)} point(s) differ by more than {LOSS_RTOL:g} (relative): "
             f"{', '.join(sorted(bad_loss))}." if bad_loss else f"all agree within {LOSS_RTOL:g} (relative).")]
    failed = [r for r in rows if r["status"] != "ok"]
    if failed:
        out += ["", "## Points not run", ""] + [f"- {r['id']}: {r['status']}: {r['reason']}" for r in failed]
    out += ["", "## Plots", ""]
    out += [f"![{p}]({p})" for p in pngs] if pngs else [why]
    write_whole(os.path.join(d, "REPORT.md"), "\n".join(out) + "\n")
