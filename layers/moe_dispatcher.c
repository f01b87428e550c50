// layers/moe_dispatcher.c: the MoE token dispatcher (moe_dispatcher.h): permute, the counts'
// and the rows' all-to-alls, the sort by local expert, and their way back with the combine.
#include "moe_dispatcher.h"
#include "core/check.h"        // defines: core_calloc
#include "layers/tp_linear.h"  // defines: tp_act_dtype (activations' Comm type)

#include <stdlib.h>
#include <string.h>

void moe_dispatcher_buffers(MoEDispatchWork *w, const MoEDims *d, MoEAlloc *a) {
    size_t M = (size_t)d->rows, C = (size_t)d->C, R = moe_recv_rows(d), E = (size_t)d->E;
    w->deo = moe_alloc(a, M * C * a->act);
    w->dxp = moe_alloc(a, M * C * a->act);
    if (d->ep > 1) {
        w->xr = moe_alloc(a, R * C * a->act);
        w->xr2 = moe_alloc(a, R * C * a->act);
        w->cnt = moe_alloc(a, 2 * E * sizeof(int));
        w->sort = moe_alloc(a, 2 * R * sizeof(int));
        if (a->be) w->h_sort = core_calloc(2 * R, sizeof(int));
    }
}

void moe_dispatcher_free(MoEDispatchWork *w, Backend *be) {
    void *dev[] = {w->deo, w->dxp, w->xr, w->xr2, w->cnt, w->sort};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) be->ops->free(be, dev[i]);
    free(w->h_sort);
    memset(w, 0, sizeof *w);
}

// x->rcounts[i El + e] = the rows rank i of the ep group sends for this rank's local expert
// e, from every rank's x->counts (one all-to-all of El ints per pair).
static void exchange_counts(const MoEDispatcher *D, MoEActs *x) {
    Backend *be = D->be;
    int E = D->d.E, P = D->d.ep;
    size_t per[MOE_MAX_EXPERTS];
    for (int i = 0; i < P; i++) per[i] = (size_t)(E / P);
    be->ops->copy(be, D->w->cnt, x->counts, (size_t)E * sizeof(int), BACKEND_H2D);
    comm_all_to_all_v(D->comm, D->w->cnt, per, D->w->cnt + E, per, COMM_I32);
    be->ops->copy(be, x->rcounts, D->w->cnt + E, (size_t)E * sizeof(int), BACKEND_D2H);
}

// Rows (C wide, be->act) from `in` to `out` over the ep group, in blocks of El = E/ep counts
// per peer: send[j El + e] rows go to rank j, recv[i El + e] come from rank i. To the
// experts: send = x->counts (rows grouped by global expert: rank j's experts are the j-th
// block), recv = x->rcounts ([source][local expert]); back: the two swapped.
static void all_to_all(const MoEDispatcher *D, const void *in, void *out, const int *send,
                       const int *recv) {
    int P = D->d.ep, El = moe_local_experts(&D->d), C = D->d.C;
    size_t sc[MOE_MAX_EXPERTS], rc[MOE_MAX_EXPERTS];
    for (int i = 0; i < P; i++) {
        sc[i] = rc[i] = 0;
        for (int e = 0; e < El; e++) sc[i] += (size_t)send[i * El + e] * C, rc[i] += (size_t)recv[i * El + e] * C;
    }
    comm_all_to_all_v(D->comm, in, sc, out, rc, tp_act_dtype(D->be));
}

// The received rows ([source rank][local expert] chunks, rcounts) sorted by local expert
// ([local expert][source rank], each chunk's rows in order), so that each local expert runs
// one GEMM pair on contiguous rows (Megatron's sort_chunks_by_idxs). Fills w->sort (backend,
// 2 R ints): [0, rows) the received row of each sorted row, [R, R + rows) the sorted row of
// each received row; lc (El) the rows of each local expert. Returns the rows received. One
// host loop and one copy.
static int sort_by_expert(const MoEDispatcher *D, const int *rcounts, int *lc) {
    MoEDispatchWork *w = D->w;
    int P = D->d.ep, El = moe_local_experts(&D->d), R = (int)moe_recv_rows(&D->d);
    int off[MOE_MAX_EXPERTS], rows = 0;  // received offset of chunk [i][e]
    for (int k = 0; k < P * El; k++) off[k] = rows, rows += rcounts[k];
    for (int e = 0, r = 0; e < El; e++) {
        lc[e] = 0;
        for (int i = 0; i < P; i++)
            for (int j = 0; j < rcounts[i * El + e]; j++, r++, lc[e]++) {
                w->h_sort[r] = off[i * El + e] + j;
                w->h_sort[R + off[i * El + e] + j] = r;
            }
    }
    if (rows) {
        D->be->ops->copy(D->be, w->sort, w->h_sort, (size_t)rows * sizeof(int), BACKEND_H2D);
        D->be->ops->copy(D->be, w->sort + R, w->h_sort + R, (size_t)rows * sizeof(int), BACKEND_H2D);
    }
    return rows;
}

