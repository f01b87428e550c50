// layers/moe_router.h: the router of a mixture-of-experts layer (Megatron-Core's TopKRouter):
// logits (n, E) = x Wr^T in fp32, the top-K choice and its combine weights (softmax or
// sigmoid, ties to the lowest index; --moe-router-enable-expert-bias adds the expert bias to
// the choice only), the capacity (--moe-expert-capacity-factor: drop by weight or position,
// padding) and the routing map: every kept (token, choice) gets a row in expert order
// (expert, token, choice). The map is built on the host: the choice comes back from the
// backend and the permutation goes back, one sync per layer, as Megatron's dispatcher has.
// The backward: through the weights, plus the load-balancing loss (aux_loss over the
// micro-batch or seq_aux_loss per sequence, the token counts summed over the ranks sharing
// the micro-batch's rows) and the z loss, into dWr and d(x).
#pragma once
#include "layers/moe.h"
#include "comm/comm.h"

// The router's workspace: backend buffers (moe_router_buffers counts them) and host staging.
typedef struct {
    int *h_idx, *h_slot;         // (n K) host staging
    float *h_probs;              // (n K)
    int *h_perm;                 // (M)
    float *h_pprobs;             // (M)
    float *h_coef;               // (groups E)
    void *h_rank;                // (n K) the routing's sort buffer (moe_router.c)
    int *row_group;              // (n) backend: the sequence of each local row (seq_aux_loss)
    int *h_row_group;            // (n) host: the same, set by the caller
    float *loss;                 // (2) backend: moe_router_loss's output
    float *dlogits;              // (n, E) fp32 backward workspace
    void *dlogits_act;           // (n, E) be->act (also the forward's logits before the cast)
    float *dprobs;               // (n K) the combine weights' gradient (moe_combine_backward)
    void *dx;                    // (n, C) the router's input gradient
} MoERouterWork;

// One layer's router on explicit inputs.
typedef struct {
    MoEDims d;
    BackendMoERouter r;          // E, K, score function, scaling; this layer's bias (or NULL)
    int cap;                     // each expert's capacity of the n K choices (0: dropless)
    int drop_position;           // drop the latest (else the lowest weights) beyond cap
    int pad_capacity;            // every expert runs exactly cap rows (padding weighs 0)
    int groups;                  // load-balancing groups: 1 (aux_loss) or B (seq_aux_loss)
    double lb_k;                 // the aux loss's coefficient per token count (0: none)
    float z_coef;                // the z loss's coefficient over the micro-batch's tokens
    Backend *be;
    MoERouterWork *w;
} MoERouter;

// The router's buffers for dims d and `groups` load-balancing groups: backend bytes counted
// in a (allocated, and the host staging too, when a->be is set). Never fails (aborts).
void moe_router_buffers(MoERouterWork *w, const MoEDims *d, int groups, MoEAlloc *a);
// Frees what moe_router_buffers allocated (be: the allocating backend). Never fails.
void moe_router_free(MoERouterWork *w, Backend *be);

// The choice and routing map of the n rows of x (n, C) with router weight Wr (E, C): fills
// x->logits, idx, probs, perm, slot, pprobs, the host counts (rows per expert) and dropped.
// Returns the expert-ordered rows (sum of the counts).
size_t moe_router_forward(const MoERouter *R, MoEActs *x, const void *in, const void *Wr);

// Backward: d(logits) through the combine weights (R->w->dprobs, written by the combine's
// backward) plus the losses (counts summed over `sum` and `cp`, either may be NULL), with
// weight aux_scale; dWr (E, C) += , dx (n, C) += the router's input gradient; tokens (E) +=
// the micro-batch's tokens per expert; loss[0], loss[1] = its aux and z losses.
void moe_router_backward(const MoERouter *R, Comm *sum, Comm *cp, const MoEActs *x,
                         const void *in, const void *Wr, float *dWr, void *dx, float aux_scale,
                         double *tokens, float loss[2]);
// The calls (comm.h's CommCall, fp32) one moe_router_backward of G token-count groups of E
// experts makes over each group it sums across (`sum`, `cp`): the counts, then the two
// losses; returns how many (<= MOE_ROUTER_MAX_CALLS). The forward makes none. The list of
// moe_router_backward's calls, kept beside them in moe_router.c. Pure.
enum { MOE_ROUTER_MAX_CALLS = 2 };
int moe_router_calls(int G, int E, CommCall calls[MOE_ROUTER_MAX_CALLS]);

// Aux-loss-free balancing (DeepSeek-V3; Megatron's get_updated_expert_bias): bias (E) +=
// rate x sign(mean - tokens[e]), tokens (E) the step's tokens routed to each expert over the
// whole global batch (their mean over the experts: sign 0 at it). In fp32, so every rank
// holding the same table gets the same bits. Pure.
void moe_router_bias_step(float *bias, const double *tokens, int E, double rate);
