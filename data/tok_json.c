// data/tok_json.c: the tokenizer file (JSON via json-c) and the "byte" self-description.
//
//   {"format": "megac-bpe", "version": 1, "vocab_size": 50257, "eod_id": 256,
//    "max_piece": 256, "pattern": "<PCRE2 pattern>", "merges": [[a, b], ...]}
//
// Merge k (0-based) makes id 257 + k; ids 0..255 are bytes, 256 is end-of-document.
// Version 2 holds any other id layout (a Hugging Face or GPT-2 file's, tokenizer.h):
//
//   {"format": "megac-bpe", "version": 2, "vocab_size": V, "eod_id": E, "max_piece": M,
//    "pattern": "...", "ignore_merges": false, "tokens": ["!", ..., null],
//    "special": [E, ...], "prefix": [], "suffix": [], "merges": [[a, b, c], ...]}
//
// A SentencePiece tokenizer is {"format": "megac-spm", ...} (tok_spm.c): its model file or
// tokenizer.json inside.
//
// tokens[i]: id i's bytes in the byte-level alphabet (a special token's: its text; null:
// none); merge k joins [a, b] into c. A Hugging Face tokenizer.json is read too (tok_hf.c).
#include "tokenizer.h"
#include "core/check.h"  // defines: core_calloc
#include "data/tok_spm.h"  // defines: tok_spm_describe, tok_spm_from_desc

#include <errno.h>
#include <json-c/json.h>  // defines: json_tokener_parse_ex, json_object_*
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>  // defines: getpid

#define TOK_FORMAT "megac-bpe"
#define TOK_VERSION 1
#define TOK_VERSION_LAYOUT 2
#define TOK_MAX_FILE (1u << 30)

static json_object *id_list(const uint32_t *ids, int n) {
    json_object *a = json_object_new_array_ext(n);
    for (int i = 0; i < n; i++) json_object_array_add(a, json_object_new_int64(ids[i]));
    return a;
}

// Version 2's fields after the header: tokens, special, prefix, suffix, merges.
static void add_layout(json_object *o, const Tokenizer *t) {
    json_object_object_add(o, "ignore_merges", json_object_new_boolean(t->ignore_merges));
    json_object *tokens = json_object_new_array_ext(t->vocab_size), *special = json_object_new_array();
    TokBytes s = {0};
    for (int id = 0; id < t->vocab_size; id++) {
        size_t len;
        const uint8_t *b = tok_token_bytes(t, (uint32_t)id, &len);
        int sp = id == t->eod_id || t->special[id];
        s.n = 0;
        for (size_t i = 0; i < len && !sp; i++) {
            char c[3];
            tok_bytes_append(&s, (const uint8_t *)c, (size_t)tok_byte_char(b[i], c));
        }
        if (sp) tok_bytes_append(&s, b, len);
        json_object_array_add(tokens, len || sp ? json_object_new_string_len((const char *)s.v, (int)s.n) : NULL);
        if (sp) json_object_array_add(special, json_object_new_int(id));
    }
    free(s.v);
    json_object_object_add(o, "tokens", tokens);
    json_object_object_add(o, "special", special);
    json_object_object_add(o, "prefix", id_list(t->prefix, t->n_prefix));
    json_object_object_add(o, "suffix", id_list(t->suffix, t->n_suffix));
    json_object *merges = json_object_new_array_ext(t->n_merges);
    for (int k = 0; k < t->n_merges; k++) {
        uint32_t m[3] = {t->merges[2 * k], t->merges[2 * k + 1], t->merge_ids[k]};
        json_object_array_add(merges, id_list(m, 3));
    }
    json_object_object_add(o, "merges", merges);
}

char *tok_serialize(const Tokenizer *t) {
    if (t->kind == TOK_BYTE) return strdup("byte");
    if (t->kind == TOK_SPM) return tok_spm_describe(t);
    json_object *o = json_object_new_object();
    json_object_object_add(o, "format", json_object_new_string(TOK_FORMAT));
    json_object_object_add(o, "version", json_object_new_int(t->megac_layout ? TOK_VERSION : TOK_VERSION_LAYOUT));
    json_object_object_add(o, "vocab_size", json_object_new_int(t->vocab_size));
    json_object_object_add(o, "eod_id", json_object_new_int(t->eod_id));
    json_object_object_add(o, "max_piece", json_object_new_int(t->max_piece));
    json_object_object_add(o, "pattern", json_object_new_string(t->pattern));
    if (!t->megac_layout) {
        add_layout(o, t);
        char *s = strdup(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE));
        json_object_put(o);
        return s;
    }
    json_object *merges = json_object_new_array_ext(t->n_merges);
    for (int k = 0; k < t->n_merges; k++) {
        json_object *m = json_object_new_array_ext(2);
        json_object_array_add(m, json_object_new_int64(t->merges[2 * k]));
        json_object_array_add(m, json_object_new_int64(t->merges[2 * k + 1]));
        json_object_array_add(merges, m);
    }
    json_object_object_add(o, "merges", merges);
    char *s = strdup(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE));
    json_object_put(o);
    return s;
}

