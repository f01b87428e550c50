#!/usr/bin/env python3
"""tests/train/checkpoint_test.py: checkpoints end to end, driving `megac train --mock-data`.

  resume   10 iterations straight vs 5 + save + resume 5 at one layout: bitwise identical
           losses and grad norms (the JSON log prints them with %.17g).
  reshard  save after 5 iterations at one (TP, PP, DP) layout, resume at others: every
           resumed iteration matches an uninterrupted single-rank run to --tol (losses) and
           --gnorm-tol (grad norms), relative.
           With --h5dump and --h5ls, the saved file is also compared with a single-rank
           save, tensor by tensor, so a misplaced or unwritten slice is caught even if the
           losses hide it.
  damaged  missing or damaged checkpoints and wrong configs: exit 2 on every rank with a
           clear message naming the file, no HDF5 error stack, no training started; an
           interrupted save leaves the previous checkpoint usable.

usage: checkpoint_test.py --megac BIN --mpiexec MPIEXEC [--tamper BIN]
                          [--h5dump BIN --h5ls BIN] [--num-layers L]
                          resume  [--layout T,P,D] [--extra FLAGS]
                          reshard --save-layout T,P,D --load-layouts T,P,D ... [--save-extra
                                  FLAGS] [--load-extra FLAGS] [--tol 1e-6]
                                  [--gnorm-tol 1e-5]
                          damaged
"""
import argparse, array, json, os, re, shutil, subprocess, sys, tempfile

TINY = ["--mock-data", "--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4",
        "--seq-length", "32", "--micro-batch-size", "2", "--global-batch-size", "8",
        "--lr", "1e-3", "--lr-warmup-iters", "2", "--lr-decay-iters", "10", "--log-interval", "100",
        "--eval-iters", "0", "--num-threads", "1"]


def layout(s):
    return tuple(int(x) for x in s.split(","))


def megac(args, lay, flags, timeout=120):
    """Runs megac train at layout (tp, pp, dp[, cp[, ep]]); returns (exit code, combined output)."""
    tp, pp, dp = lay[:3]
    cp = lay[3] if len(lay) > 3 else 1
    ep = lay[4] if len(lay) > 4 else 1
    cmd = [args.mpiexec, "-n", str(tp * pp * dp * cp), args.megac, "train",
           "--tensor-model-parallel-size", str(tp), "--pipeline-model-parallel-size", str(pp)]
    if cp > 1:
        cmd += ["--context-parallel-size", str(cp)]
    if ep > 1:
        cmd += ["--expert-model-parallel-size", str(ep)]
    model = TINY + ["--num-layers", str(args.num_layers)] + args.model.split()  # a later flag wins
    p = subprocess.run(cmd + model + flags, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, timeout=timeout)
    return p.returncode, p.stdout


def train(args, lay, flags, log):
    rc, out = megac(args, lay, flags + ["--log-json", log])
    if rc != 0:
        print(out[-4000:])
        sys.exit(f"FAIL: layout {lay} {' '.join(flags)} exited {rc}")
    return [r for r in map(json.loads, open(log)) if "iteration" in r]  # not run/validation records


def rel(a, b):
    return abs(a - b) / max(abs(b), 1e-12)


def cmd_resume(args, wd):
    lay, extra = layout(args.layout), args.extra.split()
    ckpt = os.path.join(wd, "ckpt")
    straight = train(args, lay, extra + ["--train-iters", "10"], os.path.join(wd, "a.jsonl"))
    first = train(args, lay, extra + ["--train-iters", "5", "--save", ckpt], os.path.join(wd, "b.jsonl"))
    second = train(args, lay, extra + ["--train-iters", "10", "--load", ckpt], os.path.join(wd, "c.jsonl"))
    got = first + second
    if [g["iteration"] for g in got] != list(range(1, 11)):
        sys.exit(f"FAIL: iterations {[g['iteration'] for g in got]}")
    print(f"{'iter':>4} {'straight lm_loss':>22} {'resumed lm_loss':>22}")
    bad = 0
    for s, g in zip(straight, got):
        same = all(s[k] == g[k] for k in ("lm_loss", "grad_norm", "lr"))
        bad += not same
        print(f"{s['iteration']:>4} {s['lm_loss']:>22.17g} {g['lm_loss']:>22.17g} {'' if same else 'DIFFERENT'}")
    if bad:
        sys.exit(f"FAIL: {bad} iterations differ after resuming at layout {lay}")
    print(f"resume at {lay}: 10 iterations bitwise identical")


