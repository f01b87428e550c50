// model/gpt.c: forward and backward of a GPT stage, written once for every layout.
//
// Block (pre-LayerNorm GPT-2), with the tensor-parallel split of each linear:
//   ln1 = LN(x); qkv = ln1 Wqkv^T (column) ; y = attention(qkv) on local heads ;
//   res2 = x + y Wproj^T (row, all-reduce) ; ln2 = LN(res2) ; h = ln2 Wfc^T (column) ;
//   res3 = res2 + gelu(h) Wfcproj^T (row, all-reduce)
// Last stage: lnf = LN(x); logits = lnf wte^T (column over the vocabulary); vocab-parallel
// cross-entropy (in a training forward with d(logits) written over the logits in the same
// pass as the loss: the fused classifier, at TP 1 the row statistics in that pass too; the
// backward starts from them). Llama-style (gpt_block.c): RMSNorm for LN, rotary positions
// and grouped-query heads between the QKV linear and attention, SwiGLU for GELU, no biases.
#include "gpt.h"
#include "core/check.h"
#include "gpt_block.h"  // defines: the norm, QKV and MLP of GPT-2 or Llama-style blocks
#include "gpt_moe.h"    // defines: struct GPTMoE
#include "gpt_cp.h"     // defines: gpt_cp_rows, gpt_cp_attention (layers/cp_attention.h)
#include "layers/tp_linear.h"

#include <stdlib.h>

void *gpt_stage_input(GPT *m, int slot) { return m->slots[slot].x0; }

const void *gpt_stage_output(GPT *m, int slot) {
    GPTActs *a = &m->slots[slot];
    return m->n_layers ? a->layers[m->n_layers - 1].res3 : a->x0;
}

const void *gpt_stage_input_grad(GPT *m) { return m->s.dres; }

size_t gpt_stage_io_numel(const GPT *m) { return (size_t)m->N_sp * m->cfg.hidden_size; }

// The tensor-parallel group as the layers see it, with the model's SP workspace.
static TPGroup tp_group(GPT *m, Comm *tp) {
    TPGroup g = {tp, m->sp, m->s.sp_gather, m->s.sp_full};
    return g;
}

// y (N, C/tp) = causal attention of the local heads of qkv (N, 3*C/tp) for the rows r:
// materialised (att saved) or fused (--use-flash-attn: lse saved, memory linear in T); d:
// attention dropout (NULL: none), whose masks the backward regenerates. With r->pos0 > 0 (a
// decoding step) a->qkv is row pos0 of the layer's qkv, whose rows before it hold the keys
// and values of the positions before (the cache).
static void attention_forward(GPT *m, const GPTLayerActs *a, const GPTRows *r,
                              const BackendDropout *d) {
    Backend *be = m->be;
    int hs = m->hs;
    size_t row = 3 * (size_t)m->A_tp * backend_dtype_size(be->act);  // bytes of a qkv row
    BackendAttnWindow cache = {r->pos0, 0, r->pos0 + r->T, (const char *)a->qkv - r->pos0 * row,
                               0, NULL, 0, NULL};
    BackendAttnWindow docs = {0, 0, r->T, NULL, 0, NULL, 0, r->qstart};  // --reset-attention-mask
    const BackendAttnWindow *w = r->pos0 ? &cache : r->qstart ? &docs : NULL;
    if (m->cp > 1) {  // this rank's two chunks against the whole sequence's keys
        CPAttention cp = gpt_cp_attention(m);
        cp_attention_forward(&cp, a->atty, a->lse, a->qkv, d, (CPDocStarts){r->qstart, r->qstart_seq});
        return;
    }
    if (m->cfg.use_flash_attn)
        be->ops->flash_attention_forward(be, a->atty, a->lse, a->qkv, r->B, r->T, m->NH_tp, hs, d, w);
    else
        be->ops->attention_forward(be, a->atty, a->att, a->qkv, r->B, r->T, m->NH_tp, hs, d, w);
}

