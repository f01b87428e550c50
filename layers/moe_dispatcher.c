// layers/moe_dispatcher.c: the MoE token dispatcher (moe_dispatcher.h): permute; at EP > 1
// the rows to the experts' ranks (alltoall: the counts' and the rows' all-to-alls; allgather:
// the routing's and the tokens' all-gathers, a reduce-scatter back) and the sort by local
// expert; their way back with the combine, and the backward of both.
#include "moe_dispatcher.h"
#include "core/check.h"        // defines: core_calloc
#include "layers/tp_linear.h"  // defines: tp_act_dtype (activations' Comm type)

#include <stdlib.h>
#include <string.h>

void moe_dispatcher_buffers(MoEDispatchWork *w, const MoEDims *d, MoEAlloc *a) {
    size_t M = (size_t)d->rows, C = (size_t)d->C, R = moe_recv_rows(d), E = (size_t)d->E;
    w->deo = moe_alloc(a, M * C * a->act);
    w->dxp = moe_alloc(a, M * C * a->act);
    if (d->ep == 1) return;
    w->xr = moe_alloc(a, R * C * a->act);
    w->xr2 = moe_alloc(a, R * C * a->act);
    w->cnt = moe_alloc(a, 2 * E * sizeof(int));
    w->sort = moe_alloc(a, 2 * R * sizeof(int));
    if (a->be) w->h_sort = core_calloc(2 * R, sizeof(int));
    if (d->dispatcher == MOE_DISPATCH_ALLGATHER) {
        w->route = moe_alloc(a, (size_t)(d->ep + 1) * (E + M) * sizeof(int));
        if (a->be) w->h_route = core_calloc((size_t)d->ep * (E + M), sizeof(int));
    }
}

void moe_dispatcher_free(MoEDispatchWork *w, Backend *be) {
    void *dev[] = {w->deo, w->dxp, w->xr, w->xr2, w->cnt, w->sort, w->route};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) be->ops->free(be, dev[i]);
    free(w->h_sort), free(w->h_route);
    memset(w, 0, sizeof *w);
}

static int is_allgather(const MoEDispatcher *D) { return D->d.dispatcher == MOE_DISPATCH_ALLGATHER; }

// Rows of x in expert order: the sum of the counts.
static size_t expert_rows(const MoEDims *d, const MoEActs *x) {
    size_t rows = 0;
    for (int e = 0; e < d->E; e++) rows += (size_t)x->counts[e];
    return rows;
}

// alltoall: x->rcounts[i El + e] = the rows rank i of the ep group sends for this rank's
// local expert e, from every rank's x->counts (one all-to-all of El ints per pair).
static void exchange_counts(const MoEDispatcher *D, MoEActs *x) {
    Backend *be = D->be;
    int E = D->d.E, P = D->d.ep;
    size_t per[MOE_MAX_EXPERTS];
    for (int i = 0; i < P; i++) per[i] = (size_t)(E / P);
    be->ops->copy(be, D->w->cnt, x->counts, (size_t)E * sizeof(int), BACKEND_H2D);
    comm_all_to_all_v(D->comm, D->w->cnt, per, D->w->cnt + E, per, COMM_I32);
    be->ops->copy(be, x->rcounts, D->w->cnt + E, (size_t)E * sizeof(int), BACKEND_D2H);
}

// allgather: every rank's routing ([counts (E) | perm (M)], rows of it set) gathered into
// w->h_route (P, E + M); x->rcounts[i El + e] = rank i's rows for local expert e, x->roff[i
// El + e] = where they start among rank i's expert-ordered rows.
static void gather_routing(const MoEDispatcher *D, MoEActs *x, size_t rows) {
    Backend *be = D->be;
    MoEDispatchWork *w = D->w;
    int E = D->d.E, P = D->d.ep, El = moe_local_experts(&D->d), first = D->d.ep_rank * El;
    size_t W = (size_t)E + (size_t)D->d.rows;  // ints per rank
    be->ops->copy(be, w->route, x->counts, (size_t)E * sizeof(int), BACKEND_H2D);
    if (rows) be->ops->copy(be, w->route + E, x->perm, rows * sizeof(int), BACKEND_D2D);
    if (rows < (size_t)D->d.rows)  // (the unused tail sent as zeros)
        be->ops->zero(be, w->route + E + rows, ((size_t)D->d.rows - rows) * sizeof(int));
    comm_all_gather(D->comm, w->route, w->route + W, W, COMM_I32);
    be->ops->copy(be, w->h_route, w->route + W, (size_t)P * W * sizeof(int), BACKEND_D2H);
    for (int i = 0; i < P; i++) {
        const int *cnt = w->h_route + (size_t)i * W;
        int off = 0;
        for (int e = 0; e < first; e++) off += cnt[e];
        for (int e = 0; e < El; e++) {
            x->rcounts[i * El + e] = cnt[first + e];
            x->roff[i * El + e] = off;
            off += cnt[first + e];
        }
    }
}

