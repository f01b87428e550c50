#!/usr/bin/env python3
"""bench/peer_torch.py: megac's training speed against PyTorch eager on this machine.

Runs bench_train's dense GPT configs (same names and shapes: small, medium, gpt2-vocab,
gpt2-124m, gpt2-350m) both ways, fp32, with the same threads: one training step is the
forward, the backward and an AdamW step (lr 3e-4, betas 0.9/0.95, eps 1e-8, weight decay 0.1
on the matrices), no gradient clipping (bench_train computes no norm), vocabulary padded to a
multiple of 128 and the LM head tied to the token embedding, GELU (tanh), LayerNorm, biases.
Both are timed as bench_train times: one warm-up step, then the median of --steps steps.
Rounds interleave the two (bench_train as a subprocess with --no-ceiling; torch in this
process; the first of each round alternates; each side starts after a 1 s pause, so that the
other's idle threads have stopped spinning), and per config the script prints each side's
median tokens/s and the median of the same-round ratios megac / torch with their min-max.
GFLOP/s use Megatron's formula as bench_train's (model/gpt_config.c).

With --profile, one more pair per config says where each side's step goes, in ms per step:
megac's from `bench_train --profile` (its rows summed by kind), torch's from torch.profiler
(each op's self CPU time, summed by name: mm/addmm are the linear layers' GEMMs; bmm,
softmax, masked_fill and scaled-dot-product ops the attention; gelu ops GELU; the
Optimizer.step scope AdamW; the profiler's own cost lands in torch's figures).

    /usr/bin/python3 bench/peer_torch.py --threads 2 --rounds 3 --steps 5
    /usr/bin/python3 bench/peer_torch.py --config medium,gpt2-124m --bench-train build/bench/bench_train
    /usr/bin/python3 bench/peer_torch.py --config medium --profile

Exits 77 (skip) when torch cannot be imported, 2 on a bad flag, 1 when bench_train fails.
"""
import argparse
import math
import os
import re
import statistics
import subprocess
import sys
import time

# name: (L, C, NH, T, B, V), as bench_train.c's CONFIGS (the dense ones).
CONFIGS = {
    "small": (4, 256, 4, 256, 4, 256),
    "medium": (6, 384, 6, 256, 4, 256),
    "gpt2-vocab": (6, 384, 6, 256, 4, 50257),
    "gpt2-124m": (12, 768, 12, 256, 4, 50257),
    "gpt2-350m": (24, 1024, 16, 256, 4, 50257),
}
DEFAULT = ["small", "medium", "gpt2-vocab", "gpt2-124m"]


def padded(V):
    return (V + 127) // 128 * 128


def flops_per_step(L, C, NH, T, B, V):
    """Megatron's FLOPs of one step (forward + backward), as gpt_flops_per_iteration."""
    attention = 1.5 + 0.5 + T / C
    logits = padded(V) / (2.0 * L * C)
    return 12.0 * B * T * L * C * C * (attention + logits) + 12.0 * B * T * C * C * L * 4.0


