// model/gpt_moe.c: the mixture-of-experts layer's forward and backward (gpt_moe.h).
#include "gpt_moe.h"
#include "core/check.h"
#include "layers/tp_linear.h"  // defines: tp_act_dtype (activations' Comm type)

#include <math.h>
#include <stdlib.h>
#include <string.h>

// One (token, choice) entry of an expert: its weight and index t K + k (route's sort).
typedef struct {
    float p;
    int i;
} Ranked;

// The router settings of local layer l (its expert bias with --moe-router-enable-expert-bias).
static BackendMoERouter router_of(const GPT *m, int l) {
    const GPTConfig *c = &m->cfg;
    const float *bias = m->moe->bias ? m->moe->bias + (size_t)l * c->num_experts : NULL;
    BackendMoERouter r = {c->num_experts, c->moe_topk,
                          c->moe_sigmoid ? BACKEND_MOE_SIGMOID : BACKEND_MOE_SOFTMAX,
                          c->moe_pre_softmax, (float)c->moe_topk_scaling, bias};
    return r;
}

// Groups of the load-balancing loss: the micro-batch (aux_loss) or each sequence (seq_aux).
static int lb_groups(const GPT *m) {
    return m->cfg.moe_load_balancing == GPT_MOE_LB_SEQ_AUX ? m->B : 1;
}

// Element `i` of a be->act buffer.
static void *at(const GPT *m, const void *p, size_t i) {
    return (char *)p + i * backend_dtype_size(m->be->act);
}

// bytes of backend memory for the layers' buffers, counted in s->workspace_bytes; be NULL:
// counted only (NULL returned).
static void *ws_alloc(Backend *be, struct GPTMoE *s, size_t bytes) {
    s->workspace_bytes += bytes;
    return be ? be->ops->alloc(be, bytes) : NULL;
}

// The layers' device buffers of the forward and backward (be NULL: only their bytes, into
// s->workspace_bytes): one allocation each.
static void device_buffers(const GPT *m, Backend *be, struct GPTMoE *s) {
    const GPTConfig *c = &m->cfg;
    size_t n = (size_t)m->N_sp, E = (size_t)c->num_experts, NK = n * (size_t)c->moe_topk;
    size_t M = gpt_moe_rows(m), C = (size_t)c->hidden_size, Fe = (size_t)gpt_moe_ffn(c);
    size_t F2 = (backend_act_gated(c->activation) ? 2 : 1) * Fe, R = gpt_moe_recv_rows(m);
    size_t act = backend_dtype_size(m->be->act);
    s->row_group = ws_alloc(be, s, n * sizeof(int));
    s->loss = ws_alloc(be, s, 2 * sizeof(float));
    s->dlogits = ws_alloc(be, s, n * E * sizeof(float));
    s->dlogits_act = ws_alloc(be, s, n * E * act);
    s->dprobs = ws_alloc(be, s, NK * sizeof(float));
    s->deo = ws_alloc(be, s, M * C * act);
    s->dxp = ws_alloc(be, s, M * C * act);
    s->dfch = ws_alloc(be, s, R * F2 * act);
    s->dact = ws_alloc(be, s, R * Fe * act);
    if (m->ep > 1) {
        s->xr = ws_alloc(be, s, R * C * act);
        s->xr2 = ws_alloc(be, s, R * C * act);
        s->cnt = ws_alloc(be, s, 2 * E * sizeof(int));
        s->sort = ws_alloc(be, s, 2 * R * sizeof(int));
    }
    s->dx = ws_alloc(be, s, n * C * act);
}

size_t gpt_moe_workspace_bytes(const GPT *m) {
    int any = 0;
    for (int l = 0; m->cfg.num_experts > 0 && l < m->n_layers && !any; l++) any = gpt_moe_layer(&m->cfg, m->layer0 + l);
    struct GPTMoE s = {0};
    if (any) device_buffers(m, NULL, &s);
    return s.workspace_bytes;
}

