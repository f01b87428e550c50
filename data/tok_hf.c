// data/tok_hf.c: Hugging Face tokenizer.json and GPT-2 vocab.json + merges.txt as megac
// tokenizers (tokenizer.h's TokLayout): byte-level BPE only, as GPT-2 and Llama-3 use it.
//
// The SentencePiece family (Metaspace, byte_fallback: Llama-2, Mistral) goes to tok_hf_spm.c.
// Read: model BPE (vocab, merges as "a b" or [a, b], ignore_merges); pre-tokenizer ByteLevel
// (use_regex: GPT-2's pattern) or Sequence[Split(Regex, Isolated), ByteLevel without regex]
// (Llama-3); normalizer none; post-processor none, ByteLevel or TemplateProcessing (its
// special tokens around a single text become the tokenizer's prefix / suffix); added tokens
// are special (never produced from text). Refused, naming the part: other models (WordPiece,
// Unigram), dropout, subword prefixes, normalizers, add_prefix_space, other
// pre-tokenizers and post-processors.
#include "tokenizer.h"
#include "core/check.h"  // defines: core_calloc
#include "data/tok_spm.h"  // defines: tok_hf_is_spm, tok_hf_spm

#include <json-c/json.h>  // defines: json_object_*
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>     // defines: stat, S_ISDIR

static json_object *get(json_object *o, const char *key, json_type t) {
    json_object *v;
    return o && json_object_object_get_ex(o, key, &v) && json_object_is_type(v, t) ? v : NULL;
}

static const char *type_of(json_object *o) {
    json_object *t = get(o, "type", json_type_string);
    return t ? json_object_get_string(t) : "?";
}

static int flag(json_object *o, const char *key) {
    json_object *v = get(o, key, json_type_boolean);
    return v && json_object_get_boolean(v);
}

// The inputs of build(): a vocabulary (string -> id) and merges (pairs of strings).
typedef struct {
    json_object *vocab;        // object: alphabet string -> id
    json_object *merges;       // array of "a b" or [a, b]
    json_object *added;        // array of {id, content} or NULL
    const char *eos;           // end-of-document token text, or NULL
    const char *pattern;
    int ignore_merges;
    uint32_t prefix[TOK_MAX_AFFIX], suffix[TOK_MAX_AFFIX];
    int n_prefix, n_suffix;
} HfParts;

// The two halves of merge e into a, b (each up to 1024 bytes); 0, or -1.
static int merge_halves(json_object *e, char *a, char *b) {
    if (json_object_is_type(e, json_type_string)) {
        const char *s = json_object_get_string(e), *sp = strchr(s, ' ');
        if (!sp || strchr(sp + 1, ' ') || sp - s >= 1024 || strlen(sp + 1) >= 1024) return -1;
        memcpy(a, s, (size_t)(sp - s));
        a[sp - s] = 0;
        strcpy(b, sp + 1);
        return 0;
    }
    if (!json_object_is_type(e, json_type_array) || json_object_array_length(e) != 2) return -1;
    const char *x = json_object_get_string(json_object_array_get_idx(e, 0));
    const char *y = json_object_get_string(json_object_array_get_idx(e, 1));
    if (!x || !y || strlen(x) >= 1024 || strlen(y) >= 1024) return -1;
    strcpy(a, x);
    strcpy(b, y);
    return 0;
}

static int64_t id_of(json_object *vocab, const char *s) {
    json_object *v = get(vocab, s, json_type_int);
    return v ? json_object_get_int64(v) : -1;
}

// Ids, bytes, specials and merges into a tokenizer (megac's own layout when it is that).
// The vocabulary's size V (one past the largest id of the vocabulary and the added
// tokens), or -1 with the reason in why.
static int64_t vocab_size(const HfParts *p, char *why, size_t wn) {
    int64_t V = 0;
    json_object_object_foreach(p->vocab, key, val) {
        int64_t id = json_object_is_type(val, json_type_int) ? json_object_get_int64(val) : -1;
        if (id < 0 || id >= TOK_MAX_VOCAB) {
            snprintf(why, wn, "vocabulary entry '%.40s' has no id in [0, %d)", key, TOK_MAX_VOCAB);
            return -1;
        }
        if (id + 1 > V) V = id + 1;
    }
    int n_added = p->added ? (int)json_object_array_length(p->added) : 0;
    for (int i = 0; i < n_added; i++) {
        int64_t id = json_object_get_int64(get(json_object_array_get_idx(p->added, (size_t)i), "id", json_type_int));
        if (id < 0 || id >= TOK_MAX_VOCAB) {
            snprintf(why, wn, "added token %d has no id in [0, %d)", i, TOK_MAX_VOCAB);
            return -1;
        }
        if (id + 1 > V) V = id + 1;
    }
    return V;
}