// Integer field of o, or -1 with a message when missing / not an integer in [lo, hi].
static int get_int(json_object *o, const char *key, int64_t lo, int64_t hi, int64_t *out,
                   const char *origin, char *err, size_t errlen) {
    json_object *v;
    if (!json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_int)) {
        snprintf(err, errlen, "%s: tokenizer field '%s' is missing or not an integer", origin, key);
        return -1;
    }
    *out = json_object_get_int64(v);
    if (*out < lo || *out > hi) {
        snprintf(err, errlen, "%s: tokenizer field '%s' = %lld is outside [%lld, %lld]", origin, key,
                 (long long)*out, (long long)lo, (long long)hi);
        return -1;
    }
    return 0;
}

// Reads "merges" into a (n, 2) array; NULL with a message on a malformed entry.
static uint32_t *get_merges(json_object *o, int64_t n, const char *origin, char *err, size_t errlen) {
    json_object *arr;
    if (!json_object_object_get_ex(o, "merges", &arr) || !json_object_is_type(arr, json_type_array)) {
        snprintf(err, errlen, "%s: tokenizer field 'merges' is missing or not an array", origin);
        return NULL;
    }
    if ((int64_t)json_object_array_length(arr) != n) {
        snprintf(err, errlen, "%s: %zu merges but vocab_size needs %lld", origin,
                 json_object_array_length(arr), (long long)n);
        return NULL;
    }
    uint32_t *m = core_calloc((size_t)n * 2 + 1, sizeof(uint32_t));
    for (int64_t k = 0; k < n; k++) {
        json_object *e = json_object_array_get_idx(arr, (size_t)k);
        int ok = json_object_is_type(e, json_type_array) && json_object_array_length(e) == 2;
        for (int j = 0; ok && j < 2; j++) {
            json_object *x = json_object_array_get_idx(e, (size_t)j);
            int64_t v = json_object_is_type(x, json_type_int) ? json_object_get_int64(x) : -1;
            ok = v >= 0 && v < TOK_MAX_VOCAB;
            m[2 * k + j] = (uint32_t)v;
        }
        if (!ok) {
            snprintf(err, errlen, "%s: merge %lld is not a pair of token ids", origin, (long long)k);
            free(m);
            return NULL;
        }
    }
    return m;
}

// The ids of array field key (at most max, each < V) into out; -1 with a message.
static int get_ids(json_object *o, const char *key, int max, int64_t V, uint32_t *out, int *n,
                   const char *origin, char *err, size_t errlen) {
    json_object *a;
    int ok = json_object_object_get_ex(o, key, &a) && json_object_is_type(a, json_type_array) &&
             (int)json_object_array_length(a) <= max;
    *n = ok ? (int)json_object_array_length(a) : 0;
    for (int i = 0; ok && i < *n; i++) {
        json_object *x = json_object_array_get_idx(a, (size_t)i);
        int64_t v = json_object_is_type(x, json_type_int) ? json_object_get_int64(x) : -1;
        ok = v >= 0 && v < V;
        out[i] = (uint32_t)v;
    }
    if (!ok) snprintf(err, errlen, "%s: tokenizer field '%s' is not a list of at most %d ids", origin, key, max);
    return ok ? 0 : -1;
}

// m (n, 3) = the n merges of `merges`, each [a, b, made] with ids below V; 0, or -1 with
// the reason in err.
static int merge_triples(json_object *merges, int n, int64_t V, uint32_t *m, const char *origin,
                         char *err, size_t errlen) {
    for (int k = 0; k < n; k++) {
        int n3 = 0;
        json_object *e = json_object_array_get_idx(merges, (size_t)k);
        json_object *wrap = json_object_new_object();
        json_object_object_add(wrap, "m", json_object_get(e));
        int bad = get_ids(wrap, "m", 3, V, m + 3 * k, &n3, origin, err, errlen) || n3 != 3;
        json_object_put(wrap);
        if (bad) {
            snprintf(err, errlen, "%s: merge %d is not three token ids [a, b, made]", origin, k);
            return -1;
        }
    }
    return 0;
}

