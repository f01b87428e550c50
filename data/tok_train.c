// data/tok_train.c: BPE merge learning with incremental pair counts (see tok_train.h).
#include "tok_train.h"
#include "core/check.h"  // defines: core_calloc, core_fatal
#include "core/timer.h"  // defines: core_now

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct TokTrainer {
    TokPretok *pre;
    char *pattern;
    int max_piece;
    DataStrMap words;     // unique words
    int64_t *count;       // (words capacity) occurrences of each word
    int64_t count_cap;
    TokTrainStats stats;
};

// Merge-time state. Words are symbol strings; pairs are indexed p = 0, 1, ...
typedef struct {
    int64_t n_words;
    uint32_t *sym;        // (total bytes) symbols of all words, word w at sym[off[w]..]
    int64_t *off;         // (n_words) start of each word
    int32_t *len;         // (n_words) current length (shrinks as merges apply)
    int64_t *wcount;      // (n_words) occurrences
    int64_t *wstamp;      // (n_words) last merge that visited the word
    DataU64Map pair_of;   // (a << 32 | b) -> p
    uint64_t *pkey;       // (n_pairs) the pair
    int64_t *pcount;      // (n_pairs) occurrences over the corpus
    int64_t *phead;       // (n_pairs) first node of the pair's word list, -1 when empty
    int64_t *pstamp;      // (n_pairs) last merge that touched the pair
    int64_t n_pairs, pair_cap;
    int64_t *nword, *nnext;  // (n_nodes) word-list nodes: word, next node (-1 ends)
    int64_t n_nodes, node_cap;
    int64_t *heap;        // (heap_cap, 2): (count, p) entries, max-heap
    int64_t n_heap, heap_cap;
} Merger;

static void *grow(void *p, int64_t n, size_t size) {
    void *q = realloc(p, (size_t)n * size);
    if (!q) core_fatal("out of memory growing a training table to %lld entries", (long long)n);
    return q;
}

TokTrainer *tok_trainer_new(const char *pattern, int max_piece, char *err, size_t errlen) {
    TokPretok *pre = tok_pretok_new(pattern, max_piece, err, errlen);
    if (!pre) return NULL;
    TokTrainer *tr = core_calloc(1, sizeof *tr);
    tr->pre = pre;
    tr->pattern = strdup(pattern);
    tr->max_piece = max_piece;
    data_strmap_init(&tr->words);
    return tr;
}

void tok_trainer_free(TokTrainer *tr) {
    if (!tr) return;
    tok_pretok_free(tr->pre);
    free(tr->pattern);
    data_strmap_free(&tr->words);
    free(tr->count);
    free(tr);
}

static void count_piece(void *ctx, const uint8_t *piece, size_t n) {
    TokTrainer *tr = ctx;
    int64_t id = data_strmap_intern(&tr->words, piece, n, NULL);
    if (id >= tr->count_cap) {
        int64_t cap = tr->count_cap ? 2 * tr->count_cap : 65536;
        tr->count = grow(tr->count, cap, sizeof(int64_t));
        memset(tr->count + tr->count_cap, 0, (size_t)(cap - tr->count_cap) * sizeof(int64_t));
        tr->count_cap = cap;
    }
    tr->count[id]++;
    tr->stats.n_pieces++;
}

void tok_trainer_add(TokTrainer *tr, const uint8_t *text, size_t n) {
    tr->stats.n_bytes += (int64_t)n;
    tok_pretok_split(tr->pre, text, n, count_piece, tr);
}

// ---- the max-heap of (count, pair); ties go to the smaller pair key ------------------------

static int heap_above(const Merger *m, int64_t i, int64_t j) {
    int64_t ci = m->heap[2 * i], cj = m->heap[2 * j];
    if (ci != cj) return ci > cj;
    return m->pkey[m->heap[2 * i + 1]] < m->pkey[m->heap[2 * j + 1]];
}

static void heap_swap(Merger *m, int64_t i, int64_t j) {
    for (int k = 0; k < 2; k++) {
        int64_t t = m->heap[2 * i + k];
        m->heap[2 * i + k] = m->heap[2 * j + k];
        m->heap[2 * j + k] = t;
    }
}

