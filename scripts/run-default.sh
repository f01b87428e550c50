#!/usr/bin/env bash
# scripts/run-default.sh: the README's main job on the built-in default.
#   1. install packages and build (scripts/setup.sh, scripts/build.sh);
#   2. preprocess Debian's fortunes corpus (package `fortunes`, documents separated by "%")
#      into out/fortunes.h5 with the byte-level tokenizer;
#   3. train a small GPT (4 layers, 128 wide, 128-token context) on it for 300 iterations on
#      this machine's cores, evaluating on the validation split and saving a checkpoint in
#      out/checkpoints. Run again, it resumes from out/checkpoints (e.g. after Ctrl-C, which
#      saves a checkpoint and stops cleanly, or with --train-iters 1000 to train on) and
#      appends to out/train_log.jsonl; FRESH=1 starts over (the old checkpoints are kept
#      aside in out/checkpoints.old.N and the log continues with a run_start record);
#   4. print a few samples from the trained model (megac generate on the latest checkpoint).
# Extra arguments go to `megac train` (e.g. --train-iters 1000). Set RANKS=N (and TP/PP)
# to run N MPI ranks through build/scripts/megac-mpiexec.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh build
mkdir -p out
corpus=()
for f in /usr/share/games/fortunes/*; do
  [[ -f "$f" && "$f" != *.dat && "$f" != *.u8 ]] && corpus+=("$f")
done
# Written once: a resumed run reads the same tokens (delete the file to rebuild it).
if [[ ! -s out/fortunes.h5 ]]; then
  build/megac/megac preprocess --input "${corpus[@]}" --output out/fortunes.h5 --doc-separator %
fi
resume=()
if [[ -s out/checkpoints/latest_checkpointed_iteration.txt ]]; then
  if [[ "${FRESH:-0}" == 1 ]]; then
    n=1; while [[ -e out/checkpoints.old.$n ]]; do n=$((n + 1)); done
    mv out/checkpoints "out/checkpoints.old.$n"
    echo "run-default: FRESH=1: starting over; the previous checkpoints are in out/checkpoints.old.$n"
  else
    resume=(--load out/checkpoints)
    echo "run-default: resuming from out/checkpoints at iteration $(cat out/checkpoints/latest_checkpointed_iteration.txt) (FRESH=1 starts over)"
  fi
fi
launch=(build/megac/megac)
if [[ -n "${RANKS:-}" ]]; then
  launch=(build/scripts/megac-mpiexec -n "$RANKS" build/megac/megac)
fi
"${launch[@]}" train --data-path out/fortunes.h5 --split 949,50,1 \
  --tensor-model-parallel-size "${TP:-1}" --pipeline-model-parallel-size "${PP:-1}" \
  --num-layers 4 --hidden-size 128 --num-attention-heads 4 --seq-length 128 \
  --micro-batch-size 8 --global-batch-size 16 --train-iters 300 \
  --lr 2e-3 --min-lr 2e-4 --lr-warmup-iters 20 --lr-decay-style cosine --weight-decay 0.1 \
  --clip-grad 1.0 --log-interval 25 --eval-interval 100 --eval-iters 8 \
  --save out/checkpoints --log-json out/train_log.jsonl "${resume[@]}" "$@"
# What the model learned: three continuations, sampled (temperature 0.8, top-k 40, fixed seeds).
echo "run-default: samples from the model in out/checkpoints (megac generate):"
seed=1
for prompt in "The " "You will " "Q: "; do
  build/megac/megac generate --load out/checkpoints --tokenizer out/fortunes.h5 --prompt "$prompt" \
    --max-new-tokens 120 --temperature 0.8 --top-k 40 --seed "$seed"
  echo
  seed=$((seed + 1))
done
