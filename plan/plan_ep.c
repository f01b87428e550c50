// plan/plan_ep.c: what expert parallelism changes in a stage (plan_model.h): its check
// (train_args_check_ep's), its table as gpt_create builds it (gpt_params_build_ep,
// gpt_params_place_experts, gpt_params_experts_over_tp: the same calls), the DP and EDP
// buckets' traffic of its two regions (dist_geometry.h's buckets, as dist_sync.c reduces
// them; ZeRO-2/3: plan_zero.c) and the dispatch's collectives (layers/moe_dispatcher.c;
// alltoall: the counts' all-to-all, then the rows' and the outputs'; allgather: the
// routing's and the tokens' all-gathers, the outputs' reduce-scatter), counted as Comm
// counts them. The flat buffer's geometry is plan_model.c's, by gpt_params_geometry.
#include "plan_model.h"
#include "distributed/dist_geometry.h"  // defines: dist_bucket, dist_pad_multiple
#include "model/gpt_moe.h"              // defines: gpt_moe_capacity, gpt_moe_layer
#include "model/gpt_params.h"           // defines: gpt_params_build_ep

#include <stdio.h>
#include <stdlib.h>

int plan_ep_check(const PlanSpec *s, const PlanLayout *l, char *err, size_t n) {
    const GPTConfig *c = &s->model;
    int ep = plan_ep(l), span = plan_dp_cp(l) * (l->ep_over_tp ? l->tp : 1);
    if (c->num_experts <= 0 || c->num_experts % ep || span % ep) {  // train_args.c, pgrid.c
        if (l->ep_over_tp)
            snprintf(err, n, "EP %d must divide --num-experts %d and TP x DP x CP = %d x %d x %d = %d (ETP 1)",
                     ep, c->num_experts, l->tp, l->dp, plan_cp(l), span);
        else
            snprintf(err, n, "EP %d must divide --num-experts %d and DP x CP = %d x %d = %d", ep,
                     c->num_experts, l->dp, plan_cp(l), span);
        return -1;
    }
    if (l->ep_over_tp && !l->sp) {  // train_args_check_ep
        snprintf(err, n, "--expert-tensor-parallel-size 1 with TP %d and EP %d needs --sequence-parallel "
                 "(each TP rank must hold its own tokens)", l->tp, ep);
        return -1;
    }
    return 0;
}

ParamInfo *plan_stage_table(const PlanSpec *s, const PlanLayout *l, const PlanStage *st, int n,
                            int *n_params, size_t *total) {
    const GPTConfig *c = &s->model;
    int Vp = gpt_padded_vocab(c, l->tp);
    if (plan_ep(l) == 1) return gpt_params_build(c, l->tp, Vp, st->layer0, n, st->first, st->last, n_params, total);
    ParamInfo *t = gpt_params_build_ep(c, l->tp, plan_ep(l), 0, Vp, st->layer0, n, st->first, st->last,
                                       n_params, total);
    gpt_params_place_experts(t, *n_params, dist_pad_multiple(plan_pad_ranks(l)), total);
    if (l->ep_over_tp) gpt_params_experts_over_tp(t, *n_params);  // (as gpt_alloc.c)
    return t;
}

void plan_region_traffic(const PlanSpec *s, const PlanLayout *l, size_t len, int n, PlanTraffic *t) {
    if (n == 1 || len == 0) return;  // (a stage without experts has no expert buckets)
    size_t per = l->zero1 ? len / (size_t)n : len;
    size_t bucket = dist_bucket_floats(per, (size_t)s->ddp_bucket_size, n, l->zero1);
    uint64_t N = (uint64_t)n;
    int nb = dist_num_buckets(per, bucket);  // every bucket full but the last: O(1), not O(nb)
    for (int k = nb > 2 ? nb - 2 : 0; k < nb; k++) {
        size_t b = dist_bucket(per, bucket, n, l->zero1, k).per;
        uint64_t times = k == nb - 2 ? (uint64_t)(nb - 1) : 1;
        if (l->zero1) plan_count(t, COMM_REDUCE_SCATTER, N * b * 4, N - 1, N, times);
        else plan_count(t, COMM_ALL_REDUCE, b * 4, 2 * (N - 1), N, times);
    }
    if (l->zero1) plan_count(t, COMM_ALL_GATHER, N * per * 4, N - 1, N, 1);  // the parameters
}

