// tests/plan/test_plan_attention.c: how `megac plan` times the fused attention: which kernels
// train runs (plan_attn_cudnn: cuDNN's fused SDPA only for 16-bit activations, head size 64
// or 128, no attention dropout, no CP window, --attention-backend auto/fused), the attention's
// share of a micro-batch's FLOPs (Megatron's 12 B T^2 NH hs per layer, recomputed layers'
// forward again) and the step-time formula that times that share at its own rate.
#include "plan/plan_enum.h"
#include "tests/plan/plan_test_spec.h"  // defines: tiny_spec
#include "tests/testing.h"

#include <math.h>

// The tiny model at head size 64 (C 256, 4 heads), bf16, flash attention, train's default
// kernel choice (auto) and no attention dropout: a case cuDNN runs.
static PlanSpec cudnn_spec(int world) {
    PlanSpec s = tiny_spec(world, 8);
    s.model.hidden_size = 256, s.model.ffn_hidden_size = 1024;
    s.model.use_flash_attn = 1, s.model.attn_kernels = BACKEND_ATTN_AUTO;
    s.precision = PLAN_BF16;
    return s;
}

static void test_choice(void) {
    PlanLayout one = {.tp = 1, .pp = 1, .dp = 1, .micro_batch = 2}, cp2 = one;
    cp2.cp = 2;
    PlanSpec s = cudnn_spec(1);
    EXPECT_EQ_INT(plan_attn_cudnn(&s, &one), 1);
    EXPECT_EQ_INT(plan_attn_cudnn(&s, &cp2), 0);  // the ring's blocks are windows
    s.model.attn_kernels = BACKEND_ATTN_CUDNN;    // --attention-backend fused
    EXPECT_EQ_INT(plan_attn_cudnn(&s, &one), 1);
    s.model.attn_kernels = BACKEND_ATTN_MEGAC;    // --attention-backend flash
    EXPECT_EQ_INT(plan_attn_cudnn(&s, &one), 0);
    s = cudnn_spec(1);
    s.attention_dropout = 0.1;
    EXPECT_EQ_INT(plan_attn_cudnn(&s, &one), 0);
    s = cudnn_spec(1);
    s.precision = PLAN_FP16;
    EXPECT_EQ_INT(plan_attn_cudnn(&s, &one), 1);
    s.precision = PLAN_TF32;
    EXPECT_EQ_INT(plan_attn_cudnn(&s, &one), 0);
    s = cudnn_spec(1);
    s.model.kv_channels = 128;  // head size 128
    EXPECT_EQ_INT(plan_attn_cudnn(&s, &one), 1);
    s.model.kv_channels = 32;
    EXPECT_EQ_INT(plan_attn_cudnn(&s, &one), 0);
    s = cudnn_spec(1);
    s.model.use_flash_attn = 0;  // materialised: batched GEMMs
    EXPECT_EQ_INT(plan_attn_cudnn(&s, &one), 0);
}

// attn_flops_mb = (L + recomputed / 3) 12 B T^2 NH hs / (TP CP), and t_mb times it at
// peak x the chosen efficiency, the rest of flops_mb at peak x gemm_efficiency.
static void test_share_and_time(void) {
    PlanHardware hw;
    plan_hw_builtin("h200", &hw);
    const double peak = plan_hw_peak_flops(&hw, PLAN_BF16), B = 2, T = 32, NH = 4, hs = 64;
    const double att = 12.0 * B * T * T * NH * hs;
    for (int k = 0; k < 4; k++) {
        PlanSpec s = cudnn_spec(k == 3 ? 2 : 1);
        PlanLayout l = {.tp = k == 3 ? 2 : 1, .pp = 1, .dp = 1, .micro_batch = 2};
        if (k == 1) s.attention_dropout = 0.1;  // megac's kernels
        if (k == 2) s.model.recompute = GPT_RECOMPUTE_FULL, s.model.recompute_num_layers = 1;
        PlanResult r;
        plan_predict(&s, &l, &hw, &r);
        const PlanStage *st = &r.stages[0];
        double want = (2 + (k == 2 ? 2 / 3.0 : 0)) * att / l.tp;
        EXPECT_NEAR(st->attn_flops_mb, want, 1e-12 * want);
        double eff = k == 1 ? hw.attn_megac_efficiency : hw.attn_cudnn_efficiency;
        double t = (st->flops_mb - st->attn_flops_mb) / (peak * hw.gemm_efficiency) +
                   st->attn_flops_mb / (peak * eff) + st->kernel_bytes_mb / (hw.hbm_gbps * 1e9);
        if (k < 3) EXPECT_NEAR(st->t_mb, t, 1e-12 * t);  // (TP 2 adds its collectives)
        else EXPECT(st->t_mb > t, "TP 2: %g s not above the compute %g s", st->t_mb, t);
        plan_result_free(&r);
    }
    PlanSpec s = cudnn_spec(1);
    s.model.use_flash_attn = 0;
    PlanLayout l = {.tp = 1, .pp = 1, .dp = 1, .micro_batch = 2};
    PlanResult r;
    plan_predict(&s, &l, &hw, &r);
    EXPECT_NEAR(r.stages[0].attn_flops_mb, 0.0, 0);  // materialised: all at the GEMM rate
    plan_result_free(&r);
    printf("attention: %.4g FLOP per layer and micro-batch, at %.0f%% (cuDNN) or %.0f%% (megac) of "
           "the peak\n", att, hw.attn_cudnn_efficiency * 100, hw.attn_megac_efficiency * 100);
}

int main(void) {
    test_choice();
    test_share_and_time();
    return test_result("test_plan_attention");
}
