// data/tok_spm_encode.c: the SentencePiece family's tables and encoder (see tok_spm.h):
// piece map and trie, SentencePiece's BPE (by piece score), Hugging Face's BPE (by merge
// rank), SentencePiece's unigram Viterbi, unknown symbols as <0xNN> bytes or the unknown id.
#include "tok_spm.h"
#include "core/check.h"  // defines: core_calloc

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WS_LEN 3
static const uint8_t WS[WS_LEN] = {0xE2, 0x96, 0x81};  // "▁"

static void *grow(void *p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return p;
    size_t c = *cap ? *cap : 256;
    while (c < need) c *= 2;
    p = realloc(p, c * elem);
    if (!p) core_fatal("out of memory growing an encode buffer to %zu entries", c);
    *cap = c;
    return p;
}

// One piece's text into the trie; its end node gets id.
static void trie_add(TokSpm *s, const uint8_t *t, size_t n, int32_t id, size_t *cap) {
    int64_t node = 0;
    for (size_t i = 0; i < n; i++) {
        int inserted;
        int64_t *c = data_u64map_put(&s->trie, (uint64_t)node << 8 | t[i], s->n_nodes, &inserted);
        if (inserted) {
            s->node_id = grow(s->node_id, cap, (size_t)s->n_nodes + 1, sizeof *s->node_id);
            s->node_id[s->n_nodes++] = -1;
        }
        node = *c;
    }
    s->node_id[node] = id;
}

int tok_spm_index(TokSpm *s, const char *const *text, const size_t *len, char *why, size_t wn) {
    size_t cap = 0;
    data_strmap_init(&s->pieces);
    data_u64map_init(&s->trie, 1024);
    s->node_id = grow(NULL, &cap, 1, sizeof *s->node_id);
    s->node_id[0] = -1, s->n_nodes = 1;
    s->piece_id = core_calloc((size_t)s->n_pieces + 1, sizeof *s->piece_id);
    s->min_score = 3.402823466e+38f, s->max_score = 1.175494351e-38f;  // FLT_MAX, FLT_MIN as SentencePiece
    for (int b = 0; b < TOK_N_BYTES; b++) s->byte_id[b] = -1;
    for (int id = 0; id < s->n_pieces; id++) {
        int ty = s->type[id];
        unsigned b;
        char tail;
        if (ty == SPM_NORMAL) {
            if (s->score[id] < s->min_score) s->min_score = s->score[id];
            if (s->score[id] > s->max_score) s->max_score = s->score[id];
        }
        if (ty == SPM_BYTE) {
            char buf[16] = "";
            snprintf(buf, sizeof buf, "%.*s", len[id] < 15 ? (int)len[id] : 15, text[id]);
            if (len[id] != 6 || sscanf(buf, "<0x%2X%c", &b, &tail) != 2 || tail != '>') {
                snprintf(why, wn, "piece %d of type BYTE is '%.20s', not <0xNN>", id, buf);
                return -1;
            }
            s->byte_id[b] = id;
        }
        if (ty != SPM_NORMAL && ty != SPM_USER && ty != SPM_UNUSED) continue;
        s->has_user |= ty == SPM_USER;
        int inserted;
        int64_t k = data_strmap_intern(&s->pieces, (const uint8_t *)text[id], len[id], &inserted);
        if (!inserted || len[id] == 0) {
            snprintf(why, wn, "piece %d '%.40s' is %s", id, text[id], len[id] ? "defined twice" : "empty");
            return -1;
        }
        s->piece_id[k] = id;
        trie_add(s, (const uint8_t *)text[id], len[id], id, &cap);
    }
    for (int b = 0; b < 256; b++) {
        const int64_t *c = data_u64map_get(&s->trie, (uint64_t)b);  // (node 0 << 8 | b)
        s->root[b] = c ? (int32_t)*c : -1;
    }
    tok_spm_norm_index(s);
    return 0;
}