void gpt_moe_create(GPT *m) {
    const GPTConfig *c = &m->cfg;
    int any = 0;
    for (int l = 0; l < m->n_layers; l++) any |= gpt_moe_layer(c, m->layer0 + l);
    if (!any) return;
    Backend *be = m->be;
    struct GPTMoE *s = core_calloc(1, sizeof *s);
    size_t n = (size_t)m->N_sp, E = (size_t)c->num_experts, K = (size_t)c->moe_topk, NK = n * K;
    size_t M = gpt_moe_rows(m), G = (size_t)lb_groups(m);
    if (c->moe_capacity > 0 && (m->sp || m->cp > 1))
        core_usage_error("--moe-expert-capacity-factor with --sequence-parallel or "
                         "--context-parallel-size > 1 is not implemented yet (the capacity is per "
                         "micro-batch: its rows would have to be routed together)");
    s->h_idx = core_calloc(NK, sizeof(int));
    s->h_perm = core_calloc(M, sizeof(int));
    s->h_slot = core_calloc(NK, sizeof(int));
    s->h_probs = core_calloc(NK, sizeof(float));
    s->h_pprobs = core_calloc(M, sizeof(float));
    s->h_rank = core_calloc(NK, sizeof(Ranked));
    s->h_coef = core_calloc(G * E, sizeof(float));
    if (m->ep > 1) s->h_sort = core_calloc(2 * gpt_moe_recv_rows(m), sizeof(int));
    device_buffers(m, be, s);
    s->h_row_group = core_calloc(n, sizeof(int));  // local row -> its sequence
    for (size_t i = 0; i < n; i++) {
        size_t gi = (m->sp ? (size_t)m->tp_rank * n : 0) + i;  // row of the micro-batch here
        s->h_row_group[i] = m->cp > 1 ? (int)((gi % ((size_t)m->N / 2)) / ((size_t)m->T / 2))
                                      : (int)(gi / (size_t)m->T);
    }
    be->ops->copy(be, s->row_group, s->h_row_group, n * sizeof(int), BACKEND_H2D);
    if (c->moe_expert_bias) {  // zero until gpt_moe_set_bias (gpt_moe_bias.c)
        s->bias = be->ops->alloc(be, (size_t)m->n_layers * E * sizeof(float));
        be->ops->zero(be, s->bias, (size_t)m->n_layers * E * sizeof(float));
    }
    size_t units = (size_t)m->n_slots * m->n_layers + (size_t)m->n_rc;
    s->counts = core_calloc(units * 2 * E, sizeof(int));
    s->lb_loss = core_calloc((size_t)m->n_layers, sizeof(double));
    s->z_loss = core_calloc((size_t)m->n_layers, sizeof(double));
    s->tokens = core_calloc((size_t)m->n_layers * E, sizeof(double));
    s->dropped = core_calloc((size_t)m->n_layers, sizeof(double));
    m->moe = s;
    int *next = s->counts;  // recomputed layers share their chunk's (m->rc) host counts too
    for (int i = 0; i < m->n_rc; i++, next += 2 * E) m->rc[i].moe.counts = next, m->rc[i].moe.rcounts = next + E;
    for (int k = 0; k < m->n_slots; k++)
        for (int l = 0; l < m->n_layers; l++, next += 2 * E) {
            int first, last;
            GPTLayerActs *L = &m->slots[k].layers[l];
            int rc = gpt_layer_recomputed(m, l, &first, &last);
            L->moe.counts = rc ? m->rc[l - first].moe.counts : next;
            L->moe.rcounts = rc ? m->rc[l - first].moe.rcounts : next + E;
        }
}

void gpt_moe_destroy(GPT *m) {
    struct GPTMoE *s = m->moe;
    if (!s) return;
    Backend *be = m->be;
    void *dev[] = {s->row_group, s->loss, s->dlogits, s->dlogits_act, s->dprobs, s->deo, s->dxp,
                   s->dfch, s->dact, s->dx, s->bias, s->xr, s->xr2, s->cnt, s->sort};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) be->ops->free(be, dev[i]);
    free(s->h_idx), free(s->h_perm), free(s->h_slot), free(s->h_probs), free(s->h_pprobs);
    free(s->h_coef), free(s->h_rank), free(s->dropped), free(s->counts), free(s->lb_loss);
    free(s->z_loss), free(s->tokens), free(s->h_row_group), free(s->h_sort);
    free(s);
    m->moe = NULL;
}

