#!/usr/bin/env bash
# tests/train/megatron_moe_examples.sh MPIEXEC MEGAC: Megatron's DeepSeek and Qwen launch
# flags (issue 40) run by `megac train` with only sizes and paths changed. Each flag set is
# that of its script (bash arrays expanded unquoted, as the scripts do; each changed value
# marked "# was ..."), from Megatron-LM unless said:
#   examples/megatron_fsdp/sbatch_mfsdp_deepseek_v3.sh (DeepSeek-V3, its Megatron-FSDP branch);
#   examples/post_training/modelopt/conf/deepseek-ai/DeepSeek-V2-Lite.sh (its MODEL_ARGS);
#   examples/rl/model_configs/qwen_2p5_3b.sh and qwen3_8b.sh (their MODEL_OPTIONS; the RL
#     flags, --grpo-*, --inference-*, --rl-*, --pretrained-checkpoint, are train_rl.py's);
#   Megatron-MoE-ModelZoo (the configs Megatron-Core's MoE README points to)
#     model_configs/benchmarking/Qwen3-30B-A3B.yaml and Qwen2-57B-A14B.yaml (a flag set to
#     "true" is given bare, "false" left out, as its sbatch_benchmarking.sh does).
# Each example: megac refuses it with one line (exit 2) that names every flag whose model
# feature megac lacks, grouped by reason; the same flags without those train 2 iterations,
# validate and save (every other flag is implemented or accepted with no effect).
set -uo pipefail
mpiexec="$1" megac="$2"
source "$(dirname "$0")/../lib.sh"
lib_tmpdir moe-examples
wd=$tmp

# --- data: a byte-level tokenizer.json (256 byte tokens, <|endoftext|> 256, no merges) for
# the scripts' HuggingFaceTokenizer, and a Megatron prefix of text in those ids
python3 - "$wd" <<'PY'
import json, os, random, sys
d = sys.argv[1]
bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
cs, n = bs[:], 0
for b in range(256):  # GPT-2's bytes_to_unicode
    if b not in bs:
        bs.append(b)
        cs.append(256 + n)
        n += 1
vocab = {chr(c): b for b, c in zip(bs, cs)}
vocab["<|endoftext|>"] = 256
os.makedirs(f"{d}/tok")
json.dump({"version": "1.0", "normalizer": None, "post_processor": None, "decoder": {"type": "ByteLevel"},
           "added_tokens": [{"id": 256, "content": "<|endoftext|>", "special": True, "normalized": False,
                             "single_word": False, "lstrip": False, "rstrip": False}],
           "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
           "model": {"type": "BPE", "vocab": vocab, "merges": []}}, open(f"{d}/tok/tokenizer.json", "w"))
r = random.Random(5)
words = "the router sends each token to its experts whose outputs sum back".split()
with open(f"{d}/corpus.jsonl", "w") as f:
    for _ in range(300):
        f.write(json.dumps({"text": " ".join(r.choice(words) for _ in range(r.randint(5, 40)))}) + "\n")
PY
lib_megatron_prefix "$wd/corpus.jsonl" "$wd/corpus_text_document" eod
TOKENIZER_MODEL="$wd/tok" DATA_PATH="$wd/corpus_text_document"

# drop "FLAG ..." ARGS...: kept=(ARGS without those flags and their values)
drop() {
  local names w skip=0
  names=$(printf ' %s ' $1)  # the words of $1, each between spaces
  shift
  kept=()
  for w in "$@"; do
    if [[ $w == --* ]]; then
      skip=0
      [[ $names == *" $w "* ]] && { skip=1; continue; }
    fi
    ((skip)) || kept+=("$w")
  done
}

# refused NAME RANKS WANT ARGS...: exit 2 with exactly one line, "megac: WANT"
refused() {
  local name=$1 n=$2 want=$3 out="$wd/$1.refused"
  shift 3
  timeout 120 "$mpiexec" -n "$n" "$megac" train --num-threads 1 "$@" >"$out" 2>&1
  local rc=$? got
  got=$(grep "^megac:" "$out")
  [[ $rc -eq 2 && "$got" == "megac: $want" ]] || fail "$name: exit $rc, got: ${got:-$(tail -3 "$out")}
  want: megac: $want"
}