int plan_ep_exact(const GPTConfig *c) {
    return c->moe_dispatcher == MOE_DISPATCH_ALLGATHER || (c->moe_capacity > 0 && c->moe_pad_capacity);
}

// The allgather dispatcher's calls over the ep group (layers/moe_dispatcher.c), exact: a
// forward (fw times: its layers and micro-batches, recomputed ones again) gathers every
// rank's routing (E + M ints) and tokens (n, C), and reduce-scatters the (M, C) expert rows
// back; a backward (bw times) gathers d(expert outputs) and reduce-scatters d(expert inputs),
// (M, C) each. M: the expert-ordered rows a rank holds (gpt_moe_rows).
static void allgather_traffic(const GPTConfig *c, PlanTraffic *t, uint64_t P, uint64_t n,
                              uint64_t e, uint64_t fw, uint64_t bw) {
    uint64_t E = (uint64_t)c->num_experts, C = (uint64_t)c->hidden_size, M = n * (uint64_t)c->moe_topk;
    uint64_t pad = c->moe_pad_capacity ? E * (uint64_t)gpt_moe_capacity(c, (int)n) : 0;
    if (pad > M) M = pad;
    plan_count(t, COMM_ALL_GATHER, P * (E + M) * 4, P - 1, P, fw);     // the routing (int32)
    plan_count(t, COMM_ALL_GATHER, P * n * C * e, P - 1, P, fw);       // the tokens
    plan_count(t, COMM_REDUCE_SCATTER, P * M * C * e, P - 1, P, fw + bw);  // outputs; d(inputs)
    plan_count(t, COMM_ALL_GATHER, P * M * C * e, P - 1, P, bw);       // d(outputs)
}

void plan_ep_traffic(const PlanSpec *s, const PlanLayout *l, PlanStage *st, int n_micro) {
    const GPTConfig *c = &s->model;
    if (l->zero < 2) {  // (ZeRO-2/3: per layer unit, plan_zero.c)
        plan_region_traffic(s, l, st->expert_offset, plan_dp_cp(l), &st->traffic[PLAN_G_DP]);
        plan_region_traffic(s, l, st->n_alloc - st->expert_offset, plan_edp(l), &st->traffic[PLAN_G_EDP]);
    }
    uint64_t L = (uint64_t)st->n_moe, M = (uint64_t)n_micro;
    if (!L) return;
    // recomputed layers (the first n_recomputed) run the forward's dispatch again
    uint64_t Rm = (uint64_t)plan_moe_layers(c, st->layer0, st->n_recomputed);
    uint64_t P = (uint64_t)plan_ep(l), E = (uint64_t)c->num_experts, El = E / P, K = (uint64_t)c->moe_topk;
    uint64_t e = s->precision == PLAN_BF16 || s->precision == PLAN_FP16 ? 2 : 4;
    uint64_t n = (uint64_t)l->micro_batch * (uint64_t)c->seq_length / (uint64_t)plan_cp(l);
    if (l->sp) n /= (uint64_t)l->tp;  // the rows routed here (gpt_moe_forward's n)
    PlanTraffic *t = &st->traffic[PLAN_G_EP];
    if (c->moe_dispatcher == MOE_DISPATCH_ALLGATHER) {
        allgather_traffic(c, t, P, n, e, (L + Rm) * M, L * M);
        return;
    }
    uint64_t cap = (uint64_t)gpt_moe_capacity(c, (int)n);
    // rows sent to the other P - 1 ranks per all-to-all: padded to the capacity, each of
    // their El experts gets exactly cap rows from here; else (expectation) n K / E per expert
    uint64_t rows = plan_ep_exact(c) ? (P - 1) * El * cap : n * K * (P - 1) / P;
    if (cap && !plan_ep_exact(c) && rows > (P - 1) * El * cap) rows = (P - 1) * El * cap;
    plan_count(t, COMM_ALL_TO_ALL, (P - 1) * El * 4, 1, 1, (L + Rm) * M);  // the counts (int32)
    // forward: rows there, outputs back; backward: their gradients, the same two ways
    plan_count(t, COMM_ALL_TO_ALL, rows * (uint64_t)c->hidden_size * e, 1, 1, (4 * L + 2 * Rm) * M);
}
