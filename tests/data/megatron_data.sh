#!/usr/bin/env bash
# tests/data/megatron_data.sh: Megatron .bin/.idx prefixes as --data-path, read directly.
#   A prefix trains in Megatron-Core's sample order (data/sampler.h; token for token against
#   Megatron-Core itself: megatron_order.sh), so its losses are not the HDF5 copy's (megac's
#   order) but agree between 1 rank and DP 2 (every rank maps the .bin; fp32 round-off); the
#   corpus preprocessed by megac and its `preprocess --from-megatron` import train bitwise the
#   same. A blend mixing a prefix and an HDF5 file takes megac's blend rule: its positions on
#   the HDF5 file hold exactly the samples of the all-HDF5 blend's (`megac data samples`).
#   The import keeps the tokens exactly (no EOD added; a notice counts the documents without
#   one), and training on such a prefix prints the same kind of notice.
#   A prefix without --vocab-size, --vocab-size disagreeing with an HDF5 file, and a missing
#   path are refused with one line and exit 2.
# usage: megatron_data.sh MEGAC MPIEXEC
set -uo pipefail
megac=$1 mpiexec=$2
source "$(dirname "$0")/../lib.sh"
lib_tmpdir mdata

# One corpus in two forms: JSON Lines (megac's byte tokenizer: the bytes, then EOD 256) and
# Megatron prefixes written as Megatron's indexed writer does (uint16, code 8; some documents
# of two sequences, as --split-sentences makes them): "m" ends documents with 256, "raw" not.
lib_corpus "$tmp" 7 200 20 90 "abcdefgh "
lib_megatron_prefix "$tmp/c.jsonl" "$tmp/m" eod split
lib_megatron_prefix "$tmp/c.jsonl" "$tmp/raw" split
"$megac" preprocess --input "$tmp/c.jsonl" --output "$tmp/c.h5" >/dev/null || fail "preprocess c.jsonl"
"$megac" preprocess --from-megatron "$tmp/m" --vocab-size 256 --output "$tmp/imp.h5" > "$tmp/imp.txt" ||
  fail "import m"
grep -q "notice" "$tmp/imp.txt" && fail "import of a corpus with EOD gave a notice: $(cat "$tmp/imp.txt")"
expect 0 "notice: 200 of the 200 documents do not end with the end-of-document id 256" \
  "$megac" preprocess --from-megatron "$tmp/raw" --vocab-size 256 --output "$tmp/raw.h5"
# the import of "raw" holds the corpus bytes exactly: 200 documents, no EOD added
n=$(python3 -c "import json; print(sum(len(json.loads(l)['text']) for l in open('$tmp/c.jsonl')))")
grep -q "wrote $tmp/raw.h5: 200 documents, $n tokens" <<<"$("$megac" preprocess --from-megatron "$tmp/raw" \
  --vocab-size 256 --output "$tmp/raw.h5")" || fail "raw import: want 200 documents, $n tokens"

tiny=(--train-iters 6 --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 32
      --micro-batch-size 2 --global-batch-size 8 --lr 1e-3 --log-interval 1 --eval-iters 2
      --eval-interval 3 --split 90,10,0 --num-threads 1)
