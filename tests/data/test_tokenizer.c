// tests/data/test_tokenizer.c: UTF-8 validation, pre-tokenisation, byte-level and BPE
// tokenizers: training on a known corpus gives the expected merges; encode = applying the
// merges in order (reference implementation below); round trips on random bytes and UTF-8;
// encoding in parts cut where docs.c cuts = encoding whole; the JSON file round-trips and
// bad files are refused with a message naming them.
#include "data/tok_train.h"
#include "data/tokenizer.h"
#include "data/utf8.h"
#include "tests/testing.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static uint64_t rng_next(uint64_t *s) {  // splitmix64
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

// Random valid UTF-8: ASCII words, spaces, newlines, accented letters, CJK, emoji, digits.
static size_t random_utf8(uint64_t *rng, uint8_t *out, size_t cap) {
    static const char *parts[] = {"the", " cat", " sat", "\n", "  ", " é", "ñ", "über", " 東京", "😀",
                                  " 123", "4567", "!", "?!", " don't", " I'll", "\t", "\r\n", "ß", "\n\n%\n",
                                  " (x)", "Ωmega", " a", "b", "\xcc\x81"};
    size_t n = 0;
    while (1) {
        const char *p = parts[rng_next(rng) % (sizeof parts / sizeof parts[0])];
        size_t len = strlen(p);
        if (n + len > cap) return n;
        memcpy(out + n, p, len);
        n += len;
    }
}

static void check_utf8(void) {
    const char *ok[] = {"", "plain", "h\xc3\xa9llo", "\xe2\x82\xac", "\xf0\x9d\x84\x9e", "\xf4\x8f\xbf\xbf"};
    for (int i = 0; i < 6; i++) EXPECT(data_utf8_invalid_at((const uint8_t *)ok[i], strlen(ok[i])) == -1, "%d", i);
    const char *bad[] = {"\x80", "a\xc0\x80", "ab\xed\xa0\x80", "\xf4\x90\x80\x80", "\xe2\x82", "\xff", "\xc3"};
    const long long at[] = {0, 1, 2, 0, 0, 0, 0};
    for (int i = 0; i < 7; i++) EXPECT_EQ_INT(data_utf8_invalid_at((const uint8_t *)bad[i], strlen(bad[i])), at[i]);
}

typedef struct { TokBytes cat; size_t n, longest; int joined_cut; } Pieces;

static void collect(void *ctx, const uint8_t *s, size_t n) {
    Pieces *p = ctx;
    tok_bytes_append(&p->cat, s, n);
    p->n++;
    if (n > p->longest) p->longest = n;
    for (size_t i = 0; i + 1 < n; i++)
        if (s[i] == '\n' && s[i + 1] > ' ' && s[i + 1] < 0x7f) p->joined_cut = 1;
}

// Pieces cover the input exactly, respect max_piece, never join "\n" + non-space ASCII.
static void check_pretok(void) {
    char err[256];
    TokPretok *pre = tok_pretok_new(TOK_DEFAULT_PATTERN, 16, err, sizeof err);
    EXPECT(pre != NULL, "%s", err);
    uint64_t rng = 1;
    uint8_t buf[4096];
    for (int round = 0; round < 40; round++) {
        size_t n = round % 2 ? random_utf8(&rng, buf, sizeof buf) : (size_t)(rng_next(&rng) % sizeof buf);
        if (round % 2 == 0)
            for (size_t i = 0; i < n; i++) buf[i] = (uint8_t)rng_next(&rng);
        Pieces p = {0};
        tok_pretok_split(pre, buf, n, collect, &p);
        EXPECT(p.cat.n == n && (n == 0 || !memcmp(p.cat.v, buf, n)), "round %d: pieces do not cover the input", round);
        EXPECT(p.longest <= 16, "round %d: piece of %zu bytes", round, p.longest);
        EXPECT(!p.joined_cut, "round %d: a piece joins \\n and a non-space character", round);
        free(p.cat.v);
    }
    Pieces p = {0};
    const char *s = "Hello world, it's 12345 o'clock!\n  indented";
    tok_pretok_split(pre, (const uint8_t *)s, strlen(s), collect, &p);
    EXPECT_EQ_INT(p.n, 13);  // Hello| world|,| it|'s| 123|45| o|'clock|!|\n| | indented
    free(p.cat.v);
    tok_pretok_free(pre);
    EXPECT(tok_pretok_new("(unclosed", 16, err, sizeof err) == NULL && strstr(err, "pattern"), "%s", err);
}

