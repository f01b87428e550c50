#!/usr/bin/env bash
# tests/train/megatron_examples.sh MPIEXEC MEGAC: Megatron-LM's own launch scripts, run by
# `megac train` with only sizes, paths and the world size changed (issue 29's "done when").
# The argument lists below are those of Megatron-LM's examples (facts of their command
# lines, kept as the scripts write them: bash arrays expanded unquoted, so quoted entries
# split into words as they do under torchrun), with each changed value marked "# was ...".
#   examples/gpt3/train_gpt3_175b_distributed.sh: a Megatron .bin/.idx prefix with GPT-2's
#     vocab.json/merges.txt, --fp16 (on the CPU backend), the step batch-size schedule,
#     TensorBoard, --save/--load of the same folder;
#   examples/llama/train_llama3_8b_h100_fp8.sh: its MOCK data path (--mock-data with
#     NullTokenizer and --vocab-size), RoPE, GQA with --kv-channels, SwiGLU, RMSNorm with
#     --apply-layernorm-1p, untied embeddings, sample-based schedule, --decoupled-lr,
#     --calculate-per-token-loss, --bf16 with bf16 gradient reduction, the distributed
#     optimizer with both overlaps, --sequence-parallel, TensorBoard, profiling flags; its
#     DTYPE set to bf16 (fp8 is refused: megac has no fp8) and CP_SIZE 2 (a size);
#   each script: trains, validates, saves, and a second run resumes from the checkpoint.
set -uo pipefail
mpiexec="$1" megac="$2"
source "$(dirname "$0")/../lib.sh"
lib_tmpdir examples
wd=$tmp

# --- data: GPT-2's byte-level alphabet as a vocab.json (256 byte tokens, ids = byte values,
# then <|endoftext|> 256), no merges, and a Megatron prefix of the default corpus's kind of
# text written as Megatron's indexed writer does (uint16, code 8, every document ends with 256)
python3 - "$wd" <<'PY'
import json, random, sys
d = sys.argv[1]
bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
cs, n = bs[:], 0
for b in range(256):  # GPT-2's bytes_to_unicode: printable bytes stand for themselves
    if b not in bs:
        bs.append(b)
        cs.append(256 + n)
        n += 1
vocab = {chr(c): b for b, c in zip(bs, cs)}
vocab["<|endoftext|>"] = 256
json.dump(vocab, open(f"{d}/gpt2-vocab.json", "w"))
open(f"{d}/gpt2-merges.txt", "w").write("#version: 0.2\n")
r = random.Random(3)
words = "the a pipeline of ranks holds layers tensor parallel data gradients sum loss falls".split()
with open(f"{d}/corpus.jsonl", "w") as f:
    for _ in range(400):
        f.write(json.dumps({"text": " ".join(r.choice(words) for _ in range(r.randint(5, 40)))}) + "\n")
PY
lib_megatron_prefix "$wd/corpus.jsonl" "$wd/corpus_text_document" eod

# --- examples/gpt3/train_gpt3_175b_distributed.sh ------------------------------------------
gpt3() {  # gpt3 TRAIN_ITERS LOG: the script's command line
  local CHECKPOINT_PATH="$wd/gpt3/ckpt" TENSORBOARD_LOGS_PATH="$wd/gpt3/tb"
  local VOCAB_FILE="$wd/gpt2-vocab.json" MERGE_FILE="$wd/gpt2-merges.txt" DATA_PATH="$wd/corpus_text_document"
  local GPT_MODEL_ARGS=(
    --num-layers 2                  # was 96
    --hidden-size 64                # was 12288
    --num-attention-heads 4         # was 96
    --seq-length 64                 # was 2048
    --max-position-embeddings 64    # was 2048
    --attention-backend auto # Can use (flash/fused/unfused/local)
  )
  local TRAINING_ARGS=(
    --micro-batch-size 1
    --global-batch-size 8           # was 1536
    --step-batch-size-schedule "0:4 0.5K:8"  # was "0:16 2.4B:320 4.8B:624 7.2B:928 9.6B:1232 12B:1536"
    --train-iters "$1"              # was 500000
    --weight-decay 0.1
    --adam-beta1 0.9
    --adam-beta2 0.95
    --init-method-std 0.006
    --clip-grad 1.0
    --fp16
    --lr 6.0e-5
    --lr-decay-style cosine
    --min-lr 6.0e-6
    --lr-warmup-fraction .001
    --lr-decay-iters 24             # was 430000
  )
  local MODEL_PARALLEL_ARGS=(
    --tensor-model-parallel-size 2  # was 8
    --pipeline-model-parallel-size 2  # was 16
  )
  local DATA_ARGS=(
    --data-path $DATA_PATH
    --vocab-file $VOCAB_FILE
    --merge-file $MERGE_FILE
    --split 949,50,1
  )
  local EVAL_AND_LOGGING_ARGS=(
    --log-interval 1                # was 100
    --save-interval 12              # was 10000
    --eval-interval 12              # was 1000
    --save $CHECKPOINT_PATH
    --load $CHECKPOINT_PATH
    --eval-iters 2                  # was 10
    --tensorboard-dir $TENSORBOARD_LOGS_PATH
  )
  # was: torchrun ${DISTRIBUTED_ARGS[@]} pretrain_gpt.py (8 GPUs per node)
  timeout 300 "$mpiexec" -n 4 "$megac" train --num-threads 1 --log-json "$2" \
    ${GPT_MODEL_ARGS[@]} \
    ${TRAINING_ARGS[@]} \
    ${MODEL_PARALLEL_ARGS[@]} \
    ${DATA_ARGS[@]} \
    ${EVAL_AND_LOGGING_ARGS[@]}
}

