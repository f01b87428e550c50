// layers/moe_router.c: the MoE router (moe_router.h): the choice, the capacity and the
// routing map on the host, the router's backward with the load-balancing and z losses, the
// expert bias's update.
#include "moe_router.h"
#include "core/check.h"  // defines: core_calloc

#include <stdlib.h>
#include <string.h>

// One (token, choice) entry of an expert: its weight and index t K + k (route's sort).
typedef struct {
    float p;
    int i;
} Ranked;

void moe_router_buffers(MoERouterWork *w, const MoEDims *d, int groups, MoEAlloc *a) {
    size_t n = (size_t)d->n, E = (size_t)d->E, NK = n * (size_t)d->K, M = (size_t)d->rows;
    w->row_group = moe_alloc(a, n * sizeof(int));
    w->loss = moe_alloc(a, 2 * sizeof(float));
    w->dlogits = moe_alloc(a, n * E * sizeof(float));
    w->dlogits_act = moe_alloc(a, n * E * a->act);
    w->dprobs = moe_alloc(a, NK * sizeof(float));
    w->dx = moe_alloc(a, n * (size_t)d->C * a->act);
    if (!a->be) return;
    w->h_idx = core_calloc(NK, sizeof(int));
    w->h_perm = core_calloc(M, sizeof(int));
    w->h_slot = core_calloc(NK, sizeof(int));
    w->h_probs = core_calloc(NK, sizeof(float));
    w->h_pprobs = core_calloc(M, sizeof(float));
    w->h_rank = core_calloc(NK, sizeof(Ranked));
    w->h_coef = core_calloc((size_t)groups * E, sizeof(float));
    w->h_row_group = core_calloc(n, sizeof(int));
}

void moe_router_free(MoERouterWork *w, Backend *be) {
    void *dev[] = {w->row_group, w->loss, w->dlogits, w->dlogits_act, w->dprobs, w->dx};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) be->ops->free(be, dev[i]);
    free(w->h_idx), free(w->h_perm), free(w->h_slot), free(w->h_probs), free(w->h_pprobs);
    free(w->h_rank), free(w->h_coef), free(w->h_row_group);
    memset(w, 0, sizeof *w);
}

// Higher weight first, then the earlier (token, choice): a total, layout-free order.
static int by_prob(const void *a, const void *b) {
    const Ranked *x = a, *y = b;
    if (x->p != y->p) return x->p > y->p ? -1 : 1;
    return (x->i > y->i) - (x->i < y->i);
}
static int by_index(const void *a, const void *b) {
    const Ranked *x = a, *y = b;
    return (x->i > y->i) - (x->i < y->i);
}

// The routing of n tokens (their K choices in h_idx, weights in h_probs) in expert order: the
// expert-ordered rows sorted by (expert, token, choice): perm (token of each row), pprobs (its
// weight), slot (row of each (token, choice), -1 when dropped); counts = rows per expert.
// With a capacity R->cap, an expert keeps at most that many of its (token, choice) entries,
// the highest weights (ties: the earlier) or the earliest (position), and with padding runs
// exactly that many rows (padding rows: token 0, weight 0, in no slot). Returns the entries
// dropped. Pure host arithmetic.
static int route(const MoERouter *R, int *counts) {
    MoERouterWork *w = R->w;
    int n = R->d.n, K = R->d.K, E = R->d.E, cap = R->cap, dropped = 0, off[MOE_MAX_EXPERTS + 1];
    Ranked *rank = w->h_rank;
    memset(counts, 0, (size_t)E * sizeof(int));
    for (int i = 0; i < n * K; i++) counts[w->h_idx[i]]++;
    off[0] = 0;
    for (int e = 0; e < E; e++) off[e + 1] = off[e] + counts[e];
    for (int i = 0; i < n * K; i++) {  // entries grouped by expert, token order inside
        int e = w->h_idx[i];
        rank[off[e]++] = (Ranked){w->h_probs[i], i};
    }
    for (int i = 0; i < n * K; i++) w->h_slot[i] = -1;
    for (int e = 0, begin = 0, row = 0; e < E; e++) {
        Ranked *list = rank + begin;
        int keep = counts[e];
        begin += keep;  // (counts[e] becomes the expert's rows below)
        if (cap && keep > cap) {
            if (!R->drop_position) {  // the highest weights, back in token order
                qsort(list, (size_t)keep, sizeof *list, by_prob);
                qsort(list, (size_t)cap, sizeof *list, by_index);
            }
            dropped += keep - cap;
            keep = cap;
        }
        for (int j = 0; j < keep; j++, row++) {
            w->h_perm[row] = list[j].i / K;
            w->h_pprobs[row] = list[j].p;
            w->h_slot[list[j].i] = row;
        }
        int rows = R->pad_capacity ? cap : keep;
        for (int j = keep; j < rows; j++, row++) w->h_perm[row] = 0, w->h_pprobs[row] = 0.0f;
        counts[e] = rows;
    }
    return dropped;
}

