// plan/plan_traffic.c: the traffic of one pipeline stage of a layout, counted as megac's
// communicators count it (comm/comm.c), call by call (see plan_model.h): the layers' and
// blocks' calls come from their own lists (comm.h's CommCall), iterated here.
#include "plan_model.h"
#include "distributed/dist_geometry.h"  // defines: dist_bucket, dist_bucket_floats
#include "layers/tp_vocab.h"             // defines: tp_vocab_embedding_calls, tp_vocab_xent_calls
#include "model/gpt_block.h"             // defines: gpt_block_tp_calls
#include "model/gpt_moe.h"               // defines: gpt_moe_layer

#include <stdlib.h>

// `times` calls moving bytes x num / den each (integer arithmetic, as Comm counts).
static void count(PlanTraffic *t, CommKind k, uint64_t bytes, uint64_t num, uint64_t den,
                  uint64_t times) {
    t->calls[k] += times;
    t->bytes[k] += times * (den ? bytes * num / den : 0);
}
void plan_count(PlanTraffic *t, CommKind k, uint64_t bytes, uint64_t num, uint64_t den, uint64_t times) {
    count(t, k, bytes, num, den, times);
}
static void all_reduce(PlanTraffic *t, int n, uint64_t count_, uint64_t es, uint64_t times) {
    count(t, COMM_ALL_REDUCE, count_ * es, 2 * (uint64_t)(n - 1), (uint64_t)n, times);
}
static void all_gather(PlanTraffic *t, int n, uint64_t per, uint64_t es, uint64_t times) {
    count(t, COMM_ALL_GATHER, (uint64_t)n * per * es, (uint64_t)(n - 1), (uint64_t)n, times);
}
static void reduce_scatter(PlanTraffic *t, int n, uint64_t per, uint64_t es, uint64_t times) {
    count(t, COMM_REDUCE_SCATTER, (uint64_t)n * per * es, (uint64_t)(n - 1), (uint64_t)n, times);
}

// The fp32 all-reduces of the sp_sum tensors of the table of layers [layer0, layer0 + n)
// (and st's edges when edges), each made `times`.
static void sp_sums(const PlanSpec *s, const PlanLayout *l, PlanStage st, int layer0, int n,
                    int edges, uint64_t times, PlanTraffic *t) {
    st.layer0 = layer0;
    if (!edges) st.first = st.last = 0;
    int k = 0;
    size_t total;
    ParamInfo *p = plan_stage_table(s, l, &st, n, &k, &total);
    for (int i = 0; i < k; i++)
        if (p[i].sp_sum) all_reduce(t, l->tp, p[i].numel, 4, times);
    free(p);
}

// With sequence parallelism, the gradients of the tensors replicated over tp that each rank
// computes from its own rows (the table's sp_sum: the norms, an MoE layer's router and
// experts) summed once a step, one fp32 all-reduce per tensor, as dist_sync_sum_norm_grads
// makes them; the first layer of each kind (dense, MoE) stands for its kind. ZeRO-2/3: the
// shard's segments only (plan_zero.c).
static void sp_traffic(const PlanSpec *s, const PlanLayout *l, const PlanStage *st, PlanTraffic *t) {
    if (!l->sp || l->zero >= 2) return;
    sp_sums(s, l, *st, st->layer0, 0, 1, 1, t);  // the edges: the final norm
    int end = st->layer0 + st->n_layers, Ls[2] = {st->n_layers - st->n_moe, st->n_moe};
    for (int moe = 0; moe < 2; moe++) {
        int layer = st->layer0;
        while (Ls[moe] && layer < end && gpt_moe_layer(&s->model, layer) != moe) layer++;
        if (Ls[moe] && layer < end) sp_sums(s, l, *st, layer, 1, 0, (uint64_t)Ls[moe], t);
    }
}

void plan_count_calls(PlanTraffic *t, int n, uint64_t e, const CommCall *calls, int k, uint64_t passes) {
    for (int i = 0; i < k; i++) {
        uint64_t times = (uint64_t)calls[i].times * passes, per = calls[i].count;
        uint64_t es = calls[i].f32 ? 4 : e;
        if (calls[i].kind == COMM_ALL_REDUCE) all_reduce(t, n, per, es, times);
        else if (calls[i].kind == COMM_ALL_GATHER) all_gather(t, n, per, es, times);
        else if (calls[i].kind == COMM_REDUCE_SCATTER) reduce_scatter(t, n, per, es, times);
        else count(t, calls[i].kind, per * es, 1, 1, times);  // send, recv, all_to_all: as sent
    }
}

