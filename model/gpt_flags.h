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
    int group_query_attention;          // --group-query-attention
    int num_query_groups;               // --num-query-groups (1, read with the flag above)
    int act[BACKEND_ACT_COUNT];         // act[a] = 1: the flag of activation a was given
                                        // (--swiglu, --squared-relu; GELU, the default,
                                        // has none)
    int kv_channels;                    // --kv-channels: 0 (not given), else the head size
    // mixture of experts (gpt_moe_flags.c)
    const char *moe_score, *moe_lb, *moe_dispatcher, *moe_layer_freq, *moe_drop_policy;
    int moe_grouped_gemm, moe_expert_bias, moe_pad, moe_shared_gate;
    double moe_bias_rate, moe_capacity;
    int ep, etp;                        // --expert-model-parallel-size, --expert-tensor-...
} GPTFlagText;

enum { GPT_MOE_FLAGS_N = 21 };              // entries gpt_moe_flags_specs writes
enum { GPT_FLAGS_N = 27 + GPT_MOE_FLAGS_N };  // entries gpt_flags_specs writes

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

// After parsing: F = 4 C (with a gated activation Megatron's int(4 C 2/3) rounded down to a
// multiple of 64) and max positions = T when left at 0, the recomputation, activation and
// Llama-style fields from the text; kv_channels (0 when it equals C / NH). Bad values (an
// unknown granularity, method, normalization
// or position type, contradicting flags, --kv-channels out of [1, 65536], two activation flags, --recompute-num-layers < 1 with full, a default F that overflows or
// is 0): one line, exit 2.
void gpt_flags_finish(GPTConfig *m, const GPTFlagText *t);