// alltoall: rows (C wide, be->act) from `in` to `out` over the ep group, in blocks of El =
// E/ep counts per peer: send[j El + e] rows go to rank j, recv[i El + e] come from rank i. To
// the experts: send = x->counts (rows grouped by global expert: rank j's experts are the j-th
// block), recv = x->rcounts ([source][local expert]); back: the two swapped. req: started
// nonblocking (finished by comm_wait), or NULL: blocking.
static void all_to_all(const MoEDispatcher *D, const void *in, void *out, const int *send,
                       const int *recv, CommRequest *req) {
    int P = D->d.ep, El = moe_local_experts(&D->d), C = D->d.C;
    size_t sc[MOE_MAX_EXPERTS], rc[MOE_MAX_EXPERTS];
    for (int i = 0; i < P; i++) {
        sc[i] = rc[i] = 0;
        for (int e = 0; e < El; e++) sc[i] += (size_t)send[i * El + e] * C, rc[i] += (size_t)recv[i * El + e] * C;
    }
    if (req) comm_iall_to_all_v(D->comm, in, sc, out, rc, tp_act_dtype(D->be), req);
    else comm_all_to_all_v(D->comm, in, sc, out, rc, tp_act_dtype(D->be));
}

// Where the rows of chunk k = [i][e] (source rank i, local expert e; x->rcounts[k] rows) come
// from and return to. alltoall: the received rows, [source][local expert] chunks in order;
// allgather: the (P, M) blocks of expert-ordered rows (row roff[k] + j of block i). tok
// (allgather's forward; else NULL): rows come from the gathered tokens (P, n), row i n +
// rank i's perm of the chunk's row.
typedef struct {
    int from[MOE_MAX_EXPERTS], to[MOE_MAX_EXPERTS];
    const int *tok;  // the gathered routing (w->h_route) or NULL
} ChunkMap;

static ChunkMap chunk_map(const MoEDispatcher *D, const MoEActs *x, int tokens) {
    int P = D->d.ep, El = moe_local_experts(&D->d), M = D->d.rows;
    ChunkMap c = {.tok = NULL};
    for (int k = 0, rows = 0; k < P * El; rows += x->rcounts[k++])
        c.from[k] = c.to[k] = is_allgather(D) ? (k / El) * M + x->roff[k] : rows;
    if (is_allgather(D) && tokens) {
        c.tok = D->w->h_route;
        for (int k = 0; k < P * El; k++) c.from[k] = (k / El) * (D->d.E + M) + D->d.E + x->roff[k];
    }
    return c;
}

// The local experts' rows sorted by local expert ([local expert][source rank], each chunk's
// rows in order), so that each local expert runs one GEMM pair on contiguous rows. Fills
// w->sort (backend, 2 R ints): [0, got) the source row of each sorted row (chunk_map's from),
// [R, 2 R) the sorted row of each row it returns to (chunk_map's to; allgather: all P M of
// them, -1 for the rows of other ranks' experts); lc (El) the rows of each local expert.
// Returns the rows got. One host loop and two copies.
static int sort_by_expert(const MoEDispatcher *D, const MoEActs *x, const ChunkMap *c, int *lc) {
    MoEDispatchWork *w = D->w;
    int P = D->d.ep, El = moe_local_experts(&D->d), R = (int)moe_recv_rows(&D->d), n = D->d.n;
    int got = 0, back = is_allgather(D) ? R : 0;  // inverse entries to copy (alltoall: got)
    for (int i = 0; i < back; i++) w->h_sort[R + i] = -1;
    for (int e = 0; e < El; e++) {
        lc[e] = 0;
        for (int i = 0; i < P; i++) {
            int k = i * El + e;
            for (int j = 0; j < x->rcounts[k]; j++, got++, lc[e]++) {
                w->h_sort[got] = c->tok ? i * n + c->tok[c->from[k] + j] : c->from[k] + j;
                w->h_sort[R + c->to[k] + j] = got;
            }
        }
    }
    if (!back) back = got;
    Backend *be = D->be;
    if (got) be->ops->copy(be, w->sort, w->h_sort, (size_t)got * sizeof(int), BACKEND_H2D);
    if (back) be->ops->copy(be, w->sort + R, w->h_sort + R, (size_t)back * sizeof(int), BACKEND_H2D);
    return got;
}

