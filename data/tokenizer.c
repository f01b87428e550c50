// data/tokenizer.c: byte-level and byte-level BPE encode / decode (see tokenizer.h).
#include "tokenizer.h"
#include "core/check.h"  // defines: core_calloc, core_fatal

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CACHE_MAX_PIECES (1 << 18)   // encode cache bounds: pieces ...
#define CACHE_MAX_IDS (1 << 22)      // ... and ids held

// ---- growable arrays -----------------------------------------------------------------------

void tok_ids_reserve(TokIds *a, size_t n) {
    if (a->n + n <= a->cap) return;
    size_t cap = a->cap ? a->cap : 1024;
    while (cap < a->n + n) cap *= 2;
    uint32_t *v = realloc(a->v, cap * sizeof(uint32_t));
    if (!v) core_fatal("out of memory growing a token buffer to %zu ids", cap);
    a->v = v;
    a->cap = cap;
}

void tok_ids_push(TokIds *a, uint32_t id) {
    tok_ids_reserve(a, 1);
    a->v[a->n++] = id;
}

void tok_bytes_append(TokBytes *a, const uint8_t *s, size_t n) {
    if (a->n + n > a->cap) {
        size_t cap = a->cap ? a->cap : 4096;
        while (cap < a->n + n) cap *= 2;
        uint8_t *v = realloc(a->v, cap);
        if (!v) core_fatal("out of memory growing a byte buffer to %zu bytes", cap);
        a->v = v;
        a->cap = cap;
    }
    if (n) memcpy(a->v + a->n, s, n);
    a->n += n;
}

// ---- construction --------------------------------------------------------------------------

static uint64_t pair_key(uint32_t a, uint32_t b) { return (uint64_t)a << 32 | b; }

// Byte strings of every id: bytes, EOD (empty), then each merge's two halves.
static void build_token_bytes(Tokenizer *t) {
    t->tok_off = core_calloc((size_t)t->vocab_size + 1, sizeof(uint64_t));
    // Lengths first (each id's length is the sum of its halves'), then the bytes.
    uint64_t *len = core_calloc((size_t)t->vocab_size, sizeof(uint64_t));
    for (int i = 0; i < TOK_N_BYTES; i++) len[i] = 1;
    uint64_t total = TOK_N_BYTES;
    for (int k = 0; k < t->n_merges; k++) {
        len[TOK_FIRST_MERGE + k] = len[t->merges[2 * k]] + len[t->merges[2 * k + 1]];
        total += len[TOK_FIRST_MERGE + k];
    }
    t->tok_bytes = core_calloc(total, 1);
    for (int i = 0; i < t->vocab_size; i++) t->tok_off[i + 1] = t->tok_off[i] + len[i];
    for (int i = 0; i < TOK_N_BYTES; i++) t->tok_bytes[i] = (uint8_t)i;
    for (int k = 0; k < t->n_merges; k++) {
        uint32_t a = t->merges[2 * k], b = t->merges[2 * k + 1];
        uint8_t *dst = t->tok_bytes + t->tok_off[TOK_FIRST_MERGE + k];
        memcpy(dst, t->tok_bytes + t->tok_off[a], len[a]);
        memcpy(dst + len[a], t->tok_bytes + t->tok_off[b], len[b]);
    }
    free(len);
}

Tokenizer *tok_byte_new(void) {
    Tokenizer *t = core_calloc(1, sizeof *t);
    t->kind = TOK_BYTE;
    t->vocab_size = TOK_FIRST_MERGE;
    t->eod_id = TOK_EOD;
    build_token_bytes(t);
    return t;
}

Tokenizer *tok_bpe_new(const uint32_t *merges, int n_merges, const char *pattern, int max_piece,
                       char *err, size_t errlen) {
    if (n_merges < 0 || n_merges > TOK_MAX_VOCAB - TOK_FIRST_MERGE) {
        snprintf(err, errlen, "%d merges: must be 0..%d", n_merges, TOK_MAX_VOCAB - TOK_FIRST_MERGE);
        return NULL;
    }
    if (max_piece < 1 || max_piece > TOK_MAX_PIECE_LIMIT) {
        snprintf(err, errlen, "max_piece %d: must be 1..%d", max_piece, TOK_MAX_PIECE_LIMIT);
        return NULL;
    }
    TokPretok *pre = tok_pretok_new(pattern, max_piece, err, errlen);
    if (!pre) return NULL;
    Tokenizer *t = core_calloc(1, sizeof *t);
    t->kind = TOK_BPE;
    t->vocab_size = TOK_FIRST_MERGE + n_merges;
    t->eod_id = TOK_EOD;
    t->n_merges = n_merges;
    t->merges = core_calloc((size_t)n_merges * 2 + 1, sizeof(uint32_t));
    if (n_merges) memcpy(t->merges, merges, (size_t)n_merges * 2 * sizeof(uint32_t));
    t->pre = pre;
    t->max_piece = max_piece;
    t->pattern = strdup(pattern);
    data_u64map_init(&t->merge_id, (size_t)n_merges);
    for (int k = 0; k < n_merges; k++) {
        uint32_t a = merges[2 * k], b = merges[2 * k + 1], id = (uint32_t)(TOK_FIRST_MERGE + k);
        if (a >= id || b >= id || a == TOK_EOD || b == TOK_EOD) {
            snprintf(err, errlen, "merge %d [%u, %u] uses an id that is EOD or not defined before it", k, a, b);
            tok_free(t);
            return NULL;
        }
        int inserted;
        int64_t *v = data_u64map_put(&t->merge_id, pair_key(a, b), id, &inserted);
        if (!inserted) {
            snprintf(err, errlen, "merge %d [%u, %u] repeats merge %lld", k, a, b,
                     (long long)(*v - TOK_FIRST_MERGE));
            tok_free(t);
            return NULL;
        }
    }
    build_token_bytes(t);
    data_strmap_init(&t->cache);
    t->cache_start = core_calloc(CACHE_MAX_PIECES + 1, sizeof(uint64_t));
    t->scratch = core_calloc((size_t)max_piece, sizeof(uint32_t));
    return t;
}