// An id's bytes when decoding: a piece's text with "▁" as ' ', a BYTE piece's byte, nothing
// for CONTROL, " ⁇ " for UNKNOWN (as SentencePiece decodes), the text of Megatron's extras.
static void id_bytes(const TokSpm *s, int id, const char *text, size_t len, TokBytes *out) {
    int ty = id < s->n_pieces ? s->type[id] : SPM_CONTROL + 100;
    if (ty == SPM_CONTROL) return;
    if (ty == SPM_UNKNOWN) {
        tok_bytes_append(out, (const uint8_t *)" \xE2\x81\x87 ", 5);
        return;
    }
    if (ty == SPM_BYTE) {
        for (int b = 0; b < TOK_N_BYTES; b++)
            if (s->byte_id[b] == id) {
                uint8_t c = (uint8_t)b;
                tok_bytes_append(out, &c, 1);
            }
        return;
    }
    for (size_t i = 0; i < len; i++) {
        if (i + WS_LEN <= len && !memcmp(text + i, WS, WS_LEN)) {
            tok_bytes_append(out, (const uint8_t *)" ", 1);
            i += WS_LEN - 1;
        } else {
            tok_bytes_append(out, (const uint8_t *)text + i, 1);
        }
    }
}

Tokenizer *tok_spm_wrap(TokSpm *s, int V, const char *const *text, const size_t *len, int eod_id,
                        const uint32_t *prefix, int n_prefix) {
    Tokenizer *t = core_calloc(1, sizeof *t);
    t->kind = TOK_SPM;
    t->vocab_size = V;
    t->eod_id = eod_id;
    t->spm = s;
    t->special = core_calloc((size_t)V, 1);
    t->tok_off = core_calloc((size_t)V + 1, sizeof *t->tok_off);
    TokBytes b = {0};
    for (int id = 0; id < V; id++) {
        t->special[id] = id >= s->n_pieces || s->type[id] == SPM_CONTROL || id == eod_id;
        id_bytes(s, id, text[id] ? text[id] : "", text[id] ? len[id] : 0, &b);
        t->tok_off[id + 1] = b.n;
    }
    t->tok_bytes = b.v ? b.v : core_calloc(1, 1);
    for (int i = 0; i < n_prefix && i < TOK_MAX_AFFIX; i++) t->prefix[t->n_prefix++] = prefix[i];
    return t;
}

void tok_spm_free(TokSpm *s) {
    if (!s) return;
    free(s->type), free(s->score), free(s->piece_id), free(s->node_id), free(s->merge_out);
    if (s->piece_id) data_strmap_free(&s->pieces);
    data_u64map_free(&s->trie);
    data_u64map_free(&s->merges);
    free(s->charsmap);
    for (int k = 0; k < s->n_split; k++) free(s->split_text[k]);
    free(s->megatron_type), free(s->src), free(s->hf_eos);
    free(s->norm.v), free(s->sym), free(s->heap), free(s->best), free(s->best_start), free(s->best_id);
    free(s);
}

// ---- segmentation ---------------------------------------------------------------------------

static int32_t piece_of(const TokSpm *s, const uint8_t *t, size_t n) {
    int64_t k = data_strmap_find(&s->pieces, t, n);
    return k < 0 ? -1 : s->piece_id[k];
}

static int before(const SpmPair *a, const SpmPair *b) {
    return a->prio > b->prio || (a->prio == b->prio && a->left < b->left);
}

static void heap_push(TokSpm *s, size_t *n, SpmPair p) {
    s->heap = grow(s->heap, &s->heap_cap, *n + 1, sizeof *s->heap);
    size_t i = (*n)++;
    for (; i > 0 && before(&p, &s->heap[(i - 1) / 2]); i = (i - 1) / 2) s->heap[i] = s->heap[(i - 1) / 2];
    s->heap[i] = p;
}

static SpmPair heap_pop(TokSpm *s, size_t *n) {
    SpmPair top = s->heap[0], last = s->heap[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && before(&s->heap[c + 1], &s->heap[c])) c++;
        if (!before(&s->heap[c], &last)) break;
        s->heap[i] = s->heap[c];
        i = c;
    }
    if (*n) s->heap[i] = last;
    return top;
}

// The pair (l, r) onto the heap when it may merge: its concatenation is a piece (SPM_BPE) or
// (id_l, id_r) is a merge (SPM_BPE_RANKS).
static void maybe_pair(TokSpm *s, const uint8_t *t, int32_t l, int32_t r, size_t *hn) {
    if (l < 0 || r < 0) return;
    SpmSym *a = &s->sym[l], *b = &s->sym[r];
    SpmPair p = {.left = l, .right = r, .size = a->len + b->len};
    if (s->algo == SPM_BPE_RANKS) {
        if (a->id < 0 || b->id < 0) return;
        const int64_t *rank = data_u64map_get(&s->merges, (uint64_t)a->id << 32 | (uint32_t)b->id);
        if (!rank) return;
        p.prio = -(float)*rank, p.id = s->merge_out[*rank];
    } else {
        if (a->id == -2 || b->id == -2) return;  // a frozen USER symbol
        int32_t id = piece_of(s, t + a->start, p.size);
        if (id < 0 || s->type[id] == SPM_UNUSED) return;
        p.prio = s->score[id], p.id = (uint32_t)id;
    }
    heap_push(s, hn, p);
}

