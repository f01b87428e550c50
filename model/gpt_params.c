// model/gpt_params.c: parameter table, shard geometry and layout-independent init.
#include "gpt_params.h"
#include "core/check.h"
#include "core/philox.h"
#include "gpt_moe.h"  // defines: gpt_moe_layer, gpt_moe_ffn

#include <math.h>
#include <stdio.h>
#include <string.h>

// Per-block parameters, in the order they are laid out in the flat buffer. `id` numbers the
// tensor's RNG stream (64 + 64*layer + id): fixed per tensor, so adding kinds changes no
// existing initialisation. Dimensions are symbolic: resolved against the config in dim().
typedef enum { D1, DC, DQKV, DA, DFC, DF, DE, DEFC, DEC, DFE, DSFC, DS } Dim;  // DA: attention
                                    // NH hs; DE experts E, DEFC E F2e, DEC E C, DFE an
                                    // expert's F; DSFC, DS the shared expert's F2s, Fs
typedef enum {                       // when a tensor exists (bits)
    NORM_BIAS = 1,                   // not with RMSNorm
    LINEAR_BIAS = 2,                 // not with --disable-bias-linear
    DENSE = 4,                       // in a dense layer only (the MLP)
    MOE = 8,                         // in a mixture-of-experts layer only (router, experts)
    SHARED = 16,                     // in a MoE layer with a shared expert only
} Presence;
typedef struct {
    const char *name;
    int id;
    Dim rows, cols;
    ShardKind shard;
    InitKind init;
    int wd;
    int norm;  // LayerNorm parameter
    unsigned present;
} BlockSpec;

static const BlockSpec BLOCK[] = {
    {"ln1.weight", 0, DC, D1, SHARD_NONE, INIT_ONE, 0, 1, 0},
    {"ln1.bias", 1, DC, D1, SHARD_NONE, INIT_ZERO, 0, 1, NORM_BIAS},
    {"attn.qkv.weight", 2, DQKV, DC, SHARD_QKV, INIT_NORMAL, 1, 0, 0},
    {"attn.qkv.bias", 3, DQKV, D1, SHARD_QKV, INIT_ZERO, 0, 0, LINEAR_BIAS},
    {"attn.proj.weight", 4, DC, DA, SHARD_ROW, INIT_NORMAL_OUT, 1, 0, 0},
    {"attn.proj.bias", 5, DC, D1, SHARD_NONE, INIT_ZERO, 0, 0, LINEAR_BIAS},
    {"ln2.weight", 6, DC, D1, SHARD_NONE, INIT_ONE, 0, 1, 0},
    {"ln2.bias", 7, DC, D1, SHARD_NONE, INIT_ZERO, 0, 1, NORM_BIAS},
    {"mlp.fc.weight", 8, DFC, DC, SHARD_COLUMN, INIT_NORMAL, 1, 0, DENSE},
    {"mlp.fc.bias", 9, DFC, D1, SHARD_COLUMN, INIT_ZERO, 0, 0, DENSE | LINEAR_BIAS},
    {"mlp.proj.weight", 10, DC, DF, SHARD_ROW, INIT_NORMAL_OUT, 1, 0, DENSE},
    {"mlp.proj.bias", 11, DC, D1, SHARD_NONE, INIT_ZERO, 0, 0, DENSE | LINEAR_BIAS},
    {"mlp.router.weight", 12, DE, DC, SHARD_NONE, INIT_NORMAL, 1, 0, MOE},
    {"mlp.experts.fc.weight", 13, DEFC, DC, SHARD_NONE, INIT_NORMAL, 1, 0, MOE},
    {"mlp.experts.fc.bias", 14, DEFC, D1, SHARD_NONE, INIT_ZERO, 0, 0, MOE | LINEAR_BIAS},
    {"mlp.experts.proj.weight", 15, DEC, DFE, SHARD_NONE, INIT_NORMAL_OUT, 1, 0, MOE},
    {"mlp.experts.proj.bias", 16, DEC, D1, SHARD_NONE, INIT_ZERO, 0, 0, MOE | LINEAR_BIAS},
    {"mlp.shared.fc.weight", 17, DSFC, DC, SHARD_COLUMN, INIT_NORMAL, 1, 0, SHARED},
    {"mlp.shared.fc.bias", 18, DSFC, D1, SHARD_COLUMN, INIT_ZERO, 0, 0, SHARED | LINEAR_BIAS},
    {"mlp.shared.proj.weight", 19, DC, DS, SHARD_ROW, INIT_NORMAL_OUT, 1, 0, SHARED},
    {"mlp.shared.proj.bias", 20, DC, D1, SHARD_NONE, INIT_ZERO, 0, 0, SHARED | LINEAR_BIAS},
};
#define N_BLOCK (int)(sizeof BLOCK / sizeof BLOCK[0])

