#!/usr/bin/env bash
# tests/train/megatron_flags.sh MPIEXEC MEGAC: Megatron launch-script flags (issue 29). All
# unknown flags come in one line with the nearest names; Megatron's flags that only tune its
# own machinery are accepted with one notice line each on rank 0 and listed in the run
# record; flags that would change the result are refused with the reason (exit 2, one line);
# --help marks both kinds and the defaults that differ from Megatron's; --split parses as
# Megatron's (commas or slashes, spaces allowed).
set -uo pipefail
mpiexec="$1" megac="$2"
wd=$(mktemp -d)
trap 'rm -rf "$wd"' EXIT
fails=0
fail() { echo "FAIL: $*"; tail -5 "$wd/out.txt" 2>/dev/null; fails=1; }
flags=(--num-threads 1 --mock-data --num-layers 2 --hidden-size 64 --num-attention-heads 4
       --seq-length 32 --micro-batch-size 2 --global-batch-size 4 --lr 1e-3 --log-interval 1 --eval-iters 0)
run() { timeout 60 "$mpiexec" -n 2 "$megac" train "${flags[@]}" "$@" >"$wd/out.txt" 2>&1; }
# usage error: exit 2, exactly one "megac:" line, holding the text
refused() {
  local want="$1"; shift
  run --train-iters 1 "$@"; local rc=$?
  local n; n=$(grep -c "^megac:" "$wd/out.txt")
  [[ $rc -eq 2 && $n -eq 1 ]] && grep -qF -- "$want" "$wd/out.txt" || fail "rc $rc, $n lines, want '$want': $*"
}

# unknown flags: all of them, in one line, values skipped, the nearest names
refused "megac: unknown flags: --foo-bar, --hiden-size (did you mean --hidden-size?), --qux, --manual-gcc (did you mean --manual-gc?) (see --help)" \
  --foo-bar 3 --hiden-size 64 --qux --manual-gcc
refused "megac: unknown flag: --lr-decay-styl (did you mean --lr-decay-style?) (see --help)" --lr-decay-styl=cosine

# refused, with the reason
refused "megac: --fp8-param-gather is not supported: fp8 training is not implemented" --fp8-param-gather
refused "megac: --reset-attention-mask needs --data-path data: --mock-data has no end-of-document id" \
  --reset-attention-mask
refused "megac: --fp8-format hybrid is not supported: fp8 training is not implemented" --fp8-format hybrid
# every refused flag in one line, those of one reason together, in the table's order
refused "megac: --fp8-format hybrid, --fp8-param-gather are not supported: fp8 training is not implemented in megac (--bf16 and --fp16 are); --qk-layernorm is not supported: a norm on each head's queries and keys (Qwen3, DeepSeek) is not implemented in megac" \
  --fp8-param-gather --qk-layernorm --fp8-format hybrid
refused "megac: --norm-epsilon 1e-6 is not supported: megac's LayerNorm and RMSNorm add eps 1e-5" --norm-epsilon 1e-6
refused "megac: --recompute-modules expects one of core_attn|moe_act|layernorm|mla_up_proj|mlp|moe|shared_experts, got 'attn'" \
  --recompute-modules core_attn attn
refused "megac: --recompute-modules expects at least one value" --recompute-modules --manual-gc
refused "megac: --cp-comm-type must be p2p, all_gather or a2a, got 'a2a+p2p' (Megatron's hierarchical a2a+p2p is not implemented in megac)" \
  --context-parallel-size 2 --use-flash-attn --cp-comm-type a2a+p2p
refused "megac: --cp-comm-type a2a: the 4 attention heads of each tensor-parallel rank are not divisible by --context-parallel-size 8" \
  --context-parallel-size 8 --use-flash-attn --cp-comm-type a2a