static void roundtrip(Tokenizer *t, const uint8_t *s, size_t n, const char *what) {
    TokIds ids = {0};
    TokBytes back = {0};
    tok_encode(t, s, n, &ids);
    EXPECT_EQ_INT(tok_decode(t, ids.v, ids.n, &back), 0);
    EXPECT(back.n == n && (n == 0 || !memcmp(back.v, s, n)), "%s: round trip of %zu bytes failed", what, n);
    for (size_t i = 0; i < ids.n; i++)
        if (ids.v[i] >= (uint32_t)t->vocab_size || ids.v[i] == TOK_EOD) {
            EXPECT(0, "%s: id %u out of range", what, ids.v[i]);
            break;
        }
    free(ids.v);
    free(back.v);
}

// Reference encoder: apply every merge, in training order, to each piece.
typedef struct { const Tokenizer *t; TokIds *out; } RefCtx;
static void ref_piece(void *ctx, const uint8_t *s, size_t n) {
    RefCtx *c = ctx;
    uint32_t *sym = malloc(sizeof(uint32_t) * (n + 1));
    for (size_t i = 0; i < n; i++) sym[i] = s[i];
    for (int k = 0; k < c->t->n_merges; k++)
        n = tok_merge_pair(sym, n, c->t->merges[2 * k], c->t->merges[2 * k + 1], (uint32_t)(TOK_FIRST_MERGE + k));
    for (size_t i = 0; i < n; i++) tok_ids_push(c->out, sym[i]);
    free(sym);
}

static void check_bpe_known(void) {
    char err[256];
    TokTrainer *tr = tok_trainer_new(TOK_DEFAULT_PATTERN, TOK_DEFAULT_MAX_PIECE, err, sizeof err);
    const char *text = "ab ab ab ab cd";
    tok_trainer_add(tr, (const uint8_t *)text, strlen(text));
    TokTrainStats st;
    Tokenizer *t = tok_trainer_finish(tr, 300, 0, &st);
    // Pieces ab, " ab" x3, " cd": (a,b) occurs 4 times, then (" ", ab) 3 times, then nothing twice.
    EXPECT_EQ_INT(t->vocab_size, 259);
    EXPECT(t->merges[0] == 'a' && t->merges[1] == 'b', "merge 0 = (%u, %u)", t->merges[0], t->merges[1]);
    EXPECT(t->merges[2] == ' ' && t->merges[3] == 257, "merge 1 = (%u, %u)", t->merges[2], t->merges[3]);
    EXPECT_EQ_INT(st.n_words, 3);
    TokIds ids = {0};
    tok_encode(t, (const uint8_t *)text, strlen(text), &ids);
    EXPECT_EQ_INT(ids.n, 7);  // 257 258 258 258 ' ' c d
    free(ids.v);
    tok_free(t);
    tok_trainer_free(tr);
}

// Is text[i] the start of a part: "x\n" | "y" with x, y printable non-space ASCII?
static int is_cut(const uint8_t *t, size_t i) {
    return i >= 2 && t[i - 1] == '\n' && t[i - 2] > ' ' && t[i - 2] < 0x7f && t[i] > ' ' && t[i] < 0x7f;
}

static size_t safe_cut(const uint8_t *t, size_t n, size_t from) {
    while (from < n && !is_cut(t, from)) from++;
    return from;
}