// Tensor ids: 1..5 for the model-level tensors, 64 + 64*layer + id for block tensors.
enum { TID_WTE = 1, TID_WPE = 2, TID_LNF_W = 3, TID_LNF_B = 4, TID_OUTPUT = 5 };

// Whether tensor b exists in a layer that is a mixture-of-experts layer (moe 1) or not.
static int present(const BlockSpec *b, const GPTConfig *c, int moe) {
    return !((b->present & NORM_BIAS) && c->rmsnorm) &&
           !((b->present & LINEAR_BIAS) && c->disable_bias_linear) &&
           !((b->present & DENSE) && moe) && !((b->present & MOE) && !moe) &&
           !((b->present & SHARED) && !(moe && c->moe_shared_ffn > 0));
}

static int dim(Dim d, const GPTConfig *c) {
    int hs = gpt_head_size(c);
    switch (d) {
    case D1: return 1;
    case DC: return c->hidden_size;
    case DQKV: return (c->num_heads + 2 * gpt_kv_heads(c)) * hs;
    case DA: return c->num_heads * hs;
    case DFC: return (backend_act_gated(c->activation) ? 2 : 1) * c->ffn_hidden_size;
    case DF: return c->ffn_hidden_size;
    case DE: return c->num_experts;
    case DEFC: return c->num_experts * (backend_act_gated(c->activation) ? 2 : 1) * gpt_moe_ffn(c);
    case DEC: return c->num_experts * c->hidden_size;
    case DFE: return gpt_moe_ffn(c);
    case DSFC: return (backend_act_gated(c->activation) ? 2 : 1) * c->moe_shared_ffn;
    case DS: return c->moe_shared_ffn;
    }
    return 0;
}

// The q, k, v sections of a QKV tensor, or gate and up of SwiGLU's fc (else shard as is).
static void set_sections(ParamInfo *p, const GPTConfig *c) {
    int hs = gpt_head_size(c), G = gpt_kv_heads(c);
    if (p->shard == SHARD_QKV) {
        p->sections[0] = c->num_heads * hs;
        p->sections[1] = p->sections[2] = G * hs;
    } else if (p->shard == SHARD_COLUMN && backend_act_gated(c->activation)) {
        int shared = strstr(p->name, "mlp.shared.fc.") != NULL;  // a MoE layer's shared expert
        if (!shared && !strstr(p->name, "mlp.fc.")) return;
        p->shard = SHARD_GLU;
        p->sections[0] = p->sections[1] = shared ? c->moe_shared_ffn : c->ffn_hidden_size;
    }
}

static void set_local_shape(ParamInfo *p, int tp, int padded_vocab) {
    p->local_rows = p->rows;
    p->local_cols = p->cols;
    if (p->shard == SHARD_COLUMN || p->shard == SHARD_QKV || p->shard == SHARD_GLU)
        p->local_rows = p->rows / tp;
    if (p->shard == SHARD_ROW) p->local_cols = p->cols / tp;
    if (p->shard == SHARD_VOCAB) p->local_rows = padded_vocab / tp;
    p->tp_replicated = (p->shard == SHARD_NONE || p->shard == SHARD_EXPERT);
    p->numel = (size_t)p->local_rows * p->local_cols;
}

static ParamInfo make(const char *name, uint32_t id, int rows, int cols, ShardKind s,
                      InitKind init, int wd) {
    ParamInfo p;
    memset(&p, 0, sizeof p);
    snprintf(p.name, sizeof p.name, "%s", name);
    p.tensor_id = id;
    p.rows = rows;
    p.cols = cols;
    p.shard = s;
    p.init = init;
    p.weight_decay = wd;
    return p;
}

// Offsets of the tensors of t (n) that are expert tensors (which 1), the others (0) or all
// (-1), in table order from `off`, each view 64-byte aligned; returns the end.
static size_t place(ParamInfo *t, int n, int which, size_t off) {
    for (int i = 0; i < n; i++)
        if (which < 0 || t[i].expert == which) {
            t[i].offset = off;
            off += (t[i].numel + 15) / 16 * 16;
        }
    return off;
}

