#!/usr/bin/env bash
# tests/scripts/test_selfcheck.sh SCRIPTS_GPU_DIR: scripts/gpu/selfcheck.sh without a GPU, the
# way the lent machine may be worse than ours. A copy of the scripts runs in a temporary
# repository with a small fake pack (gpu-pack/megac-gpu.tar.xz made like pack.sh makes it,
# with stand-in binaries: megac writes a plausible --log-json, test_cuda_ops fails, the other
# tests pass, bench_train prints RESULT lines) and the carried gpu-pack/xz/; a stand-in
# nvidia-smi lists one GPU; stand-in compute-sanitizer and ncu record what they were given.
# PATH holds only links to the basic tools: no xz, no python3, no nvcc. The fake NVIDIA wheels
# sit in a venv (cuBLASLt, cuDNN: found by the glob) and in an odd folder (NCCL: found by the
# bounded find). When this machine allows mount namespaces, the first unpack folder is a
# noexec tmpfs. Checks:
#   0  nvidia-smi listing no GPU: one line, exit 0
#   1  all steps: unpacked with the carried xz into the second folder (the noexec one skipped),
#      megac --help ran; every step reports a result; b ran all four tests after ops failed,
#      flash_tc in full; c PASS (tolerances, bitwise rerun, the fp32 run with
#      MEGAC_CUDA_NO_GELU_EPILOGUE=1); e ran
#      memcheck, synccheck, racecheck on half and flash_tc before ops, with LD_LIBRARY_PATH
#      exactly pack/lib + NCCL's + cuBLASLt's folders; at most 8 files in $OUT; summary.md
#      written although steps FAIL (exit 1); within the deadline
#   2  SELFCHECK_STEPS=c with a non-deterministic stand-in megac: c FAIL "DIFFERENT", summary
#      still written
#   3  (with python3 here) no carried xz, no xz: unpacked with python3's tarfile
set -uo pipefail
src="$(realpath "$1")"
t0=$SECONDS
fail() { echo "FAIL: $*"; exit 1; }
expect() { grep -Eq -- "$2" "$1" || { echo "--- $1:"; cat "$1"; fail "$3"; }; }
reject() { ! grep -Eq -- "$2" "$1" || { echo "--- $1:"; cat "$1"; fail "$3"; }; }
for t in xz tar; do command -v "$t" >/dev/null || { echo "SKIP: '$t' not found"; exit 77; }; done

tmp=$(mktemp -d)
trap 'umount "$tmp/noexec" 2>/dev/null; rm -rf "$tmp"' EXIT
repo="$tmp/repo"
mkdir -p "$repo/scripts/gpu" "$repo/gpu-pack/xz" "$tmp/stage/bin" "$tmp/stage/lib" "$tmp/sbin" "$tmp/path" \
         "$tmp/home" "$tmp/tmpd" "$tmp/noexec" "$tmp/exec"
cp "$src/selfcheck.sh" "$src/env.sh" "$src/ncu_table.py" "$repo/scripts/gpu/"

# --- the fake pack: stand-ins for the binaries, the real env.sh ----------------------------
cat > "$tmp/stage/bin/megac" <<'EOF'
#!/bin/sh
# stand-in megac: 20 rows of --log-json, CUDA slightly off the CPU (within every tolerance)
# (selfcheck.sh looks for the name MEGAC_CUDA_NO_GELU_EPILOGUE in megac: here it is)
echo "megac $*|$LD_LIBRARY_PATH|no_gelu_epilogue=${MEGAC_CUDA_NO_GELU_EPILOGUE:-}" >> "$STUB_LOG"
[ "$1" = --help ] && { echo "usage: megac COMMAND"; exit 0; }
dev=cpu bf16=0 tf32=1 log="" hs=64 attn=auto
while [ $# -gt 0 ]; do
  case "$1" in --device) dev=$2; shift ;; --bf16) bf16=1 ;; --no-tf32) tf32=0 ;;
               --attention-backend) attn=$2; shift ;;
               --log-json) log=$2; shift ;; --hidden-size) hs=$2; shift ;; esac
  shift