losses() {  # losses NAME NP ARGS...: every lm_loss and validation loss, as printed in the JSON log
  local name=$1 np=$2; shift 2
  "$mpiexec" -n "$np" "$megac" train "${tiny[@]}" --log-json "$tmp/$name.jsonl" "$@" > "$tmp/$name.out" 2>&1 ||
    { fail "$name: $(tail -5 "$tmp/$name.out")"; return; }
  grep -oE '"(lm_loss|validation_loss|loss)":[^,}]*' "$tmp/$name.jsonl" > "$tmp/$name.loss"
  [[ -s "$tmp/$name.loss" ]] || fail "$name: no losses logged"
}
losses h5 1 --data-path "$tmp/c.h5"
losses prefix 1 --data-path "$tmp/m" --vocab-size 256
losses import 1 --data-path "$tmp/imp.h5"
losses prefix_dp2 2 --data-path "$tmp/m" --vocab-size 256
losses h5_dp2 2 --data-path "$tmp/c.h5"
cmp -s "$tmp/h5.loss" "$tmp/import.loss" || fail "import and HDF5 differ"
cmp -s "$tmp/h5.loss" "$tmp/prefix.loss" && fail "the prefix trained in megac's HDF5 order, not Megatron's"
python3 - "$tmp/prefix.loss" "$tmp/prefix_dp2.loss" <<'PY' || fail "prefix: DP 2 differs from 1 rank"
import sys
a, b = ([float(l.split(":")[1]) for l in open(f)] for f in sys.argv[1:])
sys.exit(not (len(a) == len(b) > 0 and all(abs(x - y) <= 1e-5 * abs(x) for x, y in zip(a, b))))
PY
grep -q "notice" "$tmp/prefix.out" && fail "EOD notice for a corpus with EOD"
# a blend of a prefix and an HDF5 file (megac's blend rule): the HDF5 file's positions hold
# the samples of the blend of the two HDF5 files
losses blend_mixed 1 --data-path 0.3 "$tmp/m" 0.7 "$tmp/imp.h5" --vocab-size 256
samples=(--seq-length 32 --global-batch-size 8 --train-iters 6 --split 90,10,0 --vocab-size 256)
"$megac" data samples --first 48 --output "$tmp/bh.bin" "${samples[@]}" --data-path 0.3 "$tmp/c.h5" 0.7 \
  "$tmp/imp.h5" > /dev/null || fail "data samples of the HDF5 blend"
"$megac" data samples --first 48 --output "$tmp/bm.bin" "${samples[@]}" --data-path 0.3 "$tmp/m" 0.7 \
  "$tmp/imp.h5" > /dev/null || fail "data samples of the mixed blend"
python3 - "$tmp/bh.bin" "$tmp/bm.bin" <<'PY' || fail "mixed blend: the HDF5 file's samples changed"
import sys
h, m = (open(f, "rb").read() for f in sys.argv[1:])
row, n, w, got = 33 * 4, [0, 0], [0.3, 0.7], []
for i in range(48):  # blend.h step 2: the file whose share is most behind
    k = max(range(2), key=lambda k: (w[k] * (i + 1) - n[k], -k))
    n[k] += 1
    got.append((k, h[i * row:(i + 1) * row] == m[i * row:(i + 1) * row]))
sys.exit(not (len(h) == len(m) == 48 * row and all(eq for k, eq in got if k == 1) and
              not all(eq for k, eq in got if k == 0)))
PY
expect 2 "data samples: --first 'x' is not a positive whole number" "$megac" data samples --first x --output "$tmp/x.bin"
expect 2 "data samples: --first 49, but the training order has 48 samples" \
  "$megac" data samples --first 49 --output "$tmp/x.bin" "${samples[@]}" --data-path "$tmp/m"
expect 2 "data samples: $tmp/no/x.bin: No such file or directory" \
  "$megac" data samples --first 4 --output "$tmp/no/x.bin" "${samples[@]}" --data-path "$tmp/m"
# a prefix without EOD trains, with a notice
expect 0 "notice: $tmp/raw: 200 of 200 documents checked do not end with the end-of-document id 256" \
  "$megac" train "${tiny[@]}" --train-iters 2 --data-path "$tmp/raw" --vocab-size 256

expect 2 "$tmp/m: a Megatron .bin/.idx dataset carries no vocabulary: give --vocab-size" \
  "$megac" train "${tiny[@]}" --data-path "$tmp/m"
expect 2 "--vocab-size 300 means 301 ids (the end of document included), but $tmp/c.h5 has 257" \
  "$megac" train "${tiny[@]}" --data-path "$tmp/c.h5" --vocab-size 300
expect 2 "$tmp/m.bin: the token at position" "$megac" train "${tiny[@]}" --data-path "$tmp/m" --vocab-size 200
expect 2 "$tmp/nope: No such file or directory (neither an HDF5 token file nor a Megatron prefix" \
  "$mpiexec" -n 2 "$megac" train "${tiny[@]}" --data-path "$tmp/nope"

lib_done megatron_data