# trains NAME RANKS ARGS...: iterations 1 and 2 logged, a validation, a checkpoint saved
trains() {
  local name=$1 n=$2 out="$wd/$1.out"
  shift 2
  timeout 120 "$mpiexec" -n "$n" "$megac" train --num-threads 1 --log-json "$wd/$name.jsonl" "$@" >"$out" 2>&1 ||
    { fail "$name without the refused flags: exit $?: $(grep -E '^megac|rror' "$out" | tail -3)"; return; }
  python3 - "$wd/$name.jsonl" <<'PY' || fail "$name: iterations"
import json, sys
its = [r["iteration"] for r in map(json.loads, open(sys.argv[1])) if "lm_loss" in r and "iteration" in r]
assert its == [1, 2], its
PY
  grep -q "validation loss at iteration 2" "$out" || fail "$name: no validation"
  grep -q "saved checkpoint at iteration 2" "$out" || fail "$name: no checkpoint"
  [[ " $* " != *" --num-experts "* ]] || grep -q "tokens per expert" "$out" || fail "$name: no MoE layer ran"
}

MLA="multi-latent attention (MLA: DeepSeek-V2/V3's low-rank compressed keys and values) is not implemented in megac"
YARN="rotary scaling (MLA's YaRN, Llama 3.1's rope scaling) is not implemented in megac"
MTP="multi-token prediction (MTP: DeepSeek-V3's extra next-token layers) is not implemented in megac"
GROUPED="group-limited routing (DeepSeek-V3: the top-k among the best groups of experts) is not implemented in megac"
FORCE="Megatron's benchmarking mode routes tokens by random scores; megac routes by the router's"
QKNORM="a norm on each head's queries and keys (Qwen3, DeepSeek) is not implemented in megac"
QKVBIAS="biases on the QKV projection alone (Qwen2, Qwen2.5) are not implemented in megac: its linear layers all have biases, or none with --disable-bias-linear"
EPS="megac's LayerNorm and RMSNorm add eps 1e-5 (Megatron's default; accepted); another epsilon is not implemented"
MAINGRADS="megac's main gradients are fp32 (accepted); bf16 or fp16 ones are not implemented"

