// model/gpt_moe.h: mixture-of-experts layers (Megatron-Core's MoELayer), the MLP of the
// layers --moe-layer-freq names when --num-experts E > 0.
//
// A router (an (E, C) linear, scores in fp32) picks K experts per token (moe_router_forward:
// softmax or sigmoid, ties to the lowest index); the token rows are permuted into expert
// order (rows_gather), each expert's MLP (the model's activation, its own F) runs on its
// contiguous rows, one GEMM pair per expert in expert order, and the outputs are combined
// with the routing weights (rows_combine). Dropless: every (token, choice) gets its row.
//
// Layout: the experts are replicated over tensor parallelism and each rank routes the rows it
// holds: all of the micro-batch's, or its N/tp rows with sequence parallelism (their
// gradients then summed over tp like the norms'), this rank's positions with context
// parallelism. Routing is per token, so it does not depend on the layout. With expert
// parallelism (ep > 1) a rank holds E/ep experts; the expert-ordered rows go to the ranks
// holding their experts with an all-to-all over the ep group (counts exchanged first), the
// received [source rank][local expert] chunks are sorted by local expert, each local expert
// runs one GEMM pair on its contiguous rows, and the outputs are sorted back and return the
// same way (Megatron's alltoall dispatcher). The load-balancing loss uses the token counts of
// the whole micro-batch (summed
// over the sequence-parallel and context-parallel ranks).
//
// The routing is built on the host: the chosen experts come back from the backend, the
// permutation is made in (expert, token, choice) order and sent back. One sync per layer,
// as Megatron's dispatcher has.
#pragma once
#include "gpt.h"

// The host side of a stage's MoE layers (GPT.moe; NULL without experts).
struct GPTMoE {
    int *h_idx, *h_perm, *h_slot;  // (n K) host staging
    float *h_probs, *h_pprobs;     // (n K)
    float *h_coef;                 // (groups E)
    void *h_rank;                  // (n K) routing's sort buffer (gpt_moe.c)
    int *row_group;                // (n) backend: the sequence of each local row (seq_aux_loss)
    int *h_row_group;              // (n) host: the same
    float *loss;                   // (2) backend: moe_router_loss's output
    float *dlogits;                // (n, E) backward workspace (shared by the layers)
    void *dlogits_act;             // (n, E) be->act
    float *dprobs;                 // (n K)
    void *deo, *dxp;               // (M, C) each
    void *dfch, *dact;             // (R, F2e), (R, Fe); R = gpt_moe_recv_rows
    void *xr, *xr2;                // ep > 1: (R, C) each, rows as received or sorted by local
                                   // expert (the experts' outputs, their gradients and
                                   // inputs'); else NULL
    int *cnt;                      // ep > 1: (2 E) backend: the counts' all-to-all
    int *sort, *h_sort;            // ep > 1: (2 R) backend / host: the received rows' sort by
                                   // local expert and its inverse (gpt_moe.c); else NULL
    void *dx;                      // (n, C) the router's input gradient
    int *counts;                   // host (n_slots, n_layers, 2 E): GPTMoEActs.counts, rcounts
    double *lb_loss, *z_loss;      // (n_layers) host: this step's sums over micro-batches
    double *tokens;                // (n_layers, E) host: this step's tokens per expert
    double *dropped;               // (n_layers) host: this step's dropped (token, choice)s
    float *bias;                   // (n_layers, E) backend: the layers' expert bias
                                   // (--moe-router-enable-expert-bias; else NULL)
    size_t workspace_bytes;        // backend bytes of the buffers above that serve the layers'
                                   // forward and backward (not bias): the memory table's
    float aux_scale;               // the losses' gradient weight in the current backward
                                   // (gpt_backward: the loss gradient's scale x the micro-
                                   // batch's tokens, so a micro-batch's loss weighs as its
                                   // mean language-model loss does)
};

enum { GPT_MOE_MAX_EXPERTS = 256 };  // the router ops' bound

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

// Aux-loss-free balancing (gpt_moe_bias.c; Megatron's get_updated_expert_bias): one
// layer's bias (E) += rate x sign(mean - tokens[e]), tokens (E) the step's tokens routed
// to each expert over the whole global batch (their mean over the experts: sign 0 at it).
// In fp32, so every rank holding the same table gets the same bits. Pure.
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