// The symbols of t[0..n): USER pieces whole, else UTF-8 characters (SPM_BPE_RANKS: with their
// ids; a character that is no piece: its <0xNN> bytes, else unknown). Returns the count.
static size_t initial_symbols(TokSpm *s, const uint8_t *t, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        size_t m = s->has_user ? tok_spm_user_match(s, t + i, n - i) : 0;
        int user = m > 0;
        if (!m) m = t[i] < 0x80 ? 1 : t[i] >= 0xF0 ? 4 : t[i] >= 0xE0 ? 3 : t[i] >= 0xC0 ? 2 : 1;
        if (m > n - i) m = n - i;
        s->sym = grow(s->sym, &s->sym_cap, k + m, sizeof *s->sym);
        int32_t id = user ? -2 : -1;
        if (s->algo == SPM_BPE_RANKS) id = piece_of(s, t + i, m);
        int bytes = s->algo == SPM_BPE_RANKS && id < 0 && s->byte_fallback;
        for (size_t j = 0; bytes && j < m; j++) bytes = s->byte_id[t[i + j]] >= 0;
        for (size_t j = 0; j < (bytes ? m : 1); j++)
            s->sym[k++] = (SpmSym){.start = (uint32_t)(i + j), .len = bytes ? 1 : (uint32_t)m,
                                   .id = bytes ? s->byte_id[t[i + j]] : id};
        i += m;
    }
    for (size_t j = 0; j < k; j++) s->sym[j].prev = (int32_t)j - 1, s->sym[j].next = j + 1 < k ? (int32_t)j + 1 : -1;
    return k;
}

// One id for a symbol t[0..n) whose piece is id (-1: unknown); *prev_unk tracks runs.
static void emit(TokSpm *s, const uint8_t *t, size_t n, int32_t id, int *prev_unk, TokIds *out) {
    if (id < 0 || id == s->unk_id) {
        int bytes = s->byte_fallback;
        for (size_t j = 0; bytes && j < n; j++) bytes = s->byte_id[t[j]] >= 0;
        for (size_t j = 0; bytes && j < n; j++) tok_ids_push(out, (uint32_t)s->byte_id[t[j]]);
        if (!bytes && !(*prev_unk && s->fuse_unk)) tok_ids_push(out, (uint32_t)s->unk_id);
        *prev_unk = !bytes;
        return;
    }
    tok_ids_push(out, (uint32_t)id);
    *prev_unk = 0;
}

// BPE over the word t[0..n) (both kinds), ids appended.
static void bpe(TokSpm *s, const uint8_t *t, size_t n, int *prev_unk, TokIds *out) {
    int32_t whole = s->ignore_merges ? piece_of(s, t, n) : -1;
    if (whole >= 0) {
        emit(s, t, n, whole, prev_unk, out);
        return;
    }
    size_t k = initial_symbols(s, t, n), hn = 0;
    for (size_t i = 1; i < k; i++) maybe_pair(s, t, (int32_t)i - 1, (int32_t)i, &hn);
    while (hn) {
        SpmPair p = heap_pop(s, &hn);
        SpmSym *a = &s->sym[p.left], *b = &s->sym[p.right];
        if (!a->len || !b->len || a->next != p.right || a->len + b->len != p.size) continue;  // stale
        a->len += b->len, a->id = (int32_t)p.id, a->next = b->next;
        if (b->next >= 0) s->sym[b->next].prev = p.left;
        b->len = 0;
        maybe_pair(s, t, a->prev, p.left, &hn);
        maybe_pair(s, t, p.left, a->next, &hn);
    }
    for (int32_t i = k ? 0 : -1; i >= 0; i = s->sym[i].next) {
        SpmSym *y = &s->sym[i];
        int32_t id = s->algo == SPM_BPE_RANKS ? y->id : piece_of(s, t + y->start, y->len);
        emit(s, t + y->start, y->len, id, prev_unk, out);
    }
}