# --- DeepSeek-V3: examples/megatron_fsdp/sbatch_mfsdp_deepseek_v3.sh ----------------------
OUTPUT_PATH="$wd/dsv3"
TP=1 EP=2 MBS=1 GBS=4 COMMENT=""  # EP was 8, GBS 2048
SHARDING_STRATEGY="optim_grads_params"
PRETRAIN_ARGS=(
    --distributed-timeout-minutes 60
    --tensor-model-parallel-size ${TP}
    --expert-model-parallel-size ${EP}
    --expert-tensor-parallel-size 1
    --context-parallel-size 1
    --use-distributed-optimizer
    --overlap-grad-reduce
    --overlap-param-gather
    --use-mcore-models
    --sequence-parallel
    --use-flash-attn
    --disable-bias-linear
    --micro-batch-size ${MBS}
    --global-batch-size ${GBS}
    --train-samples 8                   # was 585937500
    --exit-duration-in-mins 220
    --no-check-for-nan-in-loss-and-grad
    --manual-gc
    --manual-gc-interval 10
    --recompute-granularity selective
    --recompute-modules mlp moe mla_up_proj layernorm
    --transformer-impl transformer_engine
    --seq-length 64                     # was 4096
    --data-cache-path ${OUTPUT_PATH}/cache
    --tokenizer-type HuggingFaceTokenizer
    --tokenizer-model ${TOKENIZER_MODEL}  # was deepseek-ai/DeepSeek-V3
    --data-path ${DATA_PATH}
    --split 99,1,0
    --no-mmap-bin-files
    --no-create-attention-mask-in-dataloader
    --num-workers 6
    --num-layers 2                      # was 61
    --hidden-size 64                    # was 7168
    --ffn-hidden-size 128               # was 18432
    --num-attention-heads 4             # was 128
    --kv-channels 16                    # was 128
    --max-position-embeddings 64        # was 4096
    --position-embedding-type rope
    --rotary-base 10000
    --make-vocab-size-divisible-by 3232
    --normalization RMSNorm
    --norm-epsilon 1e-6
    --swiglu
    --untie-embeddings-and-output-weights
    --multi-latent-attention
    --attention-dropout 0.0
    --hidden-dropout 0.0
    --clip-grad 1.0
    --weight-decay 0.1
    --qk-layernorm
    --lr-decay-samples 8                # was 584765624
    --lr-warmup-samples 4               # was 1536000
    --lr-warmup-init 3.9e-7
    --lr 3.9e-6
    --min-lr 3.9e-7
    --lr-decay-style cosine
    --adam-beta1 0.9
    --adam-beta2 0.95
    --num-experts 8                     # was 256
    --moe-layer-freq [0]*1+[1]*1        # was [0]*3+[1]*58
    --moe-ffn-hidden-size 32            # was 2048
    --moe-shared-expert-intermediate-size 32  # was 2048
    --moe-router-load-balancing-type seq_aux_loss
    --moe-router-topk 4                 # was 8
    --moe-token-dispatcher-type flex
    --moe-flex-dispatcher-backend hybridep
    --moe-router-pre-softmax
    --moe-grouped-gemm
    --moe-aux-loss-coeff 1e-4
    --moe-router-group-topk 2           # was 4
    --moe-router-num-groups 4           # was 8
    --moe-router-topk-scaling-factor 2.5
    --moe-router-score-function sigmoid
    --moe-router-enable-expert-bias
    --moe-router-bias-update-rate 1e-3
    --moe-router-dtype fp32
    --moe-permute-fusion
    --moe-router-force-load-balancing
    --q-lora-rank 32                    # was 1536
    --kv-lora-rank 16                   # was 512
    --qk-head-dim 16                    # was 128
    --qk-pos-emb-head-dim 8             # was 64
    --v-head-dim 16                     # was 128
    --rotary-scaling-factor 40
    --mscale 1.0
    --mscale-all-dim 1.0
    --mtp-num-layers 1
    --mtp-loss-scaling-factor 0.1
    --eval-iters 1                      # was 32
    --eval-interval 2                   # was 100
    --auto-detect-ckpt-format
    --load ${OUTPUT_PATH}/checkpoints
    --save ${OUTPUT_PATH}/checkpoints
    --save-interval 2                   # was 100
    --dist-ckpt-strictness log_all
    --init-method-std 0.02
    --log-timers-to-tensorboard
    --log-memory-to-tensorboard
    --log-num-zeros-in-grad
    --log-params-norm
    --log-validation-ppl-to-tensorboard
    --log-throughput
    --log-interval 1
    --logging-level 40
    --tensorboard-dir ${OUTPUT_PATH}/tensorboard
    --bf16
    --enable-experimental
)
DSV3_BASE=("${PRETRAIN_ARGS[@]}")
PRETRAIN_ARGS=(  # USE_MEGATRON_FSDP=1, the script's default
    "${PRETRAIN_ARGS[@]}"
    --use-megatron-fsdp
    --data-parallel-sharding-strategy ${SHARDING_STRATEGY}
    --no-gradient-accumulation-fusion
    --use-distributed-optimizer
    --calculate-per-token-loss
    --init-model-with-meta-device
    --ckpt-format fsdp_dtensor
    --fsdp-double-buffer
    --use-nccl-ub
    --megatron-fsdp-grad-comm-dtype bf16
    --megatron-fsdp-main-grads-dtype bf16
)
PRETRAIN_ARGS=(  # WANDB=1, the script's default
    "${PRETRAIN_ARGS[@]}"
    --wandb-project your_own_wandb_project
    --wandb-exp-name DeepSeek-V3-TP${TP}EP${EP}-MBS${MBS}GBS${GBS}-${COMMENT}
)
# was: python pretrain_gpt.py ${PRETRAIN_ARGS[@]} under srun (the Slurm job of the script)
refused dsv3 2 "--multi-latent-attention, --q-lora-rank 32, --kv-lora-rank 16, --qk-head-dim 16, --qk-pos-emb-head-dim 8, --v-head-dim 16 are not supported: $MLA; --rotary-scaling-factor 40, --mscale 1.0, --mscale-all-dim 1.0 are not supported: $YARN; --mtp-num-layers 1, --mtp-loss-scaling-factor 0.1 are not supported: $MTP; --moe-router-num-groups 4, --moe-router-group-topk 2 are not supported: $GROUPED; --moe-router-force-load-balancing is not supported: $FORCE; --qk-layernorm is not supported: $QKNORM; --norm-epsilon 1e-6 is not supported: $EPS; --megatron-fsdp-main-grads-dtype bf16 is not supported: $MAINGRADS" \
  ${PRETRAIN_ARGS[@]}
