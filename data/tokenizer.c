// data/tokenizer.c: byte-level and byte-level BPE encode / decode (see tokenizer.h).
#include "tokenizer.h"
#include "data/tok_spm.h"  // defines: tok_spm_encode, tok_spm_free
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

// Byte strings of megac's layout: bytes, EOD (empty), then each merge's two halves.
// *off gets (vocab + 1) offsets, the return value the bytes (both malloc'ed).
static uint8_t *megac_token_bytes(const uint32_t *merges, int n_merges, uint64_t **off) {
    int vocab = TOK_FIRST_MERGE + n_merges;
    uint64_t *o = core_calloc((size_t)vocab + 1, sizeof(uint64_t));
    uint64_t *len = core_calloc((size_t)vocab, sizeof(uint64_t));  // an id's length: its halves'
    for (int i = 0; i < TOK_N_BYTES; i++) len[i] = 1;
    for (int k = 0; k < n_merges; k++) len[TOK_FIRST_MERGE + k] = len[merges[2 * k]] + len[merges[2 * k + 1]];
    for (int i = 0; i < vocab; i++) o[i + 1] = o[i] + len[i];
    uint8_t *bytes = core_calloc(o[vocab] + 1, 1);
    for (int i = 0; i < TOK_N_BYTES; i++) bytes[i] = (uint8_t)i;
    for (int k = 0; k < n_merges; k++) {
        uint32_t a = merges[2 * k], b = merges[2 * k + 1];
        uint8_t *dst = bytes + o[TOK_FIRST_MERGE + k];
        memcpy(dst, bytes + o[a], len[a]);
        memcpy(dst + len[a], bytes + o[b], len[b]);
    }
    free(len);
    *off = o;
    return bytes;
}

static void copy_token_bytes(Tokenizer *t, const uint64_t *off, const uint8_t *bytes) {
    t->tok_off = core_calloc((size_t)t->vocab_size + 1, sizeof(uint64_t));
    memcpy(t->tok_off, off, ((size_t)t->vocab_size + 1) * sizeof(uint64_t));
    t->tok_bytes = core_calloc(off[t->vocab_size] + 1, 1);
    memcpy(t->tok_bytes, bytes, off[t->vocab_size]);
}

Tokenizer *tok_byte_new(void) {
    Tokenizer *t = core_calloc(1, sizeof *t);
    t->kind = TOK_BYTE;
    t->vocab_size = TOK_FIRST_MERGE;
    t->eod_id = TOK_EOD;
    t->megac_layout = 1;
    for (int b = 0; b < TOK_N_BYTES; b++) t->byte_ids[b] = (uint32_t)b;
    uint64_t *off;
    uint8_t *bytes = megac_token_bytes(NULL, 0, &off);
    copy_token_bytes(t, off, bytes);
    free(off);
    free(bytes);
    return t;
}

static int is_special(const Tokenizer *t, uint32_t id) { return id == (uint32_t)t->eod_id || t->special[id]; }

