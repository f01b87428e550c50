#!/usr/bin/env bash
# tests/train/reset_documents.sh: --reset-position-ids and --reset-attention-mask (documents
# inside a sample: positions restart after each end-of-document token, a token attends only
# within its document).
#   On short documents (8 to 30 tokens, so a 32-token sample holds 2 to 4 of them), one rank,
#   TP 2, PP 2, PP 4 (middle stages read the tokens too), DP 2 and TP 2 x PP 2 give the same
#   losses and grad norms (parity.py, fp32 round-off) with both flags: GPT-2 with
#   materialised attention (also with sequence parallelism and full recomputation), and
#   Llama-style (rope, grouped-query, flash attention; sequence parallelism in TP 2 x PP 2;
#   the interleaved schedule, PP 2 x 2 chunks); context parallelism, whose chunks need the
#   EODs of the chunks before them (CP 2 and 4, with TP, PP and DP, each --cp-comm-type; GPT-2
#   and Llama-style with SP); each flag changes the loss on its own; on a Megatron prefix
#   whose documents hold no EOD they change nothing, bitwise; --mock-data is refused with one
#   line, exit 2.
#   With `cuda` (the emulator build's megac): only the CUDA backend against one CPU rank,
#   with context parallelism (the windowed flash kernels with document starts at global
#   positions): the ring at TP 2 x CP 2 + SP, a2a, all_gather on the staged path.
# usage: reset_documents.sh MPIEXEC MEGAC PARITY_PY [cuda]
set -uo pipefail
mpiexec=$1 megac=$2 parity=$3 mode=${4:-cpu}
source "$(dirname "$0")/../lib.sh"
lib_tmpdir resetdocs

lib_corpus "$tmp" 5 300 8 30 "abcdefgh "
lib_megatron_prefix "$tmp/c.jsonl" "$tmp/raw"  # the same text, no EOD
"$megac" preprocess --input "$tmp/c.jsonl" --output "$tmp/c.h5" >/dev/null || fail "preprocess"

tiny=(--train-iters 5 --num-layers 4 --hidden-size 32 --num-attention-heads 4 --seq-length 32
      --micro-batch-size 2 --global-batch-size 8 --lr 3e-3 --log-interval 100 --eval-iters 0
      --split 1,0,0 --data-path "$tmp/c.h5")
docs=(--reset-position-ids --reset-attention-mask)
llama=(--normalization RMSNorm --swiglu --position-embedding-type rope --group-query-attention
       --num-query-groups 2 --disable-bias-linear --untie-embeddings-and-output-weights --use-flash-attn)
if [[ $mode == cuda ]]; then
  cuda="--device cuda --no-tf32"
  python3 "$parity" --megac "$megac" --mpiexec "$mpiexec" --tol 1e-5 --extra="$cuda --sequence-parallel" \
    --layouts 1,1,1 1,1,1,2 2,1,1,2 -- "${tiny[@]}" "${llama[@]}" "${docs[@]}" || fail "CUDA, the ring"
  python3 "$parity" --megac "$megac" --mpiexec "$mpiexec" --tol 1e-5 --extra="$cuda --cp-comm-type a2a" \
    --layouts 1,1,1 1,1,1,2 -- "${tiny[@]}" "${llama[@]}" "${docs[@]}" || fail "CUDA, a2a"
  python3 "$parity" --megac "$megac" --mpiexec "$mpiexec" --tol 1e-5 \
    --extra="$cuda --cp-comm-type all_gather --distributed-backend staged" \
    --layouts 1,1,1 1,1,1,2 -- "${tiny[@]}" --use-flash-attn "${docs[@]}" || fail "CUDA, all_gather, staged"
  lib_done reset_documents_cuda
  exit
fi
python3 "$parity" --megac "$megac" --mpiexec "$mpiexec" --tol 1e-5 \
  --layouts 1,1,1 2,1,1 1,2,1 1,4,1 1,1,2 2,2,1 -- "${tiny[@]}" "${docs[@]}" || fail "parity, GPT-2"