void gpt_moe_stats_reset(GPT *m) {
    struct GPTMoE *s = m->moe;
    if (!s) return;
    memset(s->lb_loss, 0, (size_t)m->n_layers * sizeof(double));
    memset(s->z_loss, 0, (size_t)m->n_layers * sizeof(double));
    memset(s->tokens, 0, (size_t)m->n_layers * m->cfg.num_experts * sizeof(double));
    memset(s->dropped, 0, (size_t)m->n_layers * sizeof(double));
}

int gpt_moe_capacity(const GPTConfig *c, int n) {
    if (c->moe_capacity <= 0) return 0;
    return (int)ceil((double)n * c->moe_topk / c->num_experts * c->moe_capacity);
}

size_t gpt_moe_rows(const GPT *m) {
    const GPTConfig *c = &m->cfg;
    size_t nk = (size_t)m->N_sp * c->moe_topk;
    size_t pad = c->moe_pad_capacity ? (size_t)c->num_experts * gpt_moe_capacity(c, m->N_sp) : 0;
    return pad > nk ? pad : nk;
}

size_t gpt_moe_recv_rows(const GPT *m) { return gpt_moe_rows(m) * (size_t)m->ep; }

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
// With a capacity (gpt_moe_capacity), an expert keeps at most that many of its (token,
// choice) entries, the highest weights (ties: the earlier) or the earliest (position), and
// with padding runs exactly that many rows (padding rows: token 0, weight 0, in no slot).
// Returns the entries dropped. Pure host arithmetic.
static int route(const GPT *m, struct GPTMoE *s, int *counts, int n, int K, int E) {
    const GPTConfig *c = &m->cfg;
    int cap = gpt_moe_capacity(c, n), dropped = 0, off[GPT_MOE_MAX_EXPERTS + 1];
    Ranked *rank = s->h_rank;
    memset(counts, 0, (size_t)E * sizeof(int));
    for (int i = 0; i < n * K; i++) counts[s->h_idx[i]]++;
    off[0] = 0;
    for (int e = 0; e < E; e++) off[e + 1] = off[e] + counts[e];
    for (int i = 0; i < n * K; i++) {  // entries grouped by expert, token order inside
        int e = s->h_idx[i];
        rank[off[e]++] = (Ranked){s->h_probs[i], i};
    }
    for (int i = 0; i < n * K; i++) s->h_slot[i] = -1;
    for (int e = 0, begin = 0, row = 0; e < E; e++) {
        Ranked *list = rank + begin;
        int keep = counts[e];
        begin += keep;  // (counts[e] becomes the expert's rows below)
        if (cap && keep > cap) {
            if (!c->moe_drop_position) {  // the highest weights, back in token order
                qsort(list, (size_t)keep, sizeof *list, by_prob);
                qsort(list, (size_t)cap, sizeof *list, by_index);
            }
            dropped += keep - cap;
            keep = cap;
        }
        for (int j = 0; j < keep; j++, row++) {
            s->h_perm[row] = list[j].i / K;
            s->h_pprobs[row] = list[j].p;
            s->h_slot[list[j].i] = row;
        }
        int rows = c->moe_pad_capacity ? cap : keep;
        for (int j = keep; j < rows; j++, row++) s->h_perm[row] = 0, s->h_pprobs[row] = 0.0f;
        counts[e] = rows;
    }
    return dropped;
}

