// model/gpt_documents.c: --reset-position-ids and --reset-attention-mask (Megatron's
// meaning): a sample holds several documents, each ending with the end-of-document token
// (the EOD belongs to the document it ends). Per micro-batch, from its tokens on the host:
// each row's position in its document (the position embedding or RoPE reads it instead of
// the row's index) and its document's first position (the attention's BackendAttnWindow
// qstart: a query sees the keys from there to itself). Both are (B, T) ints copied into the
// slot's backend memory, so the backward of that slot reads the same ones. Only the tokens
// decide them, and every tensor- and pipeline-parallel rank holds the tokens, so every
// layout computes the same.
#include "gpt_block.h"
#include "core/check.h"  // defines: core_calloc, core_fatal

#include <stdlib.h>

void gpt_set_documents(GPT *m, int64_t eod_id, int positions, int attention) {
    if (!positions && !attention) return;
    if (m->cp > 1)
        core_fatal("--reset-position-ids / --reset-attention-mask with context parallelism "
                   "(cp %d): not supported", m->cp);
    m->docs.positions = positions;
    m->docs.attention = attention;
    m->docs.id = (int)eod_id;
    if (!m->docs.host) m->docs.host = core_calloc(2 * (size_t)m->N, sizeof(int));
    Backend *be = m->be;
    size_t bytes = (size_t)m->N * sizeof(int);
    for (int s = 0; s < m->n_slots; s++) {
        GPTActs *a = &m->slots[s];
        if (positions && !a->doc_pos) a->doc_pos = be->ops->alloc(be, bytes);
        if (attention && !a->doc_start) a->doc_start = be->ops->alloc(be, bytes);
    }
}

void gpt_documents_forward(GPT *m, int slot, const int *tokens) {
    if (!m->docs.positions && !m->docs.attention) return;
    if (!tokens) core_fatal("gpt_forward: --reset-position-ids/--reset-attention-mask need the "
                            "micro-batch's tokens on every stage (stage of layer %d)", m->layer0);
    int *pos = m->docs.host, *start = pos + m->N;  // (B, T) each
    for (int b = 0; b < m->B; b++) {
        int s = 0;  // first position of the current document
        for (int t = 0; t < m->T; t++) {
            size_t r = (size_t)b * m->T + t;
            start[r] = s;
            pos[r] = t - s;
            if (tokens[r] == m->docs.id) s = t + 1;  // the next token starts a document
        }
    }
    Backend *be = m->be;
    GPTActs *a = &m->slots[slot];
    size_t bytes = (size_t)m->N * sizeof(int);
    if (a->doc_pos) be->ops->copy(be, a->doc_pos, pos, bytes, BACKEND_H2D);
    if (a->doc_start) be->ops->copy(be, a->doc_start, start, bytes, BACKEND_H2D);
}
