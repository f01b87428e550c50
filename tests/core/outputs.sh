#!/usr/bin/env bash
# tests/core/outputs.sh MEGAC: every command's output path goes through the one guard
# (core/outpath.h): an output naming a checkpoint, a data file, an input or another model's
# folder is refused with one line naming the flag (exit 2) before any work, and the file is
# left byte for byte as it was; a refused write never leaves a temporary file.
set -uo pipefail
megac="$1"
wd=$(mktemp -d); trap 'rm -rf "$wd"' EXIT
n_bad=0
# refused "WHAT" PATTERN FILE CMD...: CMD exits 2 with one stderr line matching PATTERN, FILE unchanged.
refused() {
  local what="$1" pat="$2" file="$3"; shift 3
  local before; before=$(cksum < "$file" 2>/dev/null || echo none)
  "$@" > "$wd/out" 2> "$wd/err"; local rc=$?
  local after; after=$(cksum < "$file" 2>/dev/null || echo none)
  if [[ $rc -ne 2 ]] || ! grep -q -- "$pat" "$wd/err" || [[ $(wc -l < "$wd/err") -ne 1 ]] || [[ "$before" != "$after" ]]; then
    echo "FAIL: $what: exit $rc (want 2), one line matching '$pat', $file unchanged ($before / $after):"
    cat "$wd/err"; n_bad=$((n_bad + 1))
  else
    echo "ok: $what: $(cat "$wd/err")"
  fi
}
"$megac" train --mock-data --mock-vocab-size 300 --num-layers 1 --hidden-size 16 --num-attention-heads 2 \
  --seq-length 8 --micro-batch-size 1 --global-batch-size 1 --train-iters 2 --num-threads 1 \
  --save "$wd/ck" > /dev/null 2>&1 || { echo "FAIL: train"; exit 1; }
ckfile="$wd/ck/iter_0000002/checkpoint.h5"
printf 'hello world\nsecond line\n' > "$wd/in.txt"
"$megac" preprocess --input "$wd/in.txt" --output "$wd/data.h5" > /dev/null || { echo "FAIL: preprocess"; exit 1; }

refused "generate --dump-logits onto the checkpoint" "--dump-logits $ckfile is part of a checkpoint" "$ckfile" \
  "$megac" generate --load "$wd/ck" --prompt-ids 1,2 --max-new-tokens 1 --dump-logits "$ckfile"
refused "generate --dump-logits onto latest" "is part of a checkpoint" "$wd/ck/latest_checkpointed_iteration.txt" \
  "$megac" generate --load "$wd/ck" --prompt-ids 1,2 --max-new-tokens 1 --dump-logits "$wd/ck/latest_checkpointed_iteration.txt"
refused "generate --dump-logits onto a dataset" "--dump-logits $wd/data.h5 is a data or model file" "$wd/data.h5" \
  "$megac" generate --load "$wd/ck" --prompt-ids 1,2 --max-new-tokens 1 --dump-logits "$wd/data.h5"
refused "train --log-json onto a dataset" "--log-json $wd/data.h5 is a data or model file" "$wd/data.h5" \
  "$megac" train --mock-data --num-layers 1 --hidden-size 16 --num-attention-heads 2 --seq-length 8 \
  --micro-batch-size 1 --global-batch-size 1 --train-iters 1 --num-threads 1 --log-json "$wd/data.h5"
refused "plan --calibrate onto a dataset" "--calibrate $wd/data.h5 is a data or model file" "$wd/data.h5" \
  "$megac" plan --world-size 1 --calibrate "$wd/data.h5" --device cpu
refused "preprocess --output onto its input" "--output $wd/in.txt is the input $wd/in.txt" "$wd/in.txt" \
  "$megac" preprocess --input "$wd/in.txt" --output "$wd/in.txt"
refused "preprocess --output onto the checkpoint" "is part of a checkpoint" "$ckfile" \
  "$megac" preprocess --input "$wd/in.txt" --output "$ckfile"
refused "tokenizer --output onto its input" "--output $wd/in.txt is the same file as --input's" "$wd/in.txt" \
  "$megac" tokenizer train --input "$wd/in.txt" --vocab-size 260 --output "$wd/in.txt"
mkdir "$wd/other"; echo '{"model_type": "bert"}' > "$wd/other/config.json"
refused "export into another model's folder" "--output $wd/other holds another program's files" "$wd/other/config.json" \
  "$megac" export --load "$wd/ck" --output "$wd/other"
refused "export --output a file" "--output $wd/in.txt is a file, not a folder" "$wd/in.txt" \
  "$megac" export --load "$wd/ck" --output "$wd/in.txt"
# what is allowed: a fresh path, an earlier export, an earlier --dump-logits, a dataset rebuilt
"$megac" export --load "$wd/ck" --output "$wd/hf" > /dev/null && "$megac" export --load "$wd/ck" --output "$wd/hf" > /dev/null \
  || { echo "FAIL: export twice into the same folder"; n_bad=$((n_bad + 1)); }
"$megac" generate --load "$wd/ck" --prompt-ids 1,2 --max-new-tokens 1 --dump-logits "$wd/logits.bin" > /dev/null &&
  "$megac" generate --load "$wd/ck" --prompt-ids 1,2 --max-new-tokens 1 --dump-logits "$wd/logits.bin" > /dev/null \
  || { echo "FAIL: --dump-logits twice"; n_bad=$((n_bad + 1)); }
[[ $(stat -c %s "$wd/logits.bin") == $((3 * 300 * 4)) ]] || { echo "FAIL: logits.bin holds $(stat -c %s "$wd/logits.bin") bytes, want 3 positions x 300 x 4"; n_bad=$((n_bad + 1)); }
"$megac" preprocess --input "$wd/in.txt" --output "$wd/data.h5" > /dev/null || { echo "FAIL: preprocess again"; n_bad=$((n_bad + 1)); }
[[ -z "$(find "$wd" -name '*.tmp.*')" ]] || { echo "FAIL: temporary files left: $(find "$wd" -name '*.tmp.*')"; n_bad=$((n_bad + 1)); }
echo "ok: fresh paths, an earlier export, --dump-logits and a rebuilt dataset are written"
((n_bad == 0)) || { echo "$n_bad case(s) failed"; exit 1; }
