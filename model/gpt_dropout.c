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

const BackendDropout *gpt_dropout_desc(const GPT *m, const GPTRows *r, int site, int layer,
                                       BackendDropout *d) {
    float p = site == DROPOUT_SITE_ATTN_PROBS ? m->drop.attention : m->drop.hidden;
    if (!m->drop.on || p <= 0.0f) return NULL;
    int64_t sample0 = r->sample0;
    int slice = r->pos0 != 0 || r->T != m->T_seq || r->halves;  // a slice of each sequence
    *d = (BackendDropout){
        .key = dropout_key(m->drop.seed, m->drop.iteration, site, layer),
        .threshold = dropout_threshold(p),
        .scale = 1.0f / (1.0f - p),
        .row0 = (slice ? 0 : sample0 * m->T_seq) +
                (m->sp ? (int64_t)m->tp_rank * (r->B * r->T / m->tp) : 0),
        .sample0 = sample0,
        .h0 = m->tp_rank * m->NH_tp,
        .NH = m->cfg.num_heads,
        .T = m->T_seq,
        .pos0 = r->pos0,
        .Tl = slice ? r->T : 0,
        .pos1 = r->halves ? r->pos1 : 0,
        .half_rows = r->halves ? (int64_t)r->B * (r->T / 2) : 0,
    };
    return d;
}

void gpt_hidden_dropout(const GPT *m, void *x, const GPTRows *r, int site, int layer) {
    BackendDropout d;
    const BackendDropout *dp = gpt_dropout_desc(m, r, site, layer, &d);
    int rows = r->B * r->T / (m->sp ? m->tp : 1);
    if (dp) m->be->ops->dropout(m->be, x, x, dp, rows, m->cfg.hidden_size);
}
