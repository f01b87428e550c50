// layers/moe_experts.c: the MoE layer's experts (moe_experts.h): one GEMM pair per local
// expert on its contiguous rows (SequentialMLP), or with --moe-grouped-gemm each product of
// every expert in one grouped call (GroupedMLP), forward and backward; a pointwise act goes
// with fc's products either way (matmul_act_* or the grouped ops' pre).
#include "moe_experts.h"

#include <string.h>

void moe_experts_buffers(MoEExpertsWork *w, const MoEDims *d, MoEAlloc *a) {
    size_t R = moe_recv_rows(d), Fe = (size_t)d->Fe, F2 = (backend_act_gated(d->act) ? 2 : 1) * Fe;
    w->dfch = moe_alloc(a, R * F2 * a->act);
    w->dact = moe_alloc(a, R * Fe * a->act);
}

void moe_experts_free(MoEExpertsWork *w, Backend *be) {
    be->ops->free(be, w->dfch);
    be->ops->free(be, w->dact);
    memset(w, 0, sizeof *w);
}

// --moe-grouped-gemm: fc of every local expert in one grouped call with the activation
// (matmul_act_forward's split: pre fch, out fch_act), then proj in one grouped call.
static void grouped_forward(const MoEExperts *X, const MoEExpertWeights *W, MoEActs *x, void *out,
                            const int *lc) {
    Backend *be = X->be;
    BackendAct act = X->d.act;
    int El = moe_local_experts(&X->d), C = X->d.C, Fe = X->d.Fe, F2 = (backend_act_gated(act) ? 2 : 1) * Fe;
    be->ops->matmul_grouped_forward(be, x->fch_act, x->fch, x->xp, W->fcw, W->fcb, lc, El, C, F2, act);
    be->ops->matmul_grouped_forward(be, out, NULL, x->fch_act, W->projw, W->projb, lc, El, Fe, C, act);
}

// The backward of grouped_forward: proj's grouped backward into dfch with a pointwise act's
// gradient (gated: into dact, then the act's gradient over all rows), fc's grouped backward.
static void grouped_backward(const MoEExperts *X, const MoEExpertWeights *W, const MoEActs *x,
                             const void *dout, void *dxp, const int *lc) {
    Backend *be = X->be;
    BackendAct act = X->d.act;
    int El = moe_local_experts(&X->d), C = X->d.C, Fe = X->d.Fe, F2 = (backend_act_gated(act) ? 2 : 1) * Fe;
    if (backend_act_gated(act)) {
        be->ops->matmul_grouped_backward(be, X->w->dact, W->dprojw, W->dprojb, dout, x->fch_act,
                                         W->projw, NULL, lc, El, Fe, C, act);
        be->ops->act_backward(be, X->w->dfch, x->fch, X->w->dact, (int)backend_rows_total(lc, El),
                              Fe, act);
    } else {
        be->ops->matmul_grouped_backward(be, X->w->dfch, W->dprojw, W->dprojb, dout, x->fch_act,
                                         W->projw, x->fch, lc, El, Fe, C, act);
    }
    be->ops->matmul_grouped_backward(be, dxp, W->dfcw, W->dfcb, X->w->dfch, x->xp, W->fcw, NULL, lc,
                                     El, C, F2, act);
}

void moe_experts_forward(const MoEExperts *X, const MoEExpertWeights *W, MoEActs *x, void *out,
                         const int *lc) {
    if (X->d.grouped) {
        grouped_forward(X, W, x, out, lc);
        return;
    }
    Backend *be = X->be;
    BackendAct act = X->d.act;
    int C = X->d.C, Fe = X->d.Fe, F2 = (backend_act_gated(act) ? 2 : 1) * Fe;
    for (int e = 0, off = 0; e < moe_local_experts(&X->d); off += lc[e++]) {
        int rows = lc[e];
        if (!rows) continue;
        const void *b1 = W->fcb ? moe_at(be, W->fcb, (size_t)e * F2) : NULL;
        const void *b2 = W->projb ? moe_at(be, W->projb, (size_t)e * C) : NULL;
        const void *W1 = moe_at(be, W->fcw, (size_t)e * F2 * C), *in = moe_at(be, x->xp, (size_t)off * C);
        void *h = moe_at(be, x->fch, (size_t)off * F2), *ha = moe_at(be, x->fch_act, (size_t)off * Fe);
        if (backend_act_gated(act)) {  // h (rows, 2 Fe) [gate | up], ha (rows, Fe)
            be->ops->matmul_forward(be, h, in, W1, b1, rows, C, F2);
            be->ops->act_forward(be, ha, h, rows, Fe, act);
        } else {
            be->ops->matmul_act_forward(be, ha, h, in, W1, b1, rows, C, F2, act);
        }
        be->ops->matmul_forward(be, moe_at(be, out, (size_t)off * C), ha,
                                moe_at(be, W->projw, (size_t)e * C * Fe), b2, rows, Fe, C);
    }
}

void moe_experts_backward(const MoEExperts *X, const MoEExpertWeights *W, const MoEActs *x,
                          const void *dout, void *dxp, const int *lc) {
    if (X->d.grouped) {
        grouped_backward(X, W, x, dout, dxp, lc);
        return;
    }
    Backend *be = X->be;
    BackendAct act = X->d.act;
    int C = X->d.C, Fe = X->d.Fe, gated = backend_act_gated(act), F2 = (gated ? 2 : 1) * Fe;
    for (int e = 0, off = 0; e < moe_local_experts(&X->d); off += lc[e++]) {
        int rows = lc[e];
        if (!rows) continue;
        float *db1 = W->dfcb ? W->dfcb + (size_t)e * F2 : NULL;
        float *db2 = W->dprojb ? W->dprojb + (size_t)e * C : NULL;
        const void *h = moe_at(be, x->fch, (size_t)off * F2), *ha = moe_at(be, x->fch_act, (size_t)off * Fe);
        const void *dy = moe_at(be, dout, (size_t)off * C);
        void *dh = moe_at(be, X->w->dfch, (size_t)off * F2);
        const void *W2 = moe_at(be, W->projw, (size_t)e * C * Fe);
        float *dW2 = W->dprojw + (size_t)e * C * Fe;
        if (gated) {
            void *da = moe_at(be, X->w->dact, (size_t)off * Fe);
            be->ops->matmul_backward(be, da, dW2, db2, dy, ha, W2, rows, Fe, C);
            be->ops->act_backward(be, dh, h, da, rows, Fe, act);
        } else {
            be->ops->matmul_act_backward(be, dh, dW2, db2, dy, ha, W2, h, rows, Fe, C, act);
        }
        be->ops->matmul_backward(be, moe_at(be, dxp, (size_t)off * C), W->dfcw + (size_t)e * F2 * C,
                                 db1, dh, moe_at(be, x->xp, (size_t)off * C),
                                 moe_at(be, W->fcw, (size_t)e * F2 * C), rows, C, F2);
    }
}
