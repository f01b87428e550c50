// layers/moe.h: what the three parts of a mixture-of-experts layer share (Megatron-Core's
// MoELayer: router -> token dispatcher -> experts -> dispatcher's combine): the layer's
// sizes, the activations of one micro-batch in flight and the workspace allocator.
//
//   layers/moe_router.h      scores, top-k, the capacity and the routing map, aux/z losses,
//                            the expert bias
//   layers/moe_dispatcher.h  permute into expert order, the rows to the ranks holding their
//                            experts (alltoall or allgather), sorted by local expert; the
//                            combine back
//   layers/moe_experts.h     one GEMM pair per local expert on its contiguous rows
//
// The model composes them (model/gpt_moe.c) and carves MoEActs per micro-batch slot; each
// part's workspace comes from its *_buffers function, run once to count the bytes (megac
// plan) and once to allocate them, through MoEAlloc.
#pragma once
#include "backend/backend.h"

enum { MOE_MAX_EXPERTS = 256 };  // the router ops' bound

// --moe-token-dispatcher-type: how the rows reach the experts' ranks at EP > 1
// (layers/moe_dispatcher.h; at EP 1 both keep every row on its rank). 0 is alltoall, so a
// zeroed config keeps the all-to-all; the flag's default is allgather (Megatron's).
typedef enum { MOE_DISPATCH_ALLTOALL, MOE_DISPATCH_ALLGATHER } MoEDispatcherType;

// The sizes of one MoE layer on this rank.
typedef struct {
    int E, K;            // experts, choices per token
    int C, Fe;           // hidden size, each expert's F
    BackendAct act;      // the experts' activation (gated: fc is 2 Fe wide)
    int n;               // rows routed here (the micro-batch's, N/tp with sequence parallelism)
    int rows;            // M: expert-ordered rows a rank holds (n K, or E x padded capacity)
    int ep, ep_rank;     // the expert-parallel group's size and this rank's place (1, 0: none)
    MoEDispatcherType dispatcher;
    int grouped;         // --moe-grouped-gemm: the experts' products by the grouped entries
} MoEDims;

// Local experts: E / ep. Pure.
static inline int moe_local_experts(const MoEDims *d) { return d->E / d->ep; }
// R: rows the local experts may receive, rows x ep (every rank of the group may send all its
// rows here). Pure.
static inline size_t moe_recv_rows(const MoEDims *d) { return (size_t)d->rows * (size_t)d->ep; }

// Routing and expert activations of one MoE layer for one micro-batch in flight (the model
// carves them per slot; all NULL in a dense layer). n rows routed here, M = d.rows.
typedef struct {
    float *logits;         // (n, E) router logits, fp32
    int *idx;              // (n, K) chosen experts
    float *probs;          // (n, K) their combine weights
    int *perm;             // (M) the token row of each expert-ordered row
    int *slot;             // (n, K) the expert-ordered row of each (token, choice); -1 dropped
    float *pprobs;         // (M) probs in expert order (the combine's backward)
    float *coef;           // (groups, E) the aux loss's coefficients (moe_router_loss)
    void *xp;              // (R, C) the local experts' input rows in local-expert order (R = M
                           // at EP 1; else moe_recv_rows)
    void *fch, *fch_act;   // (R, F2e) expert fc outputs; (R, Fe) after the activation
    void *eo;              // (M, C) expert outputs, in expert order (back from their ranks)
    int *counts;           // host (E): rows routed to each expert here
    int *rcounts;          // host (E): ep > 1, rows received: [source ep rank][local expert]
    int *roff;             // host (E): ep > 1, allgather: where chunk [source][local expert]
                           // starts among the source's expert-ordered rows
    int dropped;           // (token, choice)s dropped by the capacity (host)
} MoEActs;

// The workspace allocator of the three parts: backend bytes counted in `bytes`, allocated
// when be is not NULL (be NULL: counting only, host buffers not allocated either).
typedef struct {
    Backend *be;
    size_t act;    // bytes of an activation element (be->act's size)
    size_t bytes;  // backend bytes so far
} MoEAlloc;

// `bytes` of backend memory (counted; NULL when only counting). Never fails (aborts).
static inline void *moe_alloc(MoEAlloc *a, size_t bytes) {
    a->bytes += bytes;
    return a->be ? a->be->ops->alloc(a->be, bytes) : NULL;
}

// Element i of a be->act buffer p. Pure.
static inline void *moe_at(const Backend *be, const void *p, size_t i) {
    return (char *)p + i * backend_dtype_size(be->act);
}