static void heap_push(Merger *m, int64_t count, int64_t p) {
    if (m->n_heap == m->heap_cap) {
        m->heap_cap = m->heap_cap ? 2 * m->heap_cap : 65536;
        m->heap = grow(m->heap, 2 * m->heap_cap, sizeof(int64_t));
    }
    int64_t i = m->n_heap++;
    m->heap[2 * i] = count;
    m->heap[2 * i + 1] = p;
    while (i > 0 && heap_above(m, i, (i - 1) / 2)) {
        heap_swap(m, i, (i - 1) / 2);
        i = (i - 1) / 2;
    }
}

static void heap_pop(Merger *m, int64_t *count, int64_t *p) {
    *count = m->heap[0];
    *p = m->heap[1];
    m->n_heap--;
    m->heap[0] = m->heap[2 * m->n_heap];
    m->heap[1] = m->heap[2 * m->n_heap + 1];
    for (int64_t i = 0;;) {
        int64_t l = 2 * i + 1, r = l + 1, top = i;
        if (l < m->n_heap && heap_above(m, l, top)) top = l;
        if (r < m->n_heap && heap_above(m, r, top)) top = r;
        if (top == i) break;
        heap_swap(m, i, top);
        i = top;
    }
}

// ---- pairs and their word lists ------------------------------------------------------------

static int64_t pair_index(Merger *m, uint32_t a, uint32_t b) {
    uint64_t key = (uint64_t)a << 32 | b;
    int inserted;
    int64_t *v = data_u64map_put(&m->pair_of, key, m->n_pairs, &inserted);
    if (!inserted) return *v;
    if (m->n_pairs == m->pair_cap) {
        m->pair_cap = m->pair_cap ? 2 * m->pair_cap : 65536;
        m->pkey = grow(m->pkey, m->pair_cap, sizeof(uint64_t));
        m->pcount = grow(m->pcount, m->pair_cap, sizeof(int64_t));
        m->phead = grow(m->phead, m->pair_cap, sizeof(int64_t));
        m->pstamp = grow(m->pstamp, m->pair_cap, sizeof(int64_t));
    }
    int64_t p = m->n_pairs++;
    m->pkey[p] = key;
    m->pcount[p] = 0;
    m->phead[p] = -1;
    m->pstamp[p] = 0;
    return p;
}

// Adds word w to pair p's list unless it is already at the head.
static void list_add(Merger *m, int64_t p, int64_t w) {
    if (m->phead[p] >= 0 && m->nword[m->phead[p]] == w) return;
    if (m->n_nodes == m->node_cap) {
        m->node_cap = m->node_cap ? 2 * m->node_cap : 1 << 20;
        m->nword = grow(m->nword, m->node_cap, sizeof(int64_t));
        m->nnext = grow(m->nnext, m->node_cap, sizeof(int64_t));
    }
    int64_t node = m->n_nodes++;
    m->nword[node] = w;
    m->nnext[node] = m->phead[p];
    m->phead[p] = node;
}

// Copies the counted words into symbol strings and counts every adjacent pair.
static void merger_init(Merger *m, const TokTrainer *tr) {
    memset(m, 0, sizeof *m);
    const DataStrMap *ws = &tr->words;
    m->n_words = ws->n;
    m->sym = core_calloc(ws->n_bytes + 1, sizeof(uint32_t));
    m->off = core_calloc((size_t)ws->n + 1, sizeof(int64_t));
    m->len = core_calloc((size_t)ws->n + 1, sizeof(int32_t));
    m->wcount = core_calloc((size_t)ws->n + 1, sizeof(int64_t));
    m->wstamp = core_calloc((size_t)ws->n + 1, sizeof(int64_t));
    data_u64map_init(&m->pair_of, 1 << 16);
    int64_t at = 0;
    for (int64_t w = 0; w < ws->n; w++) {
        size_t n;
        const uint8_t *s = data_strmap_key(ws, w, &n);
        m->off[w] = at;
        m->len[w] = (int32_t)n;
        m->wcount[w] = tr->count[w];
        for (size_t i = 0; i < n; i++) m->sym[at + (int64_t)i] = s[i];
        for (size_t i = 0; i + 1 < n; i++) {
            int64_t p = pair_index(m, s[i], s[i + 1]);
            m->pcount[p] += m->wcount[w];
            list_add(m, p, w);
        }
        at += (int64_t)n;
    }
    for (int64_t p = 0; p < m->n_pairs; p++) heap_push(m, m->pcount[p], p);
}

static void merger_free(Merger *m) {
    free(m->sym); free(m->off); free(m->len); free(m->wcount); free(m->wstamp);
    data_u64map_free(&m->pair_of);
    free(m->pkey); free(m->pcount); free(m->phead); free(m->pstamp);
    free(m->nword); free(m->nnext); free(m->heap);
}