// The experts' MLPs on expert-grouped rows (grouped GEMM: one GEMM pair per local expert on
// its contiguous rows): n_chunks chunks of cnt[c] contiguous rows of x->xp, chunk c for local
// expert c % El (both callers: one chunk per local expert, sort_by_expert's order at ep > 1),
// fc and the activation into x->fch / x->fch_act, the output into eo.
static void experts_forward(GPT *m, const GPTBlockW *w, GPTMoEActs *x, void *eo, const int *cnt,
                            int n_chunks, int El) {
    Backend *be = m->be;
    const GPTConfig *c = &m->cfg;
    BackendAct act = c->activation;
    int C = c->hidden_size, Fe = gpt_moe_ffn(c), F2 = (backend_act_gated(act) ? 2 : 1) * Fe;
    for (int k = 0, off = 0; k < n_chunks; off += cnt[k++]) {
        int rows = cnt[k], e = k % El;
        if (!rows) continue;
        const void *b1 = w->fcb ? at(m, w->fcb, (size_t)e * F2) : NULL;
        const void *b2 = w->fcprojb ? at(m, w->fcprojb, (size_t)e * C) : NULL;
        void *h = at(m, x->fch, (size_t)off * F2), *ha = at(m, x->fch_act, (size_t)off * Fe);
        if (backend_act_gated(act)) {
            be->ops->matmul_forward(be, h, at(m, x->xp, (size_t)off * C),
                                    at(m, w->fcw, (size_t)e * F2 * C), b1, rows, C, F2);
            be->ops->act_forward(be, ha, h, rows, Fe, act);
        } else {
            be->ops->matmul_act_forward(be, ha, h, at(m, x->xp, (size_t)off * C),
                                        at(m, w->fcw, (size_t)e * F2 * C), b1, rows, C, F2, act);
        }
        be->ops->matmul_forward(be, at(m, eo, (size_t)off * C), ha,
                                at(m, w->fcprojw, (size_t)e * C * Fe), b2, rows, Fe, C);
    }
}

// Backward of experts_forward (same chunks): deo the gradient of its output rows, dxp
// (written) that of x->xp; the experts' gradients accumulate into g.
static void experts_backward(GPT *m, const GPTBlockW *w, GPTBlockW *g, const GPTMoEActs *x,
                             const void *deo, void *dxp, const int *cnt, int n_chunks, int El) {
    Backend *be = m->be;
    struct GPTMoE *s = m->moe;
    const GPTConfig *c = &m->cfg;
    BackendAct act = c->activation;
    int C = c->hidden_size, Fe = gpt_moe_ffn(c), gated = backend_act_gated(act);
    int F2 = (gated ? 2 : 1) * Fe;
    for (int k = 0, off = 0; k < n_chunks; off += cnt[k++]) {
        int rows = cnt[k], e = k % El;
        if (!rows) continue;
        float *db1 = g->fcb ? (float *)g->fcb + (size_t)e * F2 : NULL;
        float *db2 = g->fcprojb ? (float *)g->fcprojb + (size_t)e * C : NULL;
        const void *h = at(m, x->fch, (size_t)off * F2), *ha = at(m, x->fch_act, (size_t)off * Fe);
        void *dh = at(m, s->dfch, (size_t)off * F2);
        const void *W2 = at(m, w->fcprojw, (size_t)e * C * Fe);
        float *dW2 = (float *)g->fcprojw + (size_t)e * C * Fe;
        if (gated) {
            void *da = at(m, s->dact, (size_t)off * Fe);
            be->ops->matmul_backward(be, da, dW2, db2, at(m, deo, (size_t)off * C), ha, W2, rows, Fe, C);
            be->ops->act_backward(be, dh, h, da, rows, Fe, act);
        } else {
            be->ops->matmul_act_backward(be, dh, dW2, db2, at(m, deo, (size_t)off * C), ha, W2, h,
                                         rows, Fe, C, act);
        }
        be->ops->matmul_backward(be, at(m, dxp, (size_t)off * C), (float *)g->fcw + (size_t)e * F2 * C,
                                 db1, dh, at(m, x->xp, (size_t)off * C),
                                 at(m, w->fcw, (size_t)e * F2 * C), rows, C, F2);
    }
}