// m->s.dqkv = d(qkv) from m->s.datty = d(y); m->s.datt is the workspace. r: the rows (their
// documents: r->qstart).
static void attention_backward(GPT *m, const GPTLayerActs *a, const GPTRows *r,
                               const BackendDropout *d) {
    Backend *be = m->be;
    int hs = m->hs;
    if (m->cp > 1) {
        CPAttention cp = gpt_cp_attention(m);
        cp_attention_backward(&cp, m->s.dqkv, m->s.datt, m->s.datty, a->qkv, a->atty, a->lse, d,
                              (CPDocStarts){r->qstart, r->qstart_seq});
    } else if (m->cfg.use_flash_attn && r->qstart) {  // a window adds: dqkv from 0
        BackendAttnWindow docs = {0, 0, m->T, NULL, 0, NULL, 0, r->qstart};
        be->ops->zero(be, m->s.dqkv, (size_t)m->N * 3 * m->A_tp * backend_dtype_size(be->act));
        be->ops->flash_attention_backward(be, m->s.dqkv, m->s.datt, m->s.datty, a->qkv, a->atty,
                                          a->lse, m->B, m->T, m->NH_tp, hs, d, &docs);
    } else if (m->cfg.use_flash_attn)
        be->ops->flash_attention_backward(be, m->s.dqkv, m->s.datt, m->s.datty, a->qkv, a->atty,
                                          a->lse, m->B, m->T, m->NH_tp, hs, d, NULL);
    else
        be->ops->attention_backward(be, m->s.dqkv, m->s.datt, m->s.datty, a->qkv, a->att, m->B,
                                    m->T, m->NH_tp, hs, d);
}

// The ZeRO-2/3 hook (gpt.h), if any: `unit`'s weights are about to be read, or its backward
// begins or ends.
static void hook(GPT *m, GPTHookEvent ev, int unit) {
    if (m->hook.fn) m->hook.fn(m->hook.ctx, ev, unit);
}

// The block on the rows r (the micro-batch's: N = B*T). x and the residual stream are (Ns,
// C): Ns = N, or N/tp rows with sequence parallelism. l: the local layer (dropout masks).
static void block_forward(GPT *m, TPGroup *tp, const GPTBlockW *w, GPTLayerActs *a, const void *x,
                          const GPTRows *r, int l) {
    Backend *be = m->be;
    int N = r->B * r->T, Ns = m->sp ? N / m->tp : N, C = m->cfg.hidden_size, lg = m->layer0 + l;
    BackendDropout dd;
    gpt_norm_forward(m, a->ln1, a->ln1_mean, a->ln1_rstd, x, w->ln1w, w->ln1b, Ns);
    gpt_qkv_forward(m, tp, w, a, r);  // qkv (N, 3*C/tp)
    attention_forward(m, a, r, gpt_dropout_desc(m, r, DROPOUT_SITE_ATTN_PROBS, lg, &dd));
    tp_row_linear_forward(be, tp, a->res2, a->atty, w->projw, w->projb, N, m->A_tp, C);
    gpt_hidden_dropout(m, a->res2, r, DROPOUT_SITE_ATTN_OUT, lg);  // before the residual add
    gpt_residual_norm_forward(m, a->res2, a->ln2, a->ln2_mean, a->ln2_rstd, a->res2, x, w->ln2w,
                              w->ln2b, Ns);  // res2 += x; ln2 = LN(res2)
    gpt_mlp_forward(m, tp, w, a, N, l);  // res3 = MLP(ln2)
    gpt_hidden_dropout(m, a->res3, r, DROPOUT_SITE_MLP_OUT, lg);
    be->ops->add(be, a->res3, a->res3, a->res2, (size_t)Ns * C);
}

// The rows of the micro-batch in slot a: the whole sequences, or this rank's two chunks of
// each (context parallelism). Pure.
static GPTRows micro_rows(const GPT *m, const GPTActs *a) {
    if (m->cp > 1) return gpt_cp_rows(m, a);
    GPTRows r = {m->B, m->T, 0, a->sample0, 0, 0, a->doc_pos, a->doc_start, NULL};
    return r;
}

