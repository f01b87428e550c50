// data/tok_hf_spm.c: Hugging Face tokenizer.json files of the SentencePiece family (Llama-2,
// Mistral, Mixtral as `transformers` converts them) as TOK_SPM tokenizers (tok_spm.h), read
// through tok_hf.c's HuggingFaceTokenizer path.
//
// Read: model BPE with byte_fallback (vocab, merges, unk_token, fuse_unk, ignore_merges);
// pre-tokenizer Metaspace (replacement "▁", prepend_scheme always / first / never, split) with
// no normalizer, or no pre-tokenizer with the normalizer Sequence[Prepend("▁"), Replace(" ",
// "▁")] (Llama-2's legacy form; or the Replace alone); TemplateProcessing's special tokens around each document
// (read by tok_hf.c). Added tokens are special: never produced from text. Refused, naming
// the part: a Unigram model, other normalizers and pre-tokenizers, dropout.
#include "tok_spm.h"
#include "core/check.h"  // defines: core_calloc

#include <json-c/json.h>  // defines: json_object_*
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WS "\xE2\x96\x81"

static json_object *get(json_object *o, const char *key, json_type t) {
    json_object *v;
    return o && json_object_object_get_ex(o, key, &v) && json_object_is_type(v, t) ? v : NULL;
}

static const char *str_of(json_object *o, const char *key) {
    json_object *v = get(o, key, json_type_string);
    return v ? json_object_get_string(v) : NULL;
}

static int is(json_object *o, const char *type) { return o && str_of(o, "type") && !strcmp(str_of(o, "type"), type); }

// Llama-2's legacy normalizer: Sequence[Prepend("▁"), Replace(" ", "▁")], or only the Replace
// (transformers without add_prefix_space). 0: not it, 1: Replace only, 2: with Prepend.
static int legacy_normalizer(json_object *n) {
    json_object *l = get(n, "normalizers", json_type_array);
    int k = l ? (int)json_object_array_length(l) : 0;
    if (!is(n, "Sequence") || k < 1 || k > 2) return 0;
    json_object *a = json_object_array_get_idx(l, 0), *b = json_object_array_get_idx(l, (size_t)k - 1);
    const char *pre = str_of(a, "prepend"), *from = str_of(get(b, "pattern", json_type_object), "String");
    const char *to = str_of(b, "content");
    if (k == 2 && !(is(a, "Prepend") && pre && !strcmp(pre, WS))) return 0;
    return is(b, "Replace") && from && !strcmp(from, " ") && to && !strcmp(to, WS) ? k : 0;
}

int tok_hf_is_spm(json_object *o) {
    json_object *m = get(o, "model", json_type_object), *bf = get(m, "byte_fallback", json_type_boolean);
    return (bf && json_object_get_boolean(bf)) || is(get(o, "pre_tokenizer", json_type_object), "Metaspace") ||
           legacy_normalizer(get(o, "normalizer", json_type_object));
}

// The normalizer and pre-tokenizer into s; 0, or -1 naming what is not supported.
static int metaspace(TokSpm *s, json_object *o, char *why, size_t wn) {
    json_object *norm = get(o, "normalizer", json_type_object), *pre = get(o, "pre_tokenizer", json_type_object);
    s->hf = 1;
    if (!pre && legacy_normalizer(norm)) {
        s->hf_prepend = legacy_normalizer(norm) == 2 ? 2 : 0;
        return 0;
    }
    const char *rep = str_of(pre, "replacement"), *scheme = str_of(pre, "prepend_scheme");
    json_object *split = get(pre, "split", json_type_boolean), *aps = get(pre, "add_prefix_space", json_type_boolean);
    if (norm || !is(pre, "Metaspace") || !rep || strcmp(rep, WS)) {
        snprintf(why, wn, "SentencePiece-style tokenizer.json with normalizer %s and pre-tokenizer %s is not supported "
                 "(Metaspace with replacement \"" WS "\" and no normalizer, or Llama-2's Prepend + Replace normalizer)",
                 norm ? (str_of(norm, "type") ? str_of(norm, "type") : "?") : "none",
                 pre ? (str_of(pre, "type") ? str_of(pre, "type") : "?") : "none");
        return -1;
    }
    s->hf_prepend = scheme ? strcmp(scheme, "never") != 0 : !aps || json_object_get_boolean(aps);
    s->hf_split = !split || json_object_get_boolean(split);
    return 0;
}

