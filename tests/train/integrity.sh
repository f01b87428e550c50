#!/usr/bin/env bash
# tests/train/integrity.sh MPIEXEC MEGAC TAMPER: checksums (issue 15). Checkpoint tensors and
# token chunks carry HDF5's Fletcher-32 checksums; one flipped bit inside a tensor's data or a
# token chunk stops the run with exit 2 and one line naming the file and the dataset (no HDF5
# error stack), instead of silently changing the loss. Files without checksums (written by an
# older megac; made here with h5repack -f NONE -l CONTI) still load.
set -uo pipefail
mpiexec="$1" megac="$2" tamper="$3"
wd=$(mktemp -d)
trap 'rm -rf "$wd"' EXIT
fail() { echo "FAIL: $*"; tail -5 "$wd/out.txt" 2>/dev/null; exit 1; }
flags=(--num-threads 1 --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32
       --micro-batch-size 2 --global-batch-size 8 --lr 1e-3 --eval-iters 0)
run() { timeout 60 "$mpiexec" -n 2 "$megac" train "${flags[@]}" "$@" >"$wd/out.txt" 2>&1; }
# one_line CODE TEXT ARGS...: exit CODE, TEXT on the run's only "megac:" line, no HDF5 stack.
one_line() {
  local code="$1" text="$2"; shift 2
  run "$@"; local rc=$?
  [[ $rc -eq $code ]] || fail "exit $rc, want $code: $*"
  [[ $(grep -c "megac:" "$wd/out.txt") == 1 ]] || fail "want one megac: line, got $(grep -c "megac:" "$wd/out.txt")"
  grep -qF -- "$text" "$wd/out.txt" || fail "no '$text'"
  ! grep -q "HDF5-DIAG" "$wd/out.txt" || fail "HDF5 error stack printed"
  echo "  $(grep "megac:" "$wd/out.txt")"
}

# Checkpoint: a bit flipped in a moment and in a parameter (TP 2: both ranks read them).
run --mock-data --tensor-model-parallel-size 2 --train-iters 4 --save "$wd/ck" || fail "first run"
file="$wd/ck/iter_0000004/checkpoint.h5"
cp "$file" "$wd/good.h5"
h5dump -H -p -d /model/wte "$file" | grep -q FLETCHER32 || fail "/model/wte has no Fletcher-32 filter"
for ds in /model/layers.1.attn.qkv.weight /optim/exp_avg_sq/wte; do
  cp "$wd/good.h5" "$file"
  "$tamper" "$file" flip "$ds" >/dev/null || fail "tamper $ds"
  one_line 2 "megac: $file: dataset $ds: checksum mismatch (Fletcher-32): the file is damaged" \
    --mock-data --tensor-model-parallel-size 2 --train-iters 6 --load "$wd/ck"
done
# Without checksums (an older megac's contiguous, unfiltered datasets): loads and continues.
h5repack -f NONE -l CONTI "$wd/good.h5" "$file" || fail "h5repack"
h5dump -H -p -d /model/wte "$file" | grep -q FLETCHER32 && fail "h5repack kept the filter"
run --mock-data --tensor-model-parallel-size 2 --train-iters 6 --load "$wd/ck" || fail "an unchecksummed checkpoint does not load"
grep -q "loaded checkpoint" "$wd/out.txt" || fail "no 'loaded checkpoint' line"
echo "ok: a flipped bit in a checkpoint tensor: exit 2, one line naming file and dataset; old files load"

# Metadata: checkpoints are HDF5 1.8+ files (superblock v2, checksummed object headers), so a
# byte changed in the root group's attributes (here inside the num_attention_heads value, which
# would otherwise load as another model) fails the header's checksum: exit 2, one line.
[[ "$(h5dump -B -H "$wd/good.h5")" == *"SUPERBLOCK_VERSION 2"* ]] || fail "checkpoint not written with superblock v2"
python3 - "$wd/good.h5" "$file" <<'PY' || fail "could not change the attribute's byte"
import sys
d = bytearray(open(sys.argv[1], "rb").read())
i = d.find(b"num_attention_heads")
j = d.find(b"\x04" + b"\x00" * 7, i)  # the int64 value 4, after the name
assert i > 0 and 0 < j - i < 64, (i, j)
d[j] = 2
open(sys.argv[2], "wb").write(d)
PY
one_line 2 "megac: $file: the root group's attributes do not read (HDF5 metadata damaged): the file is damaged" \
  --mock-data --tensor-model-parallel-size 2 --train-iters 6 --load "$wd/ck"
echo "ok: a changed byte in a checkpoint's attributes: exit 2, one line"

# Tokens: a bit flipped inside a chunk of /tokens, and of /doc_offsets.
python3 -c "
import random, sys
random.seed(1)
with open(sys.argv[1], 'w') as f:
    for i in range(3000):
        f.write(' '.join(random.choice(['alpha', 'beta', 'gamma', 'delta']) for _ in range(60)) + '\n%\n')
" "$wd/c.txt"
"$megac" preprocess --input "$wd/c.txt" --output "$wd/good_data.h5" --doc-separator % >/dev/null || fail "preprocess"
h5dump -H -p -d /tokens "$wd/good_data.h5" | grep -q FLETCHER32 || fail "/tokens has no Fletcher-32 filter"
cp "$wd/good_data.h5" "$wd/d.h5"
"$tamper" "$wd/d.h5" flip /tokens >/dev/null || fail "tamper /tokens"
one_line 2 "$wd/d.h5: dataset /tokens: checksum mismatch (Fletcher-32) in the chunk holding tokens" \
  --data-path "$wd/d.h5" --train-iters 30
cp "$wd/good_data.h5" "$wd/d.h5"
"$tamper" "$wd/d.h5" flip /doc_offsets >/dev/null || fail "tamper /doc_offsets"
one_line 2 "megac: $wd/d.h5: dataset /doc_offsets: checksum mismatch (Fletcher-32): the file is damaged" \
  --data-path "$wd/d.h5" --train-iters 30
h5repack -f NONE "$wd/good_data.h5" "$wd/d.h5" || fail "h5repack tokens"
run --data-path "$wd/d.h5" --train-iters 30 || fail "an unchecksummed token file does not load"
echo "ok: a flipped bit in a token chunk or doc_offsets: exit 2, one line; old files load"
