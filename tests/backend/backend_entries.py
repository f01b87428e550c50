#!/usr/bin/env python3
"""tests/backend/backend_entries.py ROOT: the Backend table's entries agree everywhere.

BackendOps in backend/backend.h declares the entries (one function pointer each); every
backend fills exactly those, each once: the CPU's op families (`t->entry = ...;` in the
cpu_*_ops functions of backend/cpu/*.c, each family listed in cpu_ops_fill), CUDA's table
(CUDA_OPS in backend/cuda/cuda_backend.cu); and backend/README.md's count ("N today") is that
number. Prints what differs; exit 1 if any.
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


def entries_of_table(path, name):
    text = path.read_text()
    body = re.search(r"BackendOps " + name + r" = \{(.*?)\n\};", text, re.S)
    if not body:
        fails.append(f"{path.relative_to(root)}: no table {name}")
        return None
    return re.findall(r"^\s*\.(\w+)\s*=", body.group(1), re.M)


ops = entries_of_struct((root / "backend/backend.h").read_text())
if len(set(ops)) != len(ops):
    fails.append("backend.h: an entry is declared twice")


def entries_of_families():
    """The CPU's registered entries, and the families cpu_ops_fill lists but no file defines
    (or files define but it does not list)."""
    got, defined = [], []
    for path in sorted((root / "backend/cpu").glob("*.c")):
        text = path.read_text()
        for m in re.finditer(r"^void (cpu_\w+_ops)\(BackendOps \*t, BackendDType act\) \{(.*?)^\}", text, re.M | re.S):
            defined.append(m.group(1))
            got += re.findall(r"^\s*t->(\w+) =", m.group(2), re.M)
    fill = re.search(r"families\[\]\)\(BackendOps \*, BackendDType\) = \{(.*?)\};",
                     (root / "backend/cpu/cpu_ops.c").read_text(), re.S)
    listed = re.findall(r"\w+", fill.group(1)) if fill else []
    for f in sorted(set(defined) ^ set(listed)):
        fails.append(f"backend/cpu: family {f} is {'not listed in cpu_ops_fill' if f in defined else 'listed but not defined'}")
    return got


tables = [("backend/cpu/*.c", None), ("backend/cuda/cuda_backend.cu", "CUDA_OPS")]
for rel, name in tables:
    if name is None:
        got, name = entries_of_families(), "the op families"
    else:
        path = root / rel
        if not path.exists():
            continue
        got = entries_of_table(path, name)
        if got is None:
            continue
    missing = [o for o in ops if o not in got]
    extra = [o for o in got if o not in ops]
    twice = sorted({o for o in got if got.count(o) > 1})
    for what, names in (("missing", missing), ("not in BackendOps", extra), ("twice", twice)):
        if names:
            fails.append(f"{rel}: {name} {what}: {', '.join(names)}")
    print(f"{rel}: {name} fills {len(got)} entries")
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