def read_all(args, path, names, wd):
    """All datasets `names` of path as one float32 array (h5dump concatenates in -d order)."""
    out = os.path.join(wd, "all.bin")
    cmd = [args.h5dump, "-b", "LE", "-o", out] + sum((["-d", n] for n in names), []) + [path]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    a = array.array("f")
    with open(out, "rb") as f:
        a.frombytes(f.read())
    return a


def dataset_shapes(args, path):
    """{name: shape} from h5ls -r."""
    out = subprocess.run([args.h5ls, "-r", path], check=True, stdout=subprocess.PIPE, text=True).stdout
    shapes = {}
    for l in out.splitlines():
        m = re.match(r"(\S+)\s+Dataset \{([\d, ]+)\}", l)
        if m:
            shapes[m.group(1)] = tuple(int(x) for x in m.group(2).split(","))
    return shapes


def compare_files(args, got_path, ref_path, wd):
    """Every dataset: same names and shapes; |got - ref| <= 1e-2 max|ref| (training round-off),
    and no element zero in got where ref is above 1e-6 max|ref| (an unwritten slice reads as
    zero)."""
    shapes = dataset_shapes(args, ref_path)
    if shapes != dataset_shapes(args, got_path):
        sys.exit("FAIL: the checkpoints hold different datasets or shapes")
    names = sorted(shapes)
    got, ref = read_all(args, got_path, names, wd), read_all(args, ref_path, names, wd)
    worst, at = 0.0, 0
    for n in names:
        size = 1
        for d in shapes[n]:
            size *= d
        g, r = got[at:at + size], ref[at:at + size]
        at += size
        scale = max(abs(x) for x in r) or 1.0
        # An unwritten slice reads as zeros where ref holds values near its scale; a zero
        # against ref's 1e-11 at scale 5e-4 (an Adam moment that cancelled) is round-off.
        zeros = sum(1 for x, y in zip(g, r) if x == 0.0 and abs(y) > 1e-6 * scale)
        d = max(abs(x - y) for x, y in zip(g, r)) / scale
        worst = max(worst, d)
        if zeros or d > 1e-2:
            sys.exit(f"FAIL: {n}: max |diff| / max |ref| = {d:.3e}, {zeros} unwritten elements")
    if at != len(ref) or len(got) != len(ref):
        sys.exit(f"FAIL: dumped {len(got)} and {len(ref)} elements, expected {at}")
    print(f"checkpoint file: {len(names)} datasets match the single-rank save "
          f"(largest |diff| / max|ref| {worst:.2e})")


