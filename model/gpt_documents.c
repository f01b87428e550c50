// model/gpt_documents.c: --reset-position-ids and --reset-attention-mask (Megatron's
// meaning): a sample holds several documents, each ending with the end-of-document token
// (the EOD belongs to the document it ends). Per micro-batch, from its tokens on the host:
// each row's position in its document (the position embedding or RoPE reads it instead of
// the row's index) and its document's first position (the attention's BackendAttnWindow
// qstart: a query sees the keys from there to itself). Both are ints copied into the slot's
// backend memory, so the backward of that slot reads the same ones. Only the tokens decide
// them, and every tensor- and pipeline-parallel rank holds the tokens, so every layout
// computes the same. With context parallelism a rank's chunks need the EODs before them:
// the CP group gathers the whole sequences' tokens (one int per token over MPI), and each
// rank keeps its chunks' rows, plus the whole sequences' starts for the a2a exchange.
#include "gpt_block.h"
#include "gpt_cp.h"       // defines: gpt_cp_select, cp_chunk_pos
#include "core/check.h"  // defines: core_calloc, core_fatal

#include <stdlib.h>
#include <string.h>

void gpt_set_documents(GPT *m, int64_t eod_id, int positions, int attention) {
    if (!positions && !attention) return;
    if (m->cp > 1 && !m->cp_host)
        core_fatal("--reset-position-ids / --reset-attention-mask with context parallelism "
                   "(cp %d): no CP group over MPI", m->cp);
    m->docs.positions = positions;
    m->docs.attention = attention;
    m->docs.id = (int)eod_id;
    size_t seq = (size_t)m->B * m->T_seq;  // the whole sequences' rows
    if (!m->docs.host) m->docs.host = core_calloc(4 * seq + 2 * (size_t)m->N, sizeof(int));
    Backend *be = m->be;
    size_t bytes = (size_t)m->N * sizeof(int);
    for (int s = 0; s < m->n_slots; s++) {
        GPTActs *a = &m->slots[s];
        if (positions && !a->doc_pos) a->doc_pos = be->ops->alloc(be, bytes);
        if (attention && !a->doc_start) a->doc_start = be->ops->alloc(be, bytes);
        if (attention && m->cp > 1 && !a->doc_start_seq)
            a->doc_start_seq = be->ops->alloc(be, seq * sizeof(int));
    }
}

// The micro-batch's whole sequences (B, T_seq) from this rank's token rows: tokens itself
// (cp 1), or gathered over the CP group into gath (cp, N) and put in sequence order in full.
static const int *whole_tokens(GPT *m, const int *tokens, int *gath, int *full) {
    if (m->cp == 1) return tokens;
    int P = m->cp, c = m->T_seq / (2 * P);
    size_t n = (size_t)m->N;
    comm_all_gather(m->cp_host, tokens, gath, n, COMM_I32);
    for (int r = 0; r < P; r++)
        for (int h = 0; h < 2; h++)
            for (int b = 0; b < m->B; b++)
                memcpy(full + (size_t)b * m->T_seq + cp_chunk_pos(m->T_seq, P, r, h),
                       gath + r * n + ((size_t)h * m->B + b) * c, (size_t)c * sizeof(int));
    return full;
}

void gpt_documents_forward(GPT *m, int slot, const int *tokens) {
    if (!m->docs.positions && !m->docs.attention) return;
    if (!tokens) core_fatal("gpt_forward: --reset-position-ids/--reset-attention-mask need the "
                            "micro-batch's tokens on every stage (stage of layer %d)", m->layer0);
    int B = m->B, T = m->T_seq;
    size_t seq = (size_t)B * T, N = (size_t)m->N;
    int *pos = m->docs.host, *start = pos + seq;  // (B, T_seq) each
    int *gath = start + seq, *full = gath + seq;  // cp > 1: (cp, N) and (B, T_seq) tokens
    int *lpos = full + seq, *lstart = lpos + N;   // cp > 1: this rank's rows (N) of pos, start
    const int *tok = whole_tokens(m, tokens, gath, full);
    for (int b = 0; b < B; b++) {
        int s = 0;  // first position of the current document
        for (int t = 0; t < T; t++) {
            size_t r = (size_t)b * T + t;
            start[r] = s;
            pos[r] = t - s;
            if (tok[r] == m->docs.id) s = t + 1;  // the next token starts a document
        }
    }
    Backend *be = m->be;
    GPTActs *a = &m->slots[slot];
    if (a->doc_start_seq) be->ops->copy(be, a->doc_start_seq, start, seq * sizeof(int), BACKEND_H2D);
    if (m->cp > 1) {  // this rank's rows: its two chunks of each sequence
        gpt_cp_select(lpos, pos, B, T, m->cp, m->cp_rank);
        gpt_cp_select(lstart, start, B, T, m->cp, m->cp_rank);
        pos = lpos, start = lstart;
    }
    if (a->doc_pos) be->ops->copy(be, a->doc_pos, pos, N * sizeof(int), BACKEND_H2D);
    if (a->doc_start) be->ops->copy(be, a->doc_start, start, N * sizeof(int), BACKEND_H2D);
}
