// model/gpt_flags.h: the model's command-line flags (Megatron-LM's names), one table shared
// by `megac train` (train/train_args.c) and `megac plan` (megac/cmd_plan.c), so that both
// read the same model, recomputation included.
#pragma once
#include "core/args.h"
#include "gpt_config.h"

// What the flags give as text before it becomes GPTConfig fields.
typedef struct {
    const char *recompute_granularity;  // --recompute-granularity: NULL, "full", "selective"
    const char *recompute_method;       // --recompute-method: "uniform" (default), "block"
    int recompute_activations;          // --recompute-activations (= selective)
    const char *normalization;          // --normalization: "LayerNorm" (default), "RMSNorm"
    const char *position_embedding;     // --position-embedding-type: "learned_absolute", "rope"
    int no_position_embedding;          // --no-position-embedding: no learned absolute positions
    int use_rotary;                     // --use-rotary-position-embeddings: Megatron's old name of rope
    int group_query_attention;          // --group-query-attention
    int num_query_groups;               // --num-query-groups (1, read with the flag above)
    int act[BACKEND_ACT_COUNT];         // act[a] = 1: the flag of activation a was given
                                        // (--swiglu, --squared-relu; GELU, the default,
                                        // has none)
    int kv_channels;                    // --kv-channels: 0 (not given), else the head size
    const char *attention_backend;      // --attention-backend: auto (default), fused, flash,
                                        // unfused, local (gpt_attention_backend)
    // mixture of experts (gpt_moe_flags.c)
    const char *moe_score, *moe_lb, *moe_dispatcher, *moe_layer_freq, *moe_drop_policy;
    int moe_grouped_gemm, moe_expert_bias, moe_pad, moe_shared_gate;
    double moe_bias_rate, moe_capacity;
    int ep, etp;                        // --expert-model-parallel-size, --expert-tensor-...
} GPTFlagText;

enum { GPT_MOE_FLAGS_N = 21 };              // entries gpt_moe_flags_specs writes
enum { GPT_FLAGS_N = 30 + GPT_MOE_FLAGS_N };  // entries gpt_flags_specs writes

// Sets megac train's model defaults in *m (L=4, C=128, NH=4, T=128, vocab padded to a
// multiple of 128, F and the position table derived later) and *t. Pure.
void gpt_flags_init(GPTConfig *m, GPTFlagText *t);

// Writes the model's GPT_FLAGS_N flag entries into specs[0..GPT_FLAGS_N), pointing into *m
// and *t (sizes, pipeline split, flash attention, init std, recomputation). Returns
// GPT_FLAGS_N. Pure.
int gpt_flags_specs(ArgSpec *specs, GPTConfig *m, GPTFlagText *t);

// The mixture-of-experts part of the table (gpt_moe_flags.c): defaults, entries, and the
// checks after parsing (unknown names, flags not implemented yet: one line, exit 2).
void gpt_moe_flags_init(GPTConfig *m, GPTFlagText *t);
int gpt_moe_flags_specs(ArgSpec *specs, GPTConfig *m, GPTFlagText *t);
void gpt_moe_flags_finish(GPTConfig *m, const GPTFlagText *t);

// Megatron's --attention-backend NAME applied to the fused-attention flag *use_flash_attn
// (--use-flash-attn) and the kernels *k (be->attn, set on the backend by the trainer):
//   auto     kernels AUTO, *use_flash_attn as given: fused attention runs cuDNN's fused SDPA
//            where it can (a CUDA backend built with cuDNN; bf16/fp16, head size 64 or 128,
//            no attention dropout, the whole sequence), megac's fused kernels elsewhere
//   fused    cuDNN's fused SDPA (Megatron: Transformer Engine's cuDNN attention): kernels
//            CUDNN, *use_flash_attn = 1; where cuDNN cannot run a call, megac's fused kernels
//            do, said once (the CPU backend, the GPU emulator, dropout, a window)
//   flash    megac's fused kernels (= --use-flash-attn): kernels MEGAC, *use_flash_attn = 1
//   unfused, local   the materialised attention ((T, T) probabilities stored): kernels MEGAC;
//            with --use-flash-attn a contradiction
// Returns 0, or -1 with one line in err (n bytes): an unknown name, a contradiction. Pure.
int gpt_attention_backend(const char *name, int *use_flash_attn, BackendAttnKernels *k,
                          char *err, size_t n);

// After parsing: F = 4 C (with a gated activation Megatron's int(4 C 2/3) rounded down to a
// multiple of 64) and max positions = T when left at 0, the recomputation, activation and
// Llama-style fields from the text; kv_channels (0 when it equals C / NH). Bad values (an
// unknown granularity, method, normalization
// or position type, contradicting flags, --kv-channels out of [1, 65536], two activation flags, --recompute-num-layers < 1 with full, a default F that overflows or
// is 0): one line, exit 2.
void gpt_flags_finish(GPTConfig *m, const GPTFlagText *t);