done
noise=0; [ -n "${STUB_NONDET:-}" ] && noise=$(date +%N)
awk -v d="$dev" -v b="$bf16" -v t="$tf32" -v hs="$hs" -v z="$noise" 'BEGIN {
  for (i = 1; i <= 20; i++) {
    l = 6 - i * 0.01 + hs * 1e-4 + z * 1e-15; g = 1.5 - i * 0.005
    if (d == "cuda") { e = b ? 3e-3 : (t ? 5e-4 : 2e-5); l *= 1 + e; g *= 1 - e }
    printf "{\"iteration\":%d,\"lm_loss\":%.17g,\"grad_norm\":%.17g,\"lr\":1e-4}\n", i, l, g } }' > "$log"
[ "$dev$attn" = cudafused ] && echo "attention: cuDNN fused SDPA runs the fused attention"
echo " iteration       20/      20 | lm loss: 5.9"
EOF
for t in test_cuda_ops test_cuda_half test_cuda_fused test_cuda_flash_tc test_cudnn_attn; do
  rc=0; [[ $t == test_cuda_ops ]] && rc=1
  printf '#!/bin/sh\necho "%s $*|$LD_LIBRARY_PATH" >> "$STUB_LOG"\necho "%s: stand-in, exit %d"\nexit %d\n' \
    "$t" "$t" "$rc" "$rc" > "$tmp/stage/bin/$t"
done
cat > "$tmp/stage/bin/bench_train" <<'EOF'
#!/bin/sh
echo "bench_train $*|$LD_LIBRARY_PATH" >> "$STUB_LOG"
attn=megac; case " $* " in *" --attention-backend fused "*) attn=fused ;; esac
echo "RESULT config=gpt2-124m device=cuda act=bf16 flash=1 T=1024 B=16 ms=100.0 tokens_s=163840.0 tflops=200.0 mem_mib=20000 attn=$attn"
EOF
chmod +x "$tmp/stage/bin/"*
cp "$src/env.sh" "$tmp/stage/env.sh"
printf 'megac GPU pack (test_selfcheck.sh stand-ins)\nnvcc: none\nleft to the GPU machine:\n  libnccl.so.2\n' > "$tmp/stage/MANIFEST.txt"
tar -C "$tmp/stage" -cf - bin lib env.sh MANIFEST.txt | xz -1 > "$repo/gpu-pack/megac-gpu.tar.xz"
cp -L "$(command -v xz)" "$repo/gpu-pack/xz/xz"  # as pack.sh does: xz and its liblzma
lzma=$(ldd "$(command -v xz)" | awk '$1 ~ /^liblzma\.so/ {print $3}')
[[ -n "$lzma" ]] && cp -L "$lzma" "$repo/gpu-pack/xz/"

# --- fake wheels: cuBLASLt and cuDNN in a venv (glob), NCCL elsewhere (bounded find) ---------
wheels="$tmp/venv/lib/python3.12/site-packages/nvidia"
mkdir -p "$wheels/cu13/lib" "$wheels/cudnn/lib" "$tmp/odd/deep/nvidia/nccl/lib"
: > "$wheels/cu13/lib/libcublasLt.so.13"
: > "$wheels/cudnn/lib/libcudnn.so.9"
: > "$tmp/odd/deep/nvidia/nccl/lib/libnccl.so.2"

# --- stand-in tools and the stripped PATH ---------------------------------------------------
cat > "$tmp/sbin/nvidia-smi" <<'EOF'
#!/bin/sh
echo "nvidia-smi $*" >> "$STUB_LOG"
if [ -n "${STUB_NO_GPU:-}" ]; then echo "No devices were found"; exit 6; fi
case "$*" in
  -L) echo "GPU 0: NVIDIA H200 (UUID: GPU-00000000-0000-0000-0000-000000000000)" ;;
  *--query-gpu=*) echo "NVIDIA H200, 143771 MiB, 580.159.04" ;;
  *) echo "| NVIDIA-SMI 580.159.04   Driver Version: 580.159.04   CUDA Version: 13.0 |" ;;