// Ids, texts and types of the vocabulary and added tokens; V, or -1 with the reason in why.
static int vocab(TokSpm *s, json_object *o, json_object *m, const char ***text, size_t **len, char *why, size_t wn) {
    json_object *voc = get(m, "vocab", json_type_object), *added = get(o, "added_tokens", json_type_array);
    int64_t V = 0, n_added = added ? (int64_t)json_object_array_length(added) : 0;
    json_object_object_foreach(voc, k, v) {
        int64_t id = json_object_is_type(v, json_type_int) ? json_object_get_int64(v) : -1;
        if (id < 0 || id >= TOK_MAX_VOCAB) {
            snprintf(why, wn, "vocabulary entry '%.40s' has no id in [0, %d)", k, TOK_MAX_VOCAB);
            return -1;
        }
        if (id >= V) V = id + 1;
    }
    for (int64_t i = 0; i < n_added; i++) {
        int64_t id = json_object_get_int64(get(json_object_array_get_idx(added, (size_t)i), "id", json_type_int));
        if (id < 0 || id >= TOK_MAX_VOCAB) {
            snprintf(why, wn, "added token %lld has no id in [0, %d)", (long long)i, TOK_MAX_VOCAB);
            return -1;
        }
        if (id >= V) V = id + 1;
    }
    *text = core_calloc((size_t)V + 1, sizeof **text);
    *len = core_calloc((size_t)V + 1, sizeof **len);
    s->type = core_calloc((size_t)V + 1, 1);
    s->score = core_calloc((size_t)V + 1, sizeof *s->score);
    s->n_pieces = (int)V;
    const char *unk = str_of(m, "unk_token");
    json_object_object_foreach(voc, k2, v2) {
        int64_t id = json_object_get_int64(v2);
        if ((*text)[id]) {
            snprintf(why, wn, "vocabulary entries '%.40s' and '%.40s' are both id %lld", (*text)[id], k2, (long long)id);
            return -1;
        }
        (*text)[id] = k2, (*len)[id] = strlen(k2);
        unsigned b;
        char tail;
        s->type[id] = unk && !strcmp(k2, unk) ? SPM_UNKNOWN
                      : s->byte_fallback && strlen(k2) == 6 && sscanf(k2, "<0x%2X%c", &b, &tail) == 2 && tail == '>' ? SPM_BYTE
                      : SPM_NORMAL;
        if (s->type[id] == SPM_UNKNOWN) s->unk_id = (int)id;
    }
    for (int64_t i = 0; i < n_added; i++) {
        json_object *a = json_object_array_get_idx(added, (size_t)i);
        int64_t id = json_object_get_int64(get(a, "id", json_type_int));
        const char *c = str_of(a, "content");
        if (s->type[id] == SPM_UNKNOWN) continue;
        (*text)[id] = c ? c : "", (*len)[id] = c ? strlen(c) : 0;
        s->type[id] = SPM_CONTROL;
    }
    for (int64_t id = 0; id < V; id++)
        if (!s->type[id]) s->type[id] = SPM_CONTROL, (*text)[id] = "", (*len)[id] = 0;  // an unused id
    return (int)V;
}

