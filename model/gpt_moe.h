// model/gpt_moe.h: mixture-of-experts layers (Megatron-Core's MoELayer) in a GPT stage: the
// MLP of the layers --moe-layer-freq names when --num-experts E > 0, composed of the router
// (layers/moe_router.h), the token dispatcher (layers/moe_dispatcher.h) and the experts
// (layers/moe_experts.h), with the stage's workspace, the per-step statistics and the
// expert bias; the MoE config (gpt_moe_config.c) and flags (gpt_moe_flags.c).
//
// Layout: the experts are replicated over tensor parallelism and each rank routes the rows it
// holds: all of the micro-batch's, or its N/tp rows with sequence parallelism (their
// gradients then summed over tp like the norms'), this rank's positions with context
// parallelism. Routing is per token, so it does not depend on the layout. With expert
// parallelism (ep > 1) a rank holds E/ep experts and the dispatcher moves the rows to them
// over the ep group. The load-balancing loss uses the token counts of the whole micro-batch
// (summed over the sequence-parallel and context-parallel ranks).
#pragma once
#include "gpt.h"
#include "layers/moe_router.h"      // defines: MoERouterWork
#include "layers/moe_dispatcher.h"  // defines: MoEDispatchWork
#include "layers/moe_experts.h"     // defines: MoEExpertsWork

// The MoE layers of a stage (GPT.moe; NULL without experts): the three parts' workspaces,
// shared by the layers, and the host statistics.
struct GPTMoE {
    MoERouterWork router;
    MoEDispatchWork disp;
    MoEExpertsWork experts;
    int *counts;                   // host (n_slots, n_layers, 3 E): MoEActs.counts, rcounts, roff
    double *lb_loss, *z_loss;      // (n_layers) host: this step's sums over micro-batches
    double *tokens;                // (n_layers, E) host: this step's tokens per expert
    double *dropped;               // (n_layers) host: this step's dropped (token, choice)s
    float *bias;                   // (n_layers, E) backend: the layers' expert bias
                                   // (--moe-router-enable-expert-bias; else NULL)
    size_t workspace_bytes;        // backend bytes of the three workspaces (not bias): the
                                   // memory table's
    float aux_scale;               // the losses' gradient weight in the current backward
                                   // (gpt_backward: the loss gradient's scale x the micro-
                                   // batch's tokens, so a micro-batch's loss weighs as its
                                   // mean language-model loss does)
};

enum { GPT_MOE_MAX_EXPERTS = MOE_MAX_EXPERTS };  // the router ops' bound

// 1 if global layer `layer` is a mixture-of-experts layer (no experts: 0). Call after
// gpt_moe_check. Pure; O(the flag's length), not O(num_layers).
int gpt_moe_layer(const GPTConfig *c, int layer);
// Each expert's F: moe_ffn_hidden_size, or ffn_hidden_size when 0. Pure.
int gpt_moe_ffn(const GPTConfig *c);
// --moe-expert-capacity-factor: the rows an expert takes of n tokens' n K choices,
// ceil(n K / E x factor) (Megatron's get_capacity); 0 without a factor (dropless). Pure.
int gpt_moe_capacity(const GPTConfig *c, int n);
// Expert-ordered rows the buffers hold: n K, or E x capacity when padding needs more. Pure.
size_t gpt_moe_rows(const GPT *m);
// Rows the local experts may receive: gpt_moe_rows times ep (every rank of the ep group may
// send all its rows here). Pure.
size_t gpt_moe_recv_rows(const GPT *m);
// Checks the MoE fields (E > 0 only): 1 <= K <= E, E <= 256, --moe-layer-freq (an int >= 1,
// or a list of 0/1 with one entry per layer that names some layer). Returns 0, or -1 with
// one line naming the numbers in err.
int gpt_moe_check(const GPTConfig *c, char *err, size_t errlen);

// Allocates m->moe (host staging, backward workspace, per-layer statistics) when the stage
// holds an MoE layer; m's sizes, slots and table must be set. Never fails (aborts).
void gpt_moe_create(GPT *m);
// Frees m->moe. NULL is fine.
void gpt_moe_destroy(GPT *m);
// Bytes of the backend buffers gpt_moe_create allocates for the layers' forward and backward
// (m->moe->workspace_bytes; 0 when the stage holds no MoE layer), from m's sizes only: what
// megac plan counts. Pure.
size_t gpt_moe_workspace_bytes(const GPT *m);
// Zeroes the per-step statistics (lb_loss, z_loss, tokens). Never fails.
void gpt_moe_stats_reset(GPT *m);

// Aux-loss-free balancing (gpt_moe_bias.c): one layer's bias (E) moved by its step's tokens
// per expert (E): moe_router_bias_step. Pure.
void gpt_moe_bias_step(float *bias, const double *tokens, int E, double rate);
// Copies the stage's layers' rows of all (num_layers, E) host, the whole model's expert
// bias, into the router's (no-op without --moe-router-enable-expert-bias). Never fails.
void gpt_moe_set_bias(GPT *m, const float *all);

// Forward of the MoE layer (local layer l) for the n rows of a->ln2 into out (n, C) (the
// routed experts' output, before dropout and the residual add). Records the routing in a->moe.
void gpt_moe_forward(GPT *m, const GPTBlockW *w, GPTLayerActs *a, void *out, int n, int l);
// Backward: dout (n, C) the gradient of out (read before dln is written; they may alias);
// dln (n, C) OVERWRITTEN with d(ln2); expert and router gradients accumulate into g. The
// load-balancing and z losses of the micro-batch (token counts summed over `sum` (the
// sequence-parallel tp group, or NULL) and the context-parallel group) join the gradient
// with weight aux_scale and are added to the step's statistics of local layer l.
void gpt_moe_backward(GPT *m, Comm *sum, const GPTBlockW *w, GPTBlockW *g,
                      const GPTLayerActs *a, const void *dout, void *dln, int n, int l,
                      float aux_scale);

// gpt_moe_forward in two halves, so that other work (the shared expert) overlaps the rows'
// travel to the experts' ranks (the allgather dispatcher's all-gather, nonblocking): the
// router and the dispatch started; a->ln2 is read until the finish. Collective (ep > 1).
void gpt_moe_forward_start(GPT *m, const GPTBlockW *w, GPTLayerActs *a, int n, int l);
// The dispatch finished, the experts, the combine into out (n, C).
void gpt_moe_forward_finish(GPT *m, const GPTBlockW *w, GPTLayerActs *a, void *out, int n);
// gpt_moe_backward in two halves: the combine's backward from dout (read only here), its
// d(expert outputs) on their way (allgather: nonblocking) ...
void gpt_moe_backward_start(GPT *m, const GPTLayerActs *a, const void *dout, int n);
// ... then the experts', the dispatch's and the router's backward: dln (n, C) OVERWRITTEN.
void gpt_moe_backward_finish(GPT *m, Comm *sum, const GPTBlockW *w, GPTBlockW *g,
                             const GPTLayerActs *a, void *dln, int n, int l, float aux_scale);
