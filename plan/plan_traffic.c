// plan/plan_traffic.c: the traffic of one pipeline stage of a layout, mirroring what megac's
// communicators count (comm/comm.c), call by call (see plan_model.h).
#include "plan_model.h"
#include "distributed/dist_geometry.h"  // defines: dist_bucket, dist_bucket_floats

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

// Tensor-parallel traffic of one step (layers/tp_linear.c, layers/tp_vocab.c, gpt.c):
// m micro-batches, then the sequence-parallel LayerNorm gradient sums (fp32).
static void tp_traffic(const PlanSpec *s, const PlanLayout *l, const PlanStage *st, int m,
                       PlanTraffic *t) {
    int n = l->tp;
    uint64_t e = (uint64_t)plan_act_bytes(s->precision), C = (uint64_t)s->model.hidden_size;
    uint64_t N = plan_rows(s, l), NC = N * C, L = (uint64_t)st->n_layers;
    uint64_t M = (uint64_t)m, shard = NC / (uint64_t)n;  // (N/tp, C) with SP
    uint64_t R = (uint64_t)st->n_recomputed;             // layers whose forward runs twice
    // an MoE layer's MLP moves nothing over tp (experts replicated, its rows routed here):
    // its attention's half only (Lm of the L layers, Rm of the R recomputed: the first R)
    uint64_t Lm = (uint64_t)st->n_moe, Rm = (uint64_t)plan_moe_layers(&s->model, st->layer0, st->n_recomputed);
    L -= Lm, R -= Rm;
    if (!l->sp) {
        if (st->first) all_reduce(t, n, NC, e, M);          // vocab embedding: token from one rank
        all_reduce(t, n, NC, e, (4 * L + 2 * R + 2 * Lm + Rm) * M);  // g forward x2, f backward x2
        if (st->last) {
            if (n > 1) {                                    // (one shard: no reduction at all)
                all_reduce(t, n, N, 4, M);                  // cross-entropy row max
                all_reduce(t, n, 2 * N, 4, M);              // sum of exps + target logit
            }
            all_reduce(t, n, NC, e, M);                     // f backward of the output layer
        }
        return;
    }
    if (st->first) {
        reduce_scatter(t, n, shard, e, M);                  // embedding forward
        all_gather(t, n, shard, e, M);                      // embedding backward
    }
    all_gather(t, n, shard, e, (6 * L + 2 * R + 3 * Lm + Rm) * M);  // per layer: 2 fwd, 2 row bwd, 2 col bwd
    reduce_scatter(t, n, shard, e, (4 * L + 2 * R + 2 * Lm + Rm) * M);  // per layer: 2 fwd, 2 col bwd
    L += Lm;
    if (st->last) {
        all_gather(t, n, shard, e, 2 * M);                  // output layer forward + backward
        reduce_scatter(t, n, shard, e, M);                  // output layer backward
        all_reduce(t, n, N, 4, M);
        all_reduce(t, n, 2 * N, 4, M);
    }
    uint64_t k = s->model.rmsnorm ? 1 : 2;  // norm tensors: weight and bias, or RMSNorm's weight
    if (l->zero < 2)  // ZeRO-2/3: the shard's LayerNorm segments only (plan_zero.c)
        all_reduce(t, n, C, 4, 2 * k * L + (st->last ? k : 0));  // norm gradients, once a step
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
        CPCommCall calls[CP_MAX_CALLS];
        int n = cp_attention_calls(&d, backward, calls);
        uint64_t passes = (backward ? L : L + R) * M;
        for (int i = 0; i < n; i++) {
            uint64_t times = (uint64_t)calls[i].times * passes, per = calls[i].count;
            if (calls[i].kind == COMM_ALL_GATHER) all_gather(t, P, per, e, times);
            else if (calls[i].kind == COMM_REDUCE_SCATTER) reduce_scatter(t, P, per, e, times);
            else if (calls[i].kind == COMM_ALL_TO_ALL) count(t, COMM_ALL_TO_ALL, (uint64_t)(P - 1) * per * e, 1, 1, times);
            else count(t, calls[i].kind, per * e, 1, 1, times);  // send, recv: one message each
        }
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