// The merges ("a b" or [a, b]) as (a << 32 | b) -> rank; 0, or -1 with the reason in why.
static int merges(TokSpm *s, json_object *voc, json_object *list, char *why, size_t wn) {
    int n = list ? (int)json_object_array_length(list) : 0;
    data_u64map_init(&s->merges, (size_t)n);
    s->merge_out = core_calloc((size_t)n + 1, sizeof *s->merge_out);
    for (int k = 0; k < n; k++) {
        json_object *e = json_object_array_get_idx(list, (size_t)k), *ia, *ib, *ic;
        char a[1024] = "", b[1024] = "", ab[2048];
        const char *sp = json_object_is_type(e, json_type_string) ? strchr(json_object_get_string(e), ' ') : NULL;
        if (sp && sp - json_object_get_string(e) < 1024 && strlen(sp + 1) < 1024)
            snprintf(a, sizeof a, "%.*s", (int)(sp - json_object_get_string(e)), json_object_get_string(e)),
                snprintf(b, sizeof b, "%s", sp + 1);
        else if (json_object_is_type(e, json_type_array) && json_object_array_length(e) == 2)
            snprintf(a, sizeof a, "%s", json_object_get_string(json_object_array_get_idx(e, 0))),
                snprintf(b, sizeof b, "%s", json_object_get_string(json_object_array_get_idx(e, 1)));
        snprintf(ab, sizeof ab, "%s%s", a, b);
        if (!*a || !*b || !json_object_object_get_ex(voc, a, &ia) || !json_object_object_get_ex(voc, b, &ib) ||
            !json_object_object_get_ex(voc, ab, &ic)) {
            snprintf(why, wn, "merge %d '%.40s %.40s': a token not in the vocabulary", k, a, b);
            return -1;
        }
        int inserted;
        data_u64map_put(&s->merges, (uint64_t)json_object_get_int64(ia) << 32 | (uint32_t)json_object_get_int64(ib), k, &inserted);
        s->merge_out[k] = (uint32_t)json_object_get_int64(ic);
        if (!inserted) {
            snprintf(why, wn, "merge %d '%.40s %.40s' is listed twice", k, a, b);
            return -1;
        }
    }
    return 0;
}

// The end-of-document id: eos's, else the first of </s>, <eos>, <|endoftext|>; -1: none.
static int eod_of(const char *const *text, int V, const char *eos) {
    static const char *const EOS[] = {"</s>", "<eos>", "<|endoftext|>", "<|end_of_text|>"};
    for (int j = 0; j < (eos ? 1 : 4); j++)
        for (int id = 0; id < V; id++)
            if (text[id] && !strcmp(text[id], eos ? eos : EOS[j])) return id;
    return -1;
}

Tokenizer *tok_hf_spm(json_object *o, const char *eos, const uint32_t *prefix, int n_prefix,
                      const uint32_t *suffix, int n_suffix, char *why, size_t wn) {
    json_object *m = get(o, "model", json_type_object), *bf = get(m, "byte_fallback", json_type_boolean);
    json_object *fu = get(m, "fuse_unk", json_type_boolean), *im = get(m, "ignore_merges", json_type_boolean);
    json_object *drop = get(m, "dropout", json_type_double);
    TokSpm *s = core_calloc(1, sizeof *s);
    const char **text = NULL;
    size_t *len = NULL;
    Tokenizer *t = NULL;
    s->algo = SPM_BPE_RANKS, s->unk_id = -1;
    s->byte_fallback = bf && json_object_get_boolean(bf);
    s->fuse_unk = fu && json_object_get_boolean(fu);
    s->ignore_merges = im && json_object_get_boolean(im);
    int V = -1, eod = -1;
    if (!is(m, "BPE") || (drop && json_object_get_double(drop) > 0) || !get(m, "vocab", json_type_object)) {
        snprintf(why, wn, "SentencePiece-style tokenizer.json with model %s%s is not supported (BPE with vocab and merges, no dropout)",
                 str_of(m, "type") ? str_of(m, "type") : "?", is(m, "Unigram") ? " (use the tokenizer.model with --tokenizer-type Llama2Tokenizer ...)" : "");
    } else if (metaspace(s, o, why, wn) == 0 && (V = vocab(s, o, m, &text, &len, why, wn)) > 0 &&
               merges(s, get(m, "vocab", json_type_object), get(m, "merges", json_type_array), why, wn) == 0 &&
               tok_spm_index(s, text, len, why, wn) == 0) {
        eod = eod_of(text, V, eos);
        if (eod < 0) snprintf(why, wn, "no end-of-document token (%s)", eos ? eos : "</s>, <eos>, <|endoftext|> or <|end_of_text|>");
    }
    if (eod >= 0) {
        s->megatron_type = strdup("HuggingFaceTokenizer");
        s->src = (uint8_t *)strdup(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE));
        s->src_len = strlen((const char *)s->src);
        s->hf_eos = eos ? strdup(eos) : NULL;
        t = tok_spm_wrap(s, V, text, len, eod, prefix, n_prefix);
        for (int i = 0; i < n_suffix && i < TOK_MAX_AFFIX; i++) t->suffix[t->n_suffix++] = suffix[i];
        s = NULL;
    }
    tok_spm_free(s);
    free(text);
    free(len);
    return t;
}