// Expert parallelism: x->rcounts[i El + e] = the rows rank i of the ep group sends for this
// rank's local expert e, from every rank's x->counts (one all-to-all of El ints per pair).
static void exchange_counts(GPT *m, GPTMoEActs *x) {
    Backend *be = m->be;
    struct GPTMoE *s = m->moe;
    int E = m->cfg.num_experts, P = m->ep;
    size_t per[GPT_MOE_MAX_EXPERTS];
    for (int i = 0; i < P; i++) per[i] = (size_t)(E / P);
    be->ops->copy(be, s->cnt, x->counts, (size_t)E * sizeof(int), BACKEND_H2D);
    comm_all_to_all_v(m->ep_comm, s->cnt, per, s->cnt + E, per, COMM_I32);
    be->ops->copy(be, x->rcounts, s->cnt + E, (size_t)E * sizeof(int), BACKEND_D2H);
}

// Expert parallelism: rows (C wide, be->act) from `in` to `out` over the ep group, in blocks
// of El = E/ep counts per peer: send[j El + e] rows go to rank j, recv[i El + e] come from
// rank i. To the experts: send = x->counts (rows grouped by global expert: rank j's experts
// are the j-th block), recv = x->rcounts ([source][local expert]); back: the two swapped.
static void dispatch(GPT *m, const void *in, void *out, const int *send, const int *recv) {
    int E = m->cfg.num_experts, P = m->ep, El = E / P, C = m->cfg.hidden_size;
    size_t sc[GPT_MOE_MAX_EXPERTS], rc[GPT_MOE_MAX_EXPERTS];
    for (int i = 0; i < P; i++) {
        sc[i] = rc[i] = 0;
        for (int e = 0; e < El; e++) sc[i] += (size_t)send[i * El + e] * C, rc[i] += (size_t)recv[i * El + e] * C;
    }
    comm_all_to_all_v(m->ep_comm, in, sc, out, rc, tp_act_dtype(m->be));
}

// Expert parallelism: the received rows ([source rank][local expert] chunks, rcounts) sorted
// by local expert ([local expert][source rank], each chunk's rows in order), so that each
// local expert runs one GEMM pair on contiguous rows (Megatron's sort_chunks_by_idxs). Fills
// s->sort (backend, 2 R ints): [0, rows) the received row of each sorted row, [R, R + rows)
// the sorted row of each received row; lc (El) the rows of each local expert. Returns the
// rows received. One host loop and one copy.
static int sort_by_expert(GPT *m, const int *rcounts, int *lc) {
    struct GPTMoE *s = m->moe;
    int P = m->ep, El = m->cfg.num_experts / P, R = (int)gpt_moe_recv_rows(m);
    int off[GPT_MOE_MAX_EXPERTS], rows = 0;  // received offset of chunk [i][e]
    for (int k = 0; k < P * El; k++) off[k] = rows, rows += rcounts[k];
    for (int e = 0, r = 0; e < El; e++) {
        lc[e] = 0;
        for (int i = 0; i < P; i++)
            for (int j = 0; j < rcounts[i * El + e]; j++, r++, lc[e]++) {
                s->h_sort[r] = off[i * El + e] + j;
                s->h_sort[R + off[i * El + e] + j] = r;
            }
    }
    if (rows) {
        m->be->ops->copy(m->be, s->sort, s->h_sort, (size_t)rows * sizeof(int), BACKEND_H2D);
        m->be->ops->copy(m->be, s->sort + R, s->h_sort + R, (size_t)rows * sizeof(int), BACKEND_H2D);
    }
    return rows;
}