# check NAME LOG OUT FIRST LAST: iterations FIRST..LAST trained, a validation, a checkpoint
check() {
  local name=$1 log=$2 out=$3 first=$4 last=$5
  python3 - "$log" "$first" "$last" <<'PY' || fail "$name: $(tail -3 "$out")"
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
its = [r["iteration"] for r in recs if "lm_loss" in r and "iteration" in r]
want = list(range(int(sys.argv[2]), int(sys.argv[3]) + 1))
assert its[-len(want):] == want, f"iterations {its}, want {want}"
assert any("validation" in json.dumps(r) for r in recs), "no validation record"
PY
  grep -q "validation loss at iteration" "$out" || fail "$name: no validation block"
  grep -q "saved checkpoint\|checkpoint saved" "$out" || fail "$name: no checkpoint saved: $(grep -i checkpoint "$out" | tail -2)"
}

mkdir -p "$wd/gpt3"
gpt3 12 "$wd/gpt3/a.jsonl" > "$wd/gpt3/a.out" 2>&1 || fail "gpt3: first run exited $?: $(grep -E 'megac|rror' "$wd/gpt3/a.out" | tail -3)"
check gpt3 "$wd/gpt3/a.jsonl" "$wd/gpt3/a.out" 1 12
gpt3 24 "$wd/gpt3/b.jsonl" > "$wd/gpt3/b.out" 2>&1 || fail "gpt3: resumed run exited $?: $(grep -E 'megac|rror' "$wd/gpt3/b.out" | tail -3)"
check gpt3 "$wd/gpt3/b.jsonl" "$wd/gpt3/b.out" 13 24
grep -q "loaded\|resum" "$wd/gpt3/b.out" || fail "gpt3: the second run did not load the checkpoint"
ls "$wd/gpt3/tb"/events.out.tfevents.* >/dev/null 2>&1 || fail "gpt3: no TensorBoard event file"
python3 - "$wd/gpt3/a.jsonl" "$wd/gpt3/b.jsonl" <<'PY' || fail "gpt3: batches or fp16 steps"
import json, sys
a, b = ([r for r in map(json.loads, open(f)) if "lm_loss" in r and "iteration" in r] for f in sys.argv[1:])
assert [r["global_batch_size"] for r in a[:3]] == [4, 4, 8], a[:3]  # 0.5K tokens = 8 samples of 64
taken = [r for r in a + b if not r["skipped"]]  # fp16 from a 2^32 scale: the first steps overflow
assert len(taken) >= 4, f"only {len(taken)} steps taken"
print(f"gpt3 example: {len(a)} + {len(b)} iterations ({len(taken)} taken after the fp16 scale "
      f"settled at {b[-1]['loss_scale']:g}), validated, saved, resumed")
PY

