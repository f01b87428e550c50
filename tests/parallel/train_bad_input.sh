#!/usr/bin/env bash
# tests/parallel/train_bad_input.sh: bad `megac train` flags and layouts end every rank with
# exit code 2 and one clear line naming the numbers, before any work.
# usage: train_bad_input.sh MPIEXEC MEGAC
set -u
mpiexec="$1"; megac="$2"
base="--mock-data --train-iters 2 --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 --micro-batch-size 2 --global-batch-size 8 --num-threads 1"
fail=0
expect2() {  # ranks, expected text, flags...
  local n="$1" want="$2"; shift 2
  local out rc
  out=$(timeout 60 "$mpiexec" -n "$n" "$megac" train $base "$@" 2>&1); rc=$?
  local lines; lines=$(grep -c "megac:" <<<"$out")
  if [[ $rc -ne 2 || $lines -ne 1 ]] || ! grep -q -- "$want" <<<"$out"; then
    echo "FAIL (rc $rc, $lines message lines, want '$want'): $*"; echo "$out" | tail -5; fail=1
  else
    echo "ok: $(grep 'megac:' <<<"$out")"
  fi
}
expect2 2 "num-attention-heads 3" --tensor-model-parallel-size 2 --num-attention-heads 3 --hidden-size 66
expect2 2 "hidden-size 66 is not divisible by num-attention-heads 4" --tensor-model-parallel-size 2 --hidden-size 66
expect2 4 "ffn-hidden-size 66" --tensor-model-parallel-size 4 --ffn-hidden-size 66
expect2 3 "world size 3 is not divisible by tensor-model-parallel-size 2 x pipeline-model-parallel-size 1 = 2" --tensor-model-parallel-size 2
expect2 2 "global-batch-size 6 is not divisible by --micro-batch-size 2 x data-parallel size 2" --global-batch-size 6
expect2 1 "global-batch-size 7 is not a multiple of --micro-batch-size 2" --global-batch-size 7
expect2 2 "num-layers 3 is not divisible by pipeline-model-parallel-size 2" --num-layers 3 --pipeline-model-parallel-size 2
expect2 4 "leaves 4 layers, which the other 3 stage(s) of pipeline-model-parallel-size 4 cannot share evenly" \
  --pipeline-model-parallel-size 4 --num-layers 5 --decoder-first-pipeline-num-layers 1
expect2 1 "need pipeline-model-parallel-size > 1" --decoder-last-pipeline-num-layers 1
expect2 1 "seq-length 64 exceeds max-position-embeddings 32" --seq-length 64 --max-position-embeddings 32
expect2 2 "unknown flag: --hiden-size (did you mean --hidden-size?)" --hiden-size 64
expect2 1 "unknown flags: --foo-bar, --hiden-size (did you mean --hidden-size?), --qux (see --help)" --foo-bar 3 --hiden-size 64 --qux
expect2 1 "expects an integer, got 'x'" --num-layers x
expect2 1 "lr-decay-style must be" --lr-decay-style exp
expect2 2 "cannot write --log-json /nonexistent/dir/log.json" --log-json /nonexistent/dir/log.json
expect2 2 "contradict each other" --use-distributed-optimizer --no-distributed-optimizer
# --data-parallel-sharding-strategy: unknown, contradicting the older flags, unsupported combinations
expect2 1 "must be no_shard, optim, optim_grads or optim_grads_params, got 'zero2'" --data-parallel-sharding-strategy zero2
expect2 2 "no-distributed-optimizer (no_shard) contradicts --data-parallel-sharding-strategy optim_grads" \
  --no-distributed-optimizer --data-parallel-sharding-strategy optim_grads
expect2 2 "use-distributed-optimizer contradicts --data-parallel-sharding-strategy no_shard" \
  --use-distributed-optimizer --data-parallel-sharding-strategy no_shard
expect2 2 "optim_grads_params (ZeRO-3) does not support --ddp-bucket-size" \
  --data-parallel-sharding-strategy optim_grads_params --ddp-bucket-size 1000
# --overlap-param-gather: ZeRO-1 (distributed/dist_sync_hook.c) and ZeRO-3 (prefetch); DDP has nothing
# to gather, ZeRO-2 is not supported
expect2 2 "overlap-param-gather needs the distributed optimizer .*; got ZeRO-2" \
  --data-parallel-sharding-strategy optim_grads --overlap-param-gather
expect2 2 "overlap-param-gather needs the distributed optimizer .*; got DDP" \
  --no-distributed-optimizer --overlap-param-gather
expect2 2 "overlap-grad-reduce works with DDP, ZeRO-1 and ZeRO-2 .*; ZeRO-3 (optim_grads_params) does not support it yet" \
  --data-parallel-sharding-strategy optim_grads_params --overlap-grad-reduce