// The checks of tok_bpe_new_layout on ids, bytes and merges; fills byte_ids and merge_id.
static int check_layout(Tokenizer *t, char *err, size_t errlen) {
    int V = t->vocab_size, have[TOK_N_BYTES] = {0};
    for (int id = 0; id < V; id++) {
        if (is_special(t, (uint32_t)id) || t->tok_off[id + 1] - t->tok_off[id] != 1) continue;
        unsigned b = t->tok_bytes[t->tok_off[id]];
        if (have[b]) {
            snprintf(err, errlen, "ids %u and %d are both the byte %u", t->byte_ids[b], id, b);
            return -1;
        }
        have[b] = 1;
        t->byte_ids[b] = (uint32_t)id;
    }
    for (int b = 0; b < TOK_N_BYTES; b++)
        if (!have[b]) {
            snprintf(err, errlen, "byte %d (0x%02x) has no token: not a byte-level vocabulary", b, b);
            return -1;
        }
    uint8_t *made = core_calloc((size_t)V, 1);  // bytes and the ids of lower-ranked merges
    for (int b = 0; b < TOK_N_BYTES; b++) made[t->byte_ids[b]] = 1;
    int rc = 0;
    for (int k = 0; k < t->n_merges && rc == 0; k++) {
        uint32_t a = t->merges[2 * k], b = t->merges[2 * k + 1], c = t->merge_ids[k];
        size_t la = t->tok_off[a + 1] - t->tok_off[a], lb = t->tok_off[b + 1] - t->tok_off[b];
        int inserted = 0;
        if (!made[a] || !made[b]) {
            snprintf(err, errlen, "merge %d [%u, %u] uses a token that is neither a byte nor made by a "
                     "lower-ranked merge", k, a, b);
            rc = -1;
        } else if (is_special(t, c) || t->tok_off[c + 1] - t->tok_off[c] != la + lb ||
                   memcmp(t->tok_bytes + t->tok_off[c], t->tok_bytes + t->tok_off[a], la) ||
                   memcmp(t->tok_bytes + t->tok_off[c] + la, t->tok_bytes + t->tok_off[b], lb)) {
            snprintf(err, errlen, "merge %d [%u, %u] makes id %u, whose bytes are not theirs", k, a, b, c);
            rc = -1;
        } else {
            int64_t *v = data_u64map_put(&t->merge_id, pair_key(a, b), k, &inserted);
            if (!inserted) {
                snprintf(err, errlen, "merge %d [%u, %u] repeats merge %lld", k, a, b, (long long)*v);
                rc = -1;
            }
        }
        made[c] = 1;
    }
    free(made);
    return rc;
}

// The layout's sizes and ids in range: 0, or -1 with the reason in err.
static int layout_in_range(const TokLayout *l, char *err, size_t errlen) {
    int V = l->vocab_size;
    if (V < 1 || V > TOK_MAX_VOCAB || l->eod_id < 0 || l->eod_id >= V) {
        snprintf(err, errlen, "vocab_size %d / eod_id %d: must be 1..%d / below vocab_size", V, l->eod_id, TOK_MAX_VOCAB);
        return -1;
    }
    if (l->n_merges < 0 || l->n_merges > V || l->n_prefix < 0 || l->n_prefix > TOK_MAX_AFFIX ||
        l->n_suffix < 0 || l->n_suffix > TOK_MAX_AFFIX) {
        snprintf(err, errlen, "%d merges, %d + %d ids around each document: too many", l->n_merges,
                 l->n_prefix, l->n_suffix);
        return -1;
    }
    for (int k = 0; k < 3 * l->n_merges; k++)
        if (l->merges[k] >= (uint32_t)V) {
            snprintf(err, errlen, "merge %d uses id %u >= vocab_size %d", k / 3, l->merges[k], V);
            return -1;
        }
    if (l->max_piece < 1 || l->max_piece > TOK_MAX_PIECE_LIMIT) {
        snprintf(err, errlen, "max_piece %d: must be 1..%d", l->max_piece, TOK_MAX_PIECE_LIMIT);
        return -1;
    }
    return 0;
}

// ignore_merges: a piece equal to a whole token is that token (t->whole and whole_id).
static void index_whole_tokens(Tokenizer *t) {
    int V = t->vocab_size;
    t->whole_id = core_calloc((size_t)V + 1, sizeof(uint32_t));
    for (int id = 0; id < V; id++) {
        size_t n = t->tok_off[id + 1] - t->tok_off[id];
        if (is_special(t, (uint32_t)id) || n == 0) continue;
        int inserted;
        int64_t k = data_strmap_intern(&t->whole, t->tok_bytes + t->tok_off[id], n, &inserted);
        if (inserted) t->whole_id[k] = (uint32_t)id;
    }
}