// allgather: the sorted rows `in` (the experts' outputs or their inputs' gradients) put back
// as (P, M, C) blocks of expert-ordered rows (zeros where other ranks' experts are) in tmp,
// and reduce-scattered (summed) over the ep group: out (M, C) this rank's rows, each the one
// rank's that ran its expert.
static void reduce_back(const MoEDispatcher *D, const void *in, void *tmp, void *out) {
    int R = (int)moe_recv_rows(&D->d), C = D->d.C;
    D->be->ops->rows_combine(D->be, tmp, in, D->w->sort + R, NULL, R, 1, C);
    comm_reduce_scatter(D->comm, tmp, out, (size_t)D->d.rows * C, tp_act_dtype(D->be), COMM_SUM);
}

void moe_dispatch_start(const MoEDispatcher *D, MoEActs *x, const void *in, size_t rows) {
    Backend *be = D->be;
    MoEDispatchWork *w = D->w;
    int C = D->d.C;
    if (D->d.ep == 1) {  // the experts, each on its contiguous rows, in expert order
        be->ops->rows_gather(be, x->xp, in, x->perm, NULL, (int)rows, C);  // (rows, C)
    } else if (is_allgather(D)) {  // the group's routing, and its tokens (P n, C) on their way
        gather_routing(D, x, rows);
        comm_iall_gather(D->comm, in, w->xr, (size_t)D->d.n * C, tp_act_dtype(be), &w->req);
    } else {  // rows to the ranks holding their experts (the counts first, blocking)
        be->ops->rows_gather(be, w->deo, in, x->perm, NULL, (int)rows, C);
        exchange_counts(D, x);
        all_to_all(D, w->deo, w->xr, x->counts, x->rcounts, &w->req);
    }
}

void *moe_dispatch_finish(const MoEDispatcher *D, MoEActs *x, int *lc) {
    MoEDispatchWork *w = D->w;
    if (D->d.ep == 1) {
        memcpy(lc, x->counts, (size_t)D->d.E * sizeof(int));
        return x->eo;
    }
    ChunkMap map = chunk_map(D, x, 1);
    int got = sort_by_expert(D, x, &map, lc);
    comm_wait(D->comm, &w->req);  // the rows (or the tokens) have arrived
    if (got) D->be->ops->rows_gather(D->be, x->xp, w->xr, w->sort, NULL, got, D->d.C);  // (got, C)
    return w->xr2;
}

void moe_combine(const MoEDispatcher *D, MoEActs *x, void *out) {
    Backend *be = D->be;
    MoEDispatchWork *w = D->w;
    int C = D->d.C, R = (int)moe_recv_rows(&D->d);
    if (D->d.ep > 1 && is_allgather(D)) {
        reduce_back(D, w->xr2, w->xr, x->eo);
    } else if (D->d.ep > 1) {  // the outputs sorted back (the received order) and home
        size_t got = 0;
        for (int k = 0; k < D->d.E; k++) got += (size_t)x->rcounts[k];
        if (got) be->ops->rows_gather(be, w->xr, w->xr2, w->sort + R, NULL, (int)got, C);
        all_to_all(D, w->xr, x->eo, x->rcounts, x->counts, NULL);
    }
    be->ops->rows_combine(be, out, x->eo, x->slot, x->probs, D->d.n, D->d.K, C);  // out (n, C)
}