def cmd_reshard(args, wd):
    save_lay = layout(args.save_layout)
    save_extra, load_extra = args.save_extra.split(), args.load_extra.split()
    ref = train(args, (1, 1, 1), ["--train-iters", "10"], os.path.join(wd, "ref.jsonl"))
    ckpt = os.path.join(wd, "ckpt")
    first = train(args, save_lay, save_extra + ["--train-iters", "5", "--save", ckpt],
                  os.path.join(wd, "save.jsonl"))
    worst = max(rel(g["lm_loss"], r["lm_loss"]) for g, r in zip(first, ref))
    print(f"saved at {save_lay} {' '.join(save_extra)}: iterations 1-5 vs one rank {worst:.3e}")
    if args.h5dump and args.h5ls:
        ref_ckpt = os.path.join(wd, "ckpt_ref")
        train(args, (1, 1, 1), ["--train-iters", "5", "--save", ref_ckpt], os.path.join(wd, "r5.jsonl"))
        compare_files(args, os.path.join(ckpt, "iter_0000005", "checkpoint.h5"),
                      os.path.join(ref_ckpt, "iter_0000005", "checkpoint.h5"), wd)
    print(f"{'resumed at (tp,pp,dp)':>24} {'iters':>5} {'max rel diff loss':>18} {'max rel diff gnorm':>19}")
    failed = False
    for s in args.load_layouts:
        lay = layout(s)
        got = train(args, lay, load_extra + ["--train-iters", "10", "--load", ckpt],
                    os.path.join(wd, f"load_{s}.jsonl"))
        if [g["iteration"] for g in got] != list(range(6, 11)):
            sys.exit(f"FAIL: resumed at {lay}: iterations {[g['iteration'] for g in got]}")
        dl = max(rel(g["lm_loss"], r["lm_loss"]) for g, r in zip(got, ref[5:]))
        dg = max(rel(g["grad_norm"], r["grad_norm"]) for g, r in zip(got, ref[5:]))
        failed |= dl > args.tol or dg > args.gnorm_tol
        print(f"{str(lay):>24} {len(got):>5} {dl:>18.3e} {dg:>19.3e}")
    if failed:
        sys.exit(f"FAIL: a resumed run differs from the uninterrupted run by more than "
                 f"{args.tol:g} (loss) or {args.gnorm_tol:g} (grad norm)")
    print(f"reshard from {save_lay}: ok (tolerance {args.tol:g} loss, {args.gnorm_tol:g} grad norm)")


def expect_exit2(args, name, flags, must_contain, lay=(1, 1, 2), may_train=False):
    rc, out = megac(args, lay, flags + ["--train-iters", "6"], timeout=60)
    problems = []
    if rc != 2:
        problems.append(f"exit code {rc}, expected 2")
    for s in must_contain:
        if s not in out:
            problems.append(f"message lacks '{s}'")
    if "HDF5-DIAG" in out or "BAD TERMINATION" in out:
        problems.append("HDF5 error stack or crash in the output")
    if not may_train and re.search(r"^ \[[^]]*\] iteration +\d", out, re.M):
        problems.append("training started")
    line = next((l for l in out.splitlines() if l.startswith("megac:")), "(no megac: line)")
    print(f"  {name:<26} rc {rc}  {line}")
    if problems:
        print(out[-3000:])
        sys.exit(f"FAIL: {name}: " + "; ".join(problems))