esac
EOF
cat > "$tmp/sbin/compute-sanitizer" <<'EOF'
#!/bin/sh
tool=?
while [ $# -gt 0 ]; do
  case "$1" in --tool) tool=$2; shift 2 ;; --error-exitcode) shift 2 ;; --*) shift ;; *) break ;; esac
done
echo "compute-sanitizer $tool $(basename "$1")|$LD_LIBRARY_PATH" >> "$STUB_LOG"
"$@"; rc=$?
echo "========= ERROR SUMMARY: 0 errors"
exit $rc
EOF
cp "$tmp/sbin/compute-sanitizer" "$tmp/sbin/ncu"
sed -i 's/^echo "compute-sanitizer /echo "ncu /' "$tmp/sbin/ncu"
chmod +x "$tmp/sbin/"*
for t in bash sh env timeout tar gzip sed awk grep cat ls mkdir rm cp chmod touch mktemp dirname basename \
         head tail tr cut wc sort uniq paste cmp diff date hostname uname nproc readlink realpath find tee \
         sleep ldd true; do
  p=$(command -v "$t") || continue
  ln -s "$p" "$tmp/path/$t"
done
export STUB_LOG="$tmp/calls.log" HOME="$tmp/home" TMPDIR="$tmp/tmpd"
clean_path="$tmp/sbin:$tmp/path"
PATH="$clean_path" command -v xz python3 nvcc >/dev/null && fail "the stripped PATH still has xz, python3 or nvcc"

# selfcheck OUT [VAR=VALUE...]: one run with the stripped PATH; its exit status in $rc
selfcheck() {
  local out=$1; shift
  env -i PATH="$clean_path" HOME="$HOME" TMPDIR="$TMPDIR" STUB_LOG="$STUB_LOG" OUT="$out" \
    SELFCHECK_PYTHON= MEGAC_CUDA_LIB_DIRS= MEGAC_WHEEL_PREFIXES="$tmp/venv" MEGAC_WHEEL_FIND_ROOTS="$tmp/odd" \
    SELFCHECK_UNPACK_DIRS="$tmp/noexec/pack $tmp/exec/pack" SELFCHECK_DEADLINE_S=100 "$@" \
    bash "$repo/scripts/gpu/selfcheck.sh" > "$tmp/stdout" 2>&1
  rc=$?
}

# --- 0: no GPU ------------------------------------------------------------------------------
selfcheck "$tmp/out0" STUB_NO_GPU=1
((rc == 0)) || { cat "$tmp/stdout"; fail "no GPU: exit $rc, expected 0"; }
expect "$tmp/stdout" '^selfcheck: no NVIDIA GPU' "no GPU: not the one line"
[[ $(wc -l < "$tmp/stdout") -eq 1 ]] || fail "no GPU: more than one line"

# --- 1: every step, noexec first folder ---------------------------------------------------
noexec=0
if unshare -rm true 2>/dev/null; then noexec=2  # a user+mount namespace for the run below
elif mount -t tmpfs -o noexec,size=16m tmpfs "$tmp/noexec" 2>/dev/null; then noexec=1
fi
: > "$STUB_LOG"
if ((noexec == 2)); then
  # the whole run inside a namespace whose $tmp/noexec is a noexec tmpfs
  export -f selfcheck
  export tmp repo clean_path
  unshare -rm bash -c 'mount -t tmpfs -o noexec,size=16m tmpfs "$tmp/noexec" || exit 99
    selfcheck "$tmp/out1"; exit $rc'
  rc=$?
  ((rc == 99)) && fail "could not mount a noexec tmpfs in the namespace"
else
  selfcheck "$tmp/out1"
