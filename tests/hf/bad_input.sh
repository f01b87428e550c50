#!/usr/bin/env bash
# tests/hf/bad_input.sh MEGAC: export, import and generate refuse bad input with one line
# naming the problem and exit 2: missing files, truncated or malformed safetensors, an
# unsupported dtype, another architecture, settings GPT-2, Llama or Mixtral in megac cannot represent, shapes
# that disagree with config.json, an existing checkpoint, a missing or wrong tokenizer, NaN or
# Inf weights, a tensor missing from the header (named).
set -uo pipefail
megac="$1"
wd=$(mktemp -d); trap 'rm -rf "$wd"' EXIT
n_bad=0
# expect "WHAT" PATTERN CMD...: CMD exits 2 and its stderr (one line) matches PATTERN.
expect() {
  local what="$1" pat="$2"; shift 2
  "$@" > "$wd/out" 2> "$wd/err"; local rc=$?
  if [[ $rc -ne 2 ]] || ! grep -q -- "$pat" "$wd/err" || [[ $(wc -l < "$wd/err") -ne 1 ]]; then
    echo "FAIL: $what: exit $rc, expected 2 and one line matching '$pat':"; cat "$wd/err"; n_bad=$((n_bad + 1))
  else
    echo "ok: $what: $(cat "$wd/err")"
  fi
}
# edit FILE PYTHON: rewrite a JSON file with a Python expression over `c` (stdlib only)
edit() { python3 -c "import json,sys; c=json.load(open(sys.argv[1])); $2; json.dump(c, open(sys.argv[1],'w'))" "$1"; }
"$megac" train --mock-data --mock-vocab-size 300 --num-layers 1 --hidden-size 16 --num-attention-heads 2 \
  --seq-length 8 --micro-batch-size 1 --global-batch-size 1 --train-iters 1 --num-threads 1 \
  --save "$wd/ck" > /dev/null 2>&1 || { echo "FAIL: train"; exit 1; }
"$megac" export --load "$wd/ck" --output "$wd/hf" > /dev/null || { echo "FAIL: export"; exit 1; }
fresh() { rm -rf "$wd/h"; cp -r "$wd/hf" "$wd/h"; }
imp() { rm -rf "$wd/c"; "$megac" import --hf "$wd/h" --output "$wd/c" --seq-length 8 --global-batch-size 1; }
st="$wd/h/model.safetensors"

