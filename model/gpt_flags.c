// model/gpt_flags.c: the model's flags, shared by `megac train` and `megac plan` (see
// gpt_flags.h).
#include "gpt_flags.h"
#include "core/check.h"  // defines: core_usage_error

#include <stdint.h>  // defines: INT32_MAX
#include <stdio.h>   // defines: snprintf
#include <string.h>

void gpt_flags_init(GPTConfig *m, GPTFlagText *t) {
    *m = (GPTConfig){.num_layers = 4, .hidden_size = 128, .num_heads = 4, .ffn_hidden_size = 0,
                     .seq_length = 128, .max_position_embeddings = 0, .vocab_size = 0,
                     .vocab_divisible_by = 128, .recompute_num_layers = 1};
    m->rotary_base = 10000.0;  // Megatron's defaults
    m->rotary_percent = 1.0;
    *t = (GPTFlagText){.recompute_method = "uniform", .normalization = "LayerNorm",
                       .position_embedding = "learned_absolute", .num_query_groups = 1,
                       .attention_backend = "auto"};
    gpt_moe_flags_init(m, t);
}

int gpt_flags_specs(ArgSpec *specs, GPTConfig *m, GPTFlagText *t) {
    const ArgSpec table[GPT_FLAGS_N - GPT_MOE_FLAGS_N] = {
        {"--num-layers", ARG_INT, &m->num_layers, "transformer layers L (Megatron: required; megac: a small test model)"},
        {"--hidden-size", ARG_INT, &m->hidden_size, "hidden size C (Megatron: required; megac: a small test model)"},
        {"--num-attention-heads", ARG_INT, &m->num_heads, "attention heads NH (Megatron: required; megac: a small test model)"},
        {"--ffn-hidden-size", ARG_INT, &m->ffn_hidden_size, "MLP hidden size (0: 4 x hidden)"},
        {"--seq-length", ARG_INT, &m->seq_length, "sequence length T (Megatron: required; megac: a small test model)"},
        {"--max-position-embeddings", ARG_INT, &m->max_position_embeddings, "position table rows (0: seq-length)"},
        {"--make-vocab-size-divisible-by", ARG_INT, &m->vocab_divisible_by, "pad the vocabulary to a multiple of this x TP"},
        {"--decoder-first-pipeline-num-layers", ARG_INT, &m->first_stage_layers, "layers on the first stage (0: even split)"},
        {"--decoder-last-pipeline-num-layers", ARG_INT, &m->last_stage_layers, "layers on the last stage (0: even split)"},
        {"--init-method-std", ARG_FLOAT, &m->init_method_std, "std of the normal initialisation (0.02); output layers / sqrt(2 L)"},
        {"--untie-embeddings-and-output-weights", ARG_BOOL, &m->untie_embeddings, "the output layer gets its own (V, C) weight (default: tied to the input embedding, as GPT-2)"},
        {"--use-flash-attn", ARG_BOOL, &m->use_flash_attn, "fused causal attention: no (T, T) probabilities stored, memory linear in T (CUDA: head size <= 128)"},
        {"--attention-backend", ARG_STR, &t->attention_backend, "auto | fused | flash | unfused | local: fused = cuDNN's fused SDPA (CUDA with --bf16/--fp16, head size 64 or 128, no attention dropout; elsewhere megac's fused kernels, said once), flash = megac's fused kernels (--use-flash-attn), unfused/local = the materialised (T, T) attention, auto = with --use-flash-attn cuDNN where it can run the call, else megac's kernels (docs/gpu.md)"},
        {"--recompute-granularity", ARG_STR, &t->recompute_granularity, "full | selective: re-run layers (or only the attention probabilities) in the backward instead of storing their activations"},
        {"--recompute-method", ARG_STR, &t->recompute_method, "full: uniform (chunks of --recompute-num-layers) | block (the first --recompute-num-layers layers of each stage)"},
        {"--recompute-num-layers", ARG_INT, &m->recompute_num_layers, "full: layers per chunk (uniform) or recomputed layers per stage (block)"},
        {"--recompute-activations", ARG_BOOL, &t->recompute_activations, "the same as --recompute-granularity selective"},
        {"--normalization", ARG_STR, &t->normalization, "LayerNorm (default) | RMSNorm (weight only, eps 1e-5)"},
        {"--swiglu", ARG_BOOL, &t->act[BACKEND_ACT_SWIGLU], "SwiGLU MLP: fc gives [gate; up] (2 F rows), silu(gate) * up; default F = int(4 C 2/3) rounded down to a multiple of 64 (Megatron's)"},
        {"--squared-relu", ARG_BOOL, &t->act[BACKEND_ACT_RELU2], "squared ReLU MLP: relu(x)^2 instead of GELU (Primer); no Hugging Face export"},
        {"--position-embedding-type", ARG_STR, &t->position_embedding, "learned_absolute (default) | rope (rotary on q and k, no position table)"},
        {"--use-rotary-position-embeddings", ARG_BOOL, &t->use_rotary, "Megatron's deprecated name of --position-embedding-type rope"},
        {"--no-position-embedding", ARG_BOOL, &t->no_position_embedding, "no learned absolute position table (Megatron's); megac's models then need --position-embedding-type rope"},
        {"--rotary-base", ARG_FLOAT, &m->rotary_base, "rope: base of the rotary frequencies (10000)"},
        {"--rotary-percent", ARG_FLOAT, &m->rotary_percent, "rope: share of each head's channels rotated (1.0)"},
        {"--group-query-attention", ARG_BOOL, &t->group_query_attention, "grouped-query attention: --num-query-groups key/value heads, each shared by NH/G query heads"},
        {"--num-query-groups", ARG_INT, &t->num_query_groups, "with --group-query-attention: key/value heads G (1); TP must divide G"},
        {"--kv-channels", ARG_INT, &t->kv_channels, "head size hs (0: hidden / heads); attention works on heads x hs channels (QKV ((NH + 2G) hs, C), projection (C, NH hs))"},
        {"--disable-bias-linear", ARG_BOOL, &m->disable_bias_linear, "no biases in the linear layers (QKV, projections, MLP)"},
        {"--apply-layernorm-1p", ARG_BOOL, &m->layernorm_1p, "zero-centred norm weights: the norms scale by 1 + w, w initialised to 0 (LayerNorm or RMSNorm)"},
    };
    memcpy(specs, table, sizeof table);
    gpt_moe_flags_specs(specs + (GPT_FLAGS_N - GPT_MOE_FLAGS_N), m, t);
    return GPT_FLAGS_N;
}

