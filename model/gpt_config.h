// model/gpt_config.h: the model's hyper-parameters (GPT-2, or Llama-style) and their checks
// against a layout.
#pragma once
#include "backend/backend.h"  // defines: BackendAct

#include <stddef.h>

typedef struct {
    int num_layers;               // L
    int hidden_size;              // C
    int num_heads;                // NH (head size hs = C / NH, or kv_channels)
    int ffn_hidden_size;          // F, 4*C for GPT-2
    int seq_length;               // T
    int max_position_embeddings;  // rows of the position table (>= T)
    int vocab_size;               // V, the tokenizer's
    int vocab_divisible_by;       // --make-vocab-size-divisible-by (128)
    int first_stage_layers;       // --decoder-first-pipeline-num-layers (0: even split)
    int last_stage_layers;        // --decoder-last-pipeline-num-layers (0: even split)
    int use_flash_attn;           // --use-flash-attn: fused attention, no (T, T) stored; the
                                  // same math (an implementation choice, not in checkpoints)
    BackendAttnKernels attn_kernels;  // --attention-backend: the fused attention's kernels
                                      // (gpt_attention_backend; not in checkpoints)
    // Activation recomputation (Megatron's flags; bitwise the same results, less memory):
    int recompute;                // --recompute-granularity: 0 none, GPT_RECOMPUTE_FULL (whole
                                  // layers re-run in the backward), GPT_RECOMPUTE_SELECTIVE
                                  // (only the attention probabilities; nothing with flash)
    int recompute_block;          // --recompute-method: 0 uniform (the stage's layers in chunks
                                  // of recompute_num_layers, only each chunk's input kept),
                                  // 1 block (the first recompute_num_layers layers, each alone)
    int recompute_num_layers;     // --recompute-num-layers (>= 1 with full)
    double init_method_std;       // --init-method-std (0: Megatron's 0.02)
    int untie_embeddings;         // --untie-embeddings-and-output-weights: the output layer has
                                  // its own (V, C) weight ("output_layer") instead of wte's
    // Llama-style architecture (Megatron's flags; all 0 for GPT-2):
    int rmsnorm;                  // --normalization RMSNorm: weight only, no bias (eps 1e-5)
    BackendAct activation;        // the MLP's: GELU (GPT-2, 0), --swiglu (fc has 2F rows
                                  // [gate; up], silu(gate) * up)
    int rope;                     // --position-embedding-type rope: no position table
    double rotary_base;           // --rotary-base (10000)
    double rotary_percent;        // --rotary-percent (1.0): rotated share of each head
    int num_query_groups;         // G kv heads (--group-query-attention --num-query-groups);
                                  // 0 or NH: multi-head attention
    int disable_bias_linear;      // --disable-bias-linear: no linear biases
    int kv_channels;              // --kv-channels: head size hs when it is not C / NH (0: C /
                                  // NH); attention then works on NH*hs channels: QKV weight
                                  // ((NH + 2G) hs, C), projection (C, NH hs)
    int layernorm_1p;             // --apply-layernorm-1p: zero-centred norm weights w (init 0),
                                  // the norms scale by 1 + w (LayerNorm or RMSNorm)
    // Mixture of experts (Megatron's --num-experts ...; model/gpt_moe.h). 0 experts: dense.
    int num_experts;              // E: MoE layers replace the MLP by E experts and a router
    int moe_dispatcher;           // MoEDispatcherType (layers/moe.h): --moe-token-dispatcher-type
                                  // (0: alltoall; the flag's default is allgather)
    int moe_grouped_gemm;         // --moe-grouped-gemm: the local experts' products as one
                                  // grouped GEMM (Backend matmul_grouped_*), else one per expert
    int moe_topk;                 // K experts per token (--moe-router-topk, 2)
    int moe_ffn_hidden_size;      // each expert's F (--moe-ffn-hidden-size; 0: ffn_hidden_size)
    int moe_shared_ffn;           // --moe-shared-expert-intermediate-size (0: no shared expert)
    int moe_sigmoid;              // --moe-router-score-function sigmoid (else softmax)
    int moe_pre_softmax;          // --moe-router-pre-softmax
    double moe_topk_scaling;      // --moe-router-topk-scaling-factor (0: none)
    int moe_load_balancing;       // GPT_MOE_LB_*: --moe-router-load-balancing-type
    double moe_aux_coeff;         // --moe-aux-loss-coeff (0)
    double moe_z_coeff;           // --moe-z-loss-coeff (0: none)
    double moe_capacity;          // --moe-expert-capacity-factor (0: dropless, Megatron's default)
    int moe_drop_position;        // --moe-token-drop-policy position (else probs)
    int moe_pad_capacity;         // --moe-pad-expert-input-to-capacity
    int moe_expert_bias;          // --moe-router-enable-expert-bias (aux-loss-free balancing)
    double moe_bias_rate;         // --moe-router-bias-update-rate (1e-3)
    char moe_layer_freq[64];      // --moe-layer-freq: "1" every layer, an int N every N-th
                                  // (layer % N == 0), or Megatron's list ("[1,0,1,0]",
                                  // "([1]*3+[0])*2"), one entry per layer
} GPTConfig;

