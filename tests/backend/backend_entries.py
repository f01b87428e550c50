#!/usr/bin/env python3
"""tests/backend/backend_entries.py ROOT: the Backend table's entries agree everywhere.

BackendOps in backend/backend.h declares the entries (one function pointer each); each
backend's op families fill exactly those, each once (`t->entry = ...;` in the cpu_*_ops
functions of backend/cpu/*.c, listed in cpu_ops_fill of cpu_ops.c; the cuda_*_ops functions
of backend/cuda/*.cu, listed in cuda_ops_fill of cuda_backend.cu); and backend/README.md's
count ("N today") is that number. Prints what differs; exit 1 if any.
"""
import pathlib
import re
import sys

root = pathlib.Path(sys.argv[1])
fails = []


def entries_of_struct(text):
    body = re.search(r"typedef struct \{(.*?)\} BackendOps;", text, re.S)
    if not body:
        sys.exit("backend_entries: no BackendOps struct in backend/backend.h")
    return re.findall(r"\(\*(\w+)\)\s*\(", body.group(1))


ops = entries_of_struct((root / "backend/backend.h").read_text())
if len(set(ops)) != len(ops):
    fails.append("backend.h: an entry is declared twice")


def entries_of_families(folder, ext, prefix, fill_file, fill_sig):
    """The entries registered by the <prefix>_*_ops functions of folder/*.ext; a family that
    the fill function of fill_file lists but no file defines (or the reverse) is a failure."""
    got, defined = [], []
    for path in sorted((root / folder).glob("*." + ext)):
        for m in re.finditer(r"^(?:static )?void (" + prefix + r"_\w+_ops)\(BackendOps \*t[^)]*\) \{(.*?)^\}",
                             path.read_text(), re.M | re.S):
            defined.append(m.group(1))
            got += re.findall(r"^\s*t->(\w+) =", m.group(2), re.M)
    fill = re.search(r"families\[\]\)\(" + re.escape(fill_sig) + r"\) = \{(.*?)\};",
                     (root / folder / fill_file).read_text(), re.S)
    listed = re.findall(r"\w+", fill.group(1)) if fill else []
    if not fill:
        fails.append(f"{folder}/{fill_file}: no families list")
    for f in sorted(set(defined) ^ set(listed)):
        fails.append(f"{folder}: family {f} is " + ("not listed" if f in defined else "listed but not defined"))
    return got


backends = [("backend/cpu", "c", "cpu", "cpu_ops.c", "BackendOps *, BackendDType"),
            ("backend/cuda", "cu", "cuda", "cuda_backend.cu", "BackendOps *")]
for folder, ext, prefix, fill_file, sig in backends:
    got = entries_of_families(folder, ext, prefix, fill_file, sig)
    missing = [o for o in ops if o not in got]
    extra = [o for o in got if o not in ops]
    twice = sorted({o for o in got if got.count(o) > 1})
    for what, names in (("missing", missing), ("not in BackendOps", extra), ("twice", twice)):
        if names:
            fails.append(f"{folder}: {what}: {', '.join(names)}")
    print(f"{folder}: its families fill {len(got)} entries")
readme = (root / "backend/README.md").read_text()
m = re.search(r"counts the entries: (\d+) today", readme)
if not m:
    fails.append("backend/README.md: no \"counts the entries: N today\"")
elif int(m.group(1)) != len(ops):
    fails.append(f"backend/README.md says {m.group(1)} entries, backend.h declares {len(ops)}")
print(f"backend/backend.h: {len(ops)} entries")
for f in fails:
    print("FAIL", f)
sys.exit(1 if fails else 0)
