// plan/plan_kernels.c: the memory-bound kernel inventory (plan_kernels.h) as one data table.
//
// A row sweeps a (rows, width) tensor on one rank: rows are the micro-batch's N = B T tokens,
// or N / TP for the ops that run on sequence-parallel shards (norms, residual adds); widths:
//   C   hidden size                    Q   this rank's q, k, v columns ((NH + 2 G) hs / TP)
//   F   this rank's MLP width (F / TP) F2  the fc output (2F with SwiGLU, else F)
//   V   this rank's logits (Vp / TP)   A   materialised scores per token (NH / TP x T)
// Per (row, column): `act` elements of the activation type read + written (2 bytes bf16/fp16,
// 4 fp32/tf32), `f32` fp32 elements, `flops`; per row `row_f32` fp32 statistics (mean, rstd).
// The kernels as the model calls them (model/gpt_block.c, model/gpt.c, backend/cuda):
//   LayerNorm: the attention residual add is fused into LN2 (residual_layernorm_forward: read
//     a, b; write res, ln); the MLP residual is its own add; RMSNorm (and any norm with
//     --apply-layernorm-1p) adds, then normalises.
//   Norm backward reads dout twice (dinp, then the weight sums), x once, writes dinp.
//   GELU runs in cuBLASLt's epilogue: the forward writes the pre-activation too (aux), the
//   backward's DGELU reads it; ReLU^2 and SwiGLU run kernels (SwiGLU: 2F in, F out).
//   Bias gradients: one column-sum pass over each linear's output gradient.
//   Backward residual stream: the gradient of each residual branch is added to the stream.
//   Cross-entropy, in the training forward (the fused classifier): at one vocabulary shard
//     (TP 1) one pass: each row's statistics, its loss and d(logits) in place from one read
//     of the logits (the row re-read from L2) and one write; with more shards two passes:
//     statistics (read; then their all-reduces), then loss and d(logits) (read, write in
//     place; the loss from the row statistics and the target logit: 3 floats in, 1 out).
// Not counted: dropout (with --hidden-dropout p > 0 add two passes of (N, C) per layer each
// way; megac plan takes only --attention-dropout, for the choice of attention kernels), fused
// attention (its matrix products are FLOPs, plan_model.c),
// the optimizer (per step, plan_cost.c).
#include "plan_kernels.h"

#include <stddef.h>

typedef enum { W_C, W_Q, W_F, W_F2, W_V, W_A } Width;
typedef enum { R_N, R_SP } Rows;
typedef enum {
    K_ALL, K_LN, K_RMS, K_GELU, K_PLAIN_ACT, K_SWIGLU, K_BIAS, K_ROPE, K_UNFUSED_ATT, K_LEARNED_POS,
    K_VOCAB_ONE, K_VOCAB_SHARDED  // the logits in one vocabulary shard (TP 1), or in several
} When;

typedef struct {
    const char *name;
    PlanKernelWhere where;
    When when;
    Rows rows;
    Width width;
    double act, f32, row_f32, flops;
} KernelRow;

static const KernelRow TABLE[] = {
    // forward, per layer
    {"ln1 forward", PLAN_KW_LAYER_FWD, K_ALL, R_SP, W_C, 2, 0, 2, 8},
    {"rope forward", PLAN_KW_LAYER_FWD, K_ROPE, R_N, W_Q, 2, 0, 0, 6},
    {"softmax forward (materialised)", PLAN_KW_LAYER_FWD, K_UNFUSED_ATT, R_N, W_A, 2, 0, 0, 5},
    {"residual add + ln2 forward", PLAN_KW_LAYER_FWD, K_LN, R_SP, W_C, 4, 0, 2, 9},
    {"residual add (attention)", PLAN_KW_LAYER_FWD, K_RMS, R_SP, W_C, 3, 0, 0, 1},
    {"ln2 forward", PLAN_KW_LAYER_FWD, K_RMS, R_SP, W_C, 2, 0, 1, 6},
    {"gelu epilogue aux write", PLAN_KW_LAYER_FWD, K_GELU, R_N, W_F, 1, 0, 0, 10},
    {"activation forward", PLAN_KW_LAYER_FWD, K_PLAIN_ACT, R_N, W_F, 2, 0, 0, 2},
    {"swiglu forward", PLAN_KW_LAYER_FWD, K_SWIGLU, R_N, W_F, 3, 0, 0, 8},
    {"residual add (mlp)", PLAN_KW_LAYER_FWD, K_ALL, R_SP, W_C, 3, 0, 0, 1},
    // backward, per layer (reverse order)
    {"fcproj bias grad", PLAN_KW_LAYER_BWD, K_BIAS, R_SP, W_C, 1, 0, 0, 1},
    {"dgelu epilogue aux read", PLAN_KW_LAYER_BWD, K_GELU, R_N, W_F, 1, 0, 0, 14},
    {"activation backward", PLAN_KW_LAYER_BWD, K_PLAIN_ACT, R_N, W_F, 3, 0, 0, 3},
    {"swiglu backward", PLAN_KW_LAYER_BWD, K_SWIGLU, R_N, W_F, 5, 0, 0, 12},
    {"fc bias grad", PLAN_KW_LAYER_BWD, K_BIAS, R_N, W_F2, 1, 0, 0, 1},
    {"ln2 backward", PLAN_KW_LAYER_BWD, K_ALL, R_SP, W_C, 4, 0, 2, 14},
    {"residual grad add (mlp)", PLAN_KW_LAYER_BWD, K_ALL, R_SP, W_C, 3, 0, 0, 1},
    {"attn proj bias grad", PLAN_KW_LAYER_BWD, K_BIAS, R_SP, W_C, 1, 0, 0, 1},
    {"softmax backward (materialised)", PLAN_KW_LAYER_BWD, K_UNFUSED_ATT, R_N, W_A, 3, 0, 0, 4},
    {"rope backward", PLAN_KW_LAYER_BWD, K_ROPE, R_N, W_Q, 2, 0, 0, 6},
    {"qkv bias grad", PLAN_KW_LAYER_BWD, K_BIAS, R_N, W_Q, 1, 0, 0, 1},
    {"ln1 backward", PLAN_KW_LAYER_BWD, K_ALL, R_SP, W_C, 4, 0, 2, 14},
    {"residual grad add (attention)", PLAN_KW_LAYER_BWD, K_ALL, R_SP, W_C, 3, 0, 0, 1},
    // first stage: token (and position) embedding
    {"embedding forward", PLAN_KW_FIRST_FWD, K_ALL, R_N, W_C, 2, 0, 0, 1},
    {"position embedding add", PLAN_KW_FIRST_FWD, K_LEARNED_POS, R_N, W_C, 1, 0, 0, 1},
    {"embedding backward (wte)", PLAN_KW_FIRST_BWD, K_ALL, R_N, W_C, 1, 2, 0, 1},
    {"position embedding backward", PLAN_KW_FIRST_BWD, K_LEARNED_POS, R_N, W_C, 1, 0, 0, 1},
    // last stage: final norm, cross-entropy over the vocabulary-parallel logits
    {"final norm forward", PLAN_KW_LAST_FWD, K_ALL, R_SP, W_C, 2, 0, 2, 8},
    {"cross-entropy fused, one pass", PLAN_KW_LAST_FWD, K_VOCAB_ONE, R_N, W_V, 2, 0, 1, 6},
    {"cross-entropy statistics", PLAN_KW_LAST_FWD, K_VOCAB_SHARDED, R_N, W_V, 1, 0, 2, 3},
    {"cross-entropy loss + dlogits", PLAN_KW_LAST_FWD, K_VOCAB_SHARDED, R_N, W_V, 2, 0, 4, 3},
    {"final norm backward", PLAN_KW_LAST_BWD, K_ALL, R_SP, W_C, 4, 0, 2, 14},
};
#define N_TABLE (int)(sizeof TABLE / sizeof TABLE[0])