// SentencePiece's unigram Viterbi over t[0..n), ids appended.
static void unigram(TokSpm *s, const uint8_t *t, size_t n, int *prev_unk, TokIds *out) {
    s->best = grow(s->best, &s->best_cap, n + 1, sizeof *s->best);
    size_t cap2 = s->best_cap;
    s->best_start = realloc(s->best_start, cap2 * sizeof *s->best_start);
    s->best_id = realloc(s->best_id, cap2 * sizeof *s->best_id);
    if (!s->best_start || !s->best_id) core_fatal("out of memory encoding %zu bytes", n);
    for (size_t i = 0; i <= n; i++) s->best[i] = 0, s->best_start[i] = -1, s->best_id[i] = -1;
    const float unk_score = s->min_score - 10.0f;
    for (size_t at = 0; at < n;) {
        size_t m = t[at] < 0x80 ? 1 : t[at] >= 0xF0 ? 4 : t[at] >= 0xE0 ? 3 : t[at] >= 0xC0 ? 2 : 1;
        if (m > n - at) m = n - at;
        float here = s->best[at];
        int single = 0;
        // the pieces starting at `at`: t[at..e] walked down the trie from the root
        for (int64_t node = s->root[t[at]], e = (int64_t)at; node >= 0;) {
            int32_t id = s->node_id[node];
            if (id >= 0 && s->type[id] != SPM_UNUSED) {
                size_t len = (size_t)e + 1 - at;
                float score = s->type[id] == SPM_USER ? (float)((double)len * s->max_score - 0.1) : s->score[id];
                float cand = score + here;
                if (s->best_start[e + 1] < 0 || cand > s->best[e + 1])
                    s->best[e + 1] = cand, s->best_start[e + 1] = (int32_t)at, s->best_id[e + 1] = id;
                single |= len == m;
            }
            if ((size_t)++e >= n) break;
            const int64_t *c = data_u64map_get(&s->trie, (uint64_t)node << 8 | t[e]);
            node = c ? *c : -1;
        }
        if (!single) {
            float cand = unk_score + here;
            if (s->best_start[at + m] < 0 || cand > s->best[at + m])
                s->best[at + m] = cand, s->best_start[at + m] = (int32_t)at, s->best_id[at + m] = -1;
        }
        at += m;
    }
    size_t k = 0;  // the best path, backwards, into sym
    for (size_t end = n; end > 0; end = (size_t)s->best_start[end]) {
        s->sym = grow(s->sym, &s->sym_cap, k + 1, sizeof *s->sym);
        s->sym[k++] = (SpmSym){.start = (uint32_t)s->best_start[end], .len = (uint32_t)(end - (size_t)s->best_start[end]),
                               .id = s->best_id[end]};
    }
    while (k--) emit(s, t + s->sym[k].start, s->sym[k].len, s->sym[k].id, prev_unk, out);
}

// One text without Megatron's special strings: normalize, split into words, segment.
static void encode_text(TokSpm *s, const uint8_t *text, size_t n, TokIds *out) {
    s->norm.n = 0;
    tok_spm_normalize(s, text, n, &s->norm);
    const uint8_t *t = s->norm.v;
    size_t len = s->norm.n, w = 0;
    int prev_unk = 0;
    if (s->algo == SPM_UNIGRAM) {
        unigram(s, t, len, &prev_unk, out);
        return;
    }
    for (size_t i = 1; s->hf_split && i + WS_LEN <= len; i++)  // Metaspace split: "▁" starts a word
        if (!memcmp(t + i, WS, WS_LEN)) {
            bpe(s, t + w, i - w, &prev_unk, out);
            w = i;
        }
    if (len > w) bpe(s, t + w, len - w, &prev_unk, out);
}

// The first occurrence of p[0..m) in t[0..n), or NULL.
static const uint8_t *find(const uint8_t *t, size_t n, const char *p, size_t m) {
    for (const uint8_t *c = t; m && (size_t)(c - t) + m <= n; c++) {
        c = memchr(c, p[0], n - m + 1 - (size_t)(c - t));
        if (!c) return NULL;
        if (!memcmp(c, p, m)) return c;
    }
    return NULL;
}

void tok_spm_encode(TokSpm *s, const uint8_t *text, size_t n, TokIds *out) {
    while (s->n_split) {  // Megatron's SentencePieceTokenizer: the first special string found
        size_t at = n, best = 0;
        int which = -1;
        for (int k = 0; k < s->n_split; k++) {
            size_t m = strlen(s->split_text[k]);
            const uint8_t *hit = find(text, n, s->split_text[k], m);
            if (hit && (size_t)(hit - text) < at) at = (size_t)(hit - text), which = k, best = m;
        }
        if (which < 0) break;
        encode_text(s, text, at, out);
        tok_ids_push(out, s->split_id[which]);
        text += at + best, n -= at + best;
    }
    encode_text(s, text, n, out);
}