// str (V) = each id's string (NULL: none), special (V) = 1 for the added tokens and the
// end-of-document token, whose id is returned; -1 with the reason in why.
static int64_t id_strings(const HfParts *p, int64_t V, const char **str, uint8_t *special,
                          char *why, size_t wn) {
    int n_added = p->added ? (int)json_object_array_length(p->added) : 0;
    for (int i = 0; i < n_added; i++) {
        json_object *a = json_object_array_get_idx(p->added, (size_t)i);
        int64_t id = json_object_get_int64(get(a, "id", json_type_int));
        json_object *c = get(a, "content", json_type_string);
        str[id] = c ? json_object_get_string(c) : "";
        special[id] = 1;
    }
    json_object_object_foreach(p->vocab, k2, v2) {
        int64_t id = json_object_get_int64(v2);
        if (str[id] && !special[id]) {
            snprintf(why, wn, "vocabulary entries '%.40s' and '%.40s' are both id %lld", str[id], k2, (long long)id);
            return -1;
        }
        if (!special[id]) str[id] = k2;
    }
    static const char *const EOS[] = {"<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>"};
    int64_t eod = -1;
    for (int64_t id = 0; id < V && eod < 0; id++)
        for (int j = 0; j < 4 && eod < 0; j++)
            if (str[id] && !strcmp(str[id], p->eos ? p->eos : EOS[j])) eod = id;
    if (eod < 0) {
        snprintf(why, wn, "no end-of-document token (%s%s)", p->eos ? p->eos : "<|endoftext|>, <|end_of_text|>, </s> or <eos>",
                 p->eos ? ", the eos_token of tokenizer_config.json" : "");
        return -1;
    }
    special[eod] = 1;
    return eod;
}

// m (n, 3) = each merge's (a, b, ab) ids; 0, or -1 with the reason in why.
static int merge_ids(const HfParts *p, int n, uint32_t *m, char *why, size_t wn) {
    for (int k = 0; k < n; k++) {
        char a[1024], b[1024], ab[2048];
        if (merge_halves(json_object_array_get_idx(p->merges, (size_t)k), a, b) != 0) {
            snprintf(why, wn, "merge %d is not two tokens", k);
            return -1;
        }
        snprintf(ab, sizeof ab, "%s%s", a, b);
        int64_t ia = id_of(p->vocab, a), ib = id_of(p->vocab, b), iab = id_of(p->vocab, ab);
        if (ia < 0 || ib < 0 || iab < 0) {
            snprintf(why, wn, "merge %d '%.40s %.40s': a token not in the vocabulary", k, a, b);
            return -1;
        }
        m[3 * k] = (uint32_t)ia, m[3 * k + 1] = (uint32_t)ib, m[3 * k + 2] = (uint32_t)iab;
    }
    return 0;
}

// t built from layout l is megac's own layout (its export: bytes first, then the merges in
// order, the end-of-document id TOK_EOD, no other special token): the same tokenizer as
// megac's, with its piece cut, replaces it. Returns the tokenizer to use.
static Tokenizer *as_megac_layout(Tokenizer *t, const HfParts *p, const TokLayout *l, char *why,
                                  size_t wn) {
    int n = l->n_merges;
    int64_t V = l->vocab_size;
    const uint32_t *m = l->merges;
    int mine = t && V == TOK_FIRST_MERGE + n && l->eod_id == TOK_EOD && !p->n_prefix && !p->n_suffix &&
               !p->ignore_merges;
    for (int i = 0; mine && i < TOK_N_BYTES; i++) mine = t->byte_ids[i] == (uint32_t)i;
    for (int k = 0; mine && k < n; k++) mine = t->merge_ids[k] == (uint32_t)(TOK_FIRST_MERGE + k);
    for (int64_t id = 0; mine && id < V; id++) mine = !l->special[id] || id == l->eod_id;
    if (!mine) return t;
    uint32_t *m2 = core_calloc((size_t)n * 2 + 1, sizeof(uint32_t));
    for (int k = 0; k < n; k++) m2[2 * k] = m[3 * k], m2[2 * k + 1] = m[3 * k + 1];
    tok_free(t);
    t = n ? tok_bpe_new(m2, n, p->pattern, TOK_DEFAULT_MAX_PIECE, why, wn) : tok_byte_new();
    free(m2);
    return t;
}