enum { GPT_MOE_LB_AUX = 0, GPT_MOE_LB_SEQ_AUX = 1, GPT_MOE_LB_NONE = 2 };

// Key/value heads G: num_query_groups, or NH when 0. Pure.
int gpt_kv_heads(const GPTConfig *c);
// Head size hs: kv_channels, or C / NH when 0. Pure.
static inline int gpt_head_size(const GPTConfig *c) {
    return c->kv_channels > 0 ? c->kv_channels : c->num_heads > 0 ? c->hidden_size / c->num_heads : 0;
}
// Rotated channels of a head: int(hs * rotary_percent) with rope, else 0. Pure.
int gpt_rotary_dim(const GPTConfig *c);
// The blocks' normalization: BACKEND_RMSNORM with --normalization RMSNorm, else LayerNorm;
// with BACKEND_NORM_1P under --apply-layernorm-1p. Pure.
static inline BackendNorm gpt_norm_kind(const GPTConfig *c) {
    return (BackendNorm)((c->rmsnorm ? BACKEND_RMSNORM : BACKEND_LAYERNORM) |
                         (c->layernorm_1p ? BACKEND_NORM_1P : 0));
}
// 1 if any Llama-style option is on (megac export then writes LlamaForCausalLM). Pure.
int gpt_is_llama_style(const GPTConfig *c);

enum { GPT_RECOMPUTE_NONE = 0, GPT_RECOMPUTE_FULL = 1, GPT_RECOMPUTE_SELECTIVE = 2 };
// The recomputation for a summary line: " | recompute full (uniform, 2 layers per chunk)"
// (block: "... per stage") in buf (n bytes), `selective` with selective recomputation, ""
// without any. Returns the text. Pure.
const char *gpt_recompute_label(const GPTConfig *c, const char *selective, char *buf, size_t n);

// Padded vocabulary Vp: V rounded up to a multiple of vocab_divisible_by * tp (Megatron). Pure.
int gpt_padded_vocab(const GPTConfig *c, int tp);

// Sizes past these are refused by gpt_config_check (before anything is allocated): the
// parameter table has GPT_MAX_LAYERS x ~16 entries at most, and the whole model at most
// GPT_MAX_PARAMS elements (2^50, 1.1e15; GPT-3 175B has 1.75e11), so no count of elements
// or bytes wraps (a model below the bound that does not fit is the allocator's to report).
#define GPT_MAX_LAYERS (1 << 20)
#define GPT_MAX_PARAMS 1125899906842624.0

// Checks the config alone and against tp and pp (heads, hidden, ffn divisible by tp; layers
// split over pp stages, see gpt_stage_layers; T <= max positions; all sizes > 0; at most
// GPT_MAX_LAYERS layers and GPT_MAX_PARAMS parameters, counted in double so nothing wraps).
// Returns 0, or -1 with one line naming the numbers in err.
int gpt_config_check(const GPTConfig *c, int tp, int pp, char *err, size_t errlen);

// The layers of pipeline stage `stage`: [*layer0, *layer0 + *n). pp pipeline ranks hold v
// model chunks each (v = 1: not interleaved); stage is virtual stage c*pp + r of pp*v (chunk
// c of rank r; v = 1: the rank). A rank's layers: evenly split, except that
// first_stage_layers / last_stage_layers (when > 0) fix the first / last rank's count and
// the other ranks share the rest evenly (Megatron's uneven pipeline split, used to balance
// the embedding and loss stages); each of its chunks holds 1/v of them. Call after
// gpt_config_check and gpt_chunks_check. Pure.
void gpt_stage_layers(const GPTConfig *c, int pp, int v, int stage, int *layer0, int *n);

// 0 if v model chunks split every pipeline rank's layers evenly (Megatron's rule for the
// interleaved schedule, uneven first/last ranks included); else -1 with one line naming the
// rank and the numbers in err. Pure.
int gpt_chunks_check(const GPTConfig *c, int pp, int v, char *err, size_t errlen);

// Megatron-LM's FLOPs per iteration (forward + backward, no recomputation) for `samples`
// sequences: 12 B T L C^2 (2 + T/C + F/C + Vp/(2LC)), see gpt_config.c; with grouped-query
// attention the QKV term shrinks to (1 + 2G/NH)/3 of it, with SwiGLU the MLP term is 3F/(2C). Pure.
double gpt_flops_per_iteration(const GPTConfig *c, int padded_vocab, long long samples);