// Trains on random UTF-8 text; checks encode against the reference and the round trips.
static Tokenizer *check_bpe_random(void) {
    char err[256];
    uint64_t rng = 42;
    size_t cap = 200000;
    uint8_t *corpus = malloc(cap), *buf = malloc(8192);
    size_t n = random_utf8(&rng, corpus, cap);
    TokTrainer *tr = tok_trainer_new(TOK_DEFAULT_PATTERN, TOK_DEFAULT_MAX_PIECE, err, sizeof err);
    size_t cut = safe_cut(corpus, n, n / 2);
    tok_trainer_add(tr, corpus, cut);  // in two parts: counting is additive
    tok_trainer_add(tr, corpus + cut, n - cut);
    Tokenizer *t = tok_trainer_finish(tr, 600, 0, NULL);
    tok_trainer_free(tr);
    EXPECT(t->vocab_size > 300, "only %d ids learned", t->vocab_size);
    TokIds ids = {0}, ref = {0};
    tok_encode(t, corpus, n, &ids);
    EXPECT(ids.n * 2 < n, "%zu bytes -> %zu ids: BPE does not compress its training text", n, ids.n);
    RefCtx rc = {t, &ref};
    tok_pretok_split(t->pre, corpus, n, ref_piece, &rc);
    EXPECT(ids.n == ref.n && !memcmp(ids.v, ref.v, ids.n * sizeof(uint32_t)), "encode != merges in order");
    for (int round = 0; round < 30; round++) {
        size_t m = rng_next(&rng) % 8192;
        for (size_t i = 0; i < m; i++) buf[i] = (uint8_t)rng_next(&rng);
        roundtrip(t, buf, m, "random bytes");
        m = random_utf8(&rng, buf, 8192 - rng_next(&rng) % 8000);
        roundtrip(t, buf, m, "random UTF-8");
    }
    // Training twice gives the same merges (ties broken by pair, not by hash order).
    tr = tok_trainer_new(TOK_DEFAULT_PATTERN, TOK_DEFAULT_MAX_PIECE, err, sizeof err);
    tok_trainer_add(tr, corpus, n);
    Tokenizer *again = tok_trainer_finish(tr, 600, 0, NULL);
    tok_trainer_free(tr);
    EXPECT(again->n_merges == t->n_merges && !memcmp(again->merges, t->merges, 8 * (size_t)t->n_merges),
           "training is not deterministic");
    tok_free(again);
    free(ids.v);
    free(ref.v);
    free(corpus);
    free(buf);
    return t;
}

// Encoding parts cut as docs.c cuts equals encoding the whole text.
static void check_cuts(Tokenizer *t) {
    uint64_t rng = 9;
    uint8_t *text = malloc(50000);
    size_t n = random_utf8(&rng, text, 50000);
    TokIds whole = {0}, parts = {0};
    tok_encode(t, text, n, &whole);
    size_t start = 0;
    for (size_t i = 1; i < n; i++)
        if (is_cut(text, i) && rng_next(&rng) % 2) {
            tok_encode(t, text + start, i - start, &parts);
            start = i;
        }
    tok_encode(t, text + start, n - start, &parts);
    EXPECT(whole.n == parts.n && !memcmp(whole.v, parts.v, whole.n * sizeof(uint32_t)),
           "encoding in parts differs (%zu vs %zu ids)", whole.n, parts.n);
    free(whole.v);
    free(parts.v);
    free(text);
}

static void check_files(Tokenizer *t) {
    char path[] = "/tmp/megac-test-tok-XXXXXX", err[512];
    int fd = mkstemp(path);
    close(fd);
    EXPECT_EQ_INT(tok_save(t, path, err, sizeof err), 0);
    Tokenizer *u = tok_load(path, err, sizeof err);
    EXPECT(u && u->n_merges == t->n_merges && !memcmp(u->merges, t->merges, 8 * (size_t)t->n_merges),
           "saved and loaded tokenizer differ: %s", u ? "" : err);
    tok_free(u);
    u = tok_load("byte", err, sizeof err);
    EXPECT(u && u->kind == TOK_BYTE && u->vocab_size == 257, "byte");
    uint8_t all[256];
    for (int i = 0; i < 256; i++) all[i] = (uint8_t)i;
    roundtrip(u, all, 256, "byte tokenizer");
    EXPECT_EQ_INT(tok_save(u, path, err, sizeof err), 0);  // saved as "byte\n": loads back
    tok_free(u);
    u = tok_load(path, err, sizeof err);
    EXPECT(u && u->kind == TOK_BYTE, "a saved byte tokenizer does not load: %s", u ? "" : err);
    tok_free(u);
    EXPECT(tok_load("/nonexistent/tok.json", err, sizeof err) == NULL && strstr(err, "/nonexistent/tok.json"), "%s", err);
    const char *bad[][2] = {
        {"{\"format\": \"megac-bpe\"", "invalid JSON"},
        {"[1, 2]", "not a megac tokenizer"},
        {"{\"format\":\"megac-bpe\",\"version\":3}", "version 3"},
        {"{\"format\":\"megac-bpe\",\"version\":1,\"vocab_size\":258,\"eod_id\":256,\"max_piece\":8,"
         "\"pattern\":\"x\",\"merges\":[[300,1]]}", "not defined"},
        {"{\"format\":\"megac-bpe\",\"version\":1,\"vocab_size\":259,\"eod_id\":256,\"max_piece\":8,"
         "\"pattern\":\"x\",\"merges\":[[1,2],[1,2]]}", "repeats"},
        {"{\"format\":\"megac-bpe\",\"version\":1,\"vocab_size\":260,\"eod_id\":256,\"max_piece\":8,"
         "\"pattern\":\"x\",\"merges\":[[1,2]]}", "merges but"},
        {"{\"format\":\"megac-bpe\",\"version\":1,\"vocab_size\":257,\"eod_id\":256,\"max_piece\":8,"
         "\"pattern\":\"(\",\"merges\":[]}", "pattern"},
        {"{\"format\":\"megac-bpe\",\"version\":1,\"vocab_size\":257,\"eod_id\":256,\"max_piece\":8,"
         "\"pattern\":\"x\",\"merges\":[]} trailing", "invalid JSON"},
    };
    for (int i = 0; i < 8; i++) {
        Tokenizer *v = tok_deserialize(bad[i][0], strlen(bad[i][0]), "bad.json", err, sizeof err);
        EXPECT(!v && strstr(err, "bad.json") && strstr(err, bad[i][1]), "case %d: '%s'", i, v ? "accepted" : err);
        tok_free(v);
    }
    remove(path);
}