static Tokenizer *build(const HfParts *p, char *why, size_t wn) {
    int64_t V = vocab_size(p, why, wn);
    if (V < 0) return NULL;
    const char **str = core_calloc((size_t)V + 1, sizeof *str);  // id -> its string (or NULL)
    uint8_t *special = core_calloc((size_t)V + 1, 1);
    Tokenizer *t = NULL;
    int n = (int)json_object_array_length(p->merges);
    uint32_t *m = core_calloc((size_t)n * 3 + 1, sizeof(uint32_t));
    uint64_t *off = core_calloc((size_t)V + 1, sizeof(uint64_t));
    TokBytes bytes = {0};
    int64_t eod = id_strings(p, V, str, special, why, wn);
    if (eod < 0) goto done;
    for (int64_t id = 0; id < V; id++) {
        size_t len = str[id] ? strlen(str[id]) : 0;
        if (special[id]) tok_bytes_append(&bytes, (const uint8_t *)str[id], len);
        else tok_alpha_decode(str[id] ? str[id] : "", len, &bytes);
        off[id + 1] = bytes.n;
    }
    if (merge_ids(p, n, m, why, wn)) goto done;
    TokLayout l = {.vocab_size = (int)V, .eod_id = (int)eod, .tok_off = off,
                   .tok_bytes = bytes.v ? bytes.v : (const uint8_t *)"", .special = special, .merges = m,
                   .n_merges = n, .ignore_merges = p->ignore_merges, .pattern = p->pattern,
                   .max_piece = TOK_MAX_PIECE_LIMIT, .prefix = p->prefix, .suffix = p->suffix,
                   .n_prefix = p->n_prefix, .n_suffix = p->n_suffix};
    t = as_megac_layout(tok_bpe_new_layout(&l, why, wn), p, &l, why, wn);
done:
    free(str);
    free(special);
    free(m);
    free(off);
    free(bytes.v);
    return t;
}

// ByteLevel's own checks: no prefix space; *regex gets use_regex.
static int byte_level(json_object *o, int *regex, char *why, size_t wn) {
    if (flag(o, "add_prefix_space")) {
        snprintf(why, wn, "ByteLevel add_prefix_space true is not supported");
        return -1;
    }
    *regex = !get(o, "use_regex", json_type_boolean) || flag(o, "use_regex");
    return 0;
}

// The pre-tokenizer's pattern into p, or -1 naming what is not supported.
static int pre_tokenizer(json_object *pre, HfParts *p, char *why, size_t wn) {
    int regex = 0;
    const char *ty = type_of(pre);
    if (!strcmp(ty, "ByteLevel")) {
        if (byte_level(pre, &regex, why, wn)) return -1;
        p->pattern = regex ? TOK_GPT2_PATTERN : NULL;
        return 0;
    }
    json_object *list = get(pre, "pretokenizers", json_type_array);
    json_object *split = list ? json_object_array_get_idx(list, 0) : NULL;
    json_object *last = list ? json_object_array_get_idx(list, json_object_array_length(list) - 1) : NULL;
    if (!strcmp(ty, "Sequence") && list && json_object_array_length(list) == 1 && !strcmp(type_of(last), "ByteLevel"))
        return pre_tokenizer(last, p, why, wn);
    json_object *rx = get(get(split, "pattern", json_type_object), "Regex", json_type_string);
    json_object *beh = get(split, "behavior", json_type_string);
    if (strcmp(ty, "Sequence") || !list || json_object_array_length(list) != 2 || strcmp(type_of(split), "Split") ||
        !rx || !beh || strcmp(json_object_get_string(beh), "Isolated") || flag(split, "invert") ||
        strcmp(type_of(last), "ByteLevel")) {
        snprintf(why, wn, "pre-tokenizer %s is not supported (ByteLevel, or Split(Regex, Isolated) then "
                 "ByteLevel, as GPT-2 and Llama-3 use)", strcmp(ty, "Sequence") ? ty : "Sequence of these parts");
        return -1;
    }
    if (byte_level(last, &regex, why, wn)) return -1;
    if (regex) {
        snprintf(why, wn, "pre-tokenizer Split then ByteLevel with use_regex true (two patterns) is not supported");
        return -1;
    }
    p->pattern = json_object_get_string(rx);
    return 0;
}

