// model/gpt_block.h: the parts of a transformer block that differ between GPT-2 and a
// Llama-style model (internal to model/): the normalization (LayerNorm or RMSNorm), the QKV
// projection (with rotary positions and grouped-query heads remapped into attention's
// layout) and the MLP (GELU or SwiGLU). gpt.c's block forward/backward call these, so the
// block is written once; the GPT-2 path makes exactly the calls it always made.
#pragma once
#include "gpt.h"
#include "layers/tp_linear.h"

// out (rows, C) = LN(x) or RMSNorm(x) (mean unused then); mean, rstd (rows) saved. Never fails.
void gpt_norm_forward(const GPT *m, void *out, float *mean, float *rstd, const void *x,
                      const void *w, const void *b, int rows);
// res (rows, C) = a + b, then ln = norm(res), as gpt_norm_forward. Never fails.
void gpt_residual_norm_forward(const GPT *m, void *res, void *ln, float *mean, float *rstd,
                               const void *a, const void *b, const void *w, const void *bias,
                               int rows);
// dinp (rows, C) += d norm; dw, db += (db unused with RMSNorm). Never fails.
void gpt_norm_backward(const GPT *m, void *dinp, float *dw, float *db, const void *dout,
                       const void *x, const void *w, const float *mean, const float *rstd, int rows);

// a->qkv (N, 3*C/tp) in attention's layout from a->ln1 for the rows r (N = r->B * r->T):
// the column-parallel QKV linear, then (rope or grouped-query) rope_gqa_forward at the rows'
// positions from the (N, QKV_tp) output. Never fails.
void gpt_qkv_forward(GPT *m, TPGroup *tp, const GPTBlockW *w, GPTLayerActs *a, const GPTRows *r);
// From m->s.dqkv (N, 3*C/tp) of the rows r: the QKV weight/bias gradients, and dln = d(ln1)
// (f backward).
void gpt_qkv_backward(GPT *m, TPGroup *tp, const GPTBlockW *w, GPTBlockW *g,
                      const GPTLayerActs *a, void *dln, const GPTRows *r);

// gpt_dropout.c. The dropout of `site` (DROPOUT_SITE_*) at global layer `layer` (-1: the
// embeddings) for the rows r (their global samples and positions), filled into *d: d, or
// NULL when that dropout is off (not training, or p = 0). Never fails.
const BackendDropout *gpt_dropout_desc(const GPT *m, const GPTRows *r, int site, int layer,
                                       BackendDropout *d);
// x (the residual stream's rows of r here: B*T, or B*T/tp with sequence parallelism, by C)
// dropped in place at `site`, or untouched when that dropout is off; the backward is the
// same call on the gradient. Never fails.
void gpt_hidden_dropout(const GPT *m, void *x, const GPTRows *r, int site, int layer);
// --eod-mask-loss (gpt_loss_mask.c): the slot's token weights from its targets (before the
// cross-entropy forward); its per-token losses weighed by them (after it); the loss gradient
// per token from them (the fused classifier's, or the backward's).
void gpt_loss_mask_weights(GPT *m, int slot, const int *targets /* (N) host */);
void gpt_loss_mask_forward(GPT *m, int slot);
void gpt_loss_mask_dscale(GPT *m, int slot, float loss_scale);
// --reset-position-ids / --reset-attention-mask (gpt_documents.c): the slot's document
// positions and starts from its tokens (B, T) (host; NULL is fatal when the flags are on).
void gpt_documents_forward(GPT *m, int slot, const int *tokens);

// a->res3 (Ns, C) = MLP(a->ln2) (not yet + res2) on N rows (m->N in training): fc (column),
// GELU or SwiGLU, proj (row); in a mixture-of-experts layer (w->routerw) the MoE layer
// (gpt_moe.h) on the Ns rows here, plus its shared expert (w->sfcw: a dense MLP of hidden
// size moe_shared_ffn, tensor-parallel like the one above), run while the routed rows are
// dispatched (gpt_moe_forward_start / _finish). l: the local layer.
void gpt_mlp_forward(GPT *m, TPGroup *tp, const GPTBlockW *w, GPTLayerActs *a, int N, int l);
// From dres = d(res3) (Ns, C): the MLP's weight gradients and dln = d(ln2). l: the local
// layer (the MoE layer's statistics).
void gpt_mlp_backward(GPT *m, TPGroup *tp, const GPTBlockW *w, GPTBlockW *g,
                      const GPTLayerActs *a, const void *dres, void *dln, int l);

// The calls (comm.h's CommCall) over the tensor-parallel group (tp ranks, sequence-parallel
// or not) of one forward (backward 0) or backward (1) of a block's linears on N rows of C:
// the attention's QKV column and projection row (gpt_qkv_*, gpt.c), a dense MLP's fc column
// and proj row (gpt_mlp_*); an MoE layer's routed MLP (moe 1) moves nothing over tp (its
// experts' rows are routed here). Returns how many (<= GPT_BLOCK_MAX_CALLS). `megac plan`
// counts this list; a recomputed block runs its forward's again. Pure.
enum { GPT_BLOCK_MAX_CALLS = 4 * TP_MAX_CALLS };
int gpt_block_tp_calls(int moe, int sp, int backward, int tp, size_t N, size_t C, CommCall *calls);