Tokenizer *tok_bpe_new_layout(const TokLayout *l, char *err, size_t errlen) {
    int V = l->vocab_size;
    if (layout_in_range(l, err, errlen)) return NULL;
    TokPretok *pre = tok_pretok_new(l->pattern, l->max_piece, err, errlen);
    if (!pre) return NULL;
    Tokenizer *t = core_calloc(1, sizeof *t);
    t->kind = TOK_BPE;
    t->vocab_size = V;
    t->eod_id = l->eod_id;
    t->n_merges = l->n_merges;
    t->merges = core_calloc((size_t)l->n_merges * 2 + 1, sizeof(uint32_t));
    t->merge_ids = core_calloc((size_t)l->n_merges + 1, sizeof(uint32_t));
    for (int k = 0; k < l->n_merges; k++) {
        t->merges[2 * k] = l->merges[3 * k];
        t->merges[2 * k + 1] = l->merges[3 * k + 1];
        t->merge_ids[k] = l->merges[3 * k + 2];
    }
    t->special = core_calloc((size_t)V, 1);
    if (l->special) memcpy(t->special, l->special, (size_t)V);
    t->pre = pre;
    t->max_piece = l->max_piece;
    t->pattern = strdup(l->pattern);
    t->ignore_merges = l->ignore_merges;
    for (int i = 0; i < l->n_prefix; i++) t->prefix[i] = l->prefix[i];
    for (int i = 0; i < l->n_suffix; i++) t->suffix[i] = l->suffix[i];
    t->n_prefix = l->n_prefix;
    t->n_suffix = l->n_suffix;
    copy_token_bytes(t, l->tok_off, l->tok_bytes);
    data_u64map_init(&t->merge_id, (size_t)l->n_merges);
    data_strmap_init(&t->whole);
    data_strmap_init(&t->cache);
    t->cache_start = core_calloc(CACHE_MAX_PIECES + 1, sizeof(uint64_t));
    t->scratch = core_calloc((size_t)l->max_piece, sizeof(uint32_t));
    if (check_layout(t, err, errlen) != 0) {
        tok_free(t);
        return NULL;
    }
    for (int i = 0; i < t->n_prefix + t->n_suffix; i++)
        if ((i < t->n_prefix ? t->prefix[i] : t->suffix[i - t->n_prefix]) >= (uint32_t)V) {
            snprintf(err, errlen, "an id put around documents is >= vocab_size %d", V);
            tok_free(t);
            return NULL;
        }
    if (t->ignore_merges) index_whole_tokens(t);
    return t;
}

Tokenizer *tok_bpe_new(const uint32_t *merges, int n_merges, const char *pattern, int max_piece,
                       char *err, size_t errlen) {
    if (n_merges < 0 || n_merges > TOK_MAX_VOCAB - TOK_FIRST_MERGE) {
        snprintf(err, errlen, "%d merges: must be 0..%d", n_merges, TOK_MAX_VOCAB - TOK_FIRST_MERGE);
        return NULL;
    }
    for (int k = 0; k < n_merges; k++) {
        uint32_t a = merges[2 * k], b = merges[2 * k + 1], id = (uint32_t)(TOK_FIRST_MERGE + k);
        if (a >= id || b >= id || a == TOK_EOD || b == TOK_EOD) {
            snprintf(err, errlen, "merge %d [%u, %u] uses an id that is EOD or not defined before it", k, a, b);
            return NULL;
        }
    }
    uint32_t *m3 = core_calloc((size_t)n_merges * 3 + 1, sizeof(uint32_t));
    for (int k = 0; k < n_merges; k++) {
        m3[3 * k] = merges[2 * k];
        m3[3 * k + 1] = merges[2 * k + 1];
        m3[3 * k + 2] = (uint32_t)(TOK_FIRST_MERGE + k);
    }
    uint64_t *off;
    uint8_t *bytes = megac_token_bytes(merges, n_merges, &off);
    TokLayout l = {.vocab_size = TOK_FIRST_MERGE + n_merges, .eod_id = TOK_EOD, .tok_off = off,
                   .tok_bytes = bytes, .merges = m3, .n_merges = n_merges, .pattern = pattern,
                   .max_piece = max_piece};
    Tokenizer *t = tok_bpe_new_layout(&l, err, errlen);
    if (t) t->megac_layout = 1;
    free(m3);
    free(off);
    free(bytes);
    return t;
}

