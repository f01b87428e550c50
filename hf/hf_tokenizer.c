// hf/hf_tokenizer.c: tokenizer.json for megac's byte-level BPE (see hf_tokenizer.h).
#include "hf_tokenizer.h"
#include "core/check.h"  // defines: core_calloc
#include "data/h5ds.h"    // defines: h5ds_open_serial

#include <json-c/json.h>  // defines: json_object_*
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>  // defines: access

int hf_tok_byte_char(unsigned b, char out[3]) { return tok_byte_char(b, out); }

// Token id's string: the alphabet characters of its bytes (NUL-terminated, malloc'ed).
static char *token_string(const Tokenizer *t, uint32_t id) {
    size_t len;
    const uint8_t *b = tok_token_bytes(t, id, &len);
    char *s = core_calloc(2 * len + 1, 1), *p = s;
    for (size_t i = 0; i < len; i++) p += hf_tok_byte_char(b[i], p);
    return s;
}

// Refuses two ids with the same bytes (a vocabulary maps each string to one id).
static int check_unique(const Tokenizer *t, char *err, size_t errlen) {
    DataStrMap seen;
    data_strmap_init(&seen);
    int64_t *owner = core_calloc((size_t)t->vocab_size + 1, sizeof *owner);
    int rc = 0;
    for (int id = 0; id < t->vocab_size && rc == 0; id++) {
        if (id == t->eod_id) continue;
        size_t len;
        const uint8_t *b = tok_token_bytes(t, (uint32_t)id, &len);
        int inserted;
        int64_t k = data_strmap_intern(&seen, b, len, &inserted);
        if (inserted) owner[k] = id;
        else {
            snprintf(err, errlen, "tokenizer: ids %lld and %d are the same %zu-byte string (two "
                     "merges make it); a Hugging Face vocabulary maps a string to one id: tokenizer "
                     "not exported", (long long)owner[k], id, len);
            rc = -1;
        }
    }
    free(owner);
    data_strmap_free(&seen);
    return rc;
}

static json_object *special_token(int id) {
    json_object *a = json_object_new_object();
    json_object_object_add(a, "id", json_object_new_int(id));
    json_object_object_add(a, "content", json_object_new_string(HF_EOD_TOKEN));
    json_object_object_add(a, "single_word", json_object_new_boolean(0));
    json_object_object_add(a, "lstrip", json_object_new_boolean(0));
    json_object_object_add(a, "rstrip", json_object_new_boolean(0));
    json_object_object_add(a, "normalized", json_object_new_boolean(0));
    json_object_object_add(a, "special", json_object_new_boolean(1));
    return a;
}

static json_object *byte_level(int use_regex) {
    json_object *b = json_object_new_object();
    json_object_object_add(b, "type", json_object_new_string("ByteLevel"));
    json_object_object_add(b, "add_prefix_space", json_object_new_boolean(0));
    json_object_object_add(b, "trim_offsets", json_object_new_boolean(1));
    json_object_object_add(b, "use_regex", json_object_new_boolean(use_regex));
    return b;
}

// Split(pattern, Isolated) then ByteLevel; only ByteLevel for the byte tokenizer.
static json_object *pre_tokenizer(const Tokenizer *t) {
    if (t->kind == TOK_BYTE) return byte_level(0);
    json_object *split = json_object_new_object(), *pat = json_object_new_object();
    json_object_object_add(split, "type", json_object_new_string("Split"));
    json_object_object_add(pat, "Regex", json_object_new_string(t->pattern));
    json_object_object_add(split, "pattern", pat);
    json_object_object_add(split, "behavior", json_object_new_string("Isolated"));
    json_object_object_add(split, "invert", json_object_new_boolean(0));
    json_object *seq = json_object_new_object(), *list = json_object_new_array();
    json_object_array_add(list, split);
    json_object_array_add(list, byte_level(0));
    json_object_object_add(seq, "type", json_object_new_string("Sequence"));
    json_object_object_add(seq, "pretokenizers", list);
    return seq;
}