static int applies(const GPTConfig *c, int tp, When w) {
    switch (w) {
    case K_ALL: return 1;
    case K_LN: return !c->rmsnorm && !c->layernorm_1p;  // the fused residual + LayerNorm
    case K_RMS: return c->rmsnorm || c->layernorm_1p;   // add, then the norm (1p: no fused op)
    case K_GELU: return c->activation == BACKEND_ACT_GELU;
    case K_PLAIN_ACT: return c->activation == BACKEND_ACT_RELU2;
    case K_SWIGLU: return c->activation == BACKEND_ACT_SWIGLU;
    case K_BIAS: return !c->disable_bias_linear;
    case K_ROPE: return c->rope;
    case K_UNFUSED_ATT: return !c->use_flash_attn;
    case K_LEARNED_POS: return !c->rope;
    case K_VOCAB_ONE: return tp == 1;
    case K_VOCAB_SHARDED: return tp > 1;
    }
    return 0;
}

int plan_kernels(const PlanSpec *s, const PlanLayout *l, PlanKernel *out) {
    const GPTConfig *c = &s->model;
    double e = s->precision == PLAN_BF16 || s->precision == PLAN_FP16 ? 2.0 : 4.0;
    double tp = l->tp, N = (double)l->micro_batch * c->seq_length / plan_cp(l);
    double hs = gpt_head_size(c), F = c->ffn_hidden_size / tp;
    double width[] = {
        [W_C] = c->hidden_size, [W_Q] = (c->num_heads + 2.0 * gpt_kv_heads(c)) * hs / tp, [W_F] = F,
        [W_F2] = c->activation == BACKEND_ACT_SWIGLU ? 2 * F : F,
        [W_V] = gpt_padded_vocab(c, l->tp) / tp, [W_A] = c->num_heads / tp * c->seq_length,
    };
    int n = 0;
    for (int i = 0; i < N_TABLE && n < PLAN_KERNELS_MAX; i++) {
        const KernelRow *k = &TABLE[i];
        if (!applies(c, l->tp, k->when)) continue;
        double rows = k->rows == R_SP && l->sp ? N / tp : N, cols = width[k->width];
        out[n++] = (PlanKernel){.name = k->name, .where = k->where,
                                .bytes = rows * (cols * (k->act * e + k->f32 * 4.0) + k->row_f32 * 4.0),
                                .flops = rows * cols * k->flops};
    }
    return n;
}

double plan_kernel_bytes(const PlanSpec *s, const PlanLayout *l, int n_layers, int n_recomputed,
                         int first, int last) {
    PlanKernel k[PLAN_KERNELS_MAX];
    int n = plan_kernels(s, l, k);
    double b = 0.0;
    for (int i = 0; i < n; i++) {
        double times = 0.0;
        switch (k[i].where) {
        case PLAN_KW_LAYER_FWD: times = n_layers + n_recomputed; break;
        case PLAN_KW_LAYER_BWD: times = n_layers; break;
        case PLAN_KW_FIRST_FWD: case PLAN_KW_FIRST_BWD: times = first; break;
        case PLAN_KW_LAST_FWD: case PLAN_KW_LAST_BWD: times = last; break;
        }
        b += times * k[i].bytes;
    }
    return b;
}

const char *plan_kernel_where_name(PlanKernelWhere w) {
    static const char *names[] = {"layer fwd", "layer bwd", "first fwd", "first bwd", "last fwd", "last bwd"};
    return w <= PLAN_KW_LAST_BWD ? names[w] : "?";
}