void moe_combine_backward_start(const MoEDispatcher *D, const MoEActs *x, const void *dout,
                                float *dprobs) {
    Backend *be = D->be;
    MoEDispatchWork *w = D->w;
    int C = D->d.C;
    // d(expert outputs) and d(weights), both read dout
    be->ops->rows_gather(be, w->deo, dout, x->perm, x->pprobs, (int)expert_rows(&D->d, x), C);
    be->ops->rows_dot(be, dprobs, dout, x->eo, x->slot, D->d.n, D->d.K, C);
    if (D->d.ep == 1) return;
    // d(outputs) to the experts' ranks
    if (is_allgather(D))  // every rank's (M, C) (the tail past its rows is not read)
        comm_iall_gather(D->comm, w->deo, w->xr, (size_t)D->d.rows * C, tp_act_dtype(be), &w->req);
    else
        all_to_all(D, w->deo, w->xr, x->counts, x->rcounts, &w->req);
}

void moe_combine_backward_finish(const MoEDispatcher *D, const MoEActs *x, int *lc, void **dy,
                                 void **dxp) {
    MoEDispatchWork *w = D->w;
    if (D->d.ep == 1) {
        memcpy(lc, x->counts, (size_t)D->d.E * sizeof(int));
        *dy = w->deo, *dxp = w->dxp;
        return;
    }
    ChunkMap map = chunk_map(D, x, 0);  // sorted by local expert
    int got = sort_by_expert(D, x, &map, lc);
    comm_wait(D->comm, &w->req);  // d(outputs) have arrived
    if (got) D->be->ops->rows_gather(D->be, w->xr2, w->xr, w->sort, NULL, got, D->d.C);
    *dy = w->xr2, *dxp = w->xr;
}

void moe_dispatch_backward(const MoEDispatcher *D, const MoEActs *x, void *dx) {
    Backend *be = D->be;
    MoEDispatchWork *w = D->w;
    int C = D->d.C, R = (int)moe_recv_rows(&D->d);
    if (D->d.ep > 1 && is_allgather(D)) {
        reduce_back(D, w->xr, w->xr2, w->dxp);
    } else if (D->d.ep > 1) {  // d(inputs) sorted back and home
        size_t got = 0;
        for (int k = 0; k < D->d.E; k++) got += (size_t)x->rcounts[k];
        if (got) be->ops->rows_gather(be, w->xr2, w->xr, w->sort + R, NULL, (int)got, C);
        all_to_all(D, w->xr2, w->dxp, x->rcounts, x->counts, NULL);
    }
    be->ops->rows_combine(be, dx, w->dxp, x->slot, NULL, D->d.n, D->d.K, C);  // un-permute
}

// The calls made above, per forward or backward (keep them in step).
int moe_dispatcher_calls(const MoEDims *d, int backward, size_t sent_rows,
                         CommCall calls[MOE_DISPATCH_MAX_CALLS]) {
    size_t E = (size_t)d->E, M = (size_t)d->rows, C = (size_t)d->C;
    if (d->dispatcher == MOE_DISPATCH_ALLGATHER) {
        if (backward) {  // d(outputs) gathered, d(inputs) reduce-scattered back
            calls[0] = (CommCall){COMM_ALL_GATHER, M * C, 1, 0};
            calls[1] = (CommCall){COMM_REDUCE_SCATTER, M * C, 1, 0};
            return 2;
        }
        calls[0] = (CommCall){COMM_ALL_GATHER, E + M, 1, 1};          // gather_routing (int32)
        calls[1] = (CommCall){COMM_ALL_GATHER, (size_t)d->n * C, 1, 0};  // the tokens
        calls[2] = (CommCall){COMM_REDUCE_SCATTER, M * C, 1, 0};         // reduce_back
        return 3;
    }
    // alltoall: the rows there and their outputs back; backward: their gradients, the same ways
    calls[0] = (CommCall){COMM_ALL_TO_ALL, sent_rows * C, 2, 0};
    if (backward) return 1;
    size_t El = (size_t)moe_local_experts(d);
    calls[1] = (CommCall){COMM_ALL_TO_ALL, (size_t)(d->ep - 1) * El, 1, 1};  // exchange_counts
    return 2;
}
