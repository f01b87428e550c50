// model/gpt_block.c: normalization, QKV and MLP of a block, GPT-2 or Llama-style (see
// gpt_block.h). Tensor-parallel split: QKV and fc column-parallel (SwiGLU's fc holds this
// rank's gate rows then its up rows; grouped-query QKV this rank's q heads, then its whole
// kv groups' k and v), the projections row-parallel.
#include "gpt_block.h"
#include "gpt_moe.h"

void gpt_norm_forward(const GPT *m, void *out, float *mean, float *rstd, const void *x,
                      const void *w, const void *b, int rows) {
    Backend *be = m->be;
    int C = m->cfg.hidden_size;
    be->ops->norm_forward(be, out, mean, rstd, x, w, b, rows, C, gpt_norm_kind(&m->cfg));
}

void gpt_residual_norm_forward(const GPT *m, void *res, void *ln, float *mean, float *rstd,
                               const void *a, const void *b, const void *w, const void *bias,
                               int rows) {
    Backend *be = m->be;
    int C = m->cfg.hidden_size;
    if (!m->cfg.rmsnorm && !m->cfg.layernorm_1p) {  // the fused op has no 1p form
        be->ops->residual_layernorm_forward(be, res, ln, mean, rstd, a, b, w, bias, rows, C);
        return;
    }
    be->ops->add(be, res, a, b, (size_t)rows * C);
    be->ops->norm_forward(be, ln, mean, rstd, res, w, bias, rows, C, gpt_norm_kind(&m->cfg));
}

void gpt_norm_backward(const GPT *m, void *dinp, float *dw, float *db, const void *dout,
                       const void *x, const void *w, const float *mean, const float *rstd, int rows) {
    Backend *be = m->be;
    int C = m->cfg.hidden_size;
    be->ops->norm_backward(be, dinp, dw, db, dout, x, w, mean, rstd, rows, C,
                           gpt_norm_kind(&m->cfg));
}

// Rotary positions + grouped-query heads between the QKV linear's rows qkv_in (N, QKV_tp)
// and attention's rows qkv (N, 3*C/tp), forward or backward (the transpose), for the rows r
// (each half of its own positions with context parallelism).
static void rope_rows(GPT *m, void *qkv, void *qkv_in, const GPTRows *r, int backward) {
    Backend *be = m->be;
    size_t esz = backend_dtype_size(be->act);
    int halves = r->halves ? 2 : 1, T = r->T / halves;
    for (int h = 0; h < halves; h++) {
        size_t row0 = (size_t)h * r->B * T;
        char *out = (char *)qkv + row0 * 3 * m->A_tp * esz, *in = (char *)qkv_in + row0 * m->QKV_tp * esz;
        int pos = h ? r->pos1 : r->pos0;
        const int *rows = r->pos ? r->pos + row0 : NULL;  // --reset-position-ids
        if (backward)
            be->ops->rope_gqa_backward(be, in, out, r->B, T, m->NH_tp, m->G_tp, m->hs, m->rot,
                                       (float)m->cfg.rotary_base, pos, rows);
        else
            be->ops->rope_gqa_forward(be, out, in, r->B, T, m->NH_tp, m->G_tp, m->hs, m->rot,
                                      (float)m->cfg.rotary_base, pos, rows);
    }
}

void gpt_qkv_forward(GPT *m, TPGroup *tp, const GPTBlockW *w, GPTLayerActs *a, const GPTRows *r) {
    Backend *be = m->be;
    int N = r->B * r->T, C = m->cfg.hidden_size;
    if (!m->remap_qkv) {
        tp_column_linear_forward(be, tp, a->qkv, a->ln1, w->qkvw, w->qkvb, N, C, 3 * m->A_tp);
        return;
    }
    tp_column_linear_forward(be, tp, m->s.qkv_in, a->ln1, w->qkvw, w->qkvb, N, C, m->QKV_tp);
    rope_rows(m, a->qkv, m->s.qkv_in, r, 0);  // (N, QKV_tp) -> (N, 3*C/tp)
}

void gpt_qkv_backward(GPT *m, TPGroup *tp, const GPTBlockW *w, GPTBlockW *g,
                      const GPTLayerActs *a, void *dln, const GPTRows *r) {
    Backend *be = m->be;
    int N = m->N, C = m->cfg.hidden_size;
    if (!m->remap_qkv) {
        tp_column_linear_backward(be, tp, dln, g->qkvw, g->qkvb, m->s.dqkv, a->ln1, w->qkvw, N, C,
                                  3 * m->A_tp);
        return;
    }
    rope_rows(m, m->s.dqkv, m->s.qkv_in, r, 1);  // (N, QKV_tp)
    tp_column_linear_backward(be, tp, dln, g->qkvw, g->qkvb, m->s.qkv_in, a->ln1, w->qkvw, N, C,
                              m->QKV_tp);
}

// A dense MLP of local hidden size F_tp (the block's MLP, or a MoE layer's shared expert):
// fc column-parallel, proj row-parallel, with the block's sequence-parallel gathers and
// reduce-scatters. fch (N, F2_tp), fch_act (N, F_tp) its activations; out (Ns, C).
typedef struct {
    const void *fcw, *fcb, *projw, *projb;
    float *dfcw, *dfcb, *dprojw, *dprojb;  // gradients (backward)
    int F_tp;
} DenseMLP;

