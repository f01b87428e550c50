// layers/moe_dispatcher.h: the token dispatcher of a mixture-of-experts layer (Megatron-Core's
// MoEAlltoAllTokenDispatcher and MoEAllGatherTokenDispatcher, one mechanism with the way
// chosen by MoEDims.dispatcher): the routed rows permuted into expert order (the router's
// map, layers/moe_router.h), brought to the ranks holding their experts, sorted by local
// expert so that each local expert runs on contiguous rows (layers/moe_experts.h); then the
// way back and the combine: each token's output is the sum of its K experts' rows times their
// weights, summed in k order.
//
// At EP 1 the rows stay here: the expert-ordered rows are the experts' input. At EP > 1 (E/ep
// experts per rank; expert-ordered rows are grouped by the rank holding their experts):
//   alltoall: the counts are exchanged first (an all-to-all of E/ep ints per pair), the rows
//     travel by one all-to-all over the ep group, and the outputs return by the reverse one.
//     The backward: the same two all-to-alls for the gradients of the outputs and inputs.
//   allgather: every rank gathers the group's routing (counts and permutation, E + M ints per
//     rank) and tokens ((n, C) per rank) and takes the rows of its own experts out of them;
//     the outputs return, still unweighted expert rows, by a reduce-scatter (sum) of (ep, M,
//     C) blocks in which each rank filled the rows of its experts (zeros elsewhere), so each
//     row's sum holds one term. The backward: an all-gather of d(expert outputs) (M rows per
//     rank), a reduce-scatter of d(expert inputs) the same way.
// Either way the local experts see the received [source rank][local expert] chunks sorted
// into [local expert][source rank] order (Megatron's sort_chunks_by_idxs), and each token's
// combine is the same sum as at EP 1: the two dispatchers give the same bits.
#pragma once
#include "layers/moe.h"
#include "comm/comm.h"

// The dispatcher's workspace: backend buffers (moe_dispatcher_buffers counts them) and the
// host sort.
typedef struct {
    void *deo, *dxp;  // (M, C) each: ep > 1 the expert-ordered rows to send; the backward's
                      // d(expert outputs) and d(expert inputs) in expert order
    void *xr, *xr2;   // ep > 1: (R, C) each, rows as received or sorted by local expert
                      // (the experts' outputs, their gradients and inputs'); else NULL
    int *cnt;         // ep > 1: (2 E) backend: the counts' all-to-all; else NULL
    int *sort;        // ep > 1: (2 R) backend: the received rows' sort by local expert and
                      // its inverse; else NULL
    int *h_sort;      // ep > 1: (2 R) host: the same; else NULL
    int *route;       // ep > 1 allgather: (ep + 1, E + M) backend: this rank's [counts |
                      // perm], then the group's gathered; else NULL
    int *h_route;     // ep > 1 allgather: (ep, E + M) host: the group's; else NULL
    CommRequest req;  // the rows' all-gather (allgather) or all-to-all (alltoall) in flight
                      // between a *_start and its *_finish
} MoEDispatchWork;

typedef struct {
    MoEDims d;
    Backend *be;
    Comm *comm;  // the expert-parallel group (NULL at ep 1)
    MoEDispatchWork *w;
} MoEDispatcher;

// The dispatcher's buffers for dims d: backend bytes counted in a (allocated, and the host
// sort too, when a->be is set). Never fails (aborts).
void moe_dispatcher_buffers(MoEDispatchWork *w, const MoEDims *d, MoEAlloc *a);
// Frees what moe_dispatcher_buffers allocated. Never fails.
void moe_dispatcher_free(MoEDispatchWork *w, Backend *be);

// Dispatch, started: the `rows` expert-ordered rows of in (n, C) (x->perm, x->counts from the
// router) on their way to the local experts; sets x->rcounts (and x->roff) at ep > 1. in is
// read until moe_dispatch_finish; work between the two overlaps the rows' travel (allgather:
// the tokens' all-gather; alltoall: the rows' all-to-all, after the counts' blocking one).
// Collective over the ep group (ep > 1).
void moe_dispatch_start(const MoEDispatcher *D, MoEActs *x, const void *in, size_t rows);
// Dispatch, finished: the local experts' input x->xp (R, C), lc[e] contiguous rows for local
// expert e. Returns where the experts write their output rows (R, C) for moe_combine.
void *moe_dispatch_finish(const MoEDispatcher *D, MoEActs *x, int *lc);
// Combine: the experts' output rows (moe_dispatch's buffer) back into x->eo (M, C) in expert
// order, then out (n, C) = each token's rows times their weights. Collective (ep > 1).
void moe_combine(const MoEDispatcher *D, MoEActs *x, void *out);

// Backward of the combine, started: from dout (n, C) (read only here; it may alias
// moe_dispatch_backward's dx), dprobs (n K) fp32 written, d(expert outputs) on their way to
// the experts' ranks (their all-gather or all-to-all in flight until the finish).
// Collective (ep > 1).
void moe_combine_backward_start(const MoEDispatcher *D, const MoEActs *x, const void *dout,
                                float *dprobs);
// Backward of the combine, finished: d(expert outputs) in *dy (R, C) in the local experts'
// order (lc as moe_dispatch_finish's); *dxp is where the experts write d(their inputs).
void moe_combine_backward_finish(const MoEDispatcher *D, const MoEActs *x, int *lc, void **dy,
                                 void **dxp);
// Backward of the dispatch: d(expert inputs) (*dxp of moe_combine_backward) back to their
// ranks and un-permuted: dx (n, C) OVERWRITTEN with the gradient of moe_dispatch's in.
// Collective (ep > 1).
void moe_dispatch_backward(const MoEDispatcher *D, const MoEActs *x, void *dx);

// The calls (comm.h's CommCall) over the ep group (ep > 1) of one forward (backward 0:
// moe_dispatch_start/_finish and moe_combine) or one backward (1: moe_combine_backward_*
// and moe_dispatch_backward) of the dispatcher of d; returns how many (<=
// MOE_DISPATCH_MAX_CALLS). allgather: exact (the routing as E + M int32, the tokens, the
// (M, C) blocks). alltoall: the counts' all-to-all (E/ep int32 per peer), then the rows'
// all-to-alls of sent_rows rows to the other ranks each, which depend on the routing: the
// caller's figure (exact with a padded capacity: (ep - 1) E/ep x the capacity). The list of the functions
// above, kept beside them in moe_dispatcher.c (`megac plan` counts it). Pure.
enum { MOE_DISPATCH_MAX_CALLS = 3 };
int moe_dispatcher_calls(const MoEDims *d, int backward, size_t sent_rows,
                         CommCall calls[MOE_DISPATCH_MAX_CALLS]);