ParamInfo *gpt_params_build(const GPTConfig *c, int tp, int padded_vocab, int layer0,
                            int n_layers, int first_stage, int last_stage, int *n, size_t *total) {
    return gpt_params_build_ep(c, tp, 1, 0, padded_vocab, layer0, n_layers, first_stage,
                               last_stage, n, total);
}

ParamInfo *gpt_params_build_ep(const GPTConfig *c, int tp, int ep, int ep_rank, int padded_vocab,
                               int layer0, int n_layers, int first_stage, int last_stage, int *n,
                               size_t *total) {
    int cap = 5 + 2 + n_layers * N_BLOCK;
    ParamInfo *t = core_calloc((size_t)cap, sizeof *t);
    int k = 0, C = c->hidden_size;
    if (first_stage) {
        t[k++] = make("wte", TID_WTE, c->vocab_size, C, SHARD_VOCAB, INIT_NORMAL, 1);
        if (!c->rope)
            t[k++] = make("wpe", TID_WPE, c->max_position_embeddings, C, SHARD_NONE, INIT_NORMAL, 1);
    }
    for (int l = layer0; l < layer0 + n_layers; l++) {
        int moe = gpt_moe_layer(c, l);
        for (int s = 0; s < N_BLOCK; s++) {
            if (!present(&BLOCK[s], c, moe)) continue;
            char name[48];
            snprintf(name, sizeof name, "layers.%d.%s", l, BLOCK[s].name);
            t[k++] = make(name, 64u + 64u * (uint32_t)l + (uint32_t)BLOCK[s].id, dim(BLOCK[s].rows, c),
                          dim(BLOCK[s].cols, c), BLOCK[s].shard, BLOCK[s].init, BLOCK[s].wd);
            t[k - 1].norm_param = BLOCK[s].norm;
            t[k - 1].sp_sum = BLOCK[s].norm || (BLOCK[s].present & MOE);
            if (strstr(BLOCK[s].name, "experts.")) {  // whole experts: rows/ep per rank
                t[k - 1].shard = SHARD_EXPERT;
                t[k - 1].expert = 1;
                t[k - 1].expert_row0 = ep_rank * (t[k - 1].rows / ep);
            }
            set_sections(&t[k - 1], c);
        }
    }
    if (last_stage) {
        t[k] = make("final_ln.weight", TID_LNF_W, C, 1, SHARD_NONE, INIT_ONE, 0);
        t[k].sp_sum = 1;
        t[k++].norm_param = 1;
        if (!c->rmsnorm) {
            t[k] = make("final_ln.bias", TID_LNF_B, C, 1, SHARD_NONE, INIT_ZERO, 0);
            t[k].sp_sum = 1;
            t[k++].norm_param = 1;
        }
        if (c->untie_embeddings) {  // its own output layer, initialised like wte (Megatron)
            t[k++] = make("output_layer", TID_OUTPUT, c->vocab_size, C, SHARD_VOCAB, INIT_NORMAL, 1);
        } else if (!first_stage) {  // the output layer's copy of the tied embedding
            t[k] = make("wte", TID_WTE, c->vocab_size, C, SHARD_VOCAB, INIT_NORMAL, 1);
            t[k++].tied_copy = 1;
        }
    }
    for (int i = 0; i < k; i++) {
        if (c->layernorm_1p && t[i].init == INIT_ONE) t[i].init = INIT_ZERO;  // 1 + w, w = 0
        t[i].embedding_or_output = t[i].tensor_id == TID_WTE || t[i].tensor_id == TID_OUTPUT;
        set_local_shape(&t[i], tp, padded_vocab);
        if (t[i].expert) t[i].local_rows = t[i].rows / ep, t[i].numel = (size_t)t[i].local_rows * t[i].cols;
    }
    size_t off = place(t, k, -1, 0);
    *n = k;
    *total = off;
    return t;
}

size_t gpt_params_place_experts(ParamInfo *t, int n, size_t align, size_t *total) {
    size_t dense = place(t, n, 0, 0), start = (dense + align - 1) / align * align;
    size_t end = place(t, n, 1, start);
    if (end == start) return *total;  // no expert tensor: the offsets are as they were
    *total = end;
    return start;
}