fi
out="$tmp/out1" log="$tmp/stdout" sum="$tmp/out1/summary.md"
echo "--- run 1 (exit $rc, noexec test: $noexec):"; tail -12 "$log"
((rc == 1)) || fail "run 1: exit $rc, expected 1 (step b FAILs)"
[[ -f "$sum" ]] || fail "run 1: no summary.md"
nf=$(find "$out" -type f | wc -l)
((nf <= 8)) || { find "$out" -type f; fail "run 1: $nf files in \$OUT, at most 8"; }
for s in "u unpack" "a probe" "b op parity" "c train CPU vs CUDA" "d throughput" "e sanitizer" "g kernel profile"; do
  expect "$sum" "^\| $s \| (PASS|FAIL|SKIP) \|" "run 1: no result for '$s'"
done
expect "$sum" '^\| u unpack \| PASS \| [^|]*/exec/pack with the carried gpu-pack/xz/xz' "run 1: not unpacked with the carried xz into exec/"
expect "$sum" 'megac --help ok' "run 1: no megac --help test-run"
if ((noexec)); then
  expect "$sum" 'noexec/pack: cannot run programs' "run 1: the noexec folder was not skipped"
else
  echo "NOTE: no mount namespace here: the noexec fallback is not exercised"
fi
expect "$out/probe.txt" "libcublasLt.so.13 => $wheels/cu13/lib/libcublasLt.so.13" "run 1: cuBLASLt not found by the glob"
expect "$out/probe.txt" "^$tmp/odd/deep/nvidia/nccl/lib\$" "run 1: NCCL's folder not found by the bounded find"
expect "$out/probe.txt" "^$wheels/cudnn/lib\$" "run 1: the other wheel folders are not on the programs' path"
expect "$sum" '^\| b op parity \| FAIL \| ops exit 1; half ok; fused ok; flash_tc ok; cudnn_attn ok' "run 1: b did not run every test after ops failed"
expect "$STUB_LOG" '^test_cudnn_attn --quick\|' "run 1: test_cudnn_attn --quick not run in step b"
expect "$STUB_LOG" '^test_cuda_flash_tc \|' "run 1: test_cuda_flash_tc not run in full in step b"
expect "$sum" '^\| c train CPU vs CUDA \| PASS \|' "run 1: c not PASS on consistent logs"
expect "$sum" 'bf16_hd64 max rel loss' "run 1: c lacks the head-size-64 bf16 comparison"
expect "$sum" 'bf16_hd64 run twice: bitwise equal' "run 1: c lacks the bitwise rerun"
expect "$sum" 'fp32_nogelu max rel loss [^;]*\(tol 1e-04\)' "run 1: c lacks the fp32 run without GELU epilogues"
[[ $(grep -c -- '--device cuda --no-tf32 .*|no_gelu_epilogue=1$' "$STUB_LOG") -eq 1 ]] ||
  fail "run 1: not one fp32 run with MEGAC_CUDA_NO_GELU_EPILOGUE=1"
expect "$STUB_LOG" '^megac train .*--hidden-size 256 --num-attention-heads 4 --use-flash-attn --attention-dropout 0 --device cuda --bf16' \
  "run 1: no --bf16 --use-flash-attn --attention-dropout 0 run at head size 64"
[[ $(grep -c -- '--hidden-size 256 .*--device cuda --bf16 --attention-backend flash' "$STUB_LOG") -eq 2 ]] ||
  fail "run 1: the bf16 head-64 run on megac's kernels not run twice"
[[ $(grep -c -- '--hidden-size 256 .*--device cuda --bf16 --attention-backend fused' "$STUB_LOG") -eq 2 ]] ||
  fail "run 1: the bf16 head-64 run on cuDNN not run twice"
expect "$sum" 'bf16_hd64_fused_vs_bf16_hd64 max rel loss' "run 1: c lacks cuDNN vs megac's kernels"
expect "$sum" '^\| c offload bf16 overlapped \| PASS \| bitwise equal to bf16 without offload' "run 1: no offload row"
expect "$STUB_LOG" '^megac train .*--device cuda --bf16 --optimizer-cpu-offload --overlap-cpu-optimizer-d2h-h2d' \
  "run 1: no bf16 offload run (overlapped)"