int gpt_attention_backend(const char *name, int *use_flash_attn, BackendAttnKernels *k,
                          char *err, size_t n) {
    *k = BACKEND_ATTN_MEGAC;
    if (!strcmp(name, "auto")) {
        *k = BACKEND_ATTN_AUTO;
    } else if (!strcmp(name, "fused") || !strcmp(name, "flash")) {
        *k = name[1] == 'u' ? BACKEND_ATTN_CUDNN : BACKEND_ATTN_MEGAC;
        *use_flash_attn = 1;
    } else if (!strcmp(name, "unfused") || !strcmp(name, "local")) {
        if (*use_flash_attn) {
            snprintf(err, n, "--attention-backend %s (the materialised attention) contradicts "
                     "--use-flash-attn (fused): give one", name);
            return -1;
        }
    } else {
        snprintf(err, n, "--attention-backend must be auto, fused, flash, unfused or local, got '%s'", name);
        return -1;
    }
    return 0;
}

void gpt_flags_finish(GPTConfig *m, const GPTFlagText *t) {
    char err[160];
    if (gpt_attention_backend(t->attention_backend, &m->use_flash_attn, &m->attn_kernels, err, sizeof err))
        core_usage_error("%s", err);
    if (m->ffn_hidden_size == 0 && m->hidden_size > INT32_MAX / 4)
        core_usage_error("--hidden-size %d is too large: the default --ffn-hidden-size (4 x hidden "
                         "= %lld) does not fit a 32-bit size", m->hidden_size, 4LL * m->hidden_size);
    if (t->kv_channels < 0 || t->kv_channels > 65536)
        core_usage_error("--kv-channels must be in [1, 65536], got %d", t->kv_channels);
    // the head size C / NH is the default: kept as 0, so checkpoints and exports match
    m->kv_channels = m->num_heads > 0 && (long long)t->kv_channels * m->num_heads == m->hidden_size &&
                     m->hidden_size % m->num_heads == 0 ? 0 : t->kv_channels;
    int nact = 0;
    for (int a = 0; a < BACKEND_ACT_COUNT; a++)
        if (t->act[a]) m->activation = (BackendAct)a, nact++;
    if (nact > 1) core_usage_error("--swiglu and --squared-relu: give one activation flag at most");
    if (m->ffn_hidden_size == 0 && backend_act_gated(m->activation)) {  // Megatron: int(4 C 2/3 / 64) * 64
        m->ffn_hidden_size = (int)(4.0 * m->hidden_size * 2.0 / 3.0 / 64.0) * 64;
        if (m->ffn_hidden_size == 0)
            core_usage_error("--swiglu: the default --ffn-hidden-size int(4 x %d x 2/3) rounded down "
                             "to a multiple of 64 is 0; give --ffn-hidden-size", m->hidden_size);
    }
    if (m->ffn_hidden_size == 0) m->ffn_hidden_size = 4 * m->hidden_size;
    const char *norm = t->normalization, *pos = t->use_rotary ? "rope" : t->position_embedding;
    if (strcmp(norm, "LayerNorm") && strcmp(norm, "RMSNorm"))
        core_usage_error("--normalization must be LayerNorm or RMSNorm, got '%s'", norm);
    if (strcmp(pos, "learned_absolute") && strcmp(pos, "rope"))
        core_usage_error("--position-embedding-type must be learned_absolute or rope, got '%s'", pos);
    m->rmsnorm = !strcmp(norm, "RMSNorm");
    m->rope = !strcmp(pos, "rope");
    if (t->no_position_embedding && !m->rope)  // Megatron would train without positions at all
        core_usage_error("--no-position-embedding without --position-embedding-type rope: a model with no "
                         "positions at all is not implemented in megac (with rope it is implied)");
    if (t->group_query_attention && t->num_query_groups < 1)
        core_usage_error("--num-query-groups must be >= 1, got %d", t->num_query_groups);
    m->num_query_groups = t->group_query_attention ? t->num_query_groups : 0;
    if (m->rope && !(m->rotary_percent > 0.0 && m->rotary_percent <= 1.0))
        core_usage_error("--rotary-percent must be in (0, 1], got %g", m->rotary_percent);
    if (m->max_position_embeddings == 0) m->max_position_embeddings = m->seq_length;
    const char *gran = t->recompute_granularity, *method = t->recompute_method;
    if (gran && strcmp(gran, "full") && strcmp(gran, "selective"))
        core_usage_error("--recompute-granularity must be full or selective, got '%s'", gran);
    if (strcmp(method, "uniform") && strcmp(method, "block"))
        core_usage_error("--recompute-method must be uniform or block, got '%s'", method);
    if (t->recompute_activations && gran && strcmp(gran, "selective"))
        core_usage_error("--recompute-activations (selective) contradicts --recompute-granularity %s", gran);
    m->recompute = gran && !strcmp(gran, "full") ? GPT_RECOMPUTE_FULL
                 : (gran || t->recompute_activations) ? GPT_RECOMPUTE_SELECTIVE : GPT_RECOMPUTE_NONE;
    m->recompute_block = !strcmp(method, "block");
    if (m->recompute == GPT_RECOMPUTE_FULL && m->recompute_num_layers < 1)
        core_usage_error("--recompute-num-layers must be >= 1, got %d", m->recompute_num_layers);
    gpt_moe_flags_finish(m, t);
}