// Version 2: any id layout (see the top of this file).
static Tokenizer *from_layout(json_object *o, const char *origin, char *err, size_t errlen) {
    int64_t V, eod, max_piece;
    json_object *pat, *tokens, *merges, *im;
    if (get_int(o, "vocab_size", 1, TOK_MAX_VOCAB, &V, origin, err, errlen) ||
        get_int(o, "eod_id", 0, V - 1, &eod, origin, err, errlen) ||
        get_int(o, "max_piece", 1, TOK_MAX_PIECE_LIMIT, &max_piece, origin, err, errlen))
        return NULL;
    if (!json_object_object_get_ex(o, "pattern", &pat) || !json_object_is_type(pat, json_type_string) ||
        !json_object_object_get_ex(o, "tokens", &tokens) || !json_object_is_type(tokens, json_type_array) ||
        (int64_t)json_object_array_length(tokens) != V || !json_object_object_get_ex(o, "merges", &merges) ||
        !json_object_is_type(merges, json_type_array) || (int64_t)json_object_array_length(merges) > V) {
        snprintf(err, errlen, "%s: tokenizer fields 'pattern', 'tokens' (vocab_size strings) or 'merges' "
                 "missing or malformed", origin);
        return NULL;
    }
    TokLayout l = {.vocab_size = (int)V, .eod_id = (int)eod, .max_piece = (int)max_piece,
                   .pattern = json_object_get_string(pat), .n_merges = (int)json_object_array_length(merges)};
    l.ignore_merges = json_object_object_get_ex(o, "ignore_merges", &im) && json_object_get_boolean(im);
    uint8_t *special = core_calloc((size_t)V, 1);
    uint32_t *sp = core_calloc((size_t)V, sizeof(uint32_t)), prefix[TOK_MAX_AFFIX], suffix[TOK_MAX_AFFIX];
    uint32_t *m = core_calloc((size_t)l.n_merges * 3 + 1, sizeof(uint32_t));
    uint64_t *off = core_calloc((size_t)V + 1, sizeof(uint64_t));
    TokBytes bytes = {0};
    Tokenizer *t = NULL;
    int n_sp = 0;
    if (get_ids(o, "special", (int)V, V, sp, &n_sp, origin, err, errlen) ||
        get_ids(o, "prefix", TOK_MAX_AFFIX, V, prefix, &l.n_prefix, origin, err, errlen) ||
        get_ids(o, "suffix", TOK_MAX_AFFIX, V, suffix, &l.n_suffix, origin, err, errlen))
        goto done;
    for (int i = 0; i < n_sp; i++) special[sp[i]] = 1;
    for (int64_t id = 0; id < V; id++) {
        json_object *s = json_object_array_get_idx(tokens, (size_t)id);
        const char *str = s ? json_object_get_string(s) : "";
        size_t n = s ? (size_t)json_object_get_string_len(s) : 0;
        if (special[id]) tok_bytes_append(&bytes, (const uint8_t *)str, n);
        else tok_alpha_decode(str, n, &bytes);
        off[id + 1] = bytes.n;
    }
    if (merge_triples(merges, l.n_merges, V, m, origin, err, errlen)) goto done;
    l.special = special;
    l.tok_off = off;
    l.tok_bytes = bytes.v ? bytes.v : (const uint8_t *)"";
    l.merges = m;
    l.prefix = prefix;
    l.suffix = suffix;
    char why[400];
    t = tok_bpe_new_layout(&l, why, sizeof why);
    if (!t) snprintf(err, errlen, "%s: %s", origin, why);
done:
    free(special);
    free(sp);
    free(m);
    free(off);
    free(bytes.v);
    return t;
}

