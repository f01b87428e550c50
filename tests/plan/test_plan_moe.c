// tests/plan/test_plan_moe.c: the formulas of `megac plan` for mixture-of-experts models:
// FLOPs against a GEMM-by-GEMM count, per-stage FLOPs and TP traffic with dense and MoE
// layers mixed (recomputation too), the MoE workspace in the memory prediction.
#include "plan/plan_enum.h"
#include "tests/plan/plan_test_spec.h"  // defines: tiny_spec
#include "tests/testing.h"

#include <math.h>
#include <stdio.h>

// Mixture of experts (expert-parallel 1): gpt_flops_per_iteration against a GEMM-by-GEMM
// count (an MoE layer: K experts' MLPs of F_e per token and the router's (C, E) GEMM), the
// stages' FLOPs adding up to it with dense and MoE layers mixed, with recomputation too; an
// MoE layer's MLP moves nothing over TP (2 all-reduces per layer and micro-batch fewer).
static void test_moe(void) {
    PlanSpec s = tiny_spec(4, 8);
    GPTConfig *c = &s.model;
    c->num_layers = 4;
    c->num_experts = 8;
    c->moe_topk = 2;
    c->moe_ffn_hidden_size = 48;
    snprintf(c->moe_layer_freq, sizeof c->moe_layer_freq, "2");  // layers 0 and 2
    for (int gated = 0; gated < 2; gated++) {
        c->activation = gated ? BACKEND_ACT_SWIGLU : BACKEND_ACT_GELU;
        double C = 64, T = 32, F = 256, Fe = 48, E = 8, K = 2, Vp = 384, B = 3, g = gated ? 3 : 2;
        double attn = 2 * C * 3 * C + 2 * C * C + 2 * 2 * T * C;  // per token, forward
        double dense = g * 2 * C * F, moe = K * g * 2 * C * Fe + 2 * C * E;
        double want = 3 * B * T * (4 * attn + 2 * dense + 2 * moe + 2 * C * Vp);
        double got = gpt_flops_per_iteration(c, (int)Vp, (long long)B);
        EXPECT(fabs(got - want) <= 1e-12 * want, "MoE FLOPs (%s): %.17g, GEMM count %.17g",
               gated ? "swiglu" : "gelu", got, want);
    }
    c->activation = BACKEND_ACT_GELU;
    char err[256];
    EXPECT(gpt_config_check(c, 2, 2, err, sizeof err) == 0, "%s", err);
    PlanHardware hw;
    plan_hw_builtin("h100", &hw);
    PlanLayout l = {2, 2, 1, 1, 0, 0, 0, 0, 0, 1, 0, 1, 0, 0};  // TP 2 x PP 2, no SP
    for (int rc = 0; rc < 2; rc++) {
        c->recompute = rc ? GPT_RECOMPUTE_FULL : GPT_RECOMPUTE_NONE;
        c->recompute_block = rc;
        c->recompute_num_layers = 1;  // block: the stage's first layer (an MoE layer)
        PlanResult r, d;
        plan_predict(&s, &l, &hw, &r);
        double sum = 0.0, hw_sum = 0.0;
        for (int st = 0; st < 2; st++) {
            EXPECT_EQ_INT(r.stages[st].n_moe, 1);
            sum += r.stages[st].model_flops_mb * l.tp * r.n_micro * l.dp;
            hw_sum += r.stages[st].flops_mb * l.tp * r.n_micro * l.dp;
        }
        EXPECT_NEAR(sum, r.model_flops, 1e-12 * r.model_flops);
        GPTConfig one = *c;  // one MoE layer's FLOPs, re-run once per stage
        one.num_layers = 1;
        snprintf(one.moe_layer_freq, sizeof one.moe_layer_freq, "1");
        double extra = rc ? 2 * gpt_flops_per_iteration(&one, 0, s.global_batch) / 3 : 0.0;
        EXPECT_NEAR(hw_sum, r.model_flops + extra, 1e-12 * r.model_flops);
        GPTConfig moe = *c;
        c->num_experts = 0;
        plan_predict(&s, &l, &hw, &d);
        *c = moe;
        for (int st = 0; st < 2; st++) {  // 2 fewer per MoE layer and micro-batch, and the
            uint64_t a = d.stages[st].traffic[PLAN_G_TP].calls[COMM_ALL_REDUCE];  // recomputed
            uint64_t b = r.stages[st].traffic[PLAN_G_TP].calls[COMM_ALL_REDUCE];  // forward's 1
            EXPECT_EQ_INT((int)(a - b), (2 + rc) * r.n_micro);
            EXPECT(r.stages[st].moe_workspace > 0 && r.stages[st].n_floats > d.stages[st].n_floats,
                   "stage %d: MoE workspace %g, floats %zu vs dense %zu", st, r.stages[st].moe_workspace,
                   r.stages[st].n_floats, d.stages[st].n_floats);
        }
        plan_result_free(&r);
        plan_result_free(&d);
    }
}

int main(void) {
    test_moe();
    return test_result("test_plan_moe");
}