expect "export: no checkpoint" "No such file" "$megac" export --load "$wd/none" --output "$wd/x"
expect "export: no iteration 7" "iter_0000007" "$megac" export --load "$wd/ck" --output "$wd/x" --iteration 7
fresh; rm "$wd/h/config.json"
expect "import: no config.json" "config.json: cannot open" imp
fresh; rm "$st"
expect "import: no model.safetensors" "model.safetensors: No such file" imp
fresh; mv "$st" "$wd/h/pytorch_model.bin"
expect "import: a pickle only" "pytorch_model.bin (a pickle) is not read" imp
fresh; head -c 5 "$wd/hf/model.safetensors" > "$st"
expect "import: 5-byte file" "truncated" imp
fresh; head -c 100 "$wd/hf/model.safetensors" > "$st"
expect "import: header cut" "malformed or truncated header" imp
fresh; head -c -4 "$wd/hf/model.safetensors" > "$st"
expect "import: data cut" "(truncated)" imp
fresh; printf '\x10\x00\x00\x00\x00\x00\x00\x00{"a":[1,2,3]}   ' > "$st"
expect "import: malformed entry" "needs dtype, shape and data_offsets" imp
fresh; printf '\x08\x00\x00\x00\x00\x00\x00\x00nonsense' > "$st"
expect "import: not JSON" "malformed header" imp
fresh; sed -i 's/"transformer.wpe.weight":{"dtype":"F32"/"transformer.wpe.weight":{"dtype":"I32"/' "$st"
expect "import: I32 tensor" "has dtype I32; megac reads F32, F16 and BF16" imp
fresh; sed -i 's/"transformer.wpe.weight":{"dtype":"F32","shape":\[8,16\]/"transformer.wpe.weight":{"dtype":"F32","shape":[16,8]/' "$st"
expect "import: shape against config" "transformer.wpe.weight has shape (16, 8), config.json makes it (8, 16)" imp
fresh; edit "$wd/h/config.json" "c['model_type']='mistral'; c['architectures']=['MistralForCausalLM']"
expect "import: Mistral config" "model_type 'mistral' (MistralForCausalLM) cannot be imported" imp
fresh; edit "$wd/h/config.json" "c['model_type']='llama'; c['architectures']=['LlamaForCausalLM']"
expect "import: a GPT-2 config called llama" "'hidden_size' is missing" imp
fresh; edit "$wd/h/config.json" "c['n_layer']=1000000000"
expect "import: n_layer 1e9" "config.json: 'n_layer' 1000000000 is too large (at most 16777216)" imp
fresh; edit "$wd/h/config.json" "c['vocab_size']=2**40"
expect "import: vocab_size 2^40" "config.json: 'vocab_size' 1099511627776 is too large" imp
fresh; edit "$wd/h/config.json" "c['n_layer']=2000000"
expect "import: n_layer 2e6" "config.json: num-layers 2000000 is too large (at most 1048576)" imp
fresh; edit "$wd/h/config.json" "c['activation_function']='relu'"
expect "import: ReLU" "activation_function 'relu' cannot be represented" imp
fresh; edit "$wd/h/config.json" "c['layer_norm_epsilon']=1e-6"
expect "import: LayerNorm eps" "layer_norm_epsilon 1e-06 cannot be represented" imp
fresh; edit "$wd/h/config.json" "c['tie_word_embeddings']=False"
expect "import: untied" "tie_word_embeddings = false cannot be represented" imp
fresh; edit "$wd/h/config.json" "c['tie_word_embeddings']='yes'"
expect "import: a string for a boolean" "config.json: 'tie_word_embeddings' is \"yes\", expected true or false" imp
fresh; edit "$wd/h/config.json" "c['n_layer']=2"
expect "import: a layer too many in config" "transformer.h.1.ln_1.weight is missing" imp
fresh; edit "$wd/h/config.json" "c['n_embd']=32"
expect "import: n_embd disagrees" "has shape" imp
fresh; edit "$wd/h/config.json" "c['n_head']=3"
expect "import: heads do not divide" "config.json" imp
# st_edit ST PYTHON: rewrite safetensors file ST with a Python statement over `head` (the header
# dict) and `data` (a bytearray of the data section) (stdlib only).
st_edit() {
  python3 - "$@" <<'PY'
import json, struct, sys
path, code = sys.argv[1], sys.argv[2]
raw = open(path, "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
head, data = json.loads(raw[8:8 + n]), bytearray(raw[8 + n:])
exec(code)
h = json.dumps(head).encode()
h += b" " * (-len(h) % 8)
open(path, "wb").write(struct.pack("<Q", len(h)) + h + bytes(data))
PY
}
# issue 30: a NaN or Inf weight is refused at import, naming the tensor and the element; a
# tensor missing from the header is named (its bytes left behind are a gap, not an error)
fresh; st_edit "$st" "b = head['transformer.wpe.weight']['data_offsets'][0] + 4 * 3; data[b:b + 4] = struct.pack('<f', float('nan'))"
expect "import: a NaN weight" "tensor transformer.wpe.weight holds NaN at element 3: refusing non-finite weights" imp
fresh; st_edit "$st" "b = head['transformer.h.0.ln_1.weight']['data_offsets'][0]; data[b:b + 4] = struct.pack('<f', float('-inf'))"
expect "import: an Inf weight" "tensor transformer.h.0.ln_1.weight holds Inf at element 0" imp
fresh; st_edit "$st" "del head['transformer.h.0.ln_1.bias']"
expect "import: a tensor missing from the header" "tensor transformer.h.0.ln_1.bias is missing" imp
fresh
expect "import: into a checkpoint" "already holds a checkpoint" "$megac" import --hf "$wd/h" --output "$wd/ck"
expect "generate: no tokenizer" "has no tokenizer" "$megac" generate --load "$wd/ck" --prompt "hi"
expect "generate: wrong tokenizer" "the tokenizer has 257 ids, the checkpoint's model 300" \
  "$megac" generate --load "$wd/ck" --prompt "hi" --tokenizer byte
expect "generate: id out of range" "not a comma-separated list of ids in \[0, 300)" \
  "$megac" generate --load "$wd/ck" --prompt-ids 1,300
expect "generate: --num-threads 100000" "--num-threads 100000: at most 1024 CPU threads per rank" \
  "$megac" generate --load "$wd/ck" --prompt-ids 1,2 --num-threads 100000
expect "export: wrong tokenizer" "the tokenizer has 257 ids" "$megac" export --load "$wd/ck" --output "$wd/x" --tokenizer byte

# Llama-style: what LlamaForCausalLM cannot hold, and Llama configs megac cannot represent
# lm_head(ST, SRC, FLIP): add tensor lm_head.weight to safetensors file ST, a copy of tensor SRC
# with its first byte flipped when FLIP is 1 (stdlib only).
lm_head() {
  python3 - "$@" <<'PY'
import json, struct, sys
path, src, flip = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
raw = open(path, "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
head, data = json.loads(raw[8:8 + n]), raw[8 + n:]
t = head[src]
blob = bytearray(data[t["data_offsets"][0]:t["data_offsets"][1]])
if flip:
    blob[0] ^= 0x01
head["lm_head.weight"] = {"dtype": t["dtype"], "shape": t["shape"],
                          "data_offsets": [len(data), len(data) + len(blob)]}
h = json.dumps(head).encode()
h += b" " * (-len(h) % 8)
open(path, "wb").write(struct.pack("<Q", len(h)) + h + data + bytes(blob))
PY
}
fresh; lm_head "$st" transformer.wte.weight 0
rm -rf "$wd/c"; imp > /dev/null 2>&1 || { echo "FAIL: import with a tied lm_head.weight"; n_bad=$((n_bad + 1)); }
fresh; lm_head "$st" transformer.wte.weight 1
expect "import: lm_head.weight not the token embedding" \
  "lm_head.weight differs from transformer.wte.weight: an untied output layer cannot be represented" imp
"$megac" train --mock-data --mock-vocab-size 300 --num-layers 1 --hidden-size 16 --num-attention-heads 2 \
  --seq-length 8 --micro-batch-size 1 --global-batch-size 1 --train-iters 1 --num-threads 1 \
  --position-embedding-type rope --save "$wd/ckr" > /dev/null 2>&1 || { echo "FAIL: train rope"; exit 1; }
expect "export: rope with LayerNorm and GELU" "cannot be represented as LlamaForCausalLM" \
  "$megac" export --load "$wd/ckr" --output "$wd/x"
"$megac" train --mock-data --mock-vocab-size 300 --num-layers 1 --hidden-size 16 --num-attention-heads 2 \
  --seq-length 8 --micro-batch-size 1 --global-batch-size 1 --train-iters 1 --num-threads 1 \
  --normalization RMSNorm --swiglu --ffn-hidden-size 32 --position-embedding-type rope \
  --disable-bias-linear --save "$wd/ckl" > /dev/null 2>&1 || { echo "FAIL: train llama"; exit 1; }
rm -rf "$wd/hf"; "$megac" export --load "$wd/ckl" --output "$wd/hf" > /dev/null || { echo "FAIL: export llama"; exit 1; }
fresh; edit "$wd/h/config.json" "c['rms_norm_eps']=1e-6"
expect "import: Llama eps" "rms_norm_eps 1e-06 (megac's RMSNorm uses 1e-5) cannot be represented" imp
fresh; edit "$wd/h/config.json" "c['attention_bias']=True"
expect "import: Llama attention bias" "attention_bias = true cannot be represented" imp
fresh; edit "$wd/h/config.json" "c['rope_scaling']={'type': 'linear', 'factor': 2.0}"
expect "import: Llama rope scaling" "rope_scaling (megac's rope is unscaled) cannot be represented" imp
fresh; edit "$wd/h/config.json" "c['rope_theta']=True"
expect "import: Llama rope_theta true" "config.json: 'rope_theta' is true, expected a number" imp
fresh; edit "$wd/h/config.json" "c['rope_theta']='32'"
expect "import: Llama rope_theta a string" "config.json: 'rope_theta' is \"32\", expected a number" imp
fresh; edit "$wd/h/config.json" "c['hidden_act']='gelu'"
expect "import: Llama GELU" "hidden_act 'gelu'" imp
fresh; edit "$wd/h/config.json" "c['num_key_value_heads']=1"
expect "import: Llama kv heads against the tensors" "k_proj.weight has shape (16, 16), config.json makes it (8, 16)" imp
fresh; edit "$wd/h/config.json" "c['tie_word_embeddings']=False"
expect "import: Llama untied without lm_head" "lm_head.weight is missing" imp
fresh; mv "$st" "$wd/h/pytorch_model.bin"
expect "import: Llama, a pickle only" "pytorch_model.bin (a pickle) is not read" imp
fresh; rm "$st"; echo '{"weight_map": {}}' > "$wd/h/model.safetensors.index.json"
expect "import: Llama, sharded" "a sharded model.safetensors.index.json is not read" imp

# Mixtral: the MoE settings MixtralForCausalLM cannot hold (export names the flag), and Mixtral
# configs megac cannot represent
moe_gpt2=(--mock-data --mock-vocab-size 300 --num-layers 2 --hidden-size 16 --num-attention-heads 2
          --seq-length 8 --micro-batch-size 1 --global-batch-size 1 --train-iters 1 --num-threads 1
          --ffn-hidden-size 16 --num-experts 4 --moe-router-topk 2)
moe=("${moe_gpt2[@]}" --normalization RMSNorm --swiglu --position-embedding-type rope --disable-bias-linear)
# moe_refused NAME PATTERN FLAGS...: a checkpoint trained with FLAGS, whose export is refused
moe_refused() {
  local name="$1" pat="$2"; shift 2
  "$megac" train "$@" --save "$wd/ck_$name" > /dev/null 2>&1 || { echo "FAIL: train $name"; n_bad=$((n_bad + 1)); return; }
  expect "export: Mixtral $name" "$pat" "$megac" export --load "$wd/ck_$name" --output "$wd/x"
}
moe_refused pre_softmax "--moe-router-pre-softmax (Mixtral renormalises" "${moe[@]}" --moe-router-pre-softmax
moe_refused sigmoid "--moe-router-score-function sigmoid (Mixtral's router is a softmax) has no MixtralForCausalLM" \
  "${moe[@]}" --moe-router-score-function sigmoid
moe_refused scaling "--moe-router-topk-scaling-factor 2.5 (Mixtral does not scale)" "${moe[@]}" --moe-router-topk-scaling-factor 2.5
moe_refused freq "--moe-layer-freq '2' (layer 1 is dense" "${moe[@]}" --moe-layer-freq 2
moe_refused kv_channels "--kv-channels (MixtralForCausalLM's head size is hidden_size / num_attention_heads)" \
  "${moe[@]}" --kv-channels 4
moe_refused gpt2 "cannot be represented as MixtralForCausalLM (.* this one has LayerNorm GELU learned positions biases)" \
  "${moe_gpt2[@]}"
"$megac" train "${moe[@]}" --save "$wd/ckm" > /dev/null 2>&1 || { echo "FAIL: train mixtral"; exit 1; }
rm -rf "$wd/hf"; "$megac" export --load "$wd/ckm" --output "$wd/hf" > /dev/null || { echo "FAIL: export mixtral"; exit 1; }
fresh; edit "$wd/h/config.json" "c['sliding_window']=4"
expect "import: Mixtral sliding window" "sliding_window 4 (megac attends to every earlier position) cannot be represented" imp
fresh; edit "$wd/h/config.json" "c['num_experts_per_tok']=5"
expect "import: Mixtral top 5 of 4" "config.json: .*5.*4" imp
fresh; edit "$wd/h/config.json" "c['num_local_experts']=3"
expect "import: Mixtral 3 experts, 4 in the file" "block_sparse_moe.gate.weight has shape (4, 16), config.json makes it (3, 16)" imp
fresh; st_edit "$st" "t = dict(head['model.layers.0.block_sparse_moe.experts.3.w1.weight']); b, e = t['data_offsets']; t['data_offsets'] = [len(data), len(data) + e - b]; data += data[b:e]; head['model.layers.0.block_sparse_moe.experts.4.w1.weight'] = t"
expect "import: a fifth expert in the file" "tensor model.layers.0.block_sparse_moe.experts.4.w1.weight is not part of Mixtral" imp
fresh; st_edit "$st" "del head['model.layers.1.block_sparse_moe.experts.2.w3.weight']"
expect "import: an expert's w3 missing" "tensor model.layers.1.block_sparse_moe.experts.2.w3.weight is missing" imp
[[ $n_bad -eq 0 ]] && echo "bad_input: ok" || { echo "bad_input: $n_bad failed"; exit 1; }