void gpt_moe_forward(GPT *m, const GPTBlockW *w, GPTLayerActs *a, void *out, int n, int l) {
    Backend *be = m->be;
    const GPTConfig *c = &m->cfg;
    struct GPTMoE *s = m->moe;
    GPTMoEActs *x = &a->moe;
    BackendMoERouter r = router_of(m, l);
    int E = c->num_experts, K = c->moe_topk, C = c->hidden_size, ep = m->ep > 1;
    size_t M = (size_t)n * K;
    // router: logits (n, E) = ln2 Wr^T, in fp32; the choice and its weights
    be->ops->matmul_forward(be, s->dlogits_act, a->ln2, w->routerw, NULL, n, C, E);
    be->ops->cast(be, x->logits, BACKEND_F32, s->dlogits_act, be->act, (size_t)n * E);
    be->ops->moe_router_forward(be, x->idx, x->probs, x->logits, n, &r);
    be->ops->copy(be, s->h_idx, x->idx, M * sizeof(int), BACKEND_D2H);
    be->ops->copy(be, s->h_probs, x->probs, M * sizeof(float), BACKEND_D2H);
    x->dropped = route(m, s, x->counts, n, K, E);
    size_t rows = 0;  // expert-ordered rows (M = n K when dropless)
    for (int e = 0; e < E; e++) rows += (size_t)x->counts[e];
    be->ops->copy(be, x->perm, s->h_perm, rows * sizeof(int), BACKEND_H2D);
    be->ops->copy(be, x->slot, s->h_slot, M * sizeof(int), BACKEND_H2D);
    be->ops->copy(be, x->pprobs, s->h_pprobs, rows * sizeof(float), BACKEND_H2D);
    be->ops->rows_gather(be, ep ? s->deo : x->xp, a->ln2, x->perm, NULL, (int)rows, C);  // (rows, C)
    if (!ep) {  // the experts, each on its contiguous rows, in expert order
        experts_forward(m, w, x, x->eo, x->counts, E, E);
    } else {  // rows to the ranks holding their experts, the experts, the outputs back
        int El = E / m->ep, lc[GPT_MOE_MAX_EXPERTS], R = (int)gpt_moe_recv_rows(m);
        exchange_counts(m, x);
        dispatch(m, s->deo, s->xr, x->counts, x->rcounts);
        int got = sort_by_expert(m, x->rcounts, lc);
        if (got) be->ops->rows_gather(be, x->xp, s->xr, s->sort, NULL, got, C);  // by local expert
        experts_forward(m, w, x, s->xr2, lc, El, El);
        if (got) be->ops->rows_gather(be, s->xr, s->xr2, s->sort + R, NULL, got, C);  // back
        dispatch(m, s->xr, x->eo, x->rcounts, x->counts);
    }
    be->ops->rows_combine(be, out, x->eo, x->slot, x->probs, n, K, C);  // out (n, C)
}

// The load-balancing coefficients of the micro-batch into x->coef (moe_router_loss's coef),
// from the token counts of each group (the micro-batch, or each sequence) summed over the
// ranks that share the micro-batch's rows; adds the counts to the step's statistics.
static void lb_coef(GPT *m, Comm *sum, const GPTMoEActs *x, int n, int l) {
    Backend *be = m->be;
    const GPTConfig *c = &m->cfg;
    struct GPTMoE *s = m->moe;
    int E = c->num_experts, K = c->moe_topk, G = lb_groups(m);
    memset(s->h_coef, 0, (size_t)G * E * sizeof(float));
    // (h_idx holds the last forward's: this slot's choices again)
    be->ops->copy(be, s->h_idx, x->idx, (size_t)n * K * sizeof(int), BACKEND_D2H);
    for (int t = 0; t < n; t++)
        for (int k = 0; k < K; k++)
            s->h_coef[(G > 1 ? s->h_row_group[t] : 0) * E + s->h_idx[t * K + k]] += 1.0f;
    if (sum || m->cp_comm) {  // the counts of the rows other ranks hold (device Comms)
        be->ops->copy(be, x->coef, s->h_coef, (size_t)G * E * sizeof(float), BACKEND_H2D);
        if (sum) comm_all_reduce(sum, x->coef, (size_t)G * E, COMM_F32, COMM_SUM);
        if (m->cp_comm) comm_all_reduce(m->cp_comm, x->coef, (size_t)G * E, COMM_F32, COMM_SUM);
        be->ops->copy(be, s->h_coef, x->coef, (size_t)G * E * sizeof(float), BACKEND_D2H);
    }
    for (int i = 0; i < G * E; i++) s->tokens[(size_t)l * E + i % E] += s->h_coef[i];
    double Tg = G > 1 ? m->T_seq : (double)m->B * m->T_seq;  // tokens of a group
    double k = c->moe_load_balancing == GPT_MOE_LB_NONE ? 0.0
             : (double)E * c->moe_aux_coeff / ((double)K * Tg * Tg * G);
    for (int i = 0; i < G * E; i++) s->h_coef[i] = (float)(s->h_coef[i] * k);
    be->ops->copy(be, x->coef, s->h_coef, (size_t)G * E * sizeof(float), BACKEND_H2D);
}