// Tensor-parallel traffic of one step: m micro-batches of the layers' own lists (the
// blocks', gpt_block_tp_calls; the first stage's embedding and the last's output layer and
// cross-entropy, tp_vocab_*_calls and tp_linear_calls; recomputed blocks' forwards again),
// then with sequence parallelism the gradient sums of sp_traffic.
static void tp_traffic(const PlanSpec *s, const PlanLayout *l, const PlanStage *st, int m,
                       PlanTraffic *t) {
    int n = l->tp;
    uint64_t e = (uint64_t)plan_act_bytes(s->precision), C = (uint64_t)s->model.hidden_size;
    uint64_t N = plan_rows(s, l), M = (uint64_t)m;
    // per kind of block (dense, MoE): its layers here, and the recomputed ones (the first R)
    uint64_t Lm = (uint64_t)st->n_moe, Rm = (uint64_t)plan_moe_layers(&s->model, st->layer0, st->n_recomputed);
    uint64_t Ls[2] = {(uint64_t)st->n_layers - Lm, Lm}, Rs[2] = {(uint64_t)st->n_recomputed - Rm, Rm};
    CommCall calls[GPT_BLOCK_MAX_CALLS];
    for (int backward = 0; backward < 2; backward++) {
        if (st->first)
            plan_count_calls(t, n, e, calls, tp_vocab_embedding_calls(l->sp, backward, n, N, C, calls), M);
        for (int moe = 0; moe < 2; moe++) {
            int k = gpt_block_tp_calls(moe, l->sp, backward, n, N, C, calls);
            plan_count_calls(t, n, e, calls, k, (backward ? Ls[moe] : Ls[moe] + Rs[moe]) * M);
        }
        if (st->last)
            plan_count_calls(t, n, e, calls, tp_linear_calls(TP_COLUMN, l->sp, backward, n, N, C, calls), M);
    }
    if (st->last) plan_count_calls(t, n, e, calls, tp_vocab_xent_calls(n, N, calls), M);
    sp_traffic(s, l, st, t);
}

// Context-parallel traffic of one step: per layer and micro-batch the calls of the
// attention layer's forward and backward (cp_attention_calls, layers/cp_attention.h), in
// the activation dtype; recomputed layers' forward again.
static void cp_traffic(const PlanSpec *s, const PlanLayout *l, const PlanStage *st, int m,
                       PlanTraffic *t) {
    int P = plan_cp(l);
    uint64_t e = (uint64_t)plan_act_bytes(s->precision);
    uint64_t M = (uint64_t)m, L = (uint64_t)st->n_layers, R = (uint64_t)st->n_recomputed;
    if (P == 1) return;
    CPAttnDims d = plan_cp_dims(s, l);
    for (int backward = 0; backward < 2; backward++) {
        CommCall calls[CP_MAX_CALLS];
        int n = cp_attention_calls(&d, backward, calls);
        plan_count_calls(t, P, e, calls, n, (backward ? L : L + R) * M);
    }
}

void plan_stage_traffic(const PlanSpec *s, const PlanLayout *l, int P, int stage, int n_micro,
                        PlanStage *st) {
    const GPTConfig *c = &s->model;
    int Vp = gpt_padded_vocab(c, l->tp);
    uint64_t e = (uint64_t)plan_act_bytes(s->precision);
    size_t N = plan_rows(s, l), io = (l->sp ? N / (size_t)l->tp : N) * c->hidden_size;
    tp_traffic(s, l, st, n_micro, &st->traffic[PLAN_G_TP]);
    cp_traffic(s, l, st, n_micro, &st->traffic[PLAN_G_CP]);
    plan_moe_traffic(s, l, st, n_micro, &st->traffic[PLAN_G_TP], &st->traffic[PLAN_G_CP]);
    uint64_t sends = (uint64_t)(stage > 0) + (uint64_t)(stage < P - 1), m = (uint64_t)n_micro;
    count(&st->traffic[PLAN_G_PP], COMM_SEND, io * (uint64_t)e, 1, 1, sends * m);  // activation
    count(&st->traffic[PLAN_G_PP], COMM_RECV, io * (uint64_t)e, 1, 1, sends * m);  // and gradient
    if (l->pp > 1 && (st->first || st->last) && !c->untie_embeddings && l->zero < 2) {  // tied wte grad
        size_t wte = (size_t)(Vp / l->tp) * c->hidden_size;
        all_reduce(&st->traffic[PLAN_G_EMB], 2, wte, 4, 1);
    }
    if (plan_ep(l) > 1) plan_ep_traffic(s, l, st, n_micro);  // dp, edp and ep (plan_ep.c)
    else if (l->zero < 2) plan_region_traffic(s, l, st->n_alloc, plan_dp_cp(l), &st->traffic[PLAN_G_DP]);
}