void tok_free(Tokenizer *t) {
    if (!t) return;
    free(t->merges);
    free(t->merge_ids);
    free(t->special);
    free(t->pattern);
    data_u64map_free(&t->merge_id);
    free(t->whole_id);
    free(t->tok_off);
    free(t->tok_bytes);
    tok_pretok_free(t->pre);
    if (t->kind == TOK_BPE) {
        data_strmap_free(&t->cache);
        data_strmap_free(&t->whole);
    }
    free(t->cache_start);
    free(t->cache_ids.v);
    free(t->scratch);
    tok_spm_free(t->spm);
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

// BPE inside one piece: repeatedly apply the lowest-ranked merge present. s is (n) symbols.
static size_t bpe_piece(const Tokenizer *t, uint32_t *s, size_t n) {
    while (n >= 2) {
        int64_t best = INT64_MAX;
        for (size_t i = 0; i + 1 < n; i++) {
            const int64_t *rank = data_u64map_get(&t->merge_id, pair_key(s[i], s[i + 1]));
            if (rank && *rank < best) best = *rank;
        }
        if (best == INT64_MAX) break;
        const uint32_t *m = &t->merges[2 * best];
        n = tok_merge_pair(s, n, m[0], m[1], t->merge_ids[best]);
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
    int64_t whole = t->ignore_merges ? data_strmap_find(&t->whole, piece, n) : -1;
    size_t m = 1;
    if (whole >= 0) {
        t->scratch[0] = t->whole_id[whole];
    } else {
        for (size_t i = 0; i < n; i++) t->scratch[i] = t->byte_ids[piece[i]];
        m = bpe_piece(t, t->scratch, n);
    }
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
    if (t->kind == TOK_BYTE) {  // ids are the bytes
        tok_ids_reserve(out, n);
        for (size_t i = 0; i < n; i++) out->v[out->n++] = text[i];
        return;
    }
    if (t->kind == TOK_SPM) {  // the SentencePiece family: its own normalizer and segmentation
        tok_spm_encode(t->spm, text, n, out);
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

// ---- the byte-level alphabet (GPT-2's bytes_to_unicode) ------------------------------------
// The printable bytes ('!'..'~', 0xA1..0xAC, 0xAE..0xFF) stand for themselves; the other 68
// (0..0x20, 0x7F..0xA0, 0xAD), in increasing order, for code points 256, 257, ...

static int printable(unsigned x) { return (x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || x >= 0xAE; }

int tok_byte_char(unsigned b, char out[3]) {
    unsigned cp = b;
    if (!printable(b)) cp = 256 + (b <= 0x20 ? b : b <= 0xA0 ? 33 + (b - 0x7F) : 67);
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    out[0] = (char)(0xC0 | (cp >> 6));  // every code point is < 0x800: two bytes
    out[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
}

void tok_alpha_decode(const char *s, size_t n, TokBytes *out) {
    const uint8_t *u = (const uint8_t *)s;
    for (size_t i = 0; i < n;) {
        size_t len = u[i] < 0x80 ? 1 : (u[i] >> 5) == 6 ? 2 : (u[i] >> 4) == 14 ? 3 : 4;
        if (i + len > n) len = n - i;
        unsigned cp = len == 1 ? u[i] : len == 2 ? (unsigned)(u[i] & 0x1F) << 6 | (u[i + 1] & 0x3F) : 0x110000;
        int b = -1;
        if (cp < 256 && printable(cp)) b = (int)cp;
        else if (cp >= 256 && cp < 256 + 68) {
            unsigned k = cp - 256;
            b = (int)(k < 33 ? k : k < 67 ? 0x7F + (k - 33) : 0xAD);
        }
        if (b >= 0) {
            uint8_t c = (uint8_t)b;
            tok_bytes_append(out, &c, 1);
        } else {
            tok_bytes_append(out, u + i, len);
        }
        i += len;
    }
}