// Gradient of a branch output that went through hidden dropout at `site`: dres itself, or
// (dropout on) the dropped copy in dbuf (Ns, C), the mask regenerated.
static const void *branch_grad(GPT *m, const void *dres, void *dbuf, const GPTRows *r, int site,
                               int lg) {
    BackendDropout dd;
    const BackendDropout *d = gpt_dropout_desc(m, r, site, lg, &dd);
    if (!d) return dres;
    m->be->ops->dropout(m->be, dbuf, dres, d, m->N_sp, m->cfg.hidden_size);
    return dbuf;
}

// On entry m->s.dres holds d(res3); on exit d(x). `x` is the block's input; r (the whole
// micro-batch), l as in block_forward.
static void block_backward(GPT *m, TPGroup *tp, const GPTBlockW *w, GPTBlockW *g,
                           const GPTLayerActs *a, const void *x, const GPTRows *r, int l) {
    Backend *be = m->be;
    int N = m->N, Ns = m->N_sp, C = m->cfg.hidden_size, lg = m->layer0 + l;
    void *dres = m->s.dres, *dln = m->s.dln;
    BackendDropout dd;
    const BackendDropout *datt = gpt_dropout_desc(m, r, DROPOUT_SITE_ATTN_PROBS, lg, &dd);
    // MLP branch (with dropout its gradient is dropped into dln, which the MLP backward reads
    // before it writes d(ln2) there)
    gpt_mlp_backward(m, tp, w, g, a, branch_grad(m, dres, dln, r, DROPOUT_SITE_MLP_OUT, lg), dln, l);
    gpt_norm_backward(m, dres, g->ln2w, g->ln2b, dln, a->res2, w->ln2w, a->ln2_mean, a->ln2_rstd,
                      Ns);  // dres += : now d(res2)
    // attention branch
    tp_row_linear_backward(be, tp, m->s.datty, g->projw, g->projb,
                           branch_grad(m, dres, dln, r, DROPOUT_SITE_ATTN_OUT, lg), a->atty,
                           w->projw, N, m->A_tp, C);
    if (m->cfg.recompute == GPT_RECOMPUTE_SELECTIVE && !m->cfg.use_flash_attn)
        attention_forward(m, a, r, datt);  // the probabilities again (same bits)
    attention_backward(m, a, r, datt);
    gpt_qkv_backward(m, tp, w, g, a, dln, r);
    gpt_norm_backward(m, dres, g->ln1w, g->ln1b, dln, x, w->ln1w, a->ln1_mean, a->ln1_rstd,
                      Ns);  // dres += : now d(x)
}

// m->s.dscale (N) = slot's loss gradient per token for loss_scale: loss_scale everywhere, or
// with --eod-mask-loss weighed by the slot's token weights (gpt_loss_mask_dscale)
static void set_dscale(GPT *m, int slot, float loss_scale) {
    if (m->mask.on) {
        gpt_loss_mask_dscale(m, slot, loss_scale);
        return;
    }
    if (m->s.dscale_value == loss_scale) return;
    for (int i = 0; i < m->N; i++) m->s.dscale_host[i] = loss_scale;
    m->be->ops->copy(m->be, m->s.dscale, m->s.dscale_host, (size_t)m->N * sizeof(float), BACKEND_H2D);
    m->s.dscale_value = loss_scale;
}