// Checks the header fields and builds the tokenizer from a parsed JSON object.
static Tokenizer *from_object(json_object *o, const char *origin, char *err, size_t errlen) {
    json_object *v;
    if (json_object_is_type(o, json_type_object) && !json_object_object_get_ex(o, "format", NULL) &&
        json_object_object_get_ex(o, "model", NULL))  // a Hugging Face tokenizer.json
        return tok_hf_from_json(o, origin, NULL, err, errlen);
    if (json_object_is_type(o, json_type_object) && json_object_object_get_ex(o, "format", &v) &&
        json_object_is_type(v, json_type_string) && !strcmp(json_object_get_string(v), "megac-spm"))
        return tok_spm_from_desc(o, origin, err, errlen);  // a dataset's SentencePiece tokenizer
    if (!json_object_is_type(o, json_type_object) || !json_object_object_get_ex(o, "format", &v) ||
        !json_object_is_type(v, json_type_string) || strcmp(json_object_get_string(v), TOK_FORMAT)) {
        snprintf(err, errlen, "%s: not a megac tokenizer (needs \"format\": \"%s\")", origin, TOK_FORMAT);
        return NULL;
    }
    int64_t version, vocab, eod, max_piece;
    if (get_int(o, "version", 0, INT32_MAX, &version, origin, err, errlen)) return NULL;
    if (version == TOK_VERSION_LAYOUT) return from_layout(o, origin, err, errlen);
    if (version != TOK_VERSION) {
        snprintf(err, errlen, "%s: tokenizer version %lld is not supported (this megac reads %d)",
                 origin, (long long)version, TOK_VERSION);
        return NULL;
    }
    if (get_int(o, "vocab_size", TOK_FIRST_MERGE, TOK_MAX_VOCAB, &vocab, origin, err, errlen) ||
        get_int(o, "eod_id", TOK_EOD, TOK_EOD, &eod, origin, err, errlen) ||
        get_int(o, "max_piece", 1, TOK_MAX_PIECE_LIMIT, &max_piece, origin, err, errlen))
        return NULL;
    if (!json_object_object_get_ex(o, "pattern", &v) || !json_object_is_type(v, json_type_string)) {
        snprintf(err, errlen, "%s: tokenizer field 'pattern' is missing or not a string", origin);
        return NULL;
    }
    const char *pattern = json_object_get_string(v);
    uint32_t *merges = get_merges(o, vocab - TOK_FIRST_MERGE, origin, err, errlen);
    if (!merges) return NULL;
    char why[400];
    Tokenizer *t = tok_bpe_new(merges, (int)(vocab - TOK_FIRST_MERGE), pattern, (int)max_piece,
                               why, sizeof why);
    free(merges);
    if (!t) snprintf(err, errlen, "%s: %s", origin, why);
    return t;
}

Tokenizer *tok_deserialize(const char *text, size_t len, const char *origin, char *err, size_t errlen) {
    size_t trimmed = len;  // "byte" as tok_save writes it, with its newline
    while (trimmed > 0 && strchr(" \t\r\n", text[trimmed - 1])) trimmed--;
    if (trimmed == 4 && !memcmp(text, "byte", 4)) return tok_byte_new();
    if (len > INT32_MAX) {
        snprintf(err, errlen, "%s: tokenizer description too large", origin);
        return NULL;
    }
    json_tokener *tk = json_tokener_new();
    json_tokener_set_flags(tk, JSON_TOKENER_STRICT);
    json_object *o = json_tokener_parse_ex(tk, text, (int)len);
    enum json_tokener_error e = json_tokener_get_error(tk);
    size_t end = json_tokener_get_parse_end(tk);
    json_tokener_free(tk);
    while (o && end < len && strchr(" \t\r\n", text[end])) end++;
    if (!o || e != json_tokener_success || end != len) {
        snprintf(err, errlen, "%s: invalid JSON at byte %zu: %s", origin, end,
                 o ? "trailing characters" : json_tokener_error_desc(e == json_tokener_continue ? json_tokener_error_parse_eof : e));
        json_object_put(o);
        return NULL;
    }
    Tokenizer *t = from_object(o, origin, err, errlen);
    json_object_put(o);
    return t;
}

Tokenizer *tok_load(const char *spec, char *err, size_t errlen) {
    if (!strcmp(spec, "byte")) return tok_byte_new();
    FILE *f = fopen(spec, "rb");
    if (!f) {
        snprintf(err, errlen, "%s: cannot open tokenizer: %s", spec, strerror(errno));
        return NULL;
    }
    TokBytes buf = {0};
    uint8_t chunk[65536];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0 && buf.n <= TOK_MAX_FILE) tok_bytes_append(&buf, chunk, n);
    int bad = ferror(f);
    fclose(f);
    Tokenizer *t = NULL;
    if (bad) snprintf(err, errlen, "%s: read error", spec);
    else if (buf.n > TOK_MAX_FILE) snprintf(err, errlen, "%s: larger than 1 GiB: not a tokenizer", spec);
    else if (buf.n == 0) snprintf(err, errlen, "%s: empty file: not a tokenizer", spec);
    else t = tok_deserialize((const char *)buf.v, buf.n, spec, err, errlen);
    free(buf.v);
    return t;
}

int tok_save(const Tokenizer *t, const char *path, char *err, size_t errlen) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        snprintf(err, errlen, "%s: cannot create: %s", tmp, strerror(errno));
        return -1;
    }
    char *s = tok_serialize(t);
    int ok = fputs(s, f) >= 0 && fputc('\n', f) != EOF;
    ok = (fclose(f) == 0) && ok;
    free(s);
    if (!ok || rename(tmp, path) != 0) {
        snprintf(err, errlen, "%s: cannot write: %s", path, strerror(errno));
        remove(tmp);
        return -1;
    }
    return 0;
}
