// plan/plan_moe.c: what a stage's mixture-of-experts layers hold and move (plan_model.h),
// mirroring model/gpt_alloc.c's carve_moe, gpt_moe_create and gpt_moe_backward at
// every expert-parallel size: every rank routes the rows it holds (n = B T / CP, or n / TP
// with sequence parallelism); with EP > 1 its experts' buffers are sized for the rows they
// may receive, EP times its own expert-ordered rows (gpt_moe_recv_rows: the worst case, every
// rank of the ep group sending all its rows here), and the dispatch has buffers of its own.
#include "plan_model.h"
#include "model/gpt_moe.h"     // defines: gpt_moe_layer, gpt_moe_ffn, gpt_moe_capacity
#include "model/gpt_params.h"  // defines: gpt_params_build_ep

#include <stdlib.h>

static size_t piece(size_t bytes) { return (bytes + 63) / 64 * 64; }

// The routed rows n of one micro-batch on one rank, and the expert-ordered rows M
// (gpt_moe_rows: n K, or E x capacity when padding to the capacity needs more).
static void moe_rows(const PlanSpec *s, const PlanLayout *l, size_t *n, size_t *M) {
    const GPTConfig *c = &s->model;
    size_t N = (size_t)l->micro_batch * c->seq_length / (size_t)plan_cp(l);
    *n = l->sp ? N / (size_t)l->tp : N;
    size_t nk = *n * (size_t)c->moe_topk;
    size_t pad = c->moe_pad_capacity ? (size_t)c->num_experts * (size_t)gpt_moe_capacity(c, (int)*n) : 0;
    *M = pad > nk ? pad : nk;
}

static size_t act_size(const PlanSpec *s) {
    return s->precision == PLAN_BF16 || s->precision == PLAN_FP16 ? 2 : 4;
}

int plan_moe_layers(const GPTConfig *c, int layer0, int n) {
    int k = 0;
    for (int l = layer0; c->num_experts > 0 && l < layer0 + n; l++) k += gpt_moe_layer(c, l);
    return k;
}

size_t plan_moe_layer_bytes(const PlanSpec *s, const PlanLayout *l) {
    const GPTConfig *c = &s->model;
    size_t n, M, e = act_size(s), E = (size_t)c->num_experts, NK;
    moe_rows(s, l, &n, &M);
    NK = n * (size_t)c->moe_topk;
    size_t C = (size_t)c->hidden_size, Fe = (size_t)gpt_moe_ffn(c);
    size_t F2 = (backend_act_gated(c->activation) ? 2 : 1) * Fe;
    size_t G = c->moe_load_balancing == GPT_MOE_LB_SEQ_AUX ? (size_t)l->micro_batch : 1;
    size_t R = M * (size_t)plan_ep(l);  // the rows the local experts may receive
    return piece(n * E * 4) + 3 * piece(NK * 4) + 2 * piece(M * 4) + piece(G * E * 4) +  // routing
           piece(R * C * e) + piece(M * C * e) + piece(R * F2 * e) + piece(R * Fe * e);  // xp, eo, fch, fch_act
}

size_t plan_moe_workspace_bytes(const PlanSpec *s, const PlanLayout *l) {
    const GPTConfig *c = &s->model;
    size_t n, M, e = act_size(s), E = (size_t)c->num_experts;
    moe_rows(s, l, &n, &M);
    size_t C = (size_t)c->hidden_size, Fe = (size_t)gpt_moe_ffn(c);
    size_t F2 = (backend_act_gated(c->activation) ? 2 : 1) * Fe;
    size_t R = M * (size_t)plan_ep(l), ep = plan_ep(l) > 1;
    // row_group, loss, dlogits (fp32 and act), dprobs, deo, dxp, dfch, dact, dx, and with
    // EP > 1 xr, xr2 (R, C) and the counts (2 E): one allocation each (not 64-byte pieces)
    return n * 4 + 2 * 4 + n * E * (4 + e) + n * (size_t)c->moe_topk * 4 + 2 * M * C * e +
           R * F2 * e + R * Fe * e + n * C * e + (ep ? 2 * R * C * e + 2 * E * 4 : 0);
}

void plan_moe_traffic(const PlanSpec *s, const PlanLayout *l, const PlanStage *st, int n_micro,
                      PlanTraffic *tp, PlanTraffic *cp) {
    const GPTConfig *c = &s->model;
    uint64_t L = (uint64_t)plan_moe_layers(c, st->layer0, st->n_layers), M = (uint64_t)n_micro;
    if (!L) return;
    uint64_t G = c->moe_load_balancing == GPT_MOE_LB_SEQ_AUX ? (uint64_t)l->micro_batch : 1;
    uint64_t E = (uint64_t)c->num_experts, n = (uint64_t)l->tp, P = (uint64_t)plan_cp(l);
    // gpt_moe_backward: the token counts (G, E) and the two losses summed over the ranks that
    // share the micro-batch's rows, per layer and micro-batch (sequence-parallel tp, then cp)
    if (l->sp) {
        plan_count(tp, COMM_ALL_REDUCE, G * E * 4, 2 * (n - 1), n, L * M);
        plan_count(tp, COMM_ALL_REDUCE, 2 * 4, 2 * (n - 1), n, L * M);
    }
    if (P > 1) {
        plan_count(cp, COMM_ALL_REDUCE, G * E * 4, 2 * (P - 1), P, L * M);
        plan_count(cp, COMM_ALL_REDUCE, 2 * 4, 2 * (P - 1), P, L * M);
    }
    if (!l->sp || l->zero >= 2) return;  // ZeRO-2/3: the shard's segments (plan_zero.c)
    // the router's and experts' gradients, replicated over tp, summed once a step with
    // sequence parallelism (dist_sync_sum_norm_grads: one call per tensor), as the norms'
    int layer = st->layer0, k = 0;
    while (!gpt_moe_layer(c, layer)) layer++;
    size_t total;
    ParamInfo *t = gpt_params_build_ep(c, l->tp, plan_ep(l), 0, gpt_padded_vocab(c, l->tp), layer, 1, 0, 0,
                                       &k, &total);  // (E/EP experts' gradients with EP > 1)
    if (l->ep_over_tp) gpt_params_experts_over_tp(t, k);  // (ETP 1: the experts not summed)
    for (int i = 0; i < k; i++)
        if (t[i].sp_sum && !t[i].norm_param)
            plan_count(tp, COMM_ALL_REDUCE, t[i].numel * 4, 2 * (n - 1), n, L);
    free(t);
}