# the rest: USE_MEGATRON_FSDP=0 (megac's ZeRO-3 has no --overlap-grad-reduce yet); flex runs
# as alltoall and --moe-router-pre-softmax beside sigmoid does nothing (as in Megatron), each
# with a notice
drop "--multi-latent-attention --q-lora-rank --kv-lora-rank --qk-head-dim --qk-pos-emb-head-dim --v-head-dim
      --rotary-scaling-factor --mscale --mscale-all-dim --mtp-num-layers --mtp-loss-scaling-factor
      --moe-router-num-groups --moe-router-group-topk --moe-router-force-load-balancing --qk-layernorm
      --norm-epsilon" ${DSV3_BASE[@]}
trains dsv3 2 "${kept[@]}"
grep -q "notice: --moe-token-dispatcher-type flex: megac has no DeepEP" "$wd/dsv3.out" || fail "dsv3: no flex notice"
grep -q "notice: --moe-router-pre-softmax has no effect" "$wd/dsv3.out" || fail "dsv3: no pre-softmax notice"

# --- DeepSeek-V2-Lite: examples/post_training/modelopt/conf/deepseek-ai/DeepSeek-V2-Lite.sh -
MODEL_ARGS=" \
    --save-interval 2 \
    --attention-dropout 0.0 \
    --hidden-dropout 0.0 \
    --micro-batch-size 1 \
    --bf16 \
    --no-masked-softmax-fusion \
    --disable-bias-linear \
    --untie-embeddings-and-output-weights \
    --position-embedding-type rope \
    --no-rope-fusion \
    --normalization RMSNorm \
    --norm-epsilon 1e-6 \
    --swiglu \
    --num-layers 2 \
    --hidden-size 64 \
    --ffn-hidden-size 96 \
    --num-attention-heads 4 \
    --kv-channels 16 \
    --multi-latent-attention \
    --kv-lora-rank 16 \
    --v-head-dim 16 \
    --qk-head-dim 16 \
    --qk-layernorm \
    --qk-pos-emb-head-dim 8 \
    --num-experts 8 \
    --moe-layer-freq ([0]+[1]*1) \
    --moe-ffn-hidden-size 32 \
    --moe-grouped-gemm \
    --moe-router-score-function softmax \
    --moe-router-topk 3 \
    --moe-router-topk-scaling-factor 1.0 \
    --moe-router-pre-softmax \
    --moe-shared-expert-intermediate-size 48 \
    --moe-aux-loss-coeff 1e-3 \
    --moe-token-dispatcher-type alltoall \
    --moe-token-drop-policy probs \
    --moe-router-load-balancing-type seq_aux_loss \
    --seq-length 64 \
    --max-position-embeddings 64 \
    --tokenizer-type HuggingFaceTokenizer \
    --make-vocab-size-divisible-by 3200 \
    --attention-softmax-in-fp32 \
    --use-mcore-models \
    --rotary-percent 1.0 \
    --rotary-base 10000 \
    --rotary-scaling-factor 40 \
    --mscale 0.707 \
    --mscale-all-dim 0.707 \
    --sequence-parallel \
"  # was: --save-interval 100000, 27 layers, hidden 2048, FFN 10944, 16 heads, 64 experts of
   # 1408 ([0]+[1]*26), top-6, shared 2816, kv-lora-rank 512, head dims 128/128/64, seq 1024