// TemplateProcessing's single-text template: its special tokens before and after "A".
static int template(json_object *pp, HfParts *p, char *why, size_t wn) {
    json_object *single = get(pp, "single", json_type_array), *sp = get(pp, "special_tokens", json_type_object);
    int seen_a = 0, n = single ? (int)json_object_array_length(single) : 0;
    for (int i = 0; i < n; i++) {
        json_object *e = json_object_array_get_idx(single, (size_t)i), *st = get(e, "SpecialToken", json_type_object);
        if (get(e, "Sequence", json_type_object)) {
            seen_a = 1;
            continue;
        }
        json_object *name = get(st, "id", json_type_string);
        json_object *ids = get(get(sp, name ? json_object_get_string(name) : "", json_type_object), "ids", json_type_array);
        for (int j = 0; ids && j < (int)json_object_array_length(ids); j++) {
            int *cnt = seen_a ? &p->n_suffix : &p->n_prefix;
            if (*cnt == TOK_MAX_AFFIX) break;
            (seen_a ? p->suffix : p->prefix)[(*cnt)++] = (uint32_t)json_object_get_int64(json_object_array_get_idx(ids, (size_t)j));
        }
        if (!ids) {
            snprintf(why, wn, "post-processor TemplateProcessing: special token %d of 'single' is not in its special_tokens", i);
            return -1;
        }
    }
    return 0;
}

static int post_processor(json_object *pp, HfParts *p, char *why, size_t wn) {
    if (!pp || !strcmp(type_of(pp), "ByteLevel")) return 0;
    if (!strcmp(type_of(pp), "TemplateProcessing")) return template(pp, p, why, wn);
    json_object *list = get(pp, "processors", json_type_array);
    if (strcmp(type_of(pp), "Sequence") || !list) {
        snprintf(why, wn, "post-processor %s is not supported (none, ByteLevel or TemplateProcessing)", type_of(pp));
        return -1;
    }
    for (int i = 0; i < (int)json_object_array_length(list); i++)
        if (post_processor(json_object_array_get_idx(list, (size_t)i), p, why, wn)) return -1;
    return 0;
}

// 1 when key is in o with another JSON type than t (a present key of the wrong type is not
// an absent one: merges given as {} must not read as "no merges"). Pure.
static int mistyped(json_object *o, const char *key, json_type t) {
    json_object *v;
    return o && json_object_object_get_ex(o, key, &v) && !json_object_is_type(v, t);
}

// The structure both families read (BPE here, SentencePiece-style in tok_hf_spm.c): model an
// object, its vocab an object and merges an array, added_tokens an array of objects with an
// integer id and a string content. 0, or -1 with the first mismatch in why.
static int check_shape(json_object *o, char *why, size_t wn) {
    json_object *model = get(o, "model", json_type_object), *added = get(o, "added_tokens", json_type_array);
    const char *bad = mistyped(o, "model", json_type_object)              ? "'model' is not an object"
                      : mistyped(model, "vocab", json_type_object)        ? "'model.vocab' is not an object"
                      : mistyped(model, "merges", json_type_array)        ? "'model.merges' is not an array"
                      : mistyped(o, "added_tokens", json_type_array)      ? "'added_tokens' is not an array"
                                                                           : NULL;
    if (bad) {
        snprintf(why, wn, "%s", bad);
        return -1;
    }
    for (size_t i = 0; added && i < json_object_array_length(added); i++) {
        json_object *a = json_object_array_get_idx(added, i);
        if (!get(a, "id", json_type_int) || !get(a, "content", json_type_string)) {
            snprintf(why, wn, "added token %zu has no integer 'id' and string 'content'", i);
            return -1;
        }
    }
    return 0;
}