def build_model(torch, L, C, NH, T, V):
    nn, F = torch.nn, torch.nn.functional
    sdpa = getattr(F, "scaled_dot_product_attention", None)  # torch >= 2.0

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
            self.qkv, self.proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
            self.fc, self.fcp = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)
            self.register_buffer("mask", torch.ones(T, T, dtype=torch.bool).tril())

        def forward(self, x):
            B_, T_, _ = x.shape
            q, k, v = (t.view(B_, T_, NH, C // NH).transpose(1, 2)
                       for t in self.qkv(self.ln1(x)).split(C, dim=2))
            if sdpa is not None:
                y = sdpa(q, k, v, is_causal=True)
            else:
                att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // NH))
                att = att.masked_fill(~self.mask[:T_, :T_], float("-inf")).softmax(dim=-1)
                y = att @ v
            x = x + self.proj(y.transpose(1, 2).reshape(B_, T_, C))
            return x + self.fcp(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(padded(V), C), nn.Embedding(T, C)
            self.blocks = nn.ModuleList(Block() for _ in range(L))
            self.lnf = nn.LayerNorm(C)
            for p in self.parameters():
                if p.dim() == 2:
                    nn.init.normal_(p, std=0.02)

        def forward(self, tok, tgt):
            x = self.wte(tok) + self.wpe.weight[: tok.shape[1]]
            for b in self.blocks:
                x = b(x)
            logits = self.lnf(x) @ self.wte.weight.t()  # tied head, no bias
            if logits.shape[-1] != V:
                logits = logits[..., :V]  # the padded columns are not classes
            return F.cross_entropy(logits.reshape(-1, V), tgt.reshape(-1))

    return GPT()


def torch_step(torch, name):
    """(one training step of the config in torch, as a function; tokens per step)."""
    L, C, NH, T, B, V = CONFIGS[name]
    torch.manual_seed(1234)
    m = build_model(torch, L, C, NH, T, V)
    decay = [p for p in m.parameters() if p.dim() == 2]
    other = [p for p in m.parameters() if p.dim() != 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": other, "weight_decay": 0.0}],
                            lr=3e-4, betas=(0.9, 0.95), eps=1e-8)
    i = torch.arange(B * T, dtype=torch.int64)
    tok, tgt = ((i * 7919) % V).view(B, T), ((i * 104729 + 1) % V).view(B, T)

    def step():
        opt.zero_grad(set_to_none=True)
        m(tok, tgt).backward()
        opt.step()
    return step, B * T


def torch_tokens_per_s(torch, name, steps):
    """Median tokens/s of `steps` steps (after one warm-up) of the config in torch."""
    step, tokens = torch_step(torch, name)
    times = []
    for s in range(steps + 1):
        t0 = time.perf_counter()
        step()
        if s:
            times.append(time.perf_counter() - t0)
    return tokens / statistics.median(times)


PARTS = ("GEMMs", "attention", "GELU", "AdamW", "the rest")


def torch_profile(torch, name, steps):
    """ms per step by part (PARTS) and in all, from torch.profiler over `steps` steps after
    one warm-up: each op's self CPU time (intra-op threads inside), summed by name."""
    from torch.profiler import ProfilerActivity, profile
    step, _ = torch_step(torch, name)
    step()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            step()
    part, total = dict.fromkeys(PARTS, 0.0), 0.0
    for e in prof.key_averages():
        ms = e.self_cpu_time_total / 1e3 / steps
        total += ms
        if re.fullmatch(r"aten::(mm|addmm)", e.key):  # the linear layers and the head
            part["GEMMs"] += ms
        elif re.fullmatch(r"aten::(bmm|baddbmm|masked_fill_?)", e.key) or \
                "scaled_dot_product" in e.key or "softmax" in e.key:  # torch < 2: q @ k^T...
            part["attention"] += ms
        elif "gelu" in e.key:
            part["GELU"] += ms
        elif e.key.startswith("Optimizer.step"):  # the scope: its ops' time is inside
            part["AdamW"] += e.cpu_time_total / 1e3 / steps - ms
    part["the rest"] = total - sum(part[k] for k in PARTS[:-1])
    return part, total


def parse_profile(out):
    """(ms per step by part (PARTS), ms per step in all) from bench_train --profile's table,
    or None when there is no table."""
    part, total, rows = dict.fromkeys(PARTS, 0.0), None, 0
    for line in out.splitlines():
        m = re.search(r"per step \(mean of \d+ steps?; ([\d.]+) ms\)", line)
        if m:
            total = float(m.group(1))
        m = re.match(r"  (\S.*?)\s{2,}([\d.]+)\s+([\d.]+)\s+[\d.]+%", line)
        if total is None or not m:
            continue
        op, ms = m.group(1), float(m.group(3))
        kind = ("GEMMs" if op.startswith("gemm ") else "attention" if op.startswith("attention")
                else "GELU" if op.startswith("act ") else "AdamW" if op == "adamw" else "the rest")
        part[kind] += ms
        rows += 1
    return (part, total) if rows else None


def print_profiles(a, torch):
    """--profile: one more pair per config (megac first), ms per step by part."""
    for n in a.names:
        time.sleep(1.0)
        mg, mg_total = run_bench_train(a.bench_train, n, a.steps, a.threads, parse_profile,
                                       "--profile")
        time.sleep(1.0)
        tc, tc_total = torch_profile(torch, n, a.steps)
        print(f"\nprofile of {n}, ms per step (megac: bench_train --profile, its rows by kind; "
              f"torch: torch.profiler, self CPU time by op name)")
        print(f"  {'part':<10} {'megac':>9} {'torch':>9}  torch / megac")
        for k in PARTS:
            if k == "GELU" and mg[k] == 0:  # cpu_gemm_fused: inside the GEMM rows
                print(f"  {k:<10} {'in GEMMs':>9} {tc[k]:9.1f}  -")
                continue
            ratio = f"{tc[k] / mg[k]:.2f}" if mg[k] > 0 else "-"
            print(f"  {k:<10} {mg[k]:9.1f} {tc[k]:9.1f}  {ratio}")
        print(f"  {'step':<10} {mg_total:9.1f} {tc_total:9.1f}  {tc_total / mg_total:.2f}")


def run_bench_train(exe, name, steps, threads, parse, *extra):
    """parse(stdout) of bench_train for the config (--no-ceiling, then `extra`); exits 1 when
    bench_train fails or parse finds nothing in its output (returns None)."""
    cmd = [exe, "--config", name, "--steps", str(steps), "--threads", str(threads),
           "--no-ceiling", *extra]
    r = subprocess.run(cmd, capture_output=True, text=True)
    got = parse(r.stdout) if r.returncode == 0 else None
    if got is None:
        sys.exit(f"peer_torch: {' '.join(cmd)} failed (exit {r.returncode}):\n{r.stdout}{r.stderr}")
    return got


def megac_tokens_per_s(exe, name, steps, threads):
    """bench_train's tokens/s (median step) for the config; exits 1 when it fails."""
    def tokens(out):
        rows = [f for f in map(str.split, out.splitlines()) if len(f) >= 3 and f[0] == name]
        return float(rows[0][2]) if rows else None
    return run_bench_train(exe, name, steps, threads, tokens)


def parse_args():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser(description="megac bench_train against PyTorch eager, "
                                 "interleaved rounds, median of same-round ratios")
    ap.add_argument("--config", default=",".join(DEFAULT),
                    help="comma-separated: " + ", ".join(CONFIGS) + " (default: all but gpt2-350m)")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    ap.add_argument("--steps", type=int, default=5, help="timed steps per run (default 5)")
    ap.add_argument("--threads", type=int, default=os.cpu_count(), help="threads of both (default: all cores)")
    ap.add_argument("--profile", action="store_true",
                    help="also one pair per config with each side's step split by part (ms)")
    ap.add_argument("--bench-train", default=os.path.join(root, "build", "bench", "bench_train"),
                    help="the bench_train program (default: build/bench/bench_train)")
    a = ap.parse_args()
    names = [n for n in a.config.split(",") if n]
    bad = [n for n in names if n not in CONFIGS]
    if bad:
        ap.error("unknown --config " + ", ".join(bad) + " (dense configs: " + ", ".join(CONFIGS) + ")")
    if a.rounds < 1 or a.steps < 1 or a.threads < 1:
        ap.error("--rounds, --steps and --threads must be >= 1")
    if a.threads > 1024:  # bench_train's limit (core_check_threads)
        ap.error(f"--threads {a.threads}: at most 1024, as bench_train")
    if not os.access(a.bench_train, os.X_OK):
        ap.error(f"--bench-train {a.bench_train}: no such program (build it: scripts/build.sh build)")
    a.names = names
    return a


def torch_blas(torch):
    """torch's BLAS as built (BLAS_INFO, oneDNN, CPU capability) and the BLAS library this
    process mapped after a matmul (Debian's torch calls libblas.so.3, an alternative)."""
    keep = ("BLAS_INFO", "MKL-DNN", "oneDNN", "CPU capability")
    show = torch.__config__.show()
    parts = [p.strip(" -") for line in show.splitlines() for p in line.split(",") if any(k in p for k in keep)]
    torch.ones(64, 64) @ torch.ones(64, 64)
    try:
        with open("/proc/self/maps") as f:
            libs = sorted({l.split()[-1] for l in f if "blas" in l.lower() or "mkl" in l.lower()})
        parts.append("mapped: " + (", ".join(libs) or "none"))
    except OSError:
        pass
    return "; ".join(parts)


def main():
    a = parse_args()
    os.environ["OPENBLAS_NUM_THREADS"] = str(a.threads)  # torch's BLAS, when it is OpenBLAS
    try:
        import torch
    except ImportError as e:
        print(f"peer_torch: SKIP: torch cannot be imported ({e}); Debian: apt-get install python3-torch")
        sys.exit(77)
    torch.set_num_threads(a.threads)
    print(f"torch {torch.__version__} eager, fp32, {a.threads} threads; {torch_blas(torch)}")
    print(f"megac: {a.bench_train}; {a.rounds} interleaved rounds x {a.steps} steps (after 1 warm-up)")
    got = {n: ([], [], []) for n in a.names}  # megac, torch, ratio
    for r in range(a.rounds):
        for n in a.names:
            runs = [lambda: megac_tokens_per_s(a.bench_train, n, a.steps, a.threads),
                    lambda: torch_tokens_per_s(torch, n, a.steps)]
            first = r % 2  # alternate who runs first
            res = [None, None]
            for k in (first, 1 - first):
                time.sleep(1.0)  # the other side's idle threads (OpenMP, OpenBLAS) stop spinning
                res[k] = runs[k]()
            got[n][0].append(res[0]), got[n][1].append(res[1]), got[n][2].append(res[0] / res[1])
            print(f"round {r + 1} {n:<11} megac {res[0]:8.0f} tokens/s  torch {res[1]:8.0f} tokens/s"
                  f"  ratio {res[0] / res[1]:.2f}", flush=True)
    print(f"\n{'config':<11} {'megac tok/s':>11} {'torch tok/s':>11} {'megac GFLOP/s':>13} "
          f"{'torch GFLOP/s':>13}  megac / torch: median [min-max] of same-round ratios")
    for n in a.names:
        L, C, NH, T, B, V = CONFIGS[n]
        fl = flops_per_step(L, C, NH, T, B, V) / (B * T) * 1e-9
        mg, tc, ra = (statistics.median(v) for v in got[n])
        print(f"{n:<11} {mg:11.0f} {tc:11.0f} {mg * fl:13.1f} {tc * fl:13.1f}  "
              f"{ra:.2f} [{min(got[n][2]):.2f}-{max(got[n][2]):.2f}]")
    if a.profile:
        print_profiles(a, torch)


if __name__ == "__main__":
    main()