def cmd_damaged(args, wd):
    good = os.path.join(wd, "good")
    train(args, (1, 1, 1), ["--train-iters", "5", "--save", good], os.path.join(wd, "g.jsonl"))
    h5 = os.path.join("iter_0000005", "checkpoint.h5")
    size = os.path.getsize(os.path.join(good, h5))
    n = [0]

    def fresh(edit=None):
        n[0] += 1
        d = os.path.join(wd, f"case{n[0]}")
        shutil.copytree(good, d)
        if edit:
            edit(d)
        return d

    def write(path, text):
        with open(path, "w") as f:
            f.write(text)

    def truncate(d, length):
        with open(os.path.join(d, h5), "r+b") as f:
            f.truncate(length)

    def tamper(d, *what):
        subprocess.run([args.tamper, os.path.join(d, h5)] + list(what), check=True)

    latest = "latest_checkpointed_iteration.txt"
    print("damaged or mismatched checkpoints (2 ranks each):")
    # (a missing or empty --load directory starts from scratch, as Megatron: load_first_run.sh)
    d = os.path.join(wd, "a-file")
    write(d, "x\n")
    expect_exit2(args, "a file, not a directory", ["--load", d], [os.path.join(d, latest)])
    d = fresh(lambda d: os.remove(os.path.join(d, latest)))
    expect_exit2(args, "missing latest", ["--load", d], [os.path.join(d, latest), "No such file"])
    d = fresh(lambda d: write(os.path.join(d, latest), "five\n"))
    expect_exit2(args, "garbage latest", ["--load", d], [latest, "expected an iteration number"])
    d = fresh(lambda d: write(os.path.join(d, latest), "7\n"))
    expect_exit2(args, "latest names a missing dir", ["--load", d], ["iter_0000007/checkpoint.h5"])
    d = fresh(lambda d: truncate(d, size // 2))
    expect_exit2(args, "truncated to half", ["--load", d], [os.path.join(d, h5), "truncated"])
    d = fresh(lambda d: truncate(d, 100))
    expect_exit2(args, "truncated to 100 bytes", ["--load", d], [os.path.join(d, h5), "truncated"])
    d = fresh(lambda d: write(os.path.join(d, h5), "not hdf5\n"))
    expect_exit2(args, "not an HDF5 file", ["--load", d], [os.path.join(d, h5), "not a readable HDF5"])
    if args.tamper:
        d = fresh(lambda d: tamper(d, "delete", "/optim/exp_avg_sq/layers.1.mlp.fc.bias"))
        expect_exit2(args, "missing dataset", ["--load", d],
                     [h5, "dataset /optim/exp_avg_sq/layers.1.mlp.fc.bias is missing"])
        d = fresh(lambda d: tamper(d, "reshape", "/model/wpe"))
        expect_exit2(args, "wrong shape", ["--load", d], [h5, "/model/wpe", "shape (32, 64)", "(33)"])
        d = fresh(lambda d: tamper(d, "attr", "format_version", "99"))
        expect_exit2(args, "newer format version", ["--load", d], [h5, "format version 99"])
    expect_exit2(args, "other hidden size", ["--load", good, "--hidden-size", "128"],
                 [h5, "hidden-size 64 (this run 128)"])
    expect_exit2(args, "other layers and vocab", ["--load", good, "--num-layers", "4", "--mock-vocab-size", "300"],
                 [h5, "num-layers 2 (this run 4)", "vocab size 257 (this run 300)"])
    # another --global-batch-size resumes (Megatron allows it): tests/train/rampup.py
    blocker = os.path.join(wd, "a_file")
    write(blocker, "x")
    # Found at start-up (ckpt_prepare_save), before any training.
    expect_exit2(args, "--save under a file", ["--save", os.path.join(blocker, "ckpt")],
                 [blocker, "not a directory"])
    # A save interrupted at iteration 10: its temporary file is there, `latest` still says 5.
    d = fresh(lambda d: (os.makedirs(os.path.join(d, "iter_0000010")),
                         write(os.path.join(d, "iter_0000010", "checkpoint.h5.tmp"), "partial")))
    got = train(args, (1, 1, 2), ["--train-iters", "7", "--load", d, "--save", d], os.path.join(wd, "i.jsonl"))
    if [g["iteration"] for g in got] != [6, 7] or open(os.path.join(d, latest)).read() != "7\n":
        sys.exit("FAIL: interrupted save: did not resume from iteration 5 and save iteration 7")
    print("  interrupted save           the previous checkpoint resumes; the next save publishes")
    print("damaged: ok")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--megac", required=True)
    ap.add_argument("--mpiexec", default="mpiexec")
    ap.add_argument("--tamper", default="")
    ap.add_argument("--h5dump", default="")
    ap.add_argument("--h5ls", default="")
    ap.add_argument("--num-layers", type=int, default=2, help="L (4 for PP = 4)")
    ap.add_argument("--model", default="", help="model flags of every run, the references too")
    sub = ap.add_subparsers(dest="mode", required=True)
    r = sub.add_parser("resume")
    r.add_argument("--layout", default="1,1,1")
    r.add_argument("--extra", default="")
    s = sub.add_parser("reshard")
    s.add_argument("--save-layout", required=True)
    s.add_argument("--load-layouts", nargs="+", required=True)
    s.add_argument("--save-extra", default="")
    s.add_argument("--load-extra", default="")
    s.add_argument("--tol", type=float, default=1e-6, help="relative, losses")
    s.add_argument("--gnorm-tol", type=float, default=1e-5, help="relative, grad norms (as parity.py)")
    sub.add_parser("damaged")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as wd:
        {"resume": cmd_resume, "reshard": cmd_reshard, "damaged": cmd_damaged}[args.mode](args, wd)


if __name__ == "__main__":
    main()
