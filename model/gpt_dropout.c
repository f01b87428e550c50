// model/gpt_dropout.c: dropout descriptors of a GPT stage (gpt.h's GPTDropout): which masks
// a micro-batch's rows and this rank's heads get, from global indices only (the sample's
// place in the step's global batch, the sequence-parallel row shard, the global head and
// layer), so that every layout draws the same masks (backend/dropout.h).
#include "gpt_block.h"

void gpt_set_dropout(GPT *m, float hidden, float attention, uint64_t seed) {
    m->drop.hidden = hidden;
    m->drop.attention = attention;
    m->drop.seed = seed;
}

void gpt_dropout_step(GPT *m, int64_t iteration, int on) {
    m->drop.iteration = iteration;
    m->drop.on = on;
}

void gpt_set_micro_sample(GPT *m, int slot, int64_t sample0) { m->slots[slot].sample0 = sample0; }

const BackendDropout *gpt_dropout_desc(const GPT *m, int64_t sample0, int site, int layer,
                                       BackendDropout *d) {
    float p = site == DROPOUT_SITE_ATTN_PROBS ? m->drop.attention : m->drop.hidden;
    if (!m->drop.on || p <= 0.0f) return NULL;
    *d = (BackendDropout){
        .key = dropout_key(m->drop.seed, m->drop.iteration, site, layer),
        .threshold = dropout_threshold(p),
        .scale = 1.0f / (1.0f - p),
        .row0 = sample0 * m->T + (m->sp ? (int64_t)m->tp_rank * m->N_sp : 0),
        .sample0 = sample0,
        .h0 = m->tp_rank * m->NH_tp,
        .NH = m->cfg.num_heads,
    };
    return d;
}

void gpt_hidden_dropout(const GPT *m, void *x, int64_t sample0, int site, int layer) {
    BackendDropout d;
    const BackendDropout *dp = gpt_dropout_desc(m, sample0, site, layer, &d);
    if (dp) m->be->ops->dropout(m->be, x, x, dp, m->N_sp, m->cfg.hidden_size);
}