// The BPE model: vocab (string -> id) and merges ("a b" in order).
static json_object *bpe_model(const Tokenizer *t) {
    json_object *m = json_object_new_object(), *vocab = json_object_new_object();
    json_object_object_add(m, "type", json_object_new_string("BPE"));
    json_object_object_add(m, "dropout", NULL);
    json_object_object_add(m, "unk_token", NULL);
    json_object_object_add(m, "continuing_subword_prefix", NULL);
    json_object_object_add(m, "end_of_word_suffix", NULL);
    json_object_object_add(m, "fuse_unk", json_object_new_boolean(0));
    json_object_object_add(m, "byte_fallback", json_object_new_boolean(0));
    for (int id = 0; id < t->vocab_size; id++) {
        char *s = id == t->eod_id ? strdup(HF_EOD_TOKEN) : token_string(t, (uint32_t)id);
        json_object_object_add(vocab, s, json_object_new_int(id));
        free(s);
    }
    json_object_object_add(m, "vocab", vocab);
    json_object *merges = json_object_new_array_ext(t->n_merges);
    for (int k = 0; k < t->n_merges; k++) {
        char *a = token_string(t, t->merges[2 * k]), *b = token_string(t, t->merges[2 * k + 1]);
        char *ab = core_calloc(strlen(a) + strlen(b) + 2, 1);
        sprintf(ab, "%s %s", a, b);
        json_object_array_add(merges, json_object_new_string(ab));
        free(a);
        free(b);
        free(ab);
    }
    json_object_object_add(m, "merges", merges);
    return m;
}

static int save(const char *path, json_object *o, char *err, size_t errlen) {
    int rc = json_object_to_file_ext(path, o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
    json_object_put(o);
    if (rc != 0) snprintf(err, errlen, "%s: cannot write", path);
    return rc ? -1 : 0;
}

int hf_tok_write(const char *dir, const Tokenizer *t, int max_len, char *err, size_t errlen) {
    if (!t->megac_layout) {
        snprintf(err, errlen, "tokenizer: read from a Hugging Face or GPT-2 file (not megac's id "
                 "layout): copy that file to the export instead; tokenizer not exported");
        return -1;
    }
    if (check_unique(t, err, errlen) != 0) return -1;
    json_object *o = json_object_new_object(), *added = json_object_new_array();
    json_object_object_add(o, "version", json_object_new_string("1.0"));
    json_object_object_add(o, "truncation", NULL);
    json_object_object_add(o, "padding", NULL);
    json_object_array_add(added, special_token(t->eod_id));
    json_object_object_add(o, "added_tokens", added);
    json_object_object_add(o, "normalizer", NULL);
    json_object_object_add(o, "pre_tokenizer", pre_tokenizer(t));
    json_object_object_add(o, "post_processor", NULL);
    json_object_object_add(o, "decoder", byte_level(0));
    json_object_object_add(o, "model", bpe_model(t));
    char path[4200];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    if (save(path, o, err, errlen) != 0) return -1;
    json_object *c = json_object_new_object();
    json_object_object_add(c, "tokenizer_class", json_object_new_string("PreTrainedTokenizerFast"));
    json_object_object_add(c, "bos_token", json_object_new_string(HF_EOD_TOKEN));
    json_object_object_add(c, "eos_token", json_object_new_string(HF_EOD_TOKEN));
    json_object_object_add(c, "model_max_length", json_object_new_int(max_len));
    json_object_object_add(c, "clean_up_tokenization_spaces", json_object_new_boolean(0));
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    return save(path, c, err, errlen);
}

Tokenizer *hf_tok_resolve(const char *spec, const char *ckpt_dir, char *err, size_t errlen) {
    char path[4200];
    if (!spec) {
        snprintf(path, sizeof path, "%s/%s", ckpt_dir, HF_TOK_CKPT_FILE);
        if (access(path, F_OK) != 0) {
            snprintf(err, errlen, "the checkpoint %s has no tokenizer (%s): pass --tokenizer "
                     "byte|tok.json|data.h5", ckpt_dir, HF_TOK_CKPT_FILE);
            return NULL;
        }
        spec = path;
    }
    static const unsigned char HDF5_MAGIC[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
    unsigned char head[16] = {0};
    FILE *f = strcmp(spec, "byte") ? fopen(spec, "rb") : NULL;
    size_t got = f ? fread(head, 1, sizeof head - 1, f) : 0;
    if (f) fclose(f);
    if (got < 8 || memcmp(head, HDF5_MAGIC, 8)) return tok_load(spec, err, errlen);
    H5Dataset *ds = h5ds_open_serial(spec, NULL, err, errlen);
    if (!ds) return NULL;
    Tokenizer *t = tok_deserialize(ds->tokenizer, strlen(ds->tokenizer), spec, err, errlen);
    h5ds_close(ds);
    return t;
}