# --- examples/llama/train_llama3_8b_h100_fp8.sh ------------------------------------------
llama() {  # llama TRAIN_SAMPLES LOG: the script's command line (MOCK data, its default)
  local CHECKPOINT_PATH="$wd/llama/ckpt" TENSORBOARD_LOGS_PATH="$wd/llama/tb"
  local TOKENIZER_ARG="MOCK" DATA_ARG="MOCK"
  local TP_SIZE=1 CP_SIZE=2 PP_SIZE=1  # CP_SIZE was 1
  local MICRO_BATCH_SIZE=1 GLOBAL_BATCH_SIZE=4  # was 128
  local NUM_LAYERS=2  # was 32
  local DTYPE="bf16"  # was "fp8": megac has no fp8 (its flags are refused with the reason)
  local SEQ_LENGTH=64 MAX_POSITION_EMBEDDINGS=64  # were 8192
  local DATA_CACHE_PATH="$wd/llama/cache"
  local MODEL_ARGS=(
    --use-mcore-models
    --num-layers $NUM_LAYERS
    --hidden-size 64                # was 4096
    --ffn-hidden-size 160           # was 14336
    --num-attention-heads 4         # was 32
    --group-query-attention
    --num-query-groups 2            # was 8
    --kv-channels 32                # was 128
    --seq-length $SEQ_LENGTH
    --max-position-embeddings $MAX_POSITION_EMBEDDINGS
    --position-embedding-type rope
    --rotary-base 1000000
    --rotary-percent 1.0
    --attention-dropout 0.0
    --hidden-dropout 0.0
    --swiglu
    --normalization RMSNorm
    --init-method-std 0.0134
    --attention-backend fused
    --apply-layernorm-1p
    --untie-embeddings-and-output-weights
    --disable-bias-linear
  )
  local TRAINING_ARGS=(
    --micro-batch-size $MICRO_BATCH_SIZE
    --global-batch-size $GLOBAL_BATCH_SIZE
    --train-samples "$1"            # was 1953125000
    --lr-decay-samples 48           # was 1949218748
    --lr-warmup-samples 8           # was 3906252
    --lr 0.00015
    --min-lr 0.00001
    --decoupled-lr 5.0e-4      # Specific to decoupled AdamW, ensure optimizer is compatible
    --decoupled-min-lr 4.5e-5  # Specific to decoupled AdamW
    --lr-decay-style cosine
    --clip-grad 1.0
    --weight-decay 0.1
    --adam-beta1 0.9
    --adam-beta2 0.95
    --bf16
    --grad-reduce-in-bf16
    --cross-entropy-loss-fusion
    --calculate-per-token-loss
    --manual-gc
    --empty-unused-memory-level 1
    --exit-duration-in-mins 235
  )
  local DTYPE_ARGS=()
  if [[ "$DTYPE" == "fp8" ]]; then
    DTYPE_ARGS+=("--fp8-format hybrid" "--fp8-amax-history-len 1024" "--fp8-amax-compute-algo max" "--fp8-param-gather")
  fi
  local MODEL_PARALLEL_ARGS=(
    --tensor-model-parallel-size $TP_SIZE
    --context-parallel-size $CP_SIZE
    --sequence-parallel  # Always enable sequence parallelism with TP_SIZE=2
  )
  local DDP_ARGS=(--use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather)
  TRAINING_ARGS+=("${DDP_ARGS[@]}")
  local DATA_ARGS_LIST=()
  if [[ "$TOKENIZER_ARG" == "MOCK" ]] || [[ "$DATA_ARG" == "MOCK" ]] || [[ -z "$TOKENIZER_ARG" ]]; then
    DATA_ARGS_LIST+=(
      "--mock-data"
      "--tokenizer-type NullTokenizer"
      "--vocab-size 511"            # was 128256
      "--data-cache-path ${DATA_CACHE_PATH}"
      "--tiktoken-pattern v2"
      "--split '99,1,0'"
      "--no-create-attention-mask-in-dataloader"
      "--no-mmap-bin-files"
      "--num-workers 1"
    )
  fi
  local EVAL_AND_LOGGING_ARGS=(
    --log-interval 1
    --eval-iters 2                  # was 32
    --eval-interval 4               # was 100
    --save-interval 4               # was 1000
    --log-throughput
    --profile
    --profile-step-start 4
    --profile-step-end 6
    --ckpt-format torch_dist
    --distributed-timeout-minutes 60
    --save "$CHECKPOINT_PATH"
    --load "$CHECKPOINT_PATH"
    --tensorboard-dir "$TENSORBOARD_LOGS_PATH"
  )
  # was: torchrun ${DISTRIBUTED_ARGS[@]} "$PRETRAIN_SCRIPT_PATH" (8 GPUs per node)
  timeout 300 "$mpiexec" -n 4 "$megac" train --num-threads 1 --log-json "$2" \
    ${MODEL_ARGS[@]} \
    ${TRAINING_ARGS[@]} \
    ${DTYPE_ARGS[@]} \
    ${MODEL_PARALLEL_ARGS[@]} \
    ${DATA_ARGS_LIST[@]} \
    ${EVAL_AND_LOGGING_ARGS[@]}
}

mkdir -p "$wd/llama"
llama 16 "$wd/llama/a.jsonl" > "$wd/llama/a.out" 2>&1 || fail "llama: first run exited $?: $(grep -E 'megac|rror' "$wd/llama/a.out" | tail -3)"
check llama "$wd/llama/a.jsonl" "$wd/llama/a.out" 1 4
llama 32 "$wd/llama/b.jsonl" > "$wd/llama/b.out" 2>&1 || fail "llama: resumed run exited $?: $(grep -E 'megac|rror' "$wd/llama/b.out" | tail -3)"
check llama "$wd/llama/b.jsonl" "$wd/llama/b.out" 5 8
grep -q "loaded checkpoint" "$wd/llama/b.out" || fail "llama: the second run did not load the checkpoint"
grep -q "x CP 2" "$wd/llama/a.out" || fail "llama: not CP 2: $(grep 'megac train: world' "$wd/llama/a.out")"
ls "$wd/llama/tb"/events.out.tfevents.* >/dev/null 2>&1 || fail "llama: no TensorBoard event file"
python3 - "$wd/llama/a.jsonl" "$wd/llama/b.jsonl" <<'PY' || fail "llama: losses"
import json, sys
a, b = ([r for r in map(json.loads, open(f)) if "lm_loss" in r and "iteration" in r] for f in sys.argv[1:])
assert not any(r["skipped"] for r in a + b), "a bf16 step was skipped"
print(f"llama example: {len(a)} + {len(b)} iterations at CP 2 x DP 2, loss {a[0]['lm_loss']:.3f} -> "
      f"{b[-1]['lm_loss']:.3f}, validated, saved, resumed")
PY
lib_done megatron_examples