refused "megac: --context-parallel-size 3: --seq-length 32 is not divisible by 2 x 3" --context-parallel-size 3
refused "megac: --decoupled-min-lr 0.0001 needs --decoupled-lr" --decoupled-min-lr 1e-4
refused "megac: --lr-warmup-samples / --lr-decay-samples need --train-samples" --lr-warmup-samples 8
refused "megac: need 0 <= --lr-warmup-init 0.01 <= --lr 0.001" --lr-warmup-init 1e-2
# --lr-warmup-init (DeepSeek's): the warm-up's first learning rate, Megatron's formula
run --train-iters 2 --lr-warmup-iters 2 --lr-warmup-init 1e-4 || fail "--lr-warmup-init: $(grep megac: "$wd/out.txt")"
[[ $(grep -o "learning rate: [^ ]*" "$wd/out.txt" | tr '\n' ' ') == "learning rate: 1.000000E-04 learning rate: 5.500000E-04 " ]] ||
  fail "--lr-warmup-init: $(grep -o "learning rate: [^ ]*" "$wd/out.txt" | tr '\n' ' ')"
run --train-iters 1 --lr-warmup-samples 0 || fail "--train-iters with --lr-warmup-samples 0 (Megatron takes it)"
refused "megac: --tokenizer-type GPT2BPETokenizer needs --vocab-file and --merge-file" --tokenizer-type GPT2BPETokenizer
refused "megac: --tokenizer-type BertWordPieceLowerCase is not supported" --tokenizer-type BertWordPieceLowerCase
refused "megac: --ckpt-format expects one of torch|torch_dist|zarr|torch_dcp|fsdp_dtensor, got 'hdf5'" --ckpt-format hdf5
refused "megac: --kv-channels must be in [1, 65536], got -3" --kv-channels -3
refused "megac: --attention-backend must be auto, fused, flash, unfused or local, got 'fast'" --attention-backend fast
refused "megac: --attention-backend unfused (the materialised attention) contradicts --use-flash-attn (fused): give one" \
  --attention-backend unfused --use-flash-attn
refused "megac: --num-workers expects an integer, got 'two'" --num-workers two
refused "megac: --manual-gc takes no value" --manual-gc=1

# accepted with no effect: one notice each on rank 0, the run record lists them, and the
# losses equal a run without them (the values megac implements, e.g. --kv-channels C/NH, too)
run --train-iters 2 --log-json "$wd/plain.jsonl" || fail "plain run"
grep "^ \[[^]]*\] iteration" "$wd/out.txt" | sed 's/^ \[[^]]*\]//; s/elapsed.*//' > "$wd/plain.txt"
run --train-iters 2 --log-json "$wd/noop.jsonl" --use-mcore-models --attention-backend auto --manual-gc \
    --manual-gc-interval 100 --num-workers 2 --no-mmap-bin-files --empty-unused-memory-level 2 \
    --data-cache-path "$wd/cache" --cross-entropy-loss-fusion --no-create-attention-mask-in-dataloader \
    --tensorboard-queue-size 10 --profile --profile-step-start 1 --profile-step-end 2 --ckpt-format torch_dist \
    --context-parallel-size 1 --kv-channels 16 --recompute-modules core_attn mlp --no-rope-fusion \
    --norm-epsilon 1e-5 --moe-router-dtype fp32 --optimizer adam --lr-warmup-init 0 --mtp-num-layers 0 \
    --rotary-scaling-factor 1.0 || fail "run with no-effect flags"
[[ $(grep -c "accepted, no effect in megac" "$wd/out.txt") -eq 16 ]] || fail "want 16 notices (rank 0 only)"
grep -qF "megac train: --manual-gc: accepted, no effect in megac: times Python's garbage collector" "$wd/out.txt" ||
  fail "--manual-gc notice"
grep -q '"megatron_flags_no_effect":\["--use-mcore-models","--manual-gc","--manual-gc-interval","--num-workers","--no-mmap-bin-files","--empty-unused-memory-level","--data-cache-path","--cross-entropy-loss-fusion","--no-create-attention-mask-in-dataloader","--tensorboard-queue-size","--profile","--profile-step-start","--profile-step-end","--ckpt-format","--no-rope-fusion","--recompute-modules"\]' \
  "$wd/noop.jsonl" || fail "run record: $(grep -o '"megatron_flags_no_effect":[^]]*]' "$wd/noop.jsonl")"
