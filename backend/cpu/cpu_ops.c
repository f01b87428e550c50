// backend/cpu/cpu_ops.c: the CPU backend's ops table.
//
// The CPU backend is fp32 throughout (be->act is always BACKEND_F32), so the `void *`
// activation and weight-copy pointers of BackendOps are float buffers here. The ops take
// `void *` as the entries do; the few `op_` wrappers left only name `void *` as `float *` for
// add (whose fp32 twin add_f32 shares its loop) and for the attention and position ops
// (their signatures are being extended; they take `void *` next).
#include "cpu_backend.h"

static void op_add(Backend *be, void *out, const void *a, const void *b, size_t n) {
    cpu_add(be, out, a, b, n);
}
static void op_attention_forward(Backend *be, void *out, void *att, const void *qkv,
                                 int B, int T, int NH, int hs, const BackendDropout *d,
                                 const BackendAttnWindow *w) {
    cpu_attention_forward(be, out, att, qkv, B, T, NH, hs, d, w);
}
static void op_attention_backward(Backend *be, void *dqkv, float *scratch, const void *dout,
                                  const void *qkv, const void *att, int B, int T, int NH, int hs,
                                  const BackendDropout *d) {
    cpu_attention_backward(be, dqkv, scratch, dout, qkv, att, B, T, NH, hs, d);
}
static void op_flash_attention_forward(Backend *be, void *out, float *lse, const void *qkv,
                                       int B, int T, int NH, int hs, const BackendDropout *d,
                                       const BackendAttnWindow *w) {
    cpu_flash_attention_forward(be, out, lse, qkv, B, T, NH, hs, d, w);
}
static void op_flash_attention_backward(Backend *be, void *dqkv, float *scratch, const void *dout,
                                        const void *qkv, const void *out, const float *lse,
                                        int B, int T, int NH, int hs, const BackendDropout *d) {
    cpu_flash_attention_backward(be, dqkv, scratch, dout, qkv, out, lse, B, T, NH, hs, d);
}
static void op_position_forward(Backend *be, void *out, const void *wpe, int B, int T, int C,
                                int pos0) {
    cpu_position_forward(be, out, wpe, B, T, C, pos0);
}
static void op_position_backward(Backend *be, float *dwpe, const void *dout, int B, int T, int C,
                                 int pos0) {
    cpu_position_backward(be, dwpe, dout, B, T, C, pos0);
}

static const BackendOps CPU_OPS = {
    .alloc = cpu_alloc,
    .free = cpu_free,
    .zero = cpu_zero,
    .copy = cpu_copy,
    .sync = cpu_sync,
    .destroy = cpu_destroy,
    .matmul_forward = cpu_matmul_forward,
    .matmul_backward = cpu_matmul_backward,
    .norm_forward = cpu_norm_forward,
    .norm_backward = cpu_norm_backward,
    .residual_layernorm_forward = cpu_residual_layernorm_forward,
    .matmul_act_forward = cpu_matmul_act_forward,
    .matmul_act_backward = cpu_matmul_act_backward,
    .act_forward = cpu_act_forward,
    .act_backward = cpu_act_backward,
    .add = op_add,
    .add_f32 = cpu_add,
    .cast = cpu_cast,
    .dropout = cpu_dropout,
    .attention_forward = op_attention_forward,
    .attention_backward = op_attention_backward,
    .flash_attention_forward = op_flash_attention_forward,
    .flash_attention_backward = op_flash_attention_backward,
    .embedding_forward = cpu_embedding_forward,
    .embedding_backward = cpu_embedding_backward,
    .position_forward = op_position_forward,
    .position_backward = op_position_backward,
    .xent_stats = cpu_xent_stats,
    .xent_rescale = cpu_xent_rescale,
    .xent_loss = cpu_xent_loss,
    .xent_backward = cpu_xent_backward,
    .adamw_multi = cpu_adamw_multi,
    .sum_squares_multi = cpu_sum_squares_multi,
    .sum = cpu_sum,
    .rope_gqa_forward = cpu_rope_gqa_forward,
    .rope_gqa_backward = cpu_rope_gqa_backward,
};

const BackendOps *cpu_ops_table(void) { return &CPU_OPS; }