RUN=(--tokenizer-model "$TOKENIZER_MODEL" --data-path "$DATA_PATH" --split 99,1,0 --global-batch-size 4
     --train-iters 2 --lr 1e-4 --eval-interval 2 --eval-iters 1 --log-interval 1 --save "$wd/dsv2/ckpt")
refused dsv2 2 "--multi-latent-attention, --kv-lora-rank 16, --qk-head-dim 16, --qk-pos-emb-head-dim 8, --v-head-dim 16 are not supported: $MLA; --rotary-scaling-factor 40, --mscale 0.707, --mscale-all-dim 0.707 are not supported: $YARN; --qk-layernorm is not supported: $QKNORM; --norm-epsilon 1e-6 is not supported: $EPS" \
  $MODEL_ARGS "${RUN[@]}"
drop "--multi-latent-attention --kv-lora-rank --v-head-dim --qk-head-dim --qk-layernorm --qk-pos-emb-head-dim
      --rotary-scaling-factor --mscale --mscale-all-dim --norm-epsilon" $MODEL_ARGS
trains dsv2 2 "${kept[@]}" --expert-model-parallel-size 2 "${RUN[@]}"

# --- Qwen2.5-3B: examples/rl/model_configs/qwen_2p5_3b.sh (MODEL_OPTIONS, RL flags left out) -
MAX_SEQ_LENGTH=64  # was 8192
MODEL_OPTIONS="\
  --calculate-per-token-loss \
  --ckpt-format torch_dist \
  --seq-length $MAX_SEQ_LENGTH \
  --disable-bias-linear \
  --add-qkv-bias \
  --normalization RMSNorm \
  --norm-epsilon 1e-6 \
  --group-query-attention \
  --num-query-groups 2 \
  --no-masked-softmax-fusion \
  --attention-softmax-in-fp32 \
  --attention-dropout 0.0 \
  --hidden-dropout 0.0 \
  --weight-decay 0.0 \
  --position-embedding-type rope \
  --rotary-percent 1.0 \
  --rotary-base 1000000 \
  --use-rotary-position-embeddings \
  --swiglu \
  --num-layers 2  \
  --hidden-size 64  \
  --ffn-hidden-size 96 \
  --num-attention-heads 4  \
  --max-position-embeddings 64  \
  --tokenizer-type HuggingFaceTokenizer \
  --tokenizer-model $TOKENIZER_MODEL \
  --lr 0.000001 \
  --lr-warmup-samples 0 \
  --make-vocab-size-divisible-by 64 \
  --clip-grad 1.0"
  # was: 36 layers, hidden 2048, FFN 11008, 16 heads, positions 32768, unsloth/Qwen2.5-3B
RUN=(--micro-batch-size 1 --global-batch-size 4 --bf16 --data-path "$DATA_PATH" --train-iters 2
     --eval-interval 2 --eval-iters 1 --log-interval 1 --save "$wd/qwen25/ckpt")  # common.sh's, ENV_DEPENDENT's
refused qwen25 2 "--add-qkv-bias is not supported: $QKVBIAS; --norm-epsilon 1e-6 is not supported: $EPS" \
  $MODEL_OPTIONS "${RUN[@]}"
drop "--add-qkv-bias --norm-epsilon" $MODEL_OPTIONS
trains qwen25 2 "${kept[@]}" "${RUN[@]}"