static void dense_forward(GPT *m, TPGroup *tp, const DenseMLP *d, void *fch, void *fch_act,
                          const void *ln2, void *out, int N) {
    Backend *be = m->be;
    int C = m->cfg.hidden_size;
    BackendAct act = m->cfg.activation;
    int F2 = (backend_act_gated(act) ? 2 : 1) * d->F_tp;
    tp_column_linear_act_forward(be, tp, fch_act, fch, ln2, d->fcw, d->fcb, N, C, F2,
                                 act);  // fch (N, F2) = ln2 Wfc^T + b; fch_act (N, F/tp) = act(fch)
    tp_row_linear_forward(be, tp, out, fch_act, d->projw, d->projb, N, d->F_tp, C);
}

// dln (Ns, C) OVERWRITTEN with d(ln2); dres is read before dln is written (they may alias).
static void dense_backward(GPT *m, TPGroup *tp, const DenseMLP *d, const void *fch,
                           const void *fch_act, const void *ln2, const void *dres, void *dln) {
    Backend *be = m->be;
    BackendAct act = m->cfg.activation;
    int N = m->N, C = m->cfg.hidden_size, F2 = (backend_act_gated(act) ? 2 : 1) * d->F_tp;
    if (backend_act_gated(act)) {
        tp_row_linear_backward(be, tp, m->s.dact, d->dprojw, d->dprojb, dres, fch_act, d->projw,
                               N, d->F_tp, C);
        be->ops->act_backward(be, m->s.dfch, fch, m->s.dact, N, d->F_tp, act);  // (N, 2F/tp)
    } else {
        tp_row_linear_act_backward(be, tp, m->s.dfch, d->dprojw, d->dprojb, dres, fch_act,
                                   d->projw, fch, N, d->F_tp, C, act);  // through act too
    }
    tp_column_linear_backward(be, tp, dln, d->dfcw, d->dfcb, m->s.dfch, ln2, d->fcw, N, C, F2);
}

// The shared expert of a MoE layer (w->sfcw set), its gradients from g (NULL: forward).
static DenseMLP shared_mlp(const GPT *m, const GPTBlockW *w, const GPTBlockW *g) {
    DenseMLP d = {w->sfcw, w->sfcb, w->sfcprojw, w->sfcprojb, NULL, NULL, NULL, NULL,
                  m->cfg.moe_shared_ffn / m->tp};
    if (g) d.dfcw = g->sfcw, d.dfcb = g->sfcb, d.dprojw = g->sfcprojw, d.dprojb = g->sfcprojb;
    return d;
}

void gpt_mlp_forward(GPT *m, TPGroup *tp, const GPTBlockW *w, GPTLayerActs *a, int N, int l) {
    if (w->routerw) {  // a mixture-of-experts layer: the rows here, experts replicated over tp
        int n = m->sp ? N / m->tp : N;
        gpt_moe_forward_start(m, w, a, n, l);
        if (w->sfcw) {  // the shared expert, tensor-parallel like the dense MLP, overlapping
                        // the routed rows' dispatch (Megatron's shared-expert overlap)
            DenseMLP d = shared_mlp(m, w, NULL);
            dense_forward(m, tp, &d, a->fch, a->fch_act, a->ln2, m->s.shared_out, N);
        }
        gpt_moe_forward_finish(m, w, a, a->res3, n);
        if (w->sfcw) m->be->ops->add(m->be, a->res3, a->res3, m->s.shared_out, (size_t)n * m->cfg.hidden_size);
        return;
    }
    DenseMLP d = {w->fcw, w->fcb, w->fcprojw, w->fcprojb, NULL, NULL, NULL, NULL, m->F_tp};
    dense_forward(m, tp, &d, a->fch, a->fch_act, a->ln2, a->res3, N);
}

void gpt_mlp_backward(GPT *m, TPGroup *tp, const GPTBlockW *w, GPTBlockW *g,
                      const GPTLayerActs *a, const void *dres, void *dln, int l) {
    if (w->routerw) {
        void *dshared = m->s.shared_out;  // the shared expert's d(ln2), while dres is intact
        gpt_moe_backward_start(m, a, dres, m->N_sp);  // (reads dres)
        if (w->sfcw) {  // overlapping the routed rows' gradients on their way
            DenseMLP d = shared_mlp(m, w, g);
            dense_backward(m, tp, &d, a->fch, a->fch_act, a->ln2, dres, dshared);
        }
        gpt_moe_backward_finish(m, m->sp ? tp->comm : NULL, w, g, a, dln, m->N_sp, l,
                                m->moe->aux_scale);
        if (w->sfcw) m->be->ops->add(m->be, dln, dln, dshared, (size_t)m->N_sp * m->cfg.hidden_size);
        return;
    }
    DenseMLP d = {w->fcw, w->fcb, w->fcprojw, w->fcprojb, (float *)g->fcw, (float *)g->fcb,
                  (float *)g->fcprojw, (float *)g->fcprojb, m->F_tp};
    dense_backward(m, tp, &d, a->fch, a->fch_act, a->ln2, dres, dln);
}

int gpt_block_tp_calls(int moe, int sp, int backward, int tp, size_t N, size_t C, CommCall *calls) {
    static const TPLinearKind linears[4] = {TP_COLUMN, TP_ROW, TP_COLUMN, TP_ROW};  // qkv, proj, fc, proj
    int n = 0;
    for (int i = 0; i < (moe ? 2 : 4); i++) n += tp_linear_calls(linears[i], sp, backward, tp, N, C, calls + n);
    return n;
}