expect2 1 "--max-nan-iters -1" --max-nan-iters -1
# this machine has no GPU: a CUDA build says so, a CPU-only build says it has no CUDA (the
# emulator build too when its devices are switched off: MEGAC_EMU_DEVICES=0, as meson runs it)
[[ "${MEGAC_EMU_DEVICES:-0}" == 0 ]] && expect2 2 "no usable CUDA device\|built without CUDA" --device cuda
expect2 1 "distributed-backend must be nccl or staged" --distributed-backend gloo
# mixed precision, recomputation and Megatron's flags megac does not have
expect2 1 "contradict each other: choose one" --bf16 --fp16 --device cuda
expect2 1 "min-loss-scale" --min-loss-scale 0
expect2 1 "recompute-granularity must be full or selective" --recompute-granularity some
expect2 1 "recompute-num-layers must be >= 1" --recompute-granularity full --recompute-num-layers 0
expect2 1 "a dropout probability must be in \[0, 1)" --hidden-dropout -0.1
expect2 2 "a dropout probability must be in \[0, 1)" --attention-dropout 1
expect2 1 "a dropout probability must be in \[0, 1)" --hidden-dropout 1.5 --attention-dropout 0.1
expect2 1 "not both" --train-samples 16
expect2 1 "interleaved schedule (--virtual-pipeline-model-parallel-size 2) needs --pipeline-model-parallel-size >= 2" \
  --num-layers-per-virtual-pipeline-stage 1
expect2 1 "lr-warmup-fraction 2 must be in" --lr-warmup-fraction 2
# mixture of experts (model/gpt_moe*.c)
expect2 1 "moe-router-topk 5: must be in \[1, num-experts 4\]" --num-experts 4 --moe-router-topk 5
expect2 1 "num-experts 300: must be in \[1, 256\]" --num-experts 300
expect2 1 "moe-router-score-function must be softmax or sigmoid, got 'tanh'" --num-experts 4 --moe-router-score-function tanh
expect2 1 "moe-token-dispatcher-type must be allgather, alltoall or flex, got 'deepep'" --num-experts 4 --moe-token-dispatcher-type deepep
expect2 1 "moe-layer-freq '\[0,0\]' names no layer of 2" --num-experts 4 --moe-layer-freq "[0,0]"
expect2 1 "moe-layer-freq '\[1,0,1\]' has 3 entries, num-layers is 2" --num-experts 4 --moe-layer-freq "[1,0,1]"
expect2 1 "moe-layer-freq '\[1,2\]': not an int or a list" --num-experts 4 --moe-layer-freq "[1,2]"
expect2 1 "moe-expert-capacity-factor must be > 0, got -1" --num-experts 4 --moe-expert-capacity-factor -1
expect2 2 "moe-expert-capacity-factor with --sequence-parallel or --context-parallel-size > 1 is not implemented yet" \
  --num-experts 4 --moe-expert-capacity-factor 1 --tensor-model-parallel-size 2 --sequence-parallel
# Only stage 0 holds an MoE layer here: stage 1's ranks must refuse too, not wait for stage 0.
expect2 4 "moe-expert-capacity-factor with --sequence-parallel or --context-parallel-size > 1 is not implemented yet" \
  --num-experts 4 --moe-expert-capacity-factor 1 --context-parallel-size 2 --pipeline-model-parallel-size 2 \
  --moe-layer-freq 2 --global-batch-size 2
expect2 1 "moe-pad-expert-input-to-capacity needs --moe-expert-capacity-factor" --num-experts 4 --moe-pad-expert-input-to-capacity
expect2 1 "world size 1 is not divisible by expert-tensor-parallel-size 1 x expert-model-parallel-size 2 x pipeline-model-parallel-size 1 = 2" \
  --num-experts 4 --expert-model-parallel-size 2
expect2 1 "num-experts 6 is not divisible by --expert-model-parallel-size 4" --num-experts 6 --expert-model-parallel-size 4
expect2 1 "expert-model-parallel-size must be >= 1, got 0" --num-experts 4 --expert-model-parallel-size 0
expect2 2 "expert-model-parallel-size 2 needs --num-experts" --expert-model-parallel-size 2
expect2 4 "expert-tensor-parallel-size 1 with --tensor-model-parallel-size 2 and --expert-model-parallel-size 2 needs --sequence-parallel" \
  --num-experts 4 --expert-model-parallel-size 2 --expert-tensor-parallel-size 1 --tensor-model-parallel-size 2
expect2 4 "expert-tensor-parallel-size 3 must be 1 or tensor-model-parallel-size 2" \
  --num-experts 4 --expert-model-parallel-size 2 --expert-tensor-parallel-size 3 --tensor-model-parallel-size 2
expect2 4 "world size 4 is not divisible by expert-tensor-parallel-size 1 x expert-model-parallel-size 3" \
  --num-experts 6 --expert-model-parallel-size 3
expect2 2 "tensor-model-parallel-size 2 must divide moe-shared-expert-intermediate-size 33" \
  --num-experts 4 --moe-shared-expert-intermediate-size 33 --tensor-model-parallel-size 2
expect2 1 "moe-shared-expert-gate: a gated shared expert is not implemented" \
  --num-experts 4 --moe-shared-expert-intermediate-size 32 --moe-shared-expert-gate
expect2 1 "moe-router-enable-expert-bias needs --moe-router-score-function sigmoid" --num-experts 4 --moe-router-enable-expert-bias
expect2 1 "moe-router-bias-update-rate must be > 0, got 0" \
  --num-experts 4 --moe-router-score-function sigmoid --moe-router-enable-expert-bias --moe-router-bias-update-rate 0
[[ $fail -eq 0 ]] && echo "train_bad_input: ok"
exit $fail