void gpt_params_regions(const ParamInfo *t, int n, int ep, size_t *dense, size_t *experts) {
    *dense = *experts = 0;
    for (int i = 0; i < n; i++) *(ep > 1 && t[i].expert ? experts : dense) += (t[i].numel + 15) / 16 * 16;
}

GPTParamsGeometry gpt_params_geometry(size_t dense, size_t experts, size_t pad_multiple) {
    size_t q = pad_multiple ? pad_multiple : 1, start = experts ? (dense + q - 1) / q * q : dense;
    GPTParamsGeometry g = {start + experts, 0, 0};
    g.n_alloc = (g.n_floats + q - 1) / q * q;
    g.expert_offset = experts ? start : g.n_alloc;
    return g;
}

void gpt_params_experts_over_tp(ParamInfo *t, int n) {
    for (int i = 0; i < n; i++)
        if (t[i].expert) t[i].tp_replicated = t[i].sp_sum = 0;
}

void gpt_params_block_index(const ParamInfo *t, int n, int layer0, int n_layers, int *first) {
    int i = 0;
    for (int l = 0; l <= n_layers; l++) {
        char prefix[24];
        snprintf(prefix, sizeof prefix, "layers.%d.", layer0 + l);
        size_t pl = strlen(prefix);
        if (l == n_layers) {  // one past the last block tensor
            while (i < n && !strncmp(t[i].name, "layers.", 7)) i++;
        } else {
            while (i < n && strncmp(t[i].name, prefix, pl)) i++;
        }
        first[l] = i;
    }
}

int gpt_param_is_owner(const ParamInfo *p, int tp_rank) {
    return !p->tied_copy && !(p->tp_replicated && tp_rank > 0);
}

int gpt_param_slices(const ParamInfo *p, int tp, int tp_rank, ParamSlice out[3]) {
    switch (p->shard) {
    case SHARD_NONE:
        out[0] = (ParamSlice){0, 0, p->rows, 0, p->cols};
        return 1;
    case SHARD_COLUMN:
        out[0] = (ParamSlice){tp_rank * p->local_rows, 0, p->local_rows, 0, p->cols};
        return 1;
    case SHARD_ROW:
        out[0] = (ParamSlice){0, 0, p->rows, tp_rank * p->local_cols, p->local_cols};
        return 1;
    case SHARD_QKV:    // local rows [q_i | k_i | v_i], each section's rows/tp long
    case SHARD_GLU: {  // local rows [gate_i | up_i]
        int ns = 0, full0 = 0, local0 = 0;
        for (; ns < 3 && p->sections[ns] > 0; ns++) {
            int part = p->sections[ns] / tp;
            out[ns] = (ParamSlice){full0 + tp_rank * part, local0, part, 0, p->cols};
            full0 += p->sections[ns];
            local0 += part;
        }
        return ns;
    }
    case SHARD_EXPERT:
        out[0] = (ParamSlice){p->expert_row0, 0, p->local_rows, 0, p->cols};
        return 1;
    case SHARD_VOCAB: {
        int start = tp_rank * p->local_rows, valid = p->rows - start;
        if (valid > p->local_rows) valid = p->local_rows;
        if (valid <= 0) return 0;
        out[0] = (ParamSlice){start, 0, valid, 0, p->cols};
        return 1;
    }
    }
    return 0;
}

void gpt_param_init(const ParamInfo *p, const GPTConfig *c, int tp, int tp_rank, uint64_t seed,
                    float *out) {
    memset(out, 0, p->numel * sizeof(float));  // zeros, and the vocab padding rows
    if (p->init == INIT_ZERO) return;
    double std0 = c->init_method_std > 0 ? c->init_method_std : 0.02;  // Megatron's default
    double std = p->init == INIT_NORMAL_OUT ? std0 / sqrt(2.0 * c->num_layers) : std0;
    ParamSlice sl[3];
    int ns = gpt_param_slices(p, tp, tp_rank, sl);
    for (int s = 0; s < ns; s++)
        for (int r = 0; r < sl[s].nrows; r++)
            for (int j = 0; j < sl[s].ncols; j++) {
                float *dst = &out[(size_t)(sl[s].local_row0 + r) * p->local_cols + j];
                uint64_t full = (uint64_t)(sl[s].row0 + r) * (uint64_t)p->cols + (uint64_t)(sl[s].col0 + j);
                *dst = p->init == INIT_ONE ? 1.0f
                     : (float)(std * core_philox_normal(seed, p->tensor_id, full));
            }
}
