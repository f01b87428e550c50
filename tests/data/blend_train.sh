#!/usr/bin/env bash
# tests/data/blend_train.sh: `megac train` on weighted blends of token files (Megatron's
# --data-path W1 F1 W2 F2 syntax and --train-data-path/--valid-data-path):
#   a blend trains the same model on 1 rank and on TP 2 x DP 2 (parity.py, fp32 round-off);
#   the start banner lists each file with its weight, documents, samples and epochs;
#   --train-data-path/--valid-data-path run, and validate only when validation files are given;
#   bad blends (odd count, a bad weight, files with different vocabularies, validation files
#   alone, both kinds of flag) are refused with one line and exit 2 before any work.
# usage: blend_train.sh MEGAC MPIEXEC PARITY_PY
set -uo pipefail
megac=$1 mpiexec=$2 parity=$3
source "$(dirname "$0")/../lib.sh"
lib_tmpdir blend

# Two byte-level corpora that differ (letters vs digits), a third with another vocabulary.
python3 - "$tmp" <<'PY'
import random, sys
d = sys.argv[1]
r = random.Random(5)
for name, alphabet in (("a", "abcdefgh "), ("b", "0123456789 ")):
    with open(f"{d}/{name}.txt", "w") as f:
        for i in range(300):
            f.write("".join(r.choice(alphabet) for _ in range(r.randint(20, 120))) + "\n%\n")
PY
"$megac" preprocess --input "$tmp/a.txt" --doc-separator % --output "$tmp/a.h5" >/dev/null || fail "preprocess a"
"$megac" preprocess --input "$tmp/b.txt" --doc-separator % --output "$tmp/b.h5" >/dev/null || fail "preprocess b"
"$megac" tokenizer train --input "$tmp/a.txt" --doc-separator % --vocab-size 280 --output "$tmp/tok.json" >/dev/null &&
  "$megac" preprocess --input "$tmp/a.txt" --doc-separator % --tokenizer "$tmp/tok.json" --output "$tmp/c.h5" >/dev/null ||
  fail "preprocess c"

tiny=(--train-iters 20 --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32
      --micro-batch-size 2 --global-batch-size 8 --lr 1e-3 --log-interval 100 --eval-iters 0)
blend=(--data-path 0.3 "$tmp/a.h5" 0.7 "$tmp/b.h5" --split 90,10,0)

# Parity: one rank against TP 2 x DP 2 and PP 2 x DP 2 on the blend.
python3 "$parity" --megac "$megac" --mpiexec "$mpiexec" --tol 1e-5 --layouts 1,1,1 2,1,2 1,2,2 \
  -- "${tiny[@]}" "${blend[@]}" || fail "blend parity"

# The banner names both files with their weights; validation runs on the blend.
expect 0 "weight 0.7000  $tmp/b.h5" "$mpiexec" -n 2 "$megac" train --num-threads 1 "${tiny[@]}" \
  --train-iters 4 --eval-iters 2 --eval-interval 4 "${blend[@]}"
expect 0 "validation loss" "$mpiexec" -n 2 "$megac" train --num-threads 1 "${tiny[@]}" \
  --train-iters 4 --eval-iters 2 --eval-interval 4 "${blend[@]}"
# Whole files per split: trains; validates on --valid-data-path; none without it.
expect 0 "valid weight 1.0000  $tmp/b.h5" "$mpiexec" -n 2 "$megac" train --num-threads 1 "${tiny[@]}" \
  --train-iters 4 --eval-iters 2 --eval-interval 4 --train-data-path "$tmp/a.h5" --valid-data-path "$tmp/b.h5"
out=$("$mpiexec" -n 1 "$megac" train --num-threads 1 "${tiny[@]}" --train-iters 4 --eval-iters 2 \
      --eval-interval 2 --train-data-path 1 "$tmp/a.h5" 1 "$tmp/b.h5" 2>&1) || fail "--train-data-path blend: $out"
grep -q "validation loss" <<<"$out" && fail "validated without --valid-data-path"

# The test split is evaluated once at the end, as Megatron prints it; a test share too small
# for one sample (the default 969,30,1 on small files) is left out without an error.
expect 0 "validation loss at iteration 4 on test set" "$mpiexec" -n 2 "$megac" train --num-threads 1 \
  "${tiny[@]}" --train-iters 4 --eval-iters 2 --eval-interval 4 --data-path 0.3 "$tmp/a.h5" 0.7 "$tmp/b.h5" --split 80,10,10
out=$("$mpiexec" -n 1 "$megac" train --num-threads 1 "${tiny[@]}" --train-iters 2 --eval-iters 1 \
      --data-path "$tmp/a.h5" 2>&1) || fail "default split on a small file: $out"
grep -q "on test set" <<<"$out" && fail "a test split too small for one sample was evaluated"
out=$("$mpiexec" -n 1 "$megac" train --num-threads 1 "${tiny[@]}" --train-iters 2 --eval-iters 1 \
      --train-data-path "$tmp/a.h5" --test-data-path "$tmp/b.h5" 2>&1) || fail "--test-data-path: $out"
grep -q "on test set" <<<"$out" && ! grep -qE "validation loss at iteration [0-9]+ \|" <<<"$out" ||
  fail "--test-data-path without --valid-data-path: want a test loss and no validation: $out"

# Bad blends: one line, exit 2.
expect 2 "a blend is pairs of a weight and a file" "$megac" train "${tiny[@]}" --data-path 0.3 "$tmp/a.h5" 0.7
expect 2 "weight 2 ('x') is not a non-negative number" "$megac" train "${tiny[@]}" \
  --data-path 0.3 "$tmp/a.h5" x "$tmp/b.h5"
expect 2 "the blend's files disagree on the vocabulary: $tmp/a.h5 has 257 ids" "$mpiexec" -n 2 "$megac" train \
  "${tiny[@]}" --data-path 0.5 "$tmp/a.h5" 0.5 "$tmp/c.h5"
expect 2 "--valid-data-path / --test-data-path need --train-data-path" "$megac" train "${tiny[@]}" --valid-data-path "$tmp/a.h5"
expect 2 "not both" "$megac" train "${tiny[@]}" --data-path "$tmp/a.h5" --train-data-path "$tmp/b.h5"
expect 2 "$tmp/missing.h5" "$megac" train "${tiny[@]}" --data-path 0.5 "$tmp/a.h5" 0.5 "$tmp/missing.h5"

lib_done blend_train
