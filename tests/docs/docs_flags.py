#!/usr/bin/env python3
"""tests/docs/docs_flags.py: the docs cannot drift from the programs. Every `--flag` that
README.md or docs/*.md names must be printed by the `--help` of the program it belongs to,
every relative link must reach an existing file (and heading, for `#anchors`), and every
cited `file.c:line` must name a file of the tree that long (moved code shows up here; that
the line still holds what the page says is for the reader who edits the code).

usage: docs_flags.py --root SRC --megac BIN [--bench BIN ...] [FILE.md ...]
       (default files: SRC/README.md and SRC/docs/*.md)

Which program a flag belongs to. The text is cut into segments: each line of a fenced code
block (with its `\\` continuation lines), each inline `code span`, and the prose around them.
Inside a segment a flag belongs to the last program named before it (a word right after a
flag is that flag's value, not a program):
  - `megac CMD` (also build/megac/megac): checked against `megac CMD --help`; after a bare
    `--` in `megac ablate ... -- <train flags>`, against `megac train --help`;
  - a benchmark program (bench_train, bench_gemm, ...): against its own `--help`;
  - tests/train/parity.py: against its `--help`, and after `--` against `megac train`'s;
  - tests/parallel/layout_sweep.py: against its `--help`;
  - another program in EXTERNAL (sbatch, meson, h5diff, ...): not checked (not ours);
  - none (prose, or a span that is only a flag): against the union of every help above,
    or ALLOW below.
A quoted argument holding spaces (`--slurm-args "--nodes=16 ..."`) is a value, not flags.
The test fails when a flag is in no help, when an ALLOW entry is used by no page (keep the
list short and true), or when a help printed no flags (so it cannot pass vacuously).
"""
import argparse, glob, os, re, shlex, subprocess, sys, unicodedata

# Programs that are not megac's: flags after them in a segment are not checked.
EXTERNAL = {
    "sbatch", "srun", "scontrol", "scancel", "salloc",  # Slurm
    "mpiexec", "mpirun", "megac-mpiexec",  # their own flags (-n) come before `megac`
    "meson", "ninja", "git", "pip", "pip3", "apt-get", "apt", "python3",
    "h5diff", "h5dump", "h5ls", "h5repack",  # hdf5-tools
    "nvidia-smi", "compute-sanitizer", "ncu", "gnuplot",
    "test.sh", "build.sh", "setup.sh", "run-default.sh", "pack.sh", "selfcheck.sh",  # scripts/: their own tests
    "local_cluster.sh", "setup_venv.sh",
}

# Flags named in prose without their program; each with whose flag it is.
ALLOW = {
    "--signal": "sbatch/srun: Slurm's signal before the time limit (--signal=USR1@180)",
    "--array": "sbatch: the job array of `megac ablate --launcher slurm` (--array=...%K)",
    "--resource-usage": "nvcc: the register and spill report of each kernel (docs/gpu.md)",
}

FLAG = re.compile(r"(?<![\w-])--[a-z0-9][a-z0-9-]*")
SPAN = re.compile(r"`([^`]+)`")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def run_help(cmd):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120,
                       stdin=subprocess.DEVNULL)
    flags = set(FLAG.findall(p.stdout)) | {"--help"}
    if p.returncode != 0 or len(flags) < 2:
        sys.exit(f"FAIL: `{' '.join(cmd)}` exited {p.returncode} with {len(flags) - 1} flags:\n{p.stdout[-2000:]}")
    return flags


def collect_helps(args):
    """{program context: set of flags}; contexts 'megac', 'megac CMD', 'bench_x', 'parity.py',
    'layout_sweep.py'."""
    top = subprocess.run([args.megac, "--help"], stdout=subprocess.PIPE, text=True, timeout=60).stdout
    cmds = re.findall(r"^  ([a-z]+)\s{2,}", top.split("commands:", 1)[-1], re.M)
    if "train" not in cmds:
        sys.exit(f"FAIL: `megac --help` lists no commands:\n{top}")
    helps = {"megac": run_help([args.megac, "--help"])}
    for c in cmds:
        if c == "tokenizer":  # one usage, three commands with their own flags
            helps["megac " + c] = set().union(*(run_help([args.megac, c, s, "--help"])
                                                for s in ("train", "encode", "decode")))
        else:
            helps["megac " + c] = run_help([args.megac, c, "--help"])
    for b in args.bench:
        helps[os.path.basename(b)] = run_help([b, "--help"])
    helps["parity.py"] = run_help([sys.executable, os.path.join(args.root, "tests/train/parity.py"), "--help"])
    helps["layout_sweep.py"] = run_help([sys.executable, os.path.join(args.root, "tests/parallel/layout_sweep.py"),
                                         "--help"])
    return helps


