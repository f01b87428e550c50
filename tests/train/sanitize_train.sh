#!/usr/bin/env bash
# tests/train/sanitize_train.sh MPIEXEC MEGAC: short training runs under the
# AddressSanitizer build of the emulator (suite 'sanitize'), so that an overflow on the
# training path (the sync engine's staging, MoE dispatch buffers, the pipeline's slots, CP's
# ring) fails CI; the op tests alone do not reach those buffers. Each run: a few iterations
# of a tiny mock-data model at a layout that exercises one mechanism; pass = exit 0 and no
# sanitizer report on stderr. (A ZeRO-2 + ETP 1 staging overflow was found this way by hand.)
set -u
mpiexec="$1" megac="$2"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export ASAN_OPTIONS="detect_leaks=0:abort_on_error=0:exitcode=86${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export MPIR_CVAR_NOLOCAL=1 OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
fails=0
model=(--mock-data --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 16
       --max-position-embeddings 16 --micro-batch-size 2 --global-batch-size 8 --train-iters 2
       --lr 1e-3 --log-interval 1 --eval-iters 0 --hidden-dropout 0.1 --attention-dropout 0.1)
moe=(--num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 32 --moe-aux-loss-coeff 1e-2)
run() {  # run NAME RANKS FLAGS...
  local name="$1" n="$2"; shift 2
  "$mpiexec" -n "$n" "$megac" train "${model[@]}" "$@" > "$tmp/$name.out" 2> "$tmp/$name.err"
  local rc=$?
  if [[ $rc -eq 0 ]] && ! grep -q "Sanitizer" "$tmp/$name.err" && grep -q "iteration  *2/" "$tmp/$name.out"
  then echo "ok   $name: $(grep -o "lm loss: [0-9.E+-]*" "$tmp/$name.out" | tail -1)"; else
    echo "FAIL $name: exit $rc"; grep -m 20 -A 12 "ERROR: .*Sanitizer" "$tmp/$name.err" || tail -20 "$tmp/$name.err"
    fails=$((fails + 1)); fi
}
# ZeRO-2 with the bf16 reduce staging, MoE at ETP 1 over TP 4 (the expert unit wider than DP x bucket)
run zero2_etp1_bf16_reduce 4 "${moe[@]}" --tensor-model-parallel-size 4 --sequence-parallel \
  --expert-model-parallel-size 2 --expert-tensor-parallel-size 1 \
  --data-parallel-sharding-strategy optim_grads --grad-reduce-in-bf16 --overlap-grad-reduce
# ZeRO-3 with the prefetch, CP 2 ring, PP 2 (1F1B), MoE at EP 2 over DP x CP
run zero3_cp2_pp2_ep2 4 "${moe[@]}" --pipeline-model-parallel-size 2 --context-parallel-size 2 \
  --use-flash-attn --expert-model-parallel-size 2 \
  --data-parallel-sharding-strategy optim_grads_params --overlap-param-gather
# the CUDA backend (emulated) in bf16: TP 2 + SP, interleaved PP 2, ZeRO-1 with both overlaps
run cuda_bf16_tp2_ilv_zero1 4 --device cuda --bf16 --tensor-model-parallel-size 2 --sequence-parallel \
  --pipeline-model-parallel-size 2 --num-layers 4 --virtual-pipeline-model-parallel-size 2 \
  --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather --use-flash-attn
# the CUDA backend (emulated) with the optimizer and ZeRO-3's parameters in pinned host memory,
# MoE at EP 2 through the alltoall dispatcher (nonblocking rows, a shared expert) and the
# grouped GEMM
run cuda_offload_params_ep2_grouped 2 "${moe[@]}" --device cuda --bf16 --expert-model-parallel-size 2 \
  --moe-token-dispatcher-type alltoall --moe-grouped-gemm --moe-shared-expert-intermediate-size 32 \
  --data-parallel-sharding-strategy optim_grads_params --overlap-param-gather \
  --optimizer-cpu-offload --offload-params --overlap-cpu-optimizer-d2h-h2d
echo "sanitize_train: $fails failed"
exit $((fails > 0))
