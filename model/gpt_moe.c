// model/gpt_moe.c: the mixture-of-experts layers of a GPT stage (gpt_moe.h): the router,
// the token dispatcher and the experts (layers/moe_*.h) built from the stage's sizes and
// composed into the MoE MLP's forward and backward; their workspace through one allocator
// (gpt_moe_workspace_bytes counts what gpt_moe_create allocates); the step's statistics.
#include "gpt_moe.h"
#include "core/check.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

// Groups of the load-balancing loss: the micro-batch (aux_loss) or each sequence (seq_aux).
static int lb_groups(const GPT *m) {
    return m->cfg.moe_load_balancing == GPT_MOE_LB_SEQ_AUX ? m->B : 1;
}

// The sizes of the stage's MoE layers for n routed rows.
static MoEDims dims_of(const GPT *m, int n) {
    const GPTConfig *c = &m->cfg;
    MoEDims d = {c->num_experts, c->moe_topk, c->hidden_size, gpt_moe_ffn(c), c->activation,
                 n, (int)gpt_moe_rows(m), m->ep, m->ep > 1 ? m->ep_rank : 0,
                 (MoEDispatcherType)c->moe_dispatcher, c->moe_grouped_gemm};
    return d;
}

// The router of local layer l (its expert bias with --moe-router-enable-expert-bias).
static MoERouter router_of(const GPT *m, int n, int l) {
    const GPTConfig *c = &m->cfg;
    const float *bias = m->moe->bias ? m->moe->bias + (size_t)l * c->num_experts : NULL;
    int G = lb_groups(m);
    double Tg = G > 1 ? m->T_seq : (double)m->B * m->T_seq;  // tokens of a group
    double k = c->moe_load_balancing == GPT_MOE_LB_NONE ? 0.0
             : (double)c->num_experts * c->moe_aux_coeff / ((double)c->moe_topk * Tg * Tg * G);
    MoERouter r = {dims_of(m, n),
                   {c->num_experts, c->moe_topk, c->moe_sigmoid ? BACKEND_MOE_SIGMOID : BACKEND_MOE_SOFTMAX,
                    c->moe_pre_softmax, (float)c->moe_topk_scaling, bias},
                   gpt_moe_capacity(c, n), c->moe_drop_position, c->moe_pad_capacity, G, k,
                   (float)(c->moe_z_coeff / ((double)m->B * m->T_seq)), m->be, &m->moe->router};
    return r;
}

static MoEDispatcher dispatcher_of(const GPT *m, int n) {
    MoEDispatcher D = {dims_of(m, n), m->be, m->ep > 1 ? m->ep_comm : NULL, &m->moe->disp};
    return D;
}

static MoEExperts experts_of(const GPT *m, int n) {
    MoEExperts X = {dims_of(m, n), m->be, &m->moe->experts};
    return X;
}

// The local experts' weights in w, their gradients in g (NULL: forward).
static MoEExpertWeights expert_weights(const GPTBlockW *w, GPTBlockW *g) {
    MoEExpertWeights W = {w->fcw, w->fcb, w->fcprojw, w->fcprojb, NULL, NULL, NULL, NULL};
    if (g) W.dfcw = g->fcw, W.dfcb = g->fcb, W.dprojw = g->fcprojw, W.dprojb = g->fcprojb;
    return W;
}

// The three parts' workspaces of the stage (a->be NULL: only their bytes, into a->bytes).
static void buffers(const GPT *m, struct GPTMoE *s, MoEAlloc *a) {
    MoEDims d = dims_of(m, m->N_sp);
    moe_router_buffers(&s->router, &d, lb_groups(m), a);
    moe_dispatcher_buffers(&s->disp, &d, a);
    moe_experts_buffers(&s->experts, &d, a);
}

// 1 if the stage holds an MoE layer.
static int any_moe(const GPT *m) {
    int any = 0;
    for (int l = 0; m->cfg.num_experts > 0 && l < m->n_layers && !any; l++) any = gpt_moe_layer(&m->cfg, m->layer0 + l);
    return any;
}

size_t gpt_moe_workspace_bytes(const GPT *m) {
    if (!any_moe(m)) return 0;
    struct GPTMoE s = {0};
    MoEAlloc a = {NULL, backend_dtype_size(m->be->act), 0};
    buffers(m, &s, &a);
    return a.bytes;
}

// The host counts of every slot's layers and of the recomputed layers (which share their
// chunk's, m->rc): 3 E ints each, counts, rcounts then roff.
static void carve_counts(GPT *m, struct GPTMoE *s) {
    size_t E = (size_t)m->cfg.num_experts;
    size_t units = (size_t)m->n_slots * m->n_layers + (size_t)m->n_rc;
    s->counts = core_calloc(units * 3 * E, sizeof(int));
    int *next = s->counts;
    for (int i = 0; i < m->n_rc; i++, next += 3 * E) {
        MoEActs *x = &m->rc[i].moe;
        x->counts = next, x->rcounts = next + E, x->roff = next + 2 * E;
    }
    for (int k = 0; k < m->n_slots; k++)
        for (int l = 0; l < m->n_layers; l++, next += 3 * E) {
            int first, last;
            MoEActs *x = &m->slots[k].layers[l].moe;
            int rc = gpt_layer_recomputed(m, l, &first, &last);
            const MoEActs *r = rc ? &m->rc[l - first].moe : NULL;
            x->counts = r ? r->counts : next;
            x->rcounts = r ? r->rcounts : next + E;
            x->roff = r ? r->roff : next + 2 * E;
        }
}