// Applies merge (a, b) -> z to word w, moving its pair counts; pairs with z join *touched.
static void merge_word(Merger *m, int64_t w, uint32_t a, uint32_t b, uint32_t z, int64_t stamp,
                       int64_t **touched, int64_t *n_touched, int64_t *touched_cap) {
    uint32_t *s = m->sym + m->off[w];
    size_t n = (size_t)m->len[w];
    int64_t c = m->wcount[w];
    for (size_t i = 0; i + 1 < n; i++) m->pcount[pair_index(m, s[i], s[i + 1])] -= c;
    n = tok_merge_pair(s, n, a, b, z);
    m->len[w] = (int32_t)n;
    for (size_t i = 0; i + 1 < n; i++) {
        int64_t q = pair_index(m, s[i], s[i + 1]);
        m->pcount[q] += c;
        if (s[i] != z && s[i + 1] != z) continue;
        list_add(m, q, w);
        if (m->pstamp[q] == stamp) continue;
        m->pstamp[q] = stamp;
        if (*n_touched == *touched_cap) {
            *touched_cap = *touched_cap ? 2 * *touched_cap : 4096;
            *touched = grow(*touched, *touched_cap, sizeof(int64_t));
        }
        (*touched)[(*n_touched)++] = q;
    }
}

static int has_pair(const uint32_t *s, int32_t n, uint32_t a, uint32_t b) {
    for (int32_t i = 0; i + 1 < n; i++)
        if (s[i] == a && s[i + 1] == b) return 1;
    return 0;
}

// Pops the most frequent live pair; -1 when none occurs at least twice.
static int64_t best_pair(Merger *m) {
    while (m->n_heap > 0) {
        int64_t c, p;
        heap_pop(m, &c, &p);
        if (c == m->pcount[p]) return c >= 2 ? p : -1;
        if (m->pcount[p] > 0) heap_push(m, m->pcount[p], p);  // stale entry: re-file
    }
    return -1;
}

Tokenizer *tok_trainer_finish(TokTrainer *tr, int vocab_size, int progress, TokTrainStats *stats) {
    double t0 = core_now(), last = t0;
    int target = vocab_size - TOK_FIRST_MERGE;
    Merger m;
    merger_init(&m, tr);
    uint32_t *merges = core_calloc((size_t)(target > 0 ? target : 0) * 2 + 1, sizeof(uint32_t));
    int64_t *touched = NULL, n_touched = 0, touched_cap = 0;
    int k = 0;
    for (; k < target; k++) {
        int64_t p = best_pair(&m);
        if (p < 0) break;
        uint32_t a = (uint32_t)(m.pkey[p] >> 32), b = (uint32_t)m.pkey[p];
        uint32_t z = (uint32_t)(TOK_FIRST_MERGE + k);
        merges[2 * k] = a;
        merges[2 * k + 1] = b;
        n_touched = 0;
        for (int64_t node = m.phead[p]; node >= 0; node = m.nnext[node]) {
            int64_t w = m.nword[node];
            if (m.wstamp[w] == k + 1) continue;
            m.wstamp[w] = k + 1;
            if (has_pair(m.sym + m.off[w], m.len[w], a, b))
                merge_word(&m, w, a, b, z, k + 1, &touched, &n_touched, &touched_cap);
        }
        m.phead[p] = -1;
        for (int64_t i = 0; i < n_touched; i++)
            if (m.pcount[touched[i]] > 0) heap_push(&m, m.pcount[touched[i]], touched[i]);
        if (progress && core_now() - last > 0.5) {
            last = core_now();
            fprintf(stderr, "\rmegac: tokenizer: %d / %d merges, %.0f merges/s   ", k + 1, target,
                    (k + 1) / (last - t0));
        }
    }
    if (progress) fprintf(stderr, "\r%70s\r", "");
    char err[256];
    Tokenizer *t = tok_bpe_new(merges, k, tr->pattern, tr->max_piece, err, sizeof err);
    if (!t) core_fatal("tokenizer training produced invalid merges: %s", err);
    tr->stats.n_words = tr->words.n;
    tr->stats.n_merges = k;
    tr->stats.merge_seconds = core_now() - t0;
    if (stats) *stats = tr->stats;
    free(merges);
    free(touched);
    merger_free(&m);
    return t;
}