grep -q '"megatron_flags_no_effect":\[\]' "$wd/plain.jsonl" || fail "run record of the plain run"
grep "^ \[[^]]*\] iteration" "$wd/out.txt" | sed 's/^ \[[^]]*\]//; s/elapsed.*//' | diff - "$wd/plain.txt" >/dev/null ||
  fail "the no-effect flags changed the log"
[[ -s "$wd/plain.txt" ]] || fail "no iteration lines"

# tokenizer flags: accepted when the data's vocabulary and end-of-document id are the
# tokenizer's (a GPT-2-format vocab.json + merges.txt: 256 bytes, <|endoftext|> 256, one merge)
python3 - "$wd" <<'PY'
import json, sys
bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
cs, n = bs[:], 0
for b in range(256):
    if b not in bs: bs.append(b); cs.append(256 + n); n += 1
alpha = {b: chr(c) for b, c in zip(bs, cs)}
vocab = {alpha[b]: b for b in range(256)}
vocab["<|endoftext|>"] = 256
vocab[alpha[32] + "t"] = 257
json.dump(vocab, open(f"{sys.argv[1]}/vocab.json", "w"))
open(f"{sys.argv[1]}/merges.txt", "w").write(f"#version: 0.2\n{alpha[32]} t\n")
PY
gpt2=(--tokenizer-type GPT2BPETokenizer --vocab-file "$wd/vocab.json" --merge-file "$wd/merges.txt")
run --train-iters 1 --log-json "$wd/tok.jsonl" "${gpt2[@]}" || fail "mock data with a GPT-2 tokenizer"
grep -qF '"tokenizer":{"type":"GPT2BPETokenizer","vocab_size":258,"eod_id":256,"file":"'"$wd/vocab.json"'"}' \
  "$wd/tok.jsonl" || fail "run record: $(grep -o '"tokenizer":[^}]*}' "$wd/tok.jsonl")"
for i in $(seq 40); do printf 'document %d: the tokens of the test\n%%\n' "$i"; done > "$wd/c.txt"
"$megac" preprocess --input "$wd/c.txt" --doc-separator % --output "$wd/c.h5" >/dev/null || fail "preprocess"
saved=("${flags[@]}"); flags=("${flags[@]:0:2}" --data-path "$wd/c.h5" "${flags[@]:3}")  # c.h5: byte, 257 ids
refused "has 257 ids, end of document 256, but the tokenizer $wd/vocab.json has 258, 256: not the data's tokenizer" \
  "${gpt2[@]}"
"$megac" preprocess --input "$wd/c.txt" --doc-separator % --output "$wd/c.h5" "${gpt2[@]}" >/dev/null || fail "preprocess gpt2"
run --train-iters 1 --split 1,0,0 "${gpt2[@]}" || fail "data with its GPT-2 tokenizer: $(grep megac: "$wd/out.txt")"
flags=("${saved[@]}")

# Megatron's own examples (issue 40): Llama-3's --vocab-size beside a tokenizer of files is
# ignored with a notice when it differs (the tokenizer's vocabulary wins, as in Megatron);
# Mixtral's --no-masked-softmax-fusion (a kernel choice) and --no-position-embedding (with
# rope: implied; without: refused, megac has no model without positions)
run --train-iters 1 "${gpt2[@]}" --vocab-size 128256 || fail "--vocab-size beside a tokenizer: $(grep megac: "$wd/out.txt")"
grep -qF "megac train: --vocab-size 128256: ignored, as Megatron does beside --tokenizer-type GPT2BPETokenizer, whose vocabulary has 258 ids" \
  "$wd/out.txt" && grep -q "V=258 " "$wd/out.txt" || fail "--vocab-size notice: $(grep -E 'megac|V=' "$wd/out.txt")"
run --train-iters 1 "${gpt2[@]}" --vocab-size 258 && ! grep -q "vocab-size 258: ignored" "$wd/out.txt" ||
  fail "--vocab-size equal to the tokenizer's: no notice"