size_t moe_router_forward(const MoERouter *R, MoEActs *x, const void *in, const void *Wr) {
    Backend *be = R->be;
    MoERouterWork *w = R->w;
    int n = R->d.n, E = R->d.E, C = R->d.C;
    size_t NK = (size_t)n * R->d.K;
    // logits (n, E) = in Wr^T, in fp32; the choice and its weights
    be->ops->matmul_forward(be, w->dlogits_act, in, Wr, NULL, n, C, E);
    be->ops->cast(be, x->logits, BACKEND_F32, w->dlogits_act, be->act, (size_t)n * E);
    be->ops->moe_router_forward(be, x->idx, x->probs, x->logits, n, &R->r);
    be->ops->copy(be, w->h_idx, x->idx, NK * sizeof(int), BACKEND_D2H);
    be->ops->copy(be, w->h_probs, x->probs, NK * sizeof(float), BACKEND_D2H);
    x->dropped = route(R, x->counts);
    size_t rows = 0;  // expert-ordered rows (n K when dropless)
    for (int e = 0; e < E; e++) rows += (size_t)x->counts[e];
    be->ops->copy(be, x->perm, w->h_perm, rows * sizeof(int), BACKEND_H2D);
    be->ops->copy(be, x->slot, w->h_slot, NK * sizeof(int), BACKEND_H2D);
    be->ops->copy(be, x->pprobs, w->h_pprobs, rows * sizeof(float), BACKEND_H2D);
    return rows;
}

// The load-balancing coefficients of the micro-batch into x->coef (moe_router_loss's coef),
// from the token counts of each group (the micro-batch, or each sequence) summed over the
// ranks that share the micro-batch's rows (sum, cp); adds the counts to tokens (E).
static void lb_coef(const MoERouter *R, Comm *sum, Comm *cp, const MoEActs *x, double *tokens) {
    Backend *be = R->be;
    MoERouterWork *w = R->w;
    int n = R->d.n, E = R->d.E, K = R->d.K, G = R->groups;
    memset(w->h_coef, 0, (size_t)G * E * sizeof(float));
    // (h_idx holds the last forward's: this slot's choices again)
    be->ops->copy(be, w->h_idx, x->idx, (size_t)n * K * sizeof(int), BACKEND_D2H);
    for (int t = 0; t < n; t++)
        for (int k = 0; k < K; k++)
            w->h_coef[(G > 1 ? w->h_row_group[t] : 0) * E + w->h_idx[t * K + k]] += 1.0f;
    if (sum || cp) {  // the counts of the rows other ranks hold (device Comms)
        be->ops->copy(be, x->coef, w->h_coef, (size_t)G * E * sizeof(float), BACKEND_H2D);
        if (sum) comm_all_reduce(sum, x->coef, (size_t)G * E, COMM_F32, COMM_SUM);
        if (cp) comm_all_reduce(cp, x->coef, (size_t)G * E, COMM_F32, COMM_SUM);
        be->ops->copy(be, w->h_coef, x->coef, (size_t)G * E * sizeof(float), BACKEND_D2H);
    }
    for (int i = 0; i < G * E; i++) tokens[i % E] += w->h_coef[i];
    for (int i = 0; i < G * E; i++) w->h_coef[i] = (float)(w->h_coef[i] * R->lb_k);
    be->ops->copy(be, x->coef, w->h_coef, (size_t)G * E * sizeof(float), BACKEND_H2D);
}

void moe_router_backward(const MoERouter *R, Comm *sum, Comm *cp, const MoEActs *x,
                         const void *in, const void *Wr, float *dWr, void *dx, float aux_scale,
                         double *tokens, float loss[2]) {
    Backend *be = R->be;
    MoERouterWork *w = R->w;
    int n = R->d.n, E = R->d.E, C = R->d.C;
    // through the weights, plus the load-balancing and z losses
    be->ops->moe_router_backward(be, w->dlogits, w->dprobs, x->logits, x->idx, n, &R->r);
    lb_coef(R, sum, cp, x, tokens);
    be->ops->moe_router_loss(be, w->dlogits, w->loss, x->logits, x->coef,
                             R->groups > 1 ? w->row_group : NULL, R->z_coef, aux_scale, n, &R->r);
    if (sum) comm_all_reduce(sum, w->loss, 2, COMM_F32, COMM_SUM);
    if (cp) comm_all_reduce(cp, w->loss, 2, COMM_F32, COMM_SUM);
    be->ops->copy(be, loss, w->loss, 2 * sizeof(float), BACKEND_D2H);
    be->ops->cast(be, w->dlogits_act, be->act, w->dlogits, BACKEND_F32, (size_t)n * E);
    be->ops->matmul_backward(be, w->dx, dWr, NULL, w->dlogits_act, in, Wr, n, C, E);
    be->ops->add(be, dx, dx, w->dx, (size_t)n * C);
}

void moe_router_bias_step(float *bias, const double *tokens, int E, double rate) {
    double sum = 0.0;
    for (int e = 0; e < E; e++) sum += tokens[e];
    double mean = sum / E;
    float r = (float)rate;
    for (int e = 0; e < E; e++) {
        float sign = tokens[e] < mean ? 1.0f : tokens[e] > mean ? -1.0f : 0.0f;
        bias[e] = bias[e] + sign * r;
    }
}

// The calls of lb_coef and moe_router_backward over each of `sum` and `cp` (keep in step).
int moe_router_calls(int G, int E, CommCall calls[MOE_ROUTER_MAX_CALLS]) {
    calls[0] = (CommCall){COMM_ALL_REDUCE, (size_t)G * (size_t)E, 1, 1};  // the token counts
    calls[1] = (CommCall){COMM_ALL_REDUCE, 2, 1, 1};                      // aux and z losses
    return 2;
}
