// hf/hf_tokenizer_read.c: tokenizer.json back to a megac tokenizer (see hf_tok_read in
// hf_tokenizer.h): only files in megac's id layout, which hf_tok_write produces.
#include "hf_tokenizer.h"
#include "core/check.h"  // defines: core_calloc

#include <json-c/json.h>  // defines: json_object_*
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// Member `key` of o with JSON type t, or NULL.
static json_object *get(json_object *o, const char *key, json_type t) {
    json_object *v;
    return o && json_object_object_get_ex(o, key, &v) && json_object_is_type(v, t) ? v : NULL;
}

static int is_type(json_object *o, const char *type) {
    json_object *t = get(o, "type", json_type_string);
    return t && !strcmp(json_object_get_string(t), type);
}

// ByteLevel without its own regex (megac's bytes are split by the Split step, or not at all).
static int plain_byte_level(json_object *o) {
    json_object *r = get(o, "use_regex", json_type_boolean);
    return is_type(o, "ByteLevel") && r && !json_object_get_boolean(r);
}

// The pattern of Sequence[Split(Regex, Isolated), ByteLevel]; "" for ByteLevel alone; NULL else.
static const char *pre_pattern(json_object *pre) {
    if (plain_byte_level(pre)) return "";
    json_object *list = get(pre, "pretokenizers", json_type_array);
    if (!is_type(pre, "Sequence") || !list || json_object_array_length(list) != 2) return NULL;
    json_object *split = json_object_array_get_idx(list, 0);
    json_object *rx = get(get(split, "pattern", json_type_object), "Regex", json_type_string);
    json_object *beh = get(split, "behavior", json_type_string);
    if (!is_type(split, "Split") || !rx || !beh || strcmp(json_object_get_string(beh), "Isolated") ||
        !plain_byte_level(json_object_array_get_idx(list, 1)))
        return NULL;
    return json_object_get_string(rx);
}

// Id of vocabulary string s, or -1.
static int64_t id_of(json_object *vocab, const char *s) {
    json_object *v = get(vocab, s, json_type_int);
    return v ? json_object_get_int64(v) : -1;
}

// Checks the byte and EOD ids and reads the merges into m (n, 2). Returns 0 or -1 with why.
static int read_merges(json_object *vocab, json_object *merges, uint32_t *m, int n, char *why, size_t wn) {
    for (unsigned b = 0; b < 256; b++) {
        char c[3] = {0};
        hf_tok_byte_char(b, c);
        if (id_of(vocab, c) != (int64_t)b) {
            snprintf(why, wn, "byte %u is not id %u", b, b);
            return -1;
        }
    }
    if (id_of(vocab, HF_EOD_TOKEN) != TOK_EOD) {
        snprintf(why, wn, "%s is not id %d", HF_EOD_TOKEN, TOK_EOD);
        return -1;
    }
    for (int k = 0; k < n; k++) {
        json_object *e = json_object_array_get_idx(merges, (size_t)k);
        char a[1024] = "", b[1024] = "";
        if (json_object_is_type(e, json_type_string)) {
            const char *s = json_object_get_string(e), *sp = strchr(s, ' ');
            if (sp && (size_t)(sp - s) < sizeof a && strlen(sp + 1) < sizeof b) {
                memcpy(a, s, (size_t)(sp - s));
                snprintf(b, sizeof b, "%s", sp + 1);
            }
        } else if (json_object_is_type(e, json_type_array) && json_object_array_length(e) == 2) {
            snprintf(a, sizeof a, "%s", json_object_get_string(json_object_array_get_idx(e, 0)));
            snprintf(b, sizeof b, "%s", json_object_get_string(json_object_array_get_idx(e, 1)));
        }
        char ab[2048];
        snprintf(ab, sizeof ab, "%s%s", a, b);
        int64_t ia = id_of(vocab, a), ib = id_of(vocab, b), iab = id_of(vocab, ab);
        if (!*a || !*b || ia < 0 || ib < 0 || iab != TOK_FIRST_MERGE + k) {
            snprintf(why, wn, "merge %d does not make id %d from two known tokens", k, TOK_FIRST_MERGE + k);
            return -1;
        }
        m[2 * k] = (uint32_t)ia;
        m[2 * k + 1] = (uint32_t)ib;
    }
    return 0;
}

static Tokenizer *from_json(json_object *o, char *why, size_t wn) {
    json_object *model = get(o, "model", json_type_object);
    json_object *vocab = get(model, "vocab", json_type_object);
    json_object *merges = get(model, "merges", json_type_array);
    const char *pattern = pre_pattern(get(o, "pre_tokenizer", json_type_object));
    if (!is_type(model, "BPE") || !vocab || !merges) {
        snprintf(why, wn, "not a BPE model with vocab and merges");
        return NULL;
    }
    int n = (int)json_object_array_length(merges);
    if (!pattern || (!*pattern && n > 0)) {
        snprintf(why, wn, "pre-tokenizer is not Split(Regex, Isolated) + ByteLevel (use_regex false)");
        return NULL;
    }
    if (json_object_object_length(vocab) != TOK_FIRST_MERGE + n) {
        snprintf(why, wn, "%d ids for %d merges (megac's layout has 257 + merges)",
                 json_object_object_length(vocab), n);
        return NULL;
    }
    uint32_t *m = core_calloc((size_t)n * 2 + 1, sizeof(uint32_t));
    Tokenizer *t = NULL;
    if (read_merges(vocab, merges, m, n, why, wn) == 0)
        t = n == 0 ? tok_byte_new() : tok_bpe_new(m, n, pattern, TOK_DEFAULT_MAX_PIECE, why, wn);
    free(m);
    return t;
}

Tokenizer *hf_tok_read(const char *dir, char *err, size_t errlen) {
    char path[4200], why[512] = "";
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    json_object *o = json_object_from_file(path);
    Tokenizer *t = o ? from_json(o, why, sizeof why) : NULL;
    if (!o) snprintf(why, sizeof why, "missing or not JSON");
    json_object_put(o);
    if (!t) snprintf(err, errlen, "%s: %s: not in megac's byte-level BPE id layout", path, why);
    return t;
}
