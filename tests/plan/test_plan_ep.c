// tests/plan/test_plan_ep.c: megac plan's expert parallelism (plan/plan_ep.c) against hand
// counts: the all-to-all bytes of a padded capacity, the allgather dispatcher's bytes, the expert region and its ZeRO-1 shard,
// the dp and edp buckets, the refusals; and which EP and EDP groups cross nodes (the closed
// form against walking the expert decomposition's groups).
#include "plan/plan_enum.h"
#include "layers/moe.h"  // defines: MOE_DISPATCH_ALLGATHER
#include "tests/testing.h"

#include <stdio.h>
#include <string.h>

// L = 4 MoE layers of E = 4 experts (K 2, F_e 32, capacity 1.5, padded), C 64, T 32.
static PlanSpec moe_spec(int world, int global_batch) {
    PlanSpec s = {.world_size = world, .global_batch = global_batch, .precision = PLAN_FP32};
    s.model = (GPTConfig){.num_layers = 4, .hidden_size = 64, .num_heads = 8, .ffn_hidden_size = 256,
                          .seq_length = 32, .max_position_embeddings = 32, .vocab_size = 257,
                          .vocab_divisible_by = 128, .num_experts = 4, .moe_topk = 2,
                          .moe_ffn_hidden_size = 32, .moe_capacity = 1.5, .moe_pad_capacity = 1};
    snprintf(s.model.moe_layer_freq, sizeof s.model.moe_layer_freq, "1");
    return s;
}

// DP 2 x EP 2, micro-batch 2, global batch 8 (m = 2): n = 64 rows, capacity ceil(64 x 2 / 4
// x 1.5) = 48, so each row all-to-all sends (EP - 1) x E/EP x 48 = 96 rows x 64 x 4 bytes to
// the other rank; 4 layers x 2 micro-batches x (4 row all-to-alls + 1 of the counts, 2 x 4
// bytes): 786496 bytes, the run's ep_bytes (test plan_vs_run_ep). Full recomputation adds 2
// row all-to-alls and the counts per layer and micro-batch. EDP is 1 here: no edp bytes.
static void test_ep_bytes(void) {
    PlanSpec s = moe_spec(2, 8);
    PlanLayout l = {1, 1, 2, 2, 0, 0, 1, 0, 0, 1, 0, 2, 0, 0};  // ZeRO-1
    PlanStage st;
    char err[256];
    EXPECT(plan_layout_check(&s, &l, err, sizeof err) == 0, "%s", err);
    plan_stage_counts(&s, &l, 0, 2, &st);
    const PlanTraffic *ep = &st.traffic[PLAN_G_EP];
    EXPECT_EQ_INT((long long)ep->bytes[COMM_ALL_TO_ALL], 4 * 2 * (4 * 96 * 64 * 4 + 8));
    EXPECT_EQ_INT((long long)ep->calls[COMM_ALL_TO_ALL], 4 * 2 * 5);
    EXPECT_EQ_INT((long long)st.traffic[PLAN_G_EDP].bytes[COMM_REDUCE_SCATTER], 0);
    // the expert region after the dense one, from a multiple of 16 DP x CP floats; ZeRO-1
    // shards the dense region over DP x CP = 2 and the experts over EDP = 1
    EXPECT(st.expert_offset % 32 == 0 && st.expert_offset < st.n_alloc, "offset %zu of %zu",
           st.expert_offset, st.n_alloc);
    EXPECT_EQ_INT((long long)st.shard_len, (long long)(st.expert_offset / 2 + (st.n_alloc - st.expert_offset)));
    // the experts: E/EP = 2 of each layer's 4 (fc (2, 32, 64) + proj (2, 64, 32), biases)
    PlanLayout one = l;
    one.ep = 1;
    PlanStage st1;
    plan_stage_counts(&s, &one, 0, 2, &st1);
    size_t half = 4 * (2 * 32 * 64 + 2 * 64 * 32 + 2 * 32 + 2 * 64);  // 4 layers' halves
    EXPECT(st1.n_floats - half <= st.n_floats && st.n_floats < st1.n_floats - half + 32 + 16 * 8,
           "EP 2 floats %zu, EP 1 %zu minus half the experts %zu", st.n_floats, st1.n_floats, half);
    EXPECT_EQ_INT((long long)st1.traffic[PLAN_G_EP].calls[COMM_ALL_TO_ALL], 0);
    s.model.recompute = GPT_RECOMPUTE_FULL;
    s.model.recompute_num_layers = 1;
    plan_stage_counts(&s, &l, 0, 2, &st);
    EXPECT_EQ_INT((long long)st.traffic[PLAN_G_EP].bytes[COMM_ALL_TO_ALL], 4 * 2 * (6 * 96 * 64 * 4 + 2 * 8));
    s.model.recompute = GPT_RECOMPUTE_NONE;
    s.model.recompute_num_layers = 0;
    // the allgather dispatcher, the same layout: M = max(n K, E x capacity) = 192 rows; per
    // layer and micro-batch (8), each call moving (EP - 1)/EP of EP x its per-rank count: the
    // forward gathers the routing ((4 + 192) int32) and the tokens (64 x 64 floats) and
    // reduce-scatters the expert rows (192 x 64), the backward gathers and reduce-scatters
    // (192 x 64) each; no all-to-all
    s.model.moe_dispatcher = MOE_DISPATCH_ALLGATHER;
    plan_stage_counts(&s, &l, 0, 2, &st);
    ep = &st.traffic[PLAN_G_EP];
    EXPECT_EQ_INT((long long)ep->bytes[COMM_ALL_GATHER], 8 * ((4 + 192) * 4 + 64 * 64 * 4 + 192 * 64 * 4));
    EXPECT_EQ_INT((long long)ep->calls[COMM_ALL_GATHER], 8 * 3);
    EXPECT_EQ_INT((long long)ep->bytes[COMM_REDUCE_SCATTER], 8 * 2 * 192 * 64 * 4);
    EXPECT_EQ_INT((long long)ep->calls[COMM_REDUCE_SCATTER], 8 * 2);
    EXPECT_EQ_INT((long long)ep->bytes[COMM_ALL_TO_ALL], 0);
    s.model.moe_dispatcher = 0;
    // DP 4 x EP 2: EDP 2 reduces the expert region, DP x CP = 4 the rest
    s = moe_spec(4, 8);
    PlanLayout four = {1, 1, 4, 1, 0, 0, 0, 0, 0, 1, 0, 2, 0, 0};  // DDP
    plan_stage_counts(&s, &four, 0, 2, &st);
    EXPECT_EQ_INT((long long)st.traffic[PLAN_G_EDP].bytes[COMM_ALL_REDUCE], (long long)(st.n_alloc - st.expert_offset) * 4);
    EXPECT_EQ_INT((long long)st.traffic[PLAN_G_DP].bytes[COMM_ALL_REDUCE], (long long)st.expert_offset * 4 * 3 / 2);
}