void gpt_forward(GPT *m, Comm *tp_comm, int slot, const int *tokens, const int *targets,
                 float loss_scale) {
    Backend *be = m->be;
    GPTActs *a = &m->slots[slot];
    TPGroup tpg = tp_group(m, tp_comm), *tp = &tpg;
    int N = m->N, Ns = m->N_sp, C = m->cfg.hidden_size;
    gpt_documents_forward(m, slot, tokens);  // --reset-*: r's positions and document starts
    GPTRows r = micro_rows(m, a);
    hook(m, GPT_HOOK_FORWARD, GPT_UNIT_EDGE);
    if (m->first) {
        be->ops->copy(be, a->tokens, tokens, (size_t)N * sizeof(int), BACKEND_H2D);
        tp_vocab_embedding_forward(be, tp, &m->vocab, a->x0, a->tokens, m->w.wte, m->w.wpe,
                                   m->B, m->T, C, r.pos0, r.halves ? r.pos1 : -1, r.pos);
        gpt_hidden_dropout(m, a->x0, &r, DROPOUT_SITE_EMBED, -1);
    }
    const void *x = a->x0;
    for (int l = 0; l < m->n_layers; l++) {
        hook(m, GPT_HOOK_FORWARD, l);
        block_forward(m, tp, &m->w.blocks[l], &a->layers[l], x, &r, l);
        x = a->layers[l].res3;
    }
    if (m->last) {
        be->ops->copy(be, a->targets, targets, (size_t)N * sizeof(int), BACKEND_H2D);
        gpt_norm_forward(m, a->lnf, a->lnf_mean, a->lnf_rstd, x, m->w.lnfw, m->w.lnfb, Ns);
        tp_column_linear_forward(be, tp, a->logits, a->lnf, m->w.out ? m->w.out : m->w.wte, NULL, N, C,
                                 m->vocab.V_tp);
        if (m->mask.on) gpt_loss_mask_weights(m, slot, targets);
        a->dlogits_scale = loss_scale > 0 && m->fused_classifier ? loss_scale : 0.0f;
        if (a->dlogits_scale > 0) set_dscale(m, slot, loss_scale);  // the fused classifier
        tp_vocab_xent_forward(be, tp, &m->vocab, &a->xent, a->logits, a->targets,
                              a->dlogits_scale > 0 ? m->s.dscale : NULL, N);
        if (m->mask.on) gpt_loss_mask_forward(m, slot);
    }
}

void gpt_forward_positions(GPT *m, Comm *tp_comm, int slot, const int *tokens, int p0, int n) {
    Backend *be = m->be;
    GPTActs *a = &m->slots[slot];
    TPGroup tpg = tp_group(m, tp_comm), *tp = &tpg;
    int C = m->cfg.hidden_size;
    if (m->B != 1 || m->tp != 1 || m->cp != 1 || m->drop.on || p0 < 0 || n < 1 || p0 + n > m->T)
        core_fatal("gpt_forward_positions: positions [%d, %d) of %d, micro-batch %d, tp %d, "
                   "dropout %d: needs one sequence on one rank without dropout", p0, p0 + n,
                   m->T, m->B, m->tp, m->drop.on);
    GPTRows r = {1, n, p0, a->sample0, 0, 0, NULL, NULL, NULL};
    size_t qkv_row = 3 * (size_t)m->A_tp * backend_dtype_size(be->act);
    hook(m, GPT_HOOK_FORWARD, GPT_UNIT_EDGE);
    if (m->first) {
        be->ops->copy(be, a->tokens, tokens, (size_t)n * sizeof(int), BACKEND_H2D);
        tp_vocab_embedding_forward(be, tp, &m->vocab, a->x0, a->tokens, m->w.wte, m->w.wpe,
                                   1, n, C, p0, -1, NULL);
    }
    const void *x = a->x0;
    for (int l = 0; l < m->n_layers; l++) {
        GPTLayerActs rows = a->layers[l];  // rows [0, n) of the buffers, but qkv at row p0
        rows.qkv = (char *)rows.qkv + p0 * qkv_row;
        hook(m, GPT_HOOK_FORWARD, l);
        block_forward(m, tp, &m->w.blocks[l], &rows, x, &r, l);
        x = rows.res3;
    }
    if (m->last) {
        gpt_norm_forward(m, a->lnf, a->lnf_mean, a->lnf_rstd, x, m->w.lnfw, m->w.lnfb, n);
        tp_column_linear_forward(be, tp, a->logits, a->lnf, m->w.out ? m->w.out : m->w.wte, NULL,
                                 n, C, m->vocab.V_tp);
    }
}