static Tokenizer *from_hf(json_object *o, const char *eos, char *why, size_t wn) {
    if (check_shape(o, why, wn) != 0) return NULL;
    json_object *model = get(o, "model", json_type_object), *norm = get(o, "normalizer", json_type_object);
    const char *ty = type_of(model);
    HfParts p = {.vocab = get(model, "vocab", json_type_object), .merges = get(model, "merges", json_type_array),
                 .added = get(o, "added_tokens", json_type_array), .eos = eos,
                 .ignore_merges = flag(model, "ignore_merges")};
    json_object *drop = get(model, "dropout", json_type_double), *cp = get(model, "continuing_subword_prefix", json_type_string);
    json_object *ew = get(model, "end_of_word_suffix", json_type_string);
    if (tok_hf_is_spm(o))  // Metaspace / byte_fallback: the SentencePiece family (tok_hf_spm.c)
        return post_processor(get(o, "post_processor", json_type_object), &p, why, wn) ? NULL
               : tok_hf_spm(o, eos, p.prefix, p.n_prefix, p.suffix, p.n_suffix, why, wn);
    if (strcmp(ty, "BPE")) {
        snprintf(why, wn, "model %s%s is not supported: megac reads byte-level BPE (GPT-2, Llama-3)", ty,
                 !strcmp(ty, "Unigram") ? " (SentencePiece)" : "");
    } else if ((drop && json_object_get_double(drop) > 0) || (cp && *json_object_get_string(cp)) ||
               (ew && *json_object_get_string(ew))) {
        snprintf(why, wn, "BPE with dropout, continuing_subword_prefix or end_of_word_suffix is not supported");
    } else if (norm && !(!strcmp(type_of(norm), "Sequence") && get(norm, "normalizers", json_type_array) &&
                         json_object_array_length(get(norm, "normalizers", json_type_array)) == 0)) {
        snprintf(why, wn, "normalizer %s is not supported (megac's byte-level BPE takes the text as it is)", type_of(norm));
    } else if (!p.vocab || !p.merges) {
        snprintf(why, wn, "BPE model without vocab and merges");
    } else if (pre_tokenizer(get(o, "pre_tokenizer", json_type_object), &p, why, wn) == 0 &&
               post_processor(get(o, "post_processor", json_type_object), &p, why, wn) == 0) {
        if (!p.pattern && json_object_array_length(p.merges) > 0) {
            snprintf(why, wn, "pre-tokenizer ByteLevel without a pattern and with merges (the whole text one piece) is not supported");
            return NULL;
        }
        if (!p.pattern) p.pattern = TOK_GPT2_PATTERN;  // no merges: any split gives the bytes
        return build(&p, why, wn);
    }
    return NULL;
}

Tokenizer *tok_hf_from_json(json_object *o, const char *origin, const char *eos, char *err, size_t errlen) {
    char why[600] = "";
    Tokenizer *t = from_hf(o, eos, why, sizeof why);
    if (!t) snprintf(err, errlen, "%s: %s", origin, why);
    return t;
}

// The eos_token of tokenizer_config.json in dir, malloc'ed, or NULL.
static char *config_eos(const char *dir) {
    char path[4400];
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    json_object *c = json_object_from_file(path), *e = get(c, "eos_token", json_type_string);
    if (!e) e = get(get(c, "eos_token", json_type_object), "content", json_type_string);
    char *s = e ? strdup(json_object_get_string(e)) : NULL;
    json_object_put(c);
    return s;
}

Tokenizer *tok_load_hf(const char *path, char *err, size_t errlen) {
    char file[4200], dir[4200];
    struct stat st;
    int is_dir = stat(path, &st) == 0 && S_ISDIR(st.st_mode);
    snprintf(file, sizeof file, is_dir ? "%s/tokenizer.json" : "%s", path);
    snprintf(dir, sizeof dir, "%s", is_dir ? path : ".");
    const char *slash = strrchr(path, '/');
    if (!is_dir && slash) snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    json_object *o = json_object_from_file(file);
    if (!o) {
        snprintf(err, errlen, "%s: missing, unreadable or not JSON (a Hugging Face tokenizer.json, or "
                 "the directory holding it)", file);
        return NULL;
    }
    char *eos = config_eos(dir);
    Tokenizer *t = tok_hf_from_json(o, file, eos, err, errlen);
    free(eos);
    json_object_put(o);
    return t;
}

Tokenizer *tok_load_gpt2(const char *vocab_file, const char *merge_file, char *err, size_t errlen) {
    json_object *vocab = json_object_from_file(vocab_file);
    if (!json_object_is_type(vocab, json_type_object)) {
        snprintf(err, errlen, "%s: missing, unreadable or not a JSON object (GPT-2's vocab.json)", vocab_file);
        json_object_put(vocab);
        return NULL;
    }
    FILE *f = fopen(merge_file, "r");
    if (!f) {
        snprintf(err, errlen, "%s: cannot open (GPT-2's merges.txt)", merge_file);
        json_object_put(vocab);
        return NULL;
    }
    json_object *merges = json_object_new_array();
    char line[4200];
    while (fgets(line, sizeof line, f)) {
        size_t n = strcspn(line, "\r\n");
        line[n] = 0;
        if (n == 0 || !strncmp(line, "#version", 8)) continue;
        json_object_array_add(merges, json_object_new_string(line));
    }
    fclose(f);
    HfParts p = {.vocab = vocab, .merges = merges, .pattern = TOK_GPT2_PATTERN, .eos = "<|endoftext|>"};
    char why[600] = "";
    Tokenizer *t = build(&p, why, sizeof why);
    if (!t) snprintf(err, errlen, "%s + %s: %s", vocab_file, merge_file, why);
    json_object_put(vocab);
    json_object_put(merges);
    return t;
}