# --- Qwen3-8B: examples/rl/model_configs/qwen3_8b.sh (MODEL_OPTIONS, RL flags left out) ------
MODEL_OPTIONS="\
  --ckpt-format torch_dist \
  --seq-length $MAX_SEQ_LENGTH \
  --untie-embeddings-and-output-weights \
  --num-layers 2 \
  --hidden-size 64 \
  --ffn-hidden-size 96 \
  --num-attention-heads 4 \
  --kv-channels 32 \
  --max-position-embeddings 64 \
  --group-query-attention \
  --num-query-groups 2 \
  --normalization RMSNorm \
  --norm-epsilon 1e-6 \
  --qk-layernorm \
  --position-embedding-type rope \
  --rotary-percent 1.0 \
  --rotary-base 1000000 \
  --use-rotary-position-embeddings \
  --swiglu \
  --disable-bias-linear \
  --attention-dropout 0.0 \
  --hidden-dropout 0.0 \
  --no-masked-softmax-fusion \
  --attention-softmax-in-fp32 \
  --tokenizer-type HuggingFaceTokenizer \
  --tokenizer-model $TOKENIZER_MODEL \
  --vocab-size 257 \
  --make-vocab-size-divisible-by 128 \
  --optimizer adam \
  --adam-beta1 0.9 \
  --adam-beta2 0.999 \
  --adam-eps 1e-8 \
  --lr 1e-6 \
  --min-lr 1e-7 \
  --lr-warmup-samples 0 \
  --clip-grad 1.0 \
  --weight-decay 0.01 \
  --recompute-granularity selective \
  --recompute-activations \
  --recompute-modules core_attn \
  "  # was: 36 layers, hidden 4096, FFN 12288, 32 heads of 128, 8 groups, positions 40960,
     # vocabulary 151936, Qwen/Qwen3-8B
RUN[-1]="$wd/qwen3/ckpt"
refused qwen3 2 "--qk-layernorm is not supported: $QKNORM; --norm-epsilon 1e-6 is not supported: $EPS" \
  $MODEL_OPTIONS "${RUN[@]}"
drop "--qk-layernorm --norm-epsilon" $MODEL_OPTIONS
trains qwen3 2 "${kept[@]}" "${RUN[@]}"

# --- Qwen3-30B-A3B: Megatron-MoE-ModelZoo model_configs/benchmarking/Qwen3-30B-A3B.yaml -----
# (its runtime.conf row: TP 1, PP 1, EP 8, CP 1, VPP 1, alltoall, grouped GEMM)
TP=1 PP=1 EP=2 CP=1 VPP=1 MBS=1 GBS=4 SEQ_LEN=64  # EP was 8, GBS 256, SEQ_LEN 4096
WORKSPACE="$wd/zoo" OUTPUT_PATH="$wd/zoo/qwen3moe" LOAD_PATH="$wd/zoo/qwen3moe/checkpoints"
MOE_GROUPED_GEMM=true MOE_TOKEN_DISPATCHER=alltoall WANDB_PROJECT=moe COMMENT=""
MODEL_ARGS=(
  --distributed-timeout-minutes 60
  --tensor-model-parallel-size ${TP}
  --pipeline-model-parallel-size ${PP}
  # --num-layers-per-virtual-pipeline-stage: false at VPP 1, so left out
  --expert-model-parallel-size ${EP}
  --context-parallel-size ${CP}
  --expert-tensor-parallel-size 1
  --use-distributed-optimizer
  --overlap-grad-reduce
  --overlap-param-gather
  --no-create-attention-mask-in-dataloader
  --use-mcore-models
  --sequence-parallel
  --use-flash-attn
  --disable-bias-linear
  --micro-batch-size ${MBS}
  --global-batch-size ${GBS}
  --train-samples 8                   # was 268554688
  --exit-duration-in-mins 230
  --manual-gc
  --manual-gc-interval 5
  --cross-entropy-loss-fusion
  --cross-entropy-fusion-impl te
  --enable-experimental
  --transformer-impl transformer_engine
  --data-cache-path ${WORKSPACE}/data_cache
  --tokenizer-type HuggingFaceTokenizer
  --tokenizer-model ${TOKENIZER_MODEL}  # was Qwen/Qwen3-30B-A3B
  --data-path ${DATA_PATH}
  --split 99,1,0
  --no-mmap-bin-files
  --num-workers 6
  --untie-embeddings-and-output-weights
  --position-embedding-type rope
  --rotary-percent 1.0
  --rotary-base 1000000
  --rotary-seq-len-interpolation-factor 1
  --normalization RMSNorm
  --swiglu
  --norm-epsilon 1e-06
  --num-layers 2                      # was 48
  --hidden-size 64                    # was 2048
  --ffn-hidden-size 96                # was 6144
  --num-attention-heads 4             # was 32
  --group-query-attention
  --num-query-groups 2                # was 4
  --kv-channels 32                    # was 128
  --qk-layernorm
  --seq-length ${SEQ_LEN}
  --max-position-embeddings 64        # was 40960
  --make-vocab-size-divisible-by 1187
  --attention-dropout 0.0
  --hidden-dropout 0.0
  --clip-grad 1.0
  --weight-decay 0.1
  --lr-decay-samples 8                # was 255126953
  --lr-warmup-samples 2               # was 162761
  --lr 1.2e-4
  --min-lr 1.2e-5
  --lr-decay-style cosine
  --adam-beta1 0.9
  --adam-beta2 0.95
  --num-experts 8                     # was 128
  --moe-ffn-hidden-size 32            # was 768
  --moe-router-load-balancing-type aux_loss
  --moe-router-topk 4                 # was 8
  # --moe-router-pre-softmax: false, so left out
  --moe-grouped-gemm
  --moe-aux-loss-coeff 1e-3
  --moe-token-dispatcher-type ${MOE_TOKEN_DISPATCHER}
  --moe-permute-fusion
  --moe-router-dtype fp32
  --moe-router-fusion
  --eval-iters 1                      # was 32
  --eval-interval 2                   # was 500
  --finetune
  --auto-detect-ckpt-format
  --load ${LOAD_PATH}
  --save ${OUTPUT_PATH}/checkpoints
  --save-interval 2                   # was 500
  --dist-ckpt-strictness log_all
  --init-method-std 0.02
  --log-timers-to-tensorboard
  --log-memory-to-tensorboard
  --log-num-zeros-in-grad
  --log-params-norm
  --log-validation-ppl-to-tensorboard
  --log-throughput
  --log-interval 1
  --tensorboard-dir ${OUTPUT_PATH}/tensorboard
  --wandb-project ${WANDB_PROJECT}
  --wandb-exp-name Qwen3-30B-A3B-TP${TP}PP${PP}EP${EP}CP${CP}VPP${VPP}-MBS${MBS}GBS${GBS}-${COMMENT}
  --bf16
)
refused qwen3moe 2 "--qk-layernorm is not supported: $QKNORM; --norm-epsilon 1e-06 is not supported: $EPS" \
  ${MODEL_ARGS[@]}