// What megac train refuses: EP not dividing DP x CP (ETP 1: TP x DP x CP) or E, no experts,
// ETP 1 at TP > 1 without SP; ZeRO-2/3 are planned.
static void test_ep_refusals(void) {
    PlanSpec s = moe_spec(4, 8);
    char err[256];
    PlanLayout l = {2, 1, 2, 1, 0, 0, 0, 0, 0, 1, 0, 4, 0, 0};
    EXPECT(plan_layout_check(&s, &l, err, sizeof err) != 0 && strstr(err, "EP 4 must divide"), "%s", err);
    l.ep_over_tp = 1;  // ETP 1: EP 4 over TP x DP = 4, with SP
    EXPECT(plan_layout_check(&s, &l, err, sizeof err) != 0 && strstr(err, "--sequence-parallel"), "%s", err);
    l.sp = 1;
    EXPECT(plan_layout_check(&s, &l, err, sizeof err) == 0, "%s", err);
    EXPECT_EQ_INT(plan_edp(&l), 1);
    l = (PlanLayout){2, 1, 2, 1, 0, 0, 0, 0, 0, 1, 0, 2, 0, 0};
    l.zero1 = 1;
    for (l.zero = 3; l.zero >= 0; l.zero -= l.zero == 2 ? 2 : 1)
        EXPECT(plan_layout_check(&s, &l, err, sizeof err) == 0, "ZeRO %d: %s", l.zero, err);
    l.zero = 0;
    s.model.num_experts = 0;
    EXPECT(plan_layout_check(&s, &l, err, sizeof err) != 0 && strstr(err, "--num-experts 0"), "%s", err);
}

// plan_group_crosses for EP and EDP (closed form) against walking every group's members in
// the expert decomposition (ETP = TP, and 1), every layout of worlds up to 32 on nodes of 1 to
// W + 1.
static void test_ep_crossing(void) {
    const PGridKind kinds[2] = {PGRID_EP, PGRID_EDP};
    int checked = 0, members[64];
    char err[256];
    for (int w = 1; w <= 32; w++)
        for (int tp = 1; tp <= w; tp++)
            for (int pp = 1; tp * pp <= w; pp++)
                for (int ep = 1; pp * ep <= w; ep++)
                    for (int etp = tp; etp >= 1; etp = etp > 1 ? 1 : 0) {  // TP, then 1
                        PGridDims d;
                        if (w % (etp * pp * ep) || (d = (PGridDims){.tp = tp, .cp = 1, .pp = pp, .ep = ep, .etp = etp},
                                                         pgrid_dims_init(&d, w, err, sizeof err)))
                            continue;
                        for (int g = 1; g <= w + 1; g++)
                            for (int k = 0; k < 2; k++) {
                                int size = pgrid_group_size(&d, kinds[k]), walked = 0;
                                for (int i = 0; i < pgrid_num_groups(&d, kinds[k]); i++) {
                                    pgrid_group_members(&d, kinds[k], i, members);
                                    for (int j = 1; j < size; j++) walked |= members[j] / g != members[0] / g;
                                }
                                EXPECT(plan_group_crosses(&d, kinds[k], g) == walked,
                                       "W %d TP %d PP %d EP %d ETP %d G %d kind %d", w, tp, pp, ep, etp, g, (int)kinds[k]);
                                checked++;
                            }
                    }
    printf("which EP and EDP groups cross nodes: the closed form agrees with the walk in %d cases\n", checked);
}

int main(void) {
    test_ep_bytes();
    test_ep_refusals();
    test_ep_crossing();
    return test_result("test_plan_ep");
}
