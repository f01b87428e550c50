#!/usr/bin/env python3
"""tests/parallel/layout_sweep.py: random model features x random layouts, each against one rank.

Each case draws, from its own seed, a tiny model (GPT or Llama-style, dense or MoE with a
random router and dispatcher, dropout, recomputation, fp32/bf16/fp16, Megatron's model
flags) and a layout of 2, 4 or 8 ranks (TP, PP with interleaving and/or an uneven first stage,
DP with DDP or ZeRO-1/2/3 and the overlaps, CP with its three exchanges, EP, SP), then:

  parity  the layout's losses and grad norms against one rank's (tests/train/parity.py)
  resume  3 iterations under the layout, saved; 3 more under a second random layout loaded
          from it; all 6 against one uninterrupted rank

Either mode may also ramp the batch up (--rampup-batch-size, drawn last), so a resume
crosses from one batch size to another.

to 2e-4 relative (3e-2 with bf16/fp16). With --device cuda (the emulator build's megac) the
layouts run on the CUDA backend with strict fp32 GEMMs (--no-tf32) against one CPU rank; in
resume mode the second leg draws its backend (CUDA or CPU), so a checkpoint may cross from
one to the other. With --data documents the model trains on a token file of short documents
with EODs (made with megac preprocess) and draws --eod-mask-loss, --reset-position-ids and
--reset-attention-mask. A combination megac refuses (exit 2 with one 'megac:' line on every
rank) is counted, not failed, and prints its reason; a crash, a hang (--timeout), a
disagreement fails the test. The sweep found a hang (a refusal on some pipeline stages
only), a crash (--bf16 --apply-layernorm-1p) and a wrong resume (--bf16 --load on the CPU).
Each run draws new seeds (printed); `--seed S --count 1` replays a case.

usage: layout_sweep.py --megac BIN --mpiexec MPIEXEC [--seed S] [--count N] [--mode parity|resume]
                       [--device cpu|cuda] [--data mock|documents]
"""
import argparse, json, os, random, subprocess, sys, tempfile, time

PARITY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "train", "parity.py")
sys.path.insert(0, os.path.dirname(PARITY))
from parity import gnorm_diff  # noqa: E402 (null grad norms: --fp16 steps skipped on overflow)