// Rows of x in expert order: the sum of the counts.
static size_t expert_rows(const MoEDims *d, const MoEActs *x) {
    size_t rows = 0;
    for (int e = 0; e < d->E; e++) rows += (size_t)x->counts[e];
    return rows;
}

void *moe_dispatch(const MoEDispatcher *D, MoEActs *x, const void *in, size_t rows, int *lc) {
    Backend *be = D->be;
    MoEDispatchWork *w = D->w;
    int C = D->d.C;
    if (D->d.ep == 1) {  // the experts, each on its contiguous rows, in expert order
        be->ops->rows_gather(be, x->xp, in, x->perm, NULL, (int)rows, C);  // (rows, C)
        memcpy(lc, x->counts, (size_t)D->d.E * sizeof(int));
        return x->eo;
    }
    // rows to the ranks holding their experts, sorted by local expert there
    be->ops->rows_gather(be, w->deo, in, x->perm, NULL, (int)rows, C);
    exchange_counts(D, x);
    all_to_all(D, w->deo, w->xr, x->counts, x->rcounts);
    int got = sort_by_expert(D, x->rcounts, lc);
    if (got) be->ops->rows_gather(be, x->xp, w->xr, w->sort, NULL, got, C);  // (got, C)
    return w->xr2;
}

void moe_combine(const MoEDispatcher *D, MoEActs *x, void *out) {
    Backend *be = D->be;
    MoEDispatchWork *w = D->w;
    int C = D->d.C, R = (int)moe_recv_rows(&D->d);
    if (D->d.ep > 1) {  // the outputs sorted back (the received order) and home
        size_t got = 0;
        for (int k = 0; k < D->d.E; k++) got += (size_t)x->rcounts[k];
        if (got) be->ops->rows_gather(be, w->xr, w->xr2, w->sort + R, NULL, (int)got, C);
        all_to_all(D, w->xr, x->eo, x->rcounts, x->counts);
    }
    be->ops->rows_combine(be, out, x->eo, x->slot, x->probs, D->d.n, D->d.K, C);  // out (n, C)
}

void moe_combine_backward(const MoEDispatcher *D, const MoEActs *x, const void *dout,
                          float *dprobs, int *lc, void **dy, void **dxp) {
    Backend *be = D->be;
    MoEDispatchWork *w = D->w;
    int C = D->d.C;
    // d(expert outputs) and d(weights), both read dout
    be->ops->rows_gather(be, w->deo, dout, x->perm, x->pprobs, (int)expert_rows(&D->d, x), C);
    be->ops->rows_dot(be, dprobs, dout, x->eo, x->slot, D->d.n, D->d.K, C);
    if (D->d.ep == 1) {
        memcpy(lc, x->counts, (size_t)D->d.E * sizeof(int));
        *dy = w->deo, *dxp = w->dxp;
        return;
    }
    // d(outputs) to the experts' ranks, sorted by local expert
    all_to_all(D, w->deo, w->xr, x->counts, x->rcounts);
    int got = sort_by_expert(D, x->rcounts, lc);
    if (got) be->ops->rows_gather(be, w->xr2, w->xr, w->sort, NULL, got, C);
    *dy = w->xr2, *dxp = w->xr;
}

void moe_dispatch_backward(const MoEDispatcher *D, const MoEActs *x, void *dx) {
    Backend *be = D->be;
    MoEDispatchWork *w = D->w;
    int C = D->d.C, R = (int)moe_recv_rows(&D->d);
    if (D->d.ep > 1) {  // d(inputs) sorted back and home
        size_t got = 0;
        for (int k = 0; k < D->d.E; k++) got += (size_t)x->rcounts[k];
        if (got) be->ops->rows_gather(be, w->xr2, w->xr, w->sort + R, NULL, (int)got, C);
        all_to_all(D, w->xr2, w->dxp, x->rcounts, x->counts);
    }
    be->ops->rows_combine(be, dx, w->dxp, x->slot, NULL, D->d.n, D->d.K, C);  // un-permute
}
