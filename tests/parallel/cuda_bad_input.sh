#!/usr/bin/env bash
# tests/parallel/cuda_bad_input.sh: --device cuda problems under the CPU emulator end every
# rank with one clear line: no device (exit 2), more ranks on the node than GPUs without the
# staged path (exit 2, naming both numbers), a device allocation that does not fit (the
# message names what was allocated, the bytes asked and the bytes free).
# usage: cuda_bad_input.sh MPIEXEC MEGAC
set -u
mpiexec="$1"; megac="$2"
base="--mock-data --train-iters 2 --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 --micro-batch-size 2 --global-batch-size 8 --num-threads 1 --device cuda"
fail=0
expect() {  # rc, ranks, expected text, env assignment, flags...
  local want_rc="$1" n="$2" want="$3" envset="$4"; shift 4
  local out rc
  out=$(env $envset timeout 120 "$mpiexec" -n "$n" "$megac" train $base "$@" 2>&1); rc=$?
  if [[ $rc -ne $want_rc ]] || ! grep -q -- "$want" <<<"$out"; then
    echo "FAIL (rc $rc, want $want_rc and '$want'): $envset $*"; echo "$out" | tail -5; fail=1
  else
    echo "ok ($envset): $(grep -m1 -- "$want" <<<"$out")"
  fi
}
expect 2 1 "no usable CUDA device on this node" MEGAC_EMU_DEVICES=0
expect 2 2 "2 rank(s) on this node but 1 usable CUDA device(s)" MEGAC_EMU_DEVICES=1
expect 0 2 "iteration" MEGAC_EMU_DEVICES=1 --distributed-backend staged
# a device too small for the model: a non-zero exit naming the allocation and the free bytes
out=$(MEGAC_EMU_DEVICE_MEMORY=20000000 timeout 120 "$mpiexec" -n 1 "$megac" train $base 2>&1); rc=$?
if [[ $rc -eq 0 ]] || ! grep -q "cannot allocate .*bytes.*free" <<<"$out"; then
  echo "FAIL (rc $rc): small device memory"; echo "$out" | tail -5; fail=1
else
  echo "ok: $(grep -m1 'cannot allocate' <<<"$out")"
fi
[[ $fail -eq 0 ]] && echo "cuda_bad_input: ok"
exit $fail
