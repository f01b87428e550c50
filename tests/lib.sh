# tests/lib.sh: the preamble the shell tests share, sourced as
#   source "$(dirname "$0")/../lib.sh"
# It defines no test of its own. What it gives:
#   lib_tmpdir NAME             sets $tmp to a new /tmp/megac-test-NAME-XXXXXX, removed at exit
#                               unless KEEP is set (then kept for a look after a failure)
#   fail MSG...                 prints "FAIL: MSG" on stderr and counts it in $fails
#   expect RC NEEDLE CMD...     runs CMD; a failure unless it exits RC and prints NEEDLE
#   lib_done NAME               "NAME: ok", or "NAME: N failure(s)" and exit 1
#   lib_corpus DIR SEED N MIN MAX ALPHABET
#                               DIR/c.jsonl: N documents of MIN..MAX characters drawn from
#                               ALPHABET by random.Random(SEED), one {"text": ...} a line
#   lib_megatron_prefix JSONL PREFIX [eod] [split]
#                               PREFIX.bin/.idx: JSONL's texts as Megatron's indexed writer
#                               writes them (byte ids as uint16, dtype code 8); eod: each
#                               document ends with the id 256; split: every third document
#                               is two sequences (its first 10 ids, the rest), as
#                               --split-sentences makes them
fails=0

lib_tmpdir() {
  tmp=$(mktemp -d "/tmp/megac-test-$1-XXXXXX")
  [[ -n "${KEEP:-}" ]] || trap 'rm -rf "$tmp"' EXIT
}

fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }

expect() {
  local want=$1 needle=$2; shift 2
  local out rc
  out=$("$@" 2>&1); rc=$?
  [[ $rc -eq $want ]] || { fail "$* -> exit $rc, want $want: ${out: -2000}"; return; }
  grep -qF -- "$needle" <<<"$out" || fail "$* -> output lacks '$needle': ${out: -2000}"
}

lib_done() {
  if ((fails)); then echo "$1: $fails failure(s)"; exit 1; fi
  echo "$1: ok"
}

lib_corpus() {
  python3 - "$@" <<'PY'
import json, random, sys
d, seed, n, lo, hi, alphabet = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
r = random.Random(seed)
docs = ["".join(r.choice(alphabet) for _ in range(r.randint(lo, hi))) for _ in range(n)]
with open(f"{d}/c.jsonl", "w") as f:
    for t in docs:
        f.write(json.dumps({"text": t}) + "\n")
PY
}

lib_megatron_prefix() {
  python3 - "$@" <<'PY'
import json, struct, sys
src, prefix, opts = sys.argv[1], sys.argv[2], sys.argv[3:]
eod, split = "eod" in opts, "split" in opts
sizes, doc_idx, body = [], [0], bytearray()
for i, line in enumerate(open(src)):
    ids = list(json.loads(line)["text"].encode()) + ([256] if eod else [])
    parts = [ids[:10], ids[10:]] if split and i % 3 == 0 else [ids]
    for p in parts:
        sizes.append(len(p))
        body += struct.pack(f"<{len(p)}H", *p)
    doc_idx.append(len(sizes))
ptrs, at = [], 0
for s in sizes:
    ptrs.append(at)
    at += 2 * s
open(f"{prefix}.bin", "wb").write(body)
with open(f"{prefix}.idx", "wb") as f:
    f.write(b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, 8, len(sizes), len(doc_idx)))
    f.write(struct.pack(f"<{len(sizes)}i", *sizes) + struct.pack(f"<{len(ptrs)}q", *ptrs))
    f.write(struct.pack(f"<{len(doc_idx)}q", *doc_idx))
PY
}