drop "--qk-layernorm --norm-epsilon" ${MODEL_ARGS[@]}
trains qwen3moe 2 "${kept[@]}"

# --- Qwen2-57B-A14B: Megatron-MoE-ModelZoo model_configs/benchmarking/Qwen2-57B-A14B.yaml ---
# (the same layout; its MoE and attention flags as the YAML gives them)
drop "--qk-layernorm --kv-channels --moe-router-dtype --moe-router-fusion --manual-gc --manual-gc-interval
      --cross-entropy-loss-fusion --cross-entropy-fusion-impl --enable-experimental --rotary-seq-len-interpolation-factor
      --moe-ffn-hidden-size --moe-aux-loss-coeff --init-method-std --wandb-exp-name --save --load" ${MODEL_ARGS[@]}
MODEL_ARGS=("${kept[@]}"
  --add-qkv-bias
  --moe-router-pre-softmax
  --moe-aux-loss-coeff 1e-2
  --moe-shared-expert-intermediate-size 64  # was 20480
  --moe-shared-expert-overlap
  --no-ckpt-fully-parallel-save
  --init-method-std 0.008
  --load "$wd/zoo/qwen2moe/checkpoints" --save "$wd/zoo/qwen2moe/checkpoints"
  --wandb-exp-name Qwen2-57B-A14B-TP${TP}PP${PP}EP${EP}CP${CP}VPP${VPP}-MBS${MBS}GBS${GBS}-${COMMENT}
)  # was: 28 layers, hidden 3584, FFN 2560, 28 heads, 4 groups, 64 experts of FFN 2560, top-8
refused qwen2moe 2 "--add-qkv-bias is not supported: $QKVBIAS; --norm-epsilon 1e-06 is not supported: $EPS" \
  ${MODEL_ARGS[@]}
drop "--add-qkv-bias --norm-epsilon" ${MODEL_ARGS[@]}
trains qwen2moe 2 "${kept[@]}"

lib_done megatron_moe_examples
