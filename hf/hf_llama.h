// hf/hf_llama.h: megac's Llama-style model <-> Hugging Face transformers' LlamaForCausalLM,
// and its mixture-of-experts form <-> MixtralForCausalLM.
//
// The same network when megac trains with --normalization RMSNorm --swiglu
// --position-embedding-type rope --disable-bias-linear (rotary on whole heads, RMSNorm eps
// 1e-5, any --num-query-groups, tied or untied output layer). Names and layouts:
//
//   megac (checkpoint)        shape               Hugging Face (model.safetensors)
//   wte                       (V, C)              model.embed_tokens.weight
//   layers.L.ln1.weight       (C)                 model.layers.L.input_layernorm.weight
//   layers.L.attn.qkv.weight  ((NH + 2G) hs, C)   rows [0, NH hs): model.layers.L.self_attn.q_proj.weight,
//                                                 the next G hs: k_proj.weight, the last G hs: v_proj.weight
//   layers.L.attn.proj.weight (C, C)              model.layers.L.self_attn.o_proj.weight
//   layers.L.ln2.weight       (C)                 model.layers.L.post_attention_layernorm.weight
//   layers.L.mlp.fc.weight    (2F, C)             rows [0, F): model.layers.L.mlp.gate_proj.weight,
//                                                 rows [F, 2F): up_proj.weight
//   layers.L.mlp.proj.weight  (C, F)              model.layers.L.mlp.down_proj.weight
//   final_ln.weight           (C)                 model.norm.weight
//   output_layer (untied)     (V, C)              lm_head.weight (absent when tied)
//
// Mixtral (MixtralForCausalLM, model_type mixtral): the same with every MLP a mixture-of-
// experts layer (E experts, top K; prefix P = model.layers.L.block_sparse_moe):
//
//   layers.L.mlp.router.weight        (E, C)        P.gate.weight
//   layers.L.mlp.experts.fc.weight    (E 2Fe, C)    expert e's rows [2e Fe, (2e+1) Fe): P.experts.e.w1.weight
//                                                   (gate), the next Fe: P.experts.e.w3.weight (up)
//   layers.L.mlp.experts.proj.weight  (E C, Fe)     rows [e C, (e+1) C): P.experts.e.w2.weight (down)
//
// Routing agrees: Mixtral's softmax over the E logits, top K, renormalised over the K, is
// megac's softmax router without --moe-router-pre-softmax (softmax over the K chosen logits).
//
// All are Linear weights (out, in): no transposes. Rotary positions: megac, Megatron and
// transformers' Llama all rotate the pairs (i, i + hs/2) of a head ("rotate half"), so q and
// k rows need no permutation (the permutation in transformers' conversion script maps Meta's
// original checkpoints, which rotate adjacent pairs (2i, 2i+1)).
#pragma once
#include <stddef.h>
#include "hf_ckpt.h"

// 1 if DIR/config.json says model_type "llama" or "mixtral" (then hf_llama_read_config reads
// it). Never fails.
int hf_llama_is_config(const char *dir);

// Whether c can be written as LlamaForCausalLM (or, with experts, MixtralForCausalLM):
// RMSNorm, SwiGLU, rope on whole heads, no linear biases; with experts also a softmax router
// without pre-softmax or top-k scaling, no shared expert, every layer MoE, no --kv-channels.
// Returns 0, or -1 with one line naming what is missing (the flag) in err. Pure.
int hf_llama_check_exportable(const GPTConfig *c, char *err, size_t errlen);

// Writes DIR/config.json for LlamaForCausalLM (MixtralForCausalLM with experts: also
// num_local_experts, num_experts_per_tok, intermediate_size = each expert's F, no aux loss,
// no sliding window) from c's config. Returns 0, or -1 with one line in err.
int hf_llama_write_config(const char *dir, const HfCkpt *c, char *err, size_t errlen);

// Writes DIR/model.safetensors from c (the split of the table above; metadata as GPT-2's).
// Returns 0, or -1 with one line in err.
int hf_llama_write_weights(const char *dir, const HfCkpt *c, char *err, size_t errlen);

// Reads DIR/config.json (model_type llama or mixtral: then E, K, moe_ffn_hidden_size =
// ffn_hidden_size = intermediate_size and every layer MoE) into cfg (seq_length left 0).
// Refuses, with one line naming the file and the setting, what megac cannot represent:
// another activation than silu, rms_norm_eps other than 1e-5, rope_scaling, attention or MLP
// biases, a head_dim <= 0, partial rotary, pretraining_tp > 1, a sliding_window shorter than
// the positions (a head_dim other than hidden_size / num_attention_heads becomes
// --kv-channels).
// Returns 0, or -1 with one line in err.
int hf_llama_read_config(const char *dir, GPTConfig *cfg, char *err, size_t errlen);

// Reads DIR/model.safetensors into c (built for the config): every tensor above with the
// config's shape (F32, F16 or BF16); lm_head.weight must equal the embedding when tied;
// rotary inv_freq buffers of old exports are ignored; any other tensor is refused. Returns
// 0, or -1 with one line in err.
int hf_llama_read_weights(const char *dir, HfCkpt *c, char *err, size_t errlen);