def draw_model(r, data):
    """Model flags (the same on every rank and layout), their tolerance and a short label.
    data: None (--mock-data) or a token file of short documents."""
    L = r.choice([2, 4, 8])
    m = ["--mock-data", "--num-layers", str(L), "--hidden-size", "64", "--num-attention-heads", "4",
         "--seq-length", "32", "--micro-batch-size", "2", "--lr", "1e-3", "--log-interval", "100",
         "--eval-iters", "0"]
    tags, tol = [], 2e-4
    llama = r.random() < 0.4
    if llama:
        m += ["--swiglu", "--normalization", "RMSNorm", "--position-embedding-type", "rope", "--no-position-embedding"]
        m += ["--group-query-attention", "--num-query-groups", "2"] if r.random() < 0.5 else []
        m += ["--rotary-percent", "0.5"] if r.random() < 0.3 else []
        tags.append("llama")
    moe = r.random() < 0.4
    if moe:
        sigmoid = r.random() < 0.3
        m += ["--num-experts", "4", "--moe-router-topk", "2", "--moe-aux-loss-coeff", "0.01"]
        for p, flags in ((0.4, ["--moe-grouped-gemm"]), (0.3, ["--moe-z-loss-coeff", "0.001"]),
                         (0.3, ["--moe-shared-expert-intermediate-size", "64"]),
                         (0.2, ["--moe-router-pre-softmax"]), (0.2, ["--moe-layer-freq", "2"]),
                         (0.2, ["--moe-router-load-balancing-type", "seq_aux_loss"]),
                         (0.3, ["--moe-token-dispatcher-type", "alltoall"]),
                         (0.2, ["--expert-tensor-parallel-size", "1"])):
            m += flags if r.random() < p else []
        m += ["--moe-router-score-function", "sigmoid"] if sigmoid else []
        m += ["--moe-router-enable-expert-bias"] if sigmoid and r.random() < 0.5 else []
        if r.random() < 0.2:
            m += ["--moe-expert-capacity-factor", "1.0"] + r.choice(
                [[], ["--moe-token-drop-policy", "position"], ["--moe-pad-expert-input-to-capacity"]])
        tags.append("moe")
    if r.random() < 0.3:
        m += ["--hidden-dropout", "0.1", "--attention-dropout", "0.1"]
        tags.append("dropout")
    if r.random() < 0.3:
        g = r.choice(["full", "selective"])
        m += ["--recompute-granularity", g] + (["--recompute-method", r.choice(["uniform", "block"])] if g == "full" else [])
    pr = r.random()
    if pr < 0.2:
        prec = "--bf16" if pr < 0.12 else "--fp16"
        m += [prec] + (["--loss-scale", "1024"] if prec == "--fp16" and r.random() < 0.5 else [])
        tags.append(prec[2:])
        tol = 3e-2
    for p, flags in ((0.2, ["--untie-embeddings-and-output-weights"]), (0.2, ["--use-flash-attn"]),
                     (0.3, ["--clip-grad", "0.05"]), (0.15, ["--disable-bias-linear"]),
                     (0.15, ["--apply-layernorm-1p"]), (0.15, ["--kv-channels", "32"]),
                     (0.15, ["--ffn-hidden-size", "96"]), (0.2, ["--calculate-per-token-loss"]),
                     (0.2, ["--weight-decay", "0.1", "--lr-decay-style", "cosine", "--lr-warmup-iters", "2"])):
        m += flags if r.random() < p else []
    if not llama and r.random() < 0.15:
        m += ["--squared-relu"]
    if data:  # drawn last: a seed draws the same model as with --mock-data, then these
        m[0:1] = ["--data-path", data, "--split", "1,0,0"]
        tags.append("documents")
        for f in ("--eod-mask-loss", "--reset-position-ids", "--reset-attention-mask"):
            if r.random() < 0.5:
                m.append(f)
                tags.append(f[2:])
    return m, L, moe, tol, tags


def draw_layout(r, L, moe):
    """(tp, pp, dp, cp, ep), the layout's own flags, and micro-batches per step allowed."""
    while True:
        tp, pp, cp, n = r.choice([1, 2, 2, 4]), r.choice([1, 2, 4]), r.choice([1, 2]), r.choice([2, 4, 8])
        if n % (tp * pp * cp) == 0 and L % pp == 0:
            break
    dp = n // (tp * pp * cp)
    ep = 2 if moe and (dp * cp) % 2 == 0 and r.random() < 0.5 else 1
    x, vpp = [], False
    if tp > 1 and r.random() < 0.6:
        x.append("--sequence-parallel")
    if cp > 1:
        x += ["--cp-comm-type", r.choice(["p2p", "all_gather", "a2a"])]
    if pp > 1:
        if L // pp >= 2 and r.random() < 0.4:
            x += ["--num-layers-per-virtual-pipeline-stage", "1"]
            vpp = True
        elif r.random() < 0.3:
            x += ["--pipeline-schedule", "gpipe"]
        if not vpp and r.random() < 0.3:
            firsts = [f for f in range(1, L - pp + 2) if (L - f) % (pp - 1) == 0 and f * pp != L]
            x += ["--decoder-first-pipeline-num-layers", str(r.choice(firsts))] if firsts else []
        elif vpp and r.random() < 0.3:  # uneven first rank: v chunks split every rank's layers
            rest = lambda f: (L - f) // (pp - 1)
            opts = [(f, v) for v in range(2, L) for f in range(v, L, v) if (L - f) % (pp - 1) == 0
                    and rest(f) > 0 and rest(f) % v == 0 and f != rest(f)]
            if opts:
                f, v = r.choice(opts)
                x[-2:] = ["--virtual-pipeline-model-parallel-size", str(v), "--decoder-first-pipeline-num-layers", str(f)]
    strat = r.choice(["no_shard", "optim", "optim_grads", "optim_grads_params"])
    x += ["--data-parallel-sharding-strategy", strat]
    if strat != "optim_grads_params" and r.random() < 0.4:
        x += ["--overlap-grad-reduce"] + (["--ddp-bucket-size", "3000"] if strat in ("no_shard", "optim") else [])
    if strat in ("optim", "optim_grads_params") and r.random() < 0.3:
        x += ["--overlap-param-gather"]
    micro = pp * r.choice([1, 2]) if vpp else r.choice([1, 2, 4])
    return (tp, pp, dp, cp, ep), x, micro


