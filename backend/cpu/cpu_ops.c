// backend/cpu/cpu_ops.c: the CPU backend's ops table.
//
// With be->act BACKEND_F32 the `void *` activation and weight-copy pointers of BackendOps
// are float buffers: the ops take `void *` as the entries do; the one `op_` wrapper left
// names `void *` as `float *` for add, whose fp32 twin add_f32 shares its loop. With bf16 /
// fp16 (--bf16 / --fp16) cpu_half.c's table wraps those entries.
#include "cpu_backend.h"

static void op_add(Backend *be, void *out, const void *a, const void *b, size_t n) {
    cpu_add(be, out, a, b, n);
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
    .scale_f32 = cpu_scale,
    .cast = cpu_cast,
    .copy_row_blocks = cpu_copy_row_blocks,
    .dropout = cpu_dropout,
    .attention_forward = cpu_attention_forward,
    .attention_backward = cpu_attention_backward,
    .flash_attention_forward = cpu_flash_attention_forward,
    .flash_attention_backward = cpu_flash_attention_backward,
    .embedding_forward = cpu_embedding_forward,
    .embedding_backward = cpu_embedding_backward,
    .position_forward = cpu_position_forward,
    .position_backward = cpu_position_backward,
    .xent_stats = cpu_xent_stats,
    .xent_rescale = cpu_xent_rescale,
    .xent_loss = cpu_xent_loss,
    .xent_backward = cpu_xent_backward,
    .adamw_multi = cpu_adamw_multi,
    .sum_squares_multi = cpu_sum_squares_multi,
    .sum = cpu_sum,
    .rope_gqa_forward = cpu_rope_gqa_forward,
    .rope_gqa_backward = cpu_rope_gqa_backward,
    .moe_router_forward = cpu_moe_router_forward,
    .moe_router_backward = cpu_moe_router_backward,
    .moe_router_loss = cpu_moe_router_loss,
    .rows_gather = cpu_rows_gather,
    .rows_combine = cpu_rows_combine,
    .rows_dot = cpu_rows_dot,
};

const BackendOps *cpu_ops_table(BackendDType act) {
    return act == BACKEND_F32 ? &CPU_OPS : cpu_half_ops_table();
}
