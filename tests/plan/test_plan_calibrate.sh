#!/usr/bin/env bash
# tests/plan/test_plan_calibrate.sh MPIEXEC MEGAC BUILD: `megac plan --calibrate` on 2 ranks
# writes a profile with positive measured figures that `megac plan --hardware` reads back;
# an unwritable path is refused with exit code 2. --device cuda, by BUILD (meson's): cpu
# (built without CUDA) refused with exit 2; emu (the CPU emulator of the CUDA backend) the
# CUDA backend and NCCL measured on 2 emulated GPUs: a valid profile (the figures mean
# nothing); cuda: the same on the machine's GPUs, or, without 2 usable GPUs, refused with one
# line and exit 2.
set -u
mpiexec="$1" megac="$2" build="${3:-cpu}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
"$mpiexec" -n 2 "$megac" plan --calibrate "$tmp/box.hw" --device cpu --num-threads 1 > "$tmp/log" 2>&1 \
  || { echo "FAIL calibrate: exit $?"; cat "$tmp/log"; exit 1; }
cat "$tmp/log"
for key in peak_tflops_fp32 gemm_efficiency intra_node_gbps hbm_gbps memory_gb; do
  v=$(sed -n "s/^$key = //p" "$tmp/box.hw")
  python3 -c "import sys; v = float('$v'); sys.exit(0 if v > 0 else 1)" 2>/dev/null \
    && echo "ok   $key = $v" || { echo "FAIL $key = '$v'"; fails=$((fails + 1)); }
done
grep -q "^gpus_per_node = 2$" "$tmp/box.hw" || { echo "FAIL gpus_per_node is not the 2 ranks on this host"; fails=$((fails + 1)); }
"$megac" plan --world-size 4 --hardware "$tmp/box.hw" --device cpu --num-layers 2 --hidden-size 64 \
  --num-attention-heads 4 --seq-length 32 --vocab-size 257 > "$tmp/plan" 2>&1 \
  && grep -q "calibrated" "$tmp/plan" && echo "ok   plan reads the calibrated profile" \
  || { echo "FAIL plan --hardware calibrated"; cat "$tmp/plan"; fails=$((fails + 1)); }
"$megac" plan --calibrate "$tmp/t.hw" --device cpu --num-threads 100000 > "$tmp/out" 2> "$tmp/err"
rc=$?  # the thread limit of every command (it crashed inside libgomp)
[[ $rc -eq 2 && ! -e "$tmp/t.hw" ]] && grep -q "at most 1024 CPU threads" "$tmp/err" \
  && echo "ok   --num-threads 100000: $(cat "$tmp/err")" \
  || { echo "FAIL --num-threads 100000: exit $rc: $(tail -1 "$tmp/err")"; fails=$((fails + 1)); }
"$megac" plan --calibrate /nonexistent/dir/x.hw --device cpu > "$tmp/out" 2> "$tmp/err"
rc=$?
[[ $rc -eq 2 ]] && grep -q "cannot write" "$tmp/err" && echo "ok   unwritable: $(cat "$tmp/err")" \
  || { echo "FAIL unwritable path: exit $rc: $(cat "$tmp/err")"; fails=$((fails + 1)); }
if [[ "$build" == cpu ]]; then
  "$megac" plan --calibrate "$tmp/x.hw" > "$tmp/out" 2> "$tmp/err"
  rc=$?
  [[ $rc -eq 2 ]] && grep -q "device cpu" "$tmp/err" && echo "ok   cuda refused: $(cat "$tmp/err")" \
    || { echo "FAIL --device cuda: exit $rc: $(cat "$tmp/err")"; fails=$((fails + 1)); }
  exit $((fails > 0))
fi
"$mpiexec" -n 2 "$megac" plan --calibrate "$tmp/gpu.hw" --device cuda > "$tmp/log" 2>&1
rc=$?
cat "$tmp/log"
if [[ "$build" == cuda && $rc -eq 2 ]] && grep -q "usable CUDA device" "$tmp/log"; then
  echo "ok   --device cuda refused here (fewer than 2 usable GPUs): $(grep -m1 "usable CUDA" "$tmp/log")"
  exit $((fails > 0))
fi
((rc == 0)) || { echo "FAIL --device cuda: exit $rc"; exit 1; }
grep -q "CUDA backend, NCCL" "$tmp/log" && grep -q "^name = calibrated: .*cuda" "$tmp/gpu.hw" \
  || { echo "FAIL --device cuda: not the CUDA backend"; cat "$tmp/gpu.hw"; fails=$((fails + 1)); }
for key in peak_tflops_fp32 peak_tflops_tf32 peak_tflops_bf16 gemm_efficiency intra_node_gbps hbm_gbps memory_gb; do
  v=$(sed -n "s/^$key = //p" "$tmp/gpu.hw")
  python3 -c "import sys; v = float('$v'); sys.exit(0 if v > 0 else 1)" 2>/dev/null \
    && echo "ok   cuda $key = $v" || { echo "FAIL cuda $key = '$v'"; fails=$((fails + 1)); }
done
"$megac" plan --world-size 4 --hardware "$tmp/gpu.hw" --bf16 --num-layers 2 --hidden-size 64 \
  --num-attention-heads 4 --seq-length 32 --vocab-size 257 > "$tmp/plan" 2>&1 \
  && grep -q "calibrated" "$tmp/plan" && echo "ok   plan reads the CUDA profile" \
  || { echo "FAIL plan --hardware (cuda profile)"; cat "$tmp/plan"; fails=$((fails + 1)); }
exit $((fails > 0))