double gpt_loss_sum(GPT *m, int slot) {
    return m->be->ops->sum(m->be, NULL, m->slots[slot].xent.loss, (size_t)m->N);
}

void gpt_loss_accumulate(GPT *m, int slot, double *acc) {
    m->be->ops->sum(m->be, acc, m->slots[slot].xent.loss, (size_t)m->N);
}

void gpt_backward(GPT *m, Comm *tp_comm, int slot, const void *dout, float loss_scale) {
    Backend *be = m->be;
    GPTActs *a = &m->slots[slot];
    TPGroup tpg = tp_group(m, tp_comm), *tp = &tpg;
    int N = m->N, Ns = m->N_sp, C = m->cfg.hidden_size;
    GPTRows r = micro_rows(m, a);
    size_t NC_bytes = (size_t)Ns * C * backend_dtype_size(be->act);
    hook(m, GPT_HOOK_BACKWARD_BEGIN, GPT_UNIT_EDGE);
    if (m->moe) m->moe->aux_scale = loss_scale * (float)N * (float)m->cp;  // (gpt_moe.h)
    if (m->last) {
        if (a->dlogits_scale > 0 && a->dlogits_scale != loss_scale)
            core_fatal("gpt_backward: loss scale %.9g, but slot %d's forward wrote d(logits) "
                       "for %.9g", (double)loss_scale, slot, (double)a->dlogits_scale);
        if (a->dlogits_scale == 0.0f) {  // else the forward's fused classifier wrote them
            set_dscale(m, slot, loss_scale);
            tp_vocab_xent_backward(be, &m->vocab, &a->xent, a->logits, a->logits, a->targets,
                                   m->s.dscale, N);  // dlogits in place
        }
        a->dlogits_scale = 0.0f;
        const void *x = m->n_layers ? a->layers[m->n_layers - 1].res3 : a->x0;
        tp_column_linear_backward(be, tp, m->s.dln, m->g.out ? m->g.out : m->g.wte, NULL, a->logits, a->lnf,
                                  m->w.out ? m->w.out : m->w.wte,
                                  N, C, m->vocab.V_tp);
        be->ops->zero(be, m->s.dres, NC_bytes);
        gpt_norm_backward(m, m->s.dres, m->g.lnfw, m->g.lnfb, m->s.dln, x, m->w.lnfw, a->lnf_mean,
                          a->lnf_rstd, Ns);
    } else {
        be->ops->copy(be, m->s.dres, dout, NC_bytes, BACKEND_D2D);
    }
    for (int l = m->n_layers - 1; l >= 0; l--) {
        int first, last;
        int chunk_end = gpt_layer_recomputed(m, l, &first, &last) && l == last;
        for (int j = first; chunk_end && j <= l; j++) {  // --recompute-granularity full:
            hook(m, GPT_HOOK_FORWARD, j);                   // re-run the chunk from its input
            block_forward(m, tp, &m->w.blocks[j], &a->layers[j], j ? a->layers[j - 1].res3 : a->x0,
                          &r, j);
        }
        const void *x = l ? a->layers[l - 1].res3 : a->x0;
        hook(m, GPT_HOOK_BACKWARD_BEGIN, l);
        block_backward(m, tp, &m->w.blocks[l], &m->g.blocks[l], &a->layers[l], x, &r, l);
        hook(m, GPT_HOOK_BACKWARD_END, l);
    }
    if (m->first) {
        gpt_hidden_dropout(m, m->s.dres, &r, DROPOUT_SITE_EMBED, -1);  // the mask again
        tp_vocab_embedding_backward(be, tp, &m->vocab, m->g.wte, m->g.wpe, m->s.dres, a->tokens,
                                    m->B, m->T, C, r.pos0, r.halves ? r.pos1 : -1, r.pos);
    }
    hook(m, GPT_HOOK_BACKWARD_END, GPT_UNIT_EDGE);
}