// Another id layout (a Hugging Face file's): bytes at ids 3.., EOD 0, BOS 1 as prefix, two
// merges making ids 2 and 259, and two merges making the same id (as GPT-2's files have).
// Encodes as the layout says and survives tok_serialize / tok_deserialize (format version 2).
static void check_layout(void) {
    enum { V = 261 };
    uint64_t off[V + 1] = {0};
    uint8_t bytes[600], special[V] = {1, 1};
    size_t n = 0;
    const char *extra[] = {"ab", "bc", "abc"};  // ids 2, 259, 260
    for (int id = 0; id < V; id++) {
        if (id == 0) memcpy(bytes + n, "<eos>", 5), n += 5;
        else if (id == 1) memcpy(bytes + n, "<bos>", 5), n += 5;
        else if (id == 2 || id >= 259) {
            const char *e = extra[id == 2 ? 0 : id - 258];
            memcpy(bytes + n, e, strlen(e));
            n += strlen(e);
        } else bytes[n++] = (uint8_t)(id - 3);
        off[id + 1] = n;
    }
    uint32_t a = 'a' + 3, b = 'b' + 3, c = 'c' + 3, prefix[1] = {1};
    uint32_t merges[] = {a, b, 2, b, c, 259, 2, c, 260, a, 259, 260};
    TokLayout l = {.vocab_size = V, .eod_id = 0, .tok_off = off, .tok_bytes = bytes, .special = special,
                   .merges = merges, .n_merges = 4, .pattern = TOK_DEFAULT_PATTERN, .max_piece = 64,
                   .prefix = prefix, .n_prefix = 1};
    char err[512];
    Tokenizer *t = tok_bpe_new_layout(&l, err, sizeof err);
    EXPECT(t && !t->megac_layout, "layout: %s", t ? "megac's?" : err);
    if (!t) return;
    char *desc = tok_serialize(t);
    Tokenizer *u = tok_deserialize(desc, strlen(desc), "v2", err, sizeof err);
    EXPECT(u, "version 2 does not load: %s", err);
    for (int k = 0; u && k < 2; k++) {
        Tokenizer *x = k ? u : t;
        TokIds ids = {0};
        tok_encode(x, (const uint8_t *)"abc xbc", 7, &ids);
        EXPECT(ids.n == 4 && ids.v[0] == 260 && ids.v[1] == ' ' + 3 && ids.v[2] == 'x' + 3 && ids.v[3] == 259,
               "layout encode: %zu ids", ids.n);
        EXPECT(x->n_prefix == 1 && x->prefix[0] == 1 && x->eod_id == 0 && x->special[1], "layout fields");
        TokBytes out = {0};
        EXPECT(tok_decode(x, ids.v, ids.n, &out) == 0 && out.n == 7 && !memcmp(out.v, "abc xbc", 7), "layout decode");
        free(out.v);
        free(ids.v);
    }
    uint32_t bad[] = {a, 259, 260};  // uses 259 before a merge makes it
    l.merges = bad;
    l.n_merges = 1;
    Tokenizer *w = tok_bpe_new_layout(&l, err, sizeof err);
    EXPECT(!w && strstr(err, "lower-ranked"), "a merge of a later token: %s", w ? "accepted" : err);
    free(desc);
    tok_free(t);
    tok_free(u);
}

int main(void) {
    check_layout();
    check_utf8();
    check_pretok();
    check_bpe_known();
    Tokenizer *t = check_bpe_random();
    check_cuts(t);
    check_files(t);
    tok_free(t);
    return test_result("test_tokenizer");
}