void gpt_moe_create(GPT *m) {
    const GPTConfig *c = &m->cfg;
    if (!any_moe(m)) return;
    Backend *be = m->be;
    struct GPTMoE *s = core_calloc(1, sizeof *s);
    size_t n = (size_t)m->N_sp, E = (size_t)c->num_experts;
    MoEAlloc a = {be, backend_dtype_size(be->act), 0};
    buffers(m, s, &a);
    s->workspace_bytes = a.bytes;
    for (size_t i = 0; i < n; i++) {  // local row -> its sequence
        size_t gi = (m->sp ? (size_t)m->tp_rank * n : 0) + i;  // row of the micro-batch here
        s->router.h_row_group[i] = m->cp > 1 ? (int)((gi % ((size_t)m->N / 2)) / ((size_t)m->T / 2))
                                             : (int)(gi / (size_t)m->T);
    }
    be->ops->copy(be, s->router.row_group, s->router.h_row_group, n * sizeof(int), BACKEND_H2D);
    if (c->moe_expert_bias) {  // zero until gpt_moe_set_bias (gpt_moe_bias.c)
        s->bias = be->ops->alloc(be, (size_t)m->n_layers * E * sizeof(float));
        be->ops->zero(be, s->bias, (size_t)m->n_layers * E * sizeof(float));
    }
    s->lb_loss = core_calloc((size_t)m->n_layers, sizeof(double));
    s->z_loss = core_calloc((size_t)m->n_layers, sizeof(double));
    s->tokens = core_calloc((size_t)m->n_layers * E, sizeof(double));
    s->dropped = core_calloc((size_t)m->n_layers, sizeof(double));
    m->moe = s;
    carve_counts(m, s);
}

void gpt_moe_destroy(GPT *m) {
    struct GPTMoE *s = m->moe;
    if (!s) return;
    Backend *be = m->be;
    moe_router_free(&s->router, be);
    moe_dispatcher_free(&s->disp, be);
    moe_experts_free(&s->experts, be);
    be->ops->free(be, s->bias);
    free(s->dropped), free(s->counts), free(s->lb_loss), free(s->z_loss), free(s->tokens);
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

void gpt_moe_forward_start(GPT *m, const GPTBlockW *w, GPTLayerActs *a, int n, int l) {
    MoERouter R = router_of(m, n, l);
    MoEDispatcher D = dispatcher_of(m, n);
    size_t rows = moe_router_forward(&R, &a->moe, a->ln2, w->routerw);
    moe_dispatch_start(&D, &a->moe, a->ln2, rows);
}

void gpt_moe_forward_finish(GPT *m, const GPTBlockW *w, GPTLayerActs *a, void *out, int n) {
    MoEDispatcher D = dispatcher_of(m, n);
    MoEExperts X = experts_of(m, n);
    MoEExpertWeights W = expert_weights(w, NULL);
    int lc[MOE_MAX_EXPERTS];  // rows of each local expert
    void *eo = moe_dispatch_finish(&D, &a->moe, lc);
    moe_experts_forward(&X, &W, &a->moe, eo, lc);
    moe_combine(&D, &a->moe, out);
}

void gpt_moe_forward(GPT *m, const GPTBlockW *w, GPTLayerActs *a, void *out, int n, int l) {
    gpt_moe_forward_start(m, w, a, n, l);
    gpt_moe_forward_finish(m, w, a, out, n);
}

void gpt_moe_backward_start(GPT *m, const GPTLayerActs *a, const void *dout, int n) {
    MoEDispatcher D = dispatcher_of(m, n);
    moe_combine_backward_start(&D, &a->moe, dout, m->moe->router.dprobs);
}

void gpt_moe_backward_finish(GPT *m, Comm *sum, const GPTBlockW *w, GPTBlockW *g,
                             const GPTLayerActs *a, void *dln, int n, int l, float aux_scale) {
    struct GPTMoE *s = m->moe;
    MoERouter R = router_of(m, n, l);
    MoEDispatcher D = dispatcher_of(m, n);
    MoEExperts X = experts_of(m, n);
    MoEExpertWeights W = expert_weights(w, g);
    int lc[MOE_MAX_EXPERTS];
    void *dy, *dxp;  // d(expert outputs), d(expert inputs) in the local experts' order
    moe_combine_backward_finish(&D, &a->moe, lc, &dy, &dxp);
    moe_experts_backward(&X, &W, &a->moe, dy, dxp, lc);
    moe_dispatch_backward(&D, &a->moe, dln);  // d(ln2) through the experts
    float loss[2];
    moe_router_backward(&R, sum, m->cp_comm, &a->moe, a->ln2, w->routerw, (float *)g->routerw, dln,
                        aux_scale, s->tokens + (size_t)l * m->cfg.num_experts, loss);
    s->lb_loss[l] += loss[0];
    s->dropped[l] += a->moe.dropped;
    s->z_loss[l] += loss[1];
}

void gpt_moe_backward(GPT *m, Comm *sum, const GPTBlockW *w, GPTBlockW *g,
                      const GPTLayerActs *a, const void *dout, void *dln, int n, int l,
                      float aux_scale) {
    gpt_moe_backward_start(m, a, dout, n);
    gpt_moe_backward_finish(m, sum, w, g, a, dln, n, l, aux_scale);
}