def segments(text):
    """(line number, text, is_code) for each code-block line, code span and prose run."""
    out, lines, i = [], text.split("\n"), 0
    while i < len(lines):
        if lines[i].lstrip().startswith("```"):
            i += 1
            while i < len(lines) and not lines[i].lstrip().startswith("```"):
                start, line = i + 1, lines[i]
                while line.endswith("\\") and i + 1 < len(lines):
                    i += 1
                    line = line[:-1] + " " + lines[i]
                out.append((start, line, True))
                i += 1
            i += 1
            continue
        start, para = i + 1, []
        while i < len(lines) and lines[i].strip() and not lines[i].lstrip().startswith("```"):
            para.append(lines[i])
            i += 1
        if not para:
            i += 1
            continue
        p = "\n".join(para)
        for m in SPAN.finditer(p):
            out.append((start + p[:m.start()].count("\n"), m.group(1).replace("\n", " "), True))
        prose = SPAN.sub(lambda m: "\n" * m.group(0).count("\n"), p)
        for k, l in enumerate(prose.split("\n")):
            out.append((start + k, l, False))
    return out


def flags_in(seg, is_code, helps):
    """[(flag, context)] of one segment; context None: no program named before it."""
    if not is_code:
        return [(f, None) for f in FLAG.findall(seg)]
    try:
        toks = shlex.split(seg, comments=False)
    except ValueError:
        toks = seg.split()
    found, ctx = [], None
    for k, t in enumerate(toks):
        name = os.path.basename(t.strip("[("))
        nxt = toks[k + 1] if k + 1 < len(toks) else ""
        prev = toks[k - 1] if k else ""
        if prev.startswith("-") and "=" not in prev:  # a flag's value (--megac build/megac/megac)
            name = ""
        if name == "megac":
            ctx = "megac " + nxt if "megac " + nxt in helps else ("megac" if nxt.startswith("-") else ctx)
        elif name in helps:
            ctx = name
        elif name in EXTERNAL:
            ctx = "external"
        elif t == "--" and ctx in ("megac ablate", "parity.py"):
            ctx = "megac train"
        elif not re.search(r"\s", t):
            found += [(f, ctx) for f in FLAG.findall(t)]
    return found


def slug(heading):
    s = "".join(ch for ch in heading.strip().lower()
                if ch in " -_" or unicodedata.category(ch)[0] in "LN")
    return s.replace(" ", "-")


def anchors(path):
    text = open(path, encoding="utf-8").read()
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    return {slug(re.sub(r"[`*]", "", h)) for h in re.findall(r"^#+\s+(.*)$", text, re.M)}


def check_links(path, text):
    bad = []
    prose = re.sub(r"```.*?```", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    prose = SPAN.sub(lambda m: "\n" * m.group(0).count("\n"), prose)
    for m in LINK.finditer(prose):
        target = m.group(1)
        if re.match(r"[a-z]+:", target):
            continue
        line = prose[:m.start()].count("\n") + 1
        file, _, anchor = target.partition("#")
        dest = os.path.normpath(os.path.join(os.path.dirname(path), file)) if file else path
        if not os.path.exists(dest):
            bad.append(f"{path}:{line}: link {target}: {dest} does not exist")
        elif anchor and dest.endswith(".md") and anchor not in anchors(dest):
            bad.append(f"{path}:{line}: link {target}: no heading #{anchor} in {dest}")
    return bad


CITE = re.compile(r"`([\w./-]+\.(?:c|h|cu|cuh|py|sh|build)):(\d+)(?:-(\d+))?`")


def check_cites(root, path, text):
    """Every `file:line` (or `file:first-last`) names a file of the tree that is that long."""
    bad = []
    for m in CITE.finditer(text):
        file, last = os.path.join(root, m.group(1)), int(m.group(3) or m.group(2))
        line = text[:m.start()].count("\n") + 1
        if not os.path.isfile(file):
            bad.append(f"{path}:{line}: cites {m.group(1)}, which does not exist")
        elif sum(1 for _ in open(file, encoding="utf-8", errors="replace")) < last:
            bad.append(f"{path}:{line}: cites {m.group(0)}, but the file is shorter")
    return bad


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", required=True)
    ap.add_argument("--megac", required=True)
    ap.add_argument("--bench", action="append", default=[])
    ap.add_argument("files", nargs="*")
    args = ap.parse_args()
    files = args.files or [os.path.join(args.root, "README.md")] + sorted(glob.glob(os.path.join(args.root, "docs", "*.md")))
    helps = collect_helps(args)
    union = set().union(*helps.values())
    problems, used_allow, n_flags = [], set(), 0
    for path in files:
        text = open(path, encoding="utf-8").read()
        problems += check_links(path, text) + check_cites(args.root, path, text)
        for line, seg, is_code in segments(text):
            for flag, ctx in flags_in(seg, is_code, helps):
                n_flags += 1
                if ctx == "external":
                    continue
                if ctx is not None:
                    if flag not in helps[ctx]:
                        problems.append(f"{path}:{line}: {flag} is not in `{ctx} --help`")
                elif flag in ALLOW:
                    used_allow.add(flag)
                elif flag not in union:
                    problems.append(f"{path}:{line}: {flag} is in no megac program's --help "
                                    f"(nor in ALLOW: other programs' flags)")
    problems += [f"ALLOW entry {f} ({ALLOW[f]}) is used by no page: remove it" for f in sorted(set(ALLOW) - used_allow)]
    for p in problems:
        print(p)
    print(f"docs_flags: {n_flags} flags and the links of {len(files)} files checked against "
          f"{len(helps)} --help texts: {len(problems)} problem(s)")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