def draw_rampup(r, model, dp, pp, xs):
    """Megatron's --rampup-batch-size, drawn last (a seed draws the same case as without it):
    the batch starts at one micro-batch per DP rank (PP ranks with the interleaved schedule)
    and grows by as much every 2 steps up to the step's. Sample-based, as Megatron's: the
    run's --train-iters (and --lr-warmup-iters) become samples of that many full batches.
    Returns the start (0: none)."""
    ilv = any(f in x for x in xs for f in ("--num-layers-per-virtual-pipeline-stage",
                                            "--virtual-pipeline-model-parallel-size"))
    s = 2 * dp * (pp if ilv else 1)
    gb = int(model[model.index("--global-batch-size") + 1])
    if gb <= s or r.random() >= 0.25:
        return 0
    for flag, to in (("--train-iters", "--train-samples"), ("--lr-warmup-iters", "--lr-warmup-samples")):
        if flag in model:
            i = model.index(flag)
            model[i:i + 2] = [to, str(int(model[i + 1]) * gb)]
    model += ["--rampup-batch-size", str(s), str(s), str(2 * (gb - s))]
    return s


def launch(a, lay, flags, log):
    tp, pp, dp, cp, ep = lay
    cmd = [a.mpiexec, "-n", str(tp * pp * dp * cp), a.megac, "train", "--num-threads", "1",
           "--tensor-model-parallel-size", str(tp), "--pipeline-model-parallel-size", str(pp),
           "--context-parallel-size", str(cp), "--expert-model-parallel-size", str(ep),
           "--log-json", log] + flags
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=a.timeout)
        return p.returncode, p.stdout
    except subprocess.TimeoutExpired:
        return 124, f"timed out after {a.timeout} s: {' '.join(cmd)}"


def refused(rc, out):
    return rc == 2 and sum(l.startswith("megac:") for l in out.splitlines()) == 1


def reason(out):
    """A refusal's one 'megac:' line."""
    return next(l for l in out.splitlines() if l.startswith("megac:"))


def failed(rc, out, label):
    """The verdict of a run that exited rc: a refusal (with its reason), or a failure with its output."""
    return ("refused", f"{label}\n      {reason(out)}") if refused(rc, out) else ("FAIL", label + "\n" + out[-2000:])


def records(log):
    return {r["iteration"]: r for r in map(json.loads, open(log)) if "lm_loss" in r}


def worst_diff(got, ref):
    d = 0.0
    for it, r in ref.items():
        g = got.get(it)
        if g is None:
            return float("inf")
        d = max(d, abs(g["lm_loss"] - r["lm_loss"]) / abs(r["lm_loss"]),
                gnorm_diff(g.get("grad_norm"), r.get("grad_norm")))
    return d