void gpt_moe_backward(GPT *m, Comm *sum, const GPTBlockW *w, GPTBlockW *g,
                      const GPTLayerActs *a, const void *dout, void *dln, int n, int l,
                      float aux_scale) {
    Backend *be = m->be;
    const GPTConfig *c = &m->cfg;
    struct GPTMoE *s = m->moe;
    const GPTMoEActs *x = &a->moe;
    BackendMoERouter r = router_of(m, l);
    int E = c->num_experts, K = c->moe_topk, C = c->hidden_size;
    size_t rows = 0;  // expert-ordered rows
    for (int e = 0; e < E; e++) rows += (size_t)x->counts[e];
    // the combine: d(expert outputs) and d(weights), both read dout (dln may alias it)
    be->ops->rows_gather(be, s->deo, dout, x->perm, x->pprobs, (int)rows, C);
    be->ops->rows_dot(be, s->dprobs, dout, x->eo, x->slot, n, K, C);
    if (m->ep == 1) {
        experts_backward(m, w, g, x, s->deo, s->dxp, x->counts, E, E);
    } else {  // d(outputs) to the experts' ranks, their backward, d(inputs) back
        int El = E / m->ep, lc[GPT_MOE_MAX_EXPERTS], R = (int)gpt_moe_recv_rows(m);
        dispatch(m, s->deo, s->xr, x->counts, x->rcounts);
        int got = sort_by_expert(m, x->rcounts, lc);
        if (got) be->ops->rows_gather(be, s->xr2, s->xr, s->sort, NULL, got, C);
        experts_backward(m, w, g, x, s->xr2, s->xr, lc, El, El);
        if (got) be->ops->rows_gather(be, s->xr2, s->xr, s->sort + R, NULL, got, C);
        dispatch(m, s->xr2, s->dxp, x->rcounts, x->counts);
    }
    be->ops->rows_combine(be, dln, s->dxp, x->slot, NULL, n, K, C);  // un-permute: d(ln2)
    // router: through the weights, plus the load-balancing and z losses
    be->ops->moe_router_backward(be, s->dlogits, s->dprobs, x->logits, x->idx, n, &r);
    lb_coef(m, sum, x, n, l);
    float zc = (float)(c->moe_z_coeff / ((double)m->B * m->T_seq));
    be->ops->moe_router_loss(be, s->dlogits, s->loss, x->logits, x->coef,
                             lb_groups(m) > 1 ? s->row_group : NULL, zc, aux_scale, n, &r);
    if (sum) comm_all_reduce(sum, s->loss, 2, COMM_F32, COMM_SUM);
    if (m->cp_comm) comm_all_reduce(m->cp_comm, s->loss, 2, COMM_F32, COMM_SUM);
    float loss[2];
    be->ops->copy(be, loss, s->loss, sizeof loss, BACKEND_D2H);
    s->lb_loss[l] += loss[0];
    s->dropped[l] += x->dropped;
    s->z_loss[l] += loss[1];
    be->ops->cast(be, s->dlogits_act, be->act, s->dlogits, BACKEND_F32, (size_t)n * E);
    be->ops->matmul_backward(be, s->dx, (float *)g->routerw, NULL, s->dlogits_act, a->ln2,
                             w->routerw, n, C, E);
    be->ops->add(be, dln, dln, s->dx, (size_t)n * C);
}
