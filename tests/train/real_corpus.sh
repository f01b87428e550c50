#!/usr/bin/env bash
# tests/train/real_corpus.sh MPIEXEC MEGAC: on real text (Debian's fortunes, byte tokens) a
# small GPT's validation loss falls well below the corpus's unigram entropy (the loss of a
# model that knows only token frequencies, printed by `megac preprocess`). 2 ranks (DP 2)
# read the HDF5 file in parallel.
set -uo pipefail
mpiexec="$1" megac="$2"
F=/usr/share/games/fortunes
[[ -f $F/fortunes ]] || { echo "fortunes not installed (apt-get install fortunes): skipped"; exit 77; }
wd=$(mktemp -d); trap 'rm -rf "$wd"' EXIT
"$megac" preprocess --input $F/fortunes $F/literature $F/science $F/wisdom $F/people \
  --output "$wd/f.h5" --doc-separator % > "$wd/pre.txt" || { cat "$wd/pre.txt"; exit 1; }
h=$(sed -n 's/.*unigram entropy \([0-9.]*\) nats.*/\1/p' "$wd/pre.txt")
"$mpiexec" -n 2 "$megac" train --data-path "$wd/f.h5" --split 949,50,1 --num-threads 1 \
  --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 64 --micro-batch-size 8 \
  --global-batch-size 16 --train-iters 400 --lr 3e-3 --min-lr 3e-4 --lr-warmup-iters 10 \
  --log-interval 100 --eval-interval 100 --eval-iters 8 > "$wd/train.txt" 2>&1 \
  || { tail "$wd/train.txt"; exit 1; }
grep "validation loss" "$wd/train.txt"
v=$(grep "validation loss at iteration 400 |" "$wd/train.txt" | sed 's/.*lm loss value: \([0-9.E+-]*\) .*/\1/')
python3 -c "
h, v = $h, float('$v')
print(f'unigram entropy {h:.4f} nats/token; validation loss after 400 iterations {v:.4f}')
assert v < h - 0.5, 'the validation loss is not well below the unigram entropy'
print('real_corpus: ok')"