python3 "$parity" --megac "$megac" --mpiexec "$mpiexec" --tol 1e-5 --extra=--sequence-parallel \
  --extra="--recompute-granularity full --recompute-method uniform --recompute-num-layers 1" \
  --layouts 1,1,1 2,1,1 2,2,1 -- "${tiny[@]}" "${docs[@]}" || fail "parity, GPT-2, SP and recomputation"
python3 "$parity" --megac "$megac" --mpiexec "$mpiexec" --tol 1e-5 --extra=--sequence-parallel \
  --layouts 1,1,1 2,2,1 1,4,1 -- "${tiny[@]}" "${llama[@]}" "${docs[@]}" || fail "parity, Llama-style flash"
python3 "$parity" --megac "$megac" --mpiexec "$mpiexec" --tol 1e-5 \
  --layouts 1,1,1 1,1,1,2 1,1,1,4 2,1,1,2 1,2,1,2 1,1,2,2 -- "${tiny[@]}" --use-flash-attn "${docs[@]}" ||
  fail "parity, context parallel (p2p)"
for ct in all_gather a2a; do
  python3 "$parity" --megac "$megac" --mpiexec "$mpiexec" --tol 1e-5 --extra="--cp-comm-type $ct" \
    --layouts 1,1,1 1,1,1,4 2,1,1,2 -- "${tiny[@]}" --use-flash-attn "${docs[@]}" ||
    fail "parity, context parallel ($ct)"
done
python3 "$parity" --megac "$megac" --mpiexec "$mpiexec" --tol 1e-5 --extra=--sequence-parallel \
  --layouts 1,1,1 2,1,1,2 1,2,1,2 -- "${tiny[@]}" "${llama[@]}" "${docs[@]}" ||
  fail "parity, Llama-style, context parallel"
python3 "$parity" --megac "$megac" --mpiexec "$mpiexec" --tol 1e-5 \
  --extra="--virtual-pipeline-model-parallel-size 2" --layouts 1,1,1 1,2,1 -- "${tiny[@]}" "${llama[@]}" \
  "${docs[@]}" || fail "parity, interleaved pipeline"

losses() {  # losses NAME ARGS...: the lm_loss values of a one-rank run
  "$megac" train --num-threads 1 "${tiny[@]}" --log-json "$tmp/$1.jsonl" "${@:2}" > "$tmp/$1.out" 2>&1 ||
    fail "$1: $(tail -3 "$tmp/$1.out")"
  grep -oE '"lm_loss":[^,}]*' "$tmp/$1.jsonl" > "$tmp/$1.loss"
  [[ -s "$tmp/$1.loss" ]] || fail "$1: no losses"
}
losses plain
losses pos --reset-position-ids
losses mask --reset-attention-mask
cmp -s "$tmp/plain.loss" "$tmp/pos.loss" && fail "--reset-position-ids did not change the loss"
cmp -s "$tmp/plain.loss" "$tmp/mask.loss" && fail "--reset-attention-mask did not change the loss"
losses raw --data-path "$tmp/raw" --vocab-size 256
losses raw_docs --data-path "$tmp/raw" --vocab-size 256 "${docs[@]}"
cmp -s "$tmp/raw.loss" "$tmp/raw_docs.loss" || fail "no EOD in the data, yet the flags changed the loss"

refused() {  # refused WANT ARGS...: exit 2 and one megac: line holding WANT
  local out rc
  out=$("$megac" train "${@:2}" 2>&1); rc=$?
  [[ $rc -eq 2 && $(grep -c "^megac:" <<<"$out") -eq 1 ]] && grep -qF -- "$1" <<<"$out" ||
    fail "refused: rc $rc: $out"
}
refused "--reset-position-ids needs --data-path data: --mock-data has no end-of-document id" \
  --mock-data --train-iters 1 --reset-position-ids

lib_done reset_documents
