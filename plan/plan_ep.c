// plan/plan_ep.c: what expert parallelism changes in a stage (plan_model.h): its check
// (train_args_check_ep's), its table as gpt_create builds it (gpt_params_build_ep,
// gpt_params_place_experts, gpt_params_experts_over_tp: the same calls), the DP and EDP
// buckets' traffic of its two regions (dist_geometry.h's buckets, as dist_sync.c reduces
// them; ZeRO-2/3: plan_zero.c) and the dispatch's collectives (the dispatcher's own list,
// moe_dispatcher_calls; alltoall: the rows per peer the routing decides, exact with a padded
// capacity, else the uniform expectation), counted as Comm counts them. The flat buffer's
// geometry is plan_model.c's, by gpt_params_geometry.
#include "plan_model.h"
#include "distributed/dist_geometry.h"  // defines: dist_bucket, dist_pad_multiple
#include "layers/moe_dispatcher.h"      // defines: moe_dispatcher_calls, MoEDims
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

// The dispatcher's dims for n rows routed here (gpt_moe.c's): M = n K, or E x the padded
// capacity (gpt_moe_rows). Pure.
static MoEDims ep_dims(const GPTConfig *c, const PlanLayout *l, uint64_t n) {
    uint64_t M = n * (uint64_t)c->moe_topk;
    uint64_t pad = c->moe_pad_capacity ? (uint64_t)c->num_experts * (uint64_t)gpt_moe_capacity(c, (int)n) : 0;
    MoEDims d = {.E = c->num_experts, .K = c->moe_topk, .C = c->hidden_size, .n = (int)n,
                 .rows = (int)(pad > M ? pad : M), .ep = plan_ep(l),
                 .dispatcher = (MoEDispatcherType)c->moe_dispatcher};
    return d;
}

void plan_ep_traffic(const PlanSpec *s, const PlanLayout *l, PlanStage *st, int n_micro) {
    const GPTConfig *c = &s->model;
    if (l->zero < 2) {  // (ZeRO-2/3: per layer unit, plan_zero.c)
        plan_region_traffic(s, l, st->expert_offset, plan_dp_cp(l), &st->traffic[PLAN_G_DP]);
        plan_region_traffic(s, l, st->n_alloc - st->expert_offset, plan_edp(l), &st->traffic[PLAN_G_EDP]);
    }
    uint64_t L = (uint64_t)st->n_moe, M = (uint64_t)n_micro;
    if (!L) return;
    // recomputed layers: the first n_recomputed
    uint64_t Rm = (uint64_t)plan_moe_layers(c, st->layer0, st->n_recomputed);
    uint64_t P = (uint64_t)plan_ep(l), E = (uint64_t)c->num_experts, El = E / P, K = (uint64_t)c->moe_topk;
    uint64_t e = s->precision == PLAN_BF16 || s->precision == PLAN_FP16 ? 2 : 4;
    uint64_t n = (uint64_t)l->micro_batch * (uint64_t)c->seq_length / (uint64_t)plan_cp(l);
    if (l->sp) n /= (uint64_t)l->tp;  // the rows routed here (gpt_moe_forward's n)
    MoEDims d = ep_dims(c, l, n);
    // alltoall: the rows sent to the other P - 1 ranks per all-to-all (the allgather's lists
    // are exact): padded to the capacity, each of their El experts gets exactly cap rows from
    // here; else (expectation) n K / E per expert
    uint64_t cap = (uint64_t)gpt_moe_capacity(c, (int)n), full = (P - 1) * El * cap;
    uint64_t sent = plan_ep_exact(c) ? full : n * K * (P - 1) / P;
    if (cap && !plan_ep_exact(c) && sent > full) sent = full;
    CommCall calls[MOE_DISPATCH_MAX_CALLS];
    for (int backward = 0; backward < 2; backward++) {  // recomputed layers dispatch again
        int k = moe_dispatcher_calls(&d, backward, sent, calls);
        plan_count_calls(&st->traffic[PLAN_G_EP], (int)P, e, calls, k, (backward ? L : L + Rm) * M);
    }
}