void tok_free(Tokenizer *t) {
    if (!t) return;
    free(t->merges);
    free(t->pattern);
    data_u64map_free(&t->merge_id);
    free(t->tok_off);
    free(t->tok_bytes);
    tok_pretok_free(t->pre);
    if (t->kind == TOK_BPE) data_strmap_free(&t->cache);
    free(t->cache_start);
    free(t->cache_ids.v);
    free(t->scratch);
    free(t);
}

// ---- encode / decode -----------------------------------------------------------------------

size_t tok_merge_pair(uint32_t *s, size_t n, uint32_t a, uint32_t b, uint32_t z) {
    size_t w = 0;
    for (size_t r = 0; r < n; r++) {
        if (r + 1 < n && s[r] == a && s[r + 1] == b) {
            s[w++] = z;
            r++;
        } else {
            s[w++] = s[r];
        }
    }
    return w;
}

// BPE inside one piece: repeatedly apply the lowest-numbered merge present. s is (n) symbols.
static size_t bpe_piece(const Tokenizer *t, uint32_t *s, size_t n) {
    while (n >= 2) {
        int64_t best = INT64_MAX;
        for (size_t i = 0; i + 1 < n; i++) {
            const int64_t *id = data_u64map_get(&t->merge_id, pair_key(s[i], s[i + 1]));
            if (id && *id < best) best = *id;
        }
        if (best == INT64_MAX) break;
        const uint32_t *m = &t->merges[2 * (best - TOK_FIRST_MERGE)];
        n = tok_merge_pair(s, n, m[0], m[1], (uint32_t)best);
    }
    return n;
}

// Piece callback of tok_encode: cached ids, or BPE then cache.
static void encode_piece(void *ctx, const uint8_t *piece, size_t n) {
    void **c = ctx;
    Tokenizer *t = c[0];
    TokIds *out = c[1];
    int64_t hit = data_strmap_find(&t->cache, piece, n);
    if (hit >= 0) {
        uint64_t a = t->cache_start[hit], b = t->cache_start[hit + 1];
        tok_ids_reserve(out, b - a);
        memcpy(out->v + out->n, t->cache_ids.v + a, (b - a) * sizeof(uint32_t));
        out->n += b - a;
        return;
    }
    for (size_t i = 0; i < n; i++) t->scratch[i] = piece[i];
    size_t m = bpe_piece(t, t->scratch, n);
    tok_ids_reserve(out, m);
    memcpy(out->v + out->n, t->scratch, m * sizeof(uint32_t));
    out->n += m;
    if (t->cache.n >= CACHE_MAX_PIECES || t->cache_ids.n + m > CACHE_MAX_IDS) {
        data_strmap_clear(&t->cache);
        t->cache_ids.n = 0;
    }
    int64_t id = data_strmap_intern(&t->cache, piece, n, NULL);
    tok_ids_reserve(&t->cache_ids, m);
    memcpy(t->cache_ids.v + t->cache_ids.n, t->scratch, m * sizeof(uint32_t));
    t->cache_start[id] = t->cache_ids.n;
    t->cache_ids.n += m;
    t->cache_start[id + 1] = t->cache_ids.n;
}

void tok_encode(Tokenizer *t, const uint8_t *text, size_t n, TokIds *out) {
    if (t->kind == TOK_BYTE) {
        tok_ids_reserve(out, n);
        for (size_t i = 0; i < n; i++) out->v[out->n++] = text[i];
        return;
    }
    void *ctx[2] = {t, out};
    tok_pretok_split(t->pre, text, n, encode_piece, ctx);
}

const uint8_t *tok_token_bytes(const Tokenizer *t, uint32_t id, size_t *len) {
    *len = t->tok_off[id + 1] - t->tok_off[id];
    return t->tok_bytes + t->tok_off[id];
}

int tok_decode(const Tokenizer *t, const uint32_t *ids, size_t n, TokBytes *out) {
    for (size_t i = 0; i < n; i++) {
        if (ids[i] >= (uint32_t)t->vocab_size) return -1;
        size_t len;
        const uint8_t *s = tok_token_bytes(t, ids[i], &len);
        tok_bytes_append(out, s, len);
    }
    return 0;
}