expect "$sum" 'bf16_hd64_fused run twice: bitwise equal; fused: cuDNN ran' "run 1: c lacks the cuDNN rerun or its check"
expect "$sum" '^\| d throughput \| (PASS|FAIL) \| gpt2-124m bf16 flash1 T1024 B16 163840 tok/s 200.0 TFLOP/s' "run 1: d did not read bench_train's RESULT lines"
expect "$sum" '; gpt2-124m bf16 flash1 T1024 B16 cuDNN 163840 tok/s' "run 1: d does not mark the cuDNN runs"
expect "$sum" '^\| e sanitizer \| FAIL \|' "run 1: e not FAIL (test_cuda_ops fails under it)"
grep '^compute-sanitizer ' "$STUB_LOG" | cut -d'|' -f1 > "$tmp/cs_order"
printf 'compute-sanitizer %s\n' "memcheck test_cuda_half" "synccheck test_cuda_half" "racecheck test_cuda_half" \
  "memcheck test_cuda_flash_tc" "synccheck test_cuda_flash_tc" "racecheck test_cuda_flash_tc" \
  "memcheck test_cuda_ops" "synccheck test_cuda_ops" "racecheck test_cuda_ops" > "$tmp/cs_want"
cmp -s "$tmp/cs_order" "$tmp/cs_want" || { diff "$tmp/cs_want" "$tmp/cs_order"; fail "run 1: the sanitizer runs are not the 9 expected, in order"; }
want_tld="$tmp/exec/pack/lib:$tmp/odd/deep/nvidia/nccl/lib:$wheels/cu13/lib"
bad=$(grep -E '^(compute-sanitizer|test_cuda_[a-z_]+ --quick)' "$STUB_LOG" | grep -vF "|$want_tld" | head -3)
[[ -z "$bad" ]] || fail "run 1: the sanitizer (or its target) got another LD_LIBRARY_PATH than $want_tld: $bad"
bad=$(grep -E '^megac train' "$STUB_LOG" | grep -vF "$wheels/cudnn/lib" | head -1)
[[ -z "$bad" ]] || fail "run 1: megac did not get every wheel folder: $bad"
expect "$sum" '^\| g kernel profile \| SKIP \| bench_train not in the pack, or no python3' "run 1: g not SKIP without python3"
expect "$log" '===== summary' "run 1: no summary in stdout"
expect "$out/selfcheck.log" '^\| e sanitizer \|' "run 1: selfcheck.log lacks the summary"
((SECONDS - t0 < 100)) || fail "run 1 took over its 100 s deadline"

# --- 2: a non-deterministic megac: the bitwise rerun catches it ---------------------------
: > "$STUB_LOG"
selfcheck "$tmp/out2" SELFCHECK_STEPS=c STUB_NONDET=1
sum="$tmp/out2/summary.md"
((rc == 1)) || { cat "$tmp/stdout"; fail "run 2: exit $rc, expected 1"; }
expect "$sum" '^\| c train CPU vs CUDA \| FAIL \|.*bf16_hd64 run twice: DIFFERENT' "run 2: the differing rerun was not caught"
reject "$sum" '^\| (a|b|d|e|g) ' "run 2: steps ran that SELFCHECK_STEPS=c did not ask for"

# --- 3: neither xz nor the carried one: python3's tarfile -----------------------------------
py=$(command -v python3 || true)
if [[ -n "$py" ]] && "$py" -c 'import lzma, tarfile' 2>/dev/null; then
  rm -rf "$repo/gpu-pack/xz"
  selfcheck "$tmp/out3" SELFCHECK_STEPS=a SELFCHECK_PYTHON="$py"
  expect "$tmp/out3/summary.md" '^\| u unpack \| PASS \| [^|]* with python3 tarfile' "run 3: not unpacked with python3's tarfile"
  expect "$tmp/out3/summary.md" '^\| a probe \| (PASS|FAIL) \|' "run 3: no probe result"
else
  echo "NOTE: no python3 with lzma here: the tarfile fallback is not exercised"
fi
echo "PASS: selfcheck.sh without a GPU, stripped PATH (no xz, no python3)$( ((noexec)) && echo ', noexec /tmp stand-in'), in $((SECONDS - t0)) s"