run --train-iters 1 --no-masked-softmax-fusion --no-position-embedding --position-embedding-type rope ||
  fail "Mixtral's flags: $(grep megac: "$wd/out.txt")"
grep -qF "megac train: --no-masked-softmax-fusion: accepted, no effect in megac: a kernel choice" "$wd/out.txt" ||
  fail "--no-masked-softmax-fusion notice"
refused "megac: --no-position-embedding without --position-embedding-type rope: a model with no positions at all is not implemented in megac" \
  --no-position-embedding

# Megatron's other names for what megac implements give the same losses and gradient norms:
# --use-rotary-position-embeddings (--position-embedding-type rope), Megatron-FSDP's
# --megatron-fsdp-grad-comm-dtype bf16 (--grad-reduce-in-bf16; fp32 and auto: the default)
iters() { grep "^ \[[^]]*\] iteration" "$wd/out.txt" | grep -o "lm loss: [^|]*| .*grad norm: [^|]*|"; }
same() {  # same NAME "ARGS A" "ARGS B": the two runs' iteration lines agree
  run --train-iters 2 $2 || fail "$1: $2: $(grep megac: "$wd/out.txt")"
  iters > "$wd/a.txt"
  run --train-iters 2 $3 || fail "$1: $3: $(grep megac: "$wd/out.txt")"
  [[ -s "$wd/a.txt" ]] && iters | diff -q - "$wd/a.txt" >/dev/null || fail "$1: '$2' and '$3' differ"
}
same rotary "--position-embedding-type rope" "--use-rotary-position-embeddings"
same fsdp-comm "--grad-reduce-in-bf16" "--megatron-fsdp-grad-comm-dtype bf16"
same fsdp-comm-fp32 "" "--megatron-fsdp-grad-comm-dtype fp32"
refused "megac: --megatron-fsdp-grad-comm-dtype must be fp32, bf16 or auto (an fp16 gradient reduction is not implemented in megac), got 'fp16'" \
  --megatron-fsdp-grad-comm-dtype fp16
refused "megac: --megatron-fsdp-grad-comm-dtype auto contradicts --grad-reduce-in-bf16" \
  --megatron-fsdp-grad-comm-dtype auto --grad-reduce-in-bf16

# --help marks both kinds and the defaults that differ from Megatron's
"$megac" train --help > "$wd/help.txt" || fail "--help"
grep -qE "^  --manual-gc +\[accepted, no effect\] times Python" "$wd/help.txt" || fail "help: --manual-gc"
grep -qE "^  --fp8-param-gather +\[refused\] fp8 training" "$wd/help.txt" || fail "help: --fp8-param-gather"
grep -qE "^  --use-distributed-optimizer .*Megatron: off" "$wd/help.txt" || fail "help: distributed optimizer default"
grep -qE "^  --global-batch-size .*Megatron: " "$wd/help.txt" || fail "help: global batch default"

# --mock-data --vocab-size N: Megatron's NullTokenizer, N ids and the end-of-document id
run --train-iters 1 --vocab-size 300 && grep -q "V=301 " "$wd/out.txt" || fail "--mock-data --vocab-size 300: $(grep -E 'megac:|V=' "$wd/out.txt")"
refused "--vocab-size 300 (301 ids with the end-of-document id) and --mock-vocab-size 50 disagree" --vocab-size 300 --mock-vocab-size 50

# --split: Megatron's forms; "'99,1,0'" keeps its quotes, as a script's word splitting does
for s in "99,1,0" "969, 30, 1" "98,2,0" "98/2/0" "'99,1,0'" "100"; do
  run --train-iters 1 --split "$s" || fail "--split $s refused: $(grep megac: "$wd/out.txt")"
done
refused "--split '99,x,0': weight 2 is not a non-negative number" --split "99,x,0"
refused "--split ''99,1,0\"': weight 1 is not a non-negative number" --split "'99,1,0\""  # unmatched
exit $fails