def case(a, seed, wd):
    """Returns (verdict, detail): ok, refused or FAIL."""
    r = random.Random(seed)
    model, L, moe, tol, tags = draw_model(r, a.data_file)
    lay, x, micro = draw_layout(r, L, moe)
    model += ["--global-batch-size", str(2 * lay[2] * micro)]
    dev = ["--device", "cuda", "--no-tf32"] if a.device == "cuda" else []
    label = f"{','.join(map(str, lay))} {' '.join(tags) or 'gpt'} {' '.join(x)}"
    if a.mode == "parity":
        model += ["--train-iters", "4"]
        if draw_rampup(r, model, lay[2], lay[1], [x]):
            label += " rampup"
        cmd = [sys.executable, PARITY, "--megac", a.megac, "--mpiexec", a.mpiexec, "--tol", str(tol),
               "--timeout", str(a.timeout), "--layouts", "1,1,1", ",".join(map(str, lay)),
               "--extra=" + " ".join(x + dev), "--"] + model
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if "parity: ok" in p.stdout:
            return "ok", label
        if "exited 2:" in p.stdout and refused(2, p.stdout):
            return "refused", f"{label}\n      {reason(p.stdout)}"
        return "FAIL", label + "\n" + p.stdout[-3000:] + "\nmodel flags: " + " ".join(model)
    model += ["--train-iters", "6"]
    lay_b, x_b, _ = draw_layout(r, L, moe)
    label += f" -> {','.join(map(str, lay_b))} {' '.join(x_b)}"
    dev_b = dev if not dev or r.random() < 0.5 else []  # the second leg's backend
    label += " (cpu)" if dev and not dev_b else ""
    ramp = draw_rampup(r, model, lay[2], lay[1], [x, x_b])
    label += " rampup" if ramp else ""
    if (int(model[model.index("--global-batch-size") + 1]) // 2) % lay_b[2] or (ramp // 2) % lay_b[2]:
        return "refused", label + " (batch)"
    ck = os.path.join(wd, f"ck{seed}")
    rc, out = launch(a, (1, 1, 1, 1, 1), model, os.path.join(wd, f"s{seed}.jsonl"))
    if rc:
        return failed(rc, out, label)
    for n, (lay_i, x_i, more) in enumerate(((lay, x + dev, ["--save", ck, "--save-interval", "3", "--exit-interval", "3"]),
                                            (lay_b, x_b + dev_b, ["--load", ck]))):
        rc, out = launch(a, lay_i, model + x_i + more, os.path.join(wd, f"{'ab'[n]}{seed}.jsonl"))
        if rc:
            return failed(rc, out, label)
    got = {**records(os.path.join(wd, f"a{seed}.jsonl")), **records(os.path.join(wd, f"b{seed}.jsonl"))}
    d = worst_diff(got, records(os.path.join(wd, f"s{seed}.jsonl")))
    return ("ok" if d <= tol else "FAIL"), f"{label} (worst {d:.2e}, tolerance {tol:g})" + \
        ("" if d <= tol else "\nmodel flags: " + " ".join(model))


def documents(a, wd):
    """A token file of 1200 documents of 8 to 30 characters (a 32-token sample holds 2 to 4,
    each ending in an EOD), made with megac preprocess; its path."""
    r = random.Random(1)
    with open(os.path.join(wd, "docs.jsonl"), "w") as f:
        for _ in range(1200):
            f.write(json.dumps({"text": "".join(r.choice("abcdefgh ") for _ in range(r.randint(8, 30)))}) + "\n")
    out = os.path.join(wd, "docs.h5")
    subprocess.run([a.megac, "preprocess", "--input", os.path.join(wd, "docs.jsonl"), "--output", out],
                   check=True, stdout=subprocess.DEVNULL)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--megac", required=True)
    ap.add_argument("--mpiexec", required=True)
    ap.add_argument("--mode", choices=["parity", "resume"], default="parity")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--count", type=int, default=6)
    ap.add_argument("--timeout", type=float, default=120)
    ap.add_argument("--data", choices=["mock", "documents"], default="mock",
                    help="documents: a token file of short documents with EODs, and --eod-mask-loss, "
                         "--reset-position-ids, --reset-attention-mask drawn")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                    help="the layouts' backend (cuda: the emulator build's megac); the reference is one CPU rank")
    a = ap.parse_args()
    seed0 = a.seed if a.seed is not None else random.SystemRandom().randrange(1 << 30)
    print(f"layout sweep ({a.mode}, {a.device}, {a.data} data): seeds {seed0}..{seed0 + a.count - 1} (replay one: --seed S --count 1)")
    counts = {"ok": 0, "refused": 0, "FAIL": 0}
    with tempfile.TemporaryDirectory() as wd:
        a.data_file = documents(a, wd) if a.data == "documents" else None
        for s in range(seed0, seed0 + a.count):
            t = time.time()
            verdict, detail = case(a, s, wd)
            counts[verdict] += 1
            print(f"  seed {s}: {verdict:7s} {time.time() - t:5.1f} s  {detail}", flush=True)
    print(f"{counts['ok']} agree, {counts['refused']} refused, {counts['FAIL']} failed")
    sys.exit(1 if counts["FAIL"] else 0)


if __name__ == "__main__":
    main()
