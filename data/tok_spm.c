// data/tok_spm.c: SentencePiece's tokenizer.model (a ModelProto, read with data/protobuf.h)
// as a megac Tokenizer of kind TOK_SPM, with Megatron's three tokenizer types over it, and
// its self-description in datasets (the model file itself, base64, inside megac's JSON).
//
// Read from the ModelProto: pieces (text, score, type), TrainerSpec's model_type (UNIGRAM,
// BPE), byte_fallback, unk/bos/eos/pad ids, NormalizerSpec's precompiled_charsmap (identity
// when empty, e.g. nmt_nfkc otherwise), add_dummy_prefix, remove_extra_whitespaces,
// escape_whitespaces. Refused, naming the field: model types WORD and CHAR,
// treat_whitespace_as_suffix.
#include "tok_spm.h"
#include "core/check.h"     // defines: core_calloc
#include "data/protobuf.h"  // defines: pb_next

#include <json-c/json.h>    // defines: json_object_*
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// The parts of a ModelProto megac reads (texts point into the file's bytes).
typedef struct {
    int n;
    const char **text;
    size_t *len;
    float *score;
    uint8_t *type;
    int model_type, byte_fallback, ws_suffix;
    int unk_id, bos_id, eos_id, pad_id;
    const uint8_t *charsmap;
    size_t charsmap_len;
    int add_dummy_prefix, remove_extra_ws, escape_ws;
} SpmProto;

// One ModelProto.SentencePiece into p's entry i. 0, or -1 when malformed.
static int read_piece(SpmProto *p, int i, const uint8_t *b, size_t n) {
    PbReader r = pb_reader(b, n);
    PbField f;
    int rc;
    p->type[i] = SPM_NORMAL;
    while ((rc = pb_next(&r, &f)) == 1) {
        if (f.field == 1 && f.wire == 2) p->text[i] = (const char *)f.s, p->len[i] = f.n;
        else if (f.field == 2 && f.wire == 5) p->score[i] = pb_float(&f);
        else if (f.field == 3 && f.wire == 0) p->type[i] = (uint8_t)(f.v >= 1 && f.v <= 6 ? f.v : 0);
    }
    return rc < 0 || !p->text[i] || !p->type[i] ? -1 : 0;
}

static int read_trainer(SpmProto *p, const uint8_t *b, size_t n) {
    PbReader r = pb_reader(b, n);
    PbField f;
    int rc;
    while ((rc = pb_next(&r, &f)) == 1) {
        if (f.wire != 0) continue;
        int32_t v = (int32_t)(int64_t)f.v;  // int32 fields: negative values are 10-byte varints
        switch (f.field) {
        case 3: p->model_type = v; break;
        case 24: p->ws_suffix = v; break;
        case 35: p->byte_fallback = v; break;
        case 40: p->unk_id = v; break;
        case 41: p->bos_id = v; break;
        case 42: p->eos_id = v; break;
        case 43: p->pad_id = v; break;
        }
    }
    return rc < 0 ? -1 : 0;
}

static int read_normalizer(SpmProto *p, const uint8_t *b, size_t n) {
    PbReader r = pb_reader(b, n);
    PbField f;
    int rc;
    while ((rc = pb_next(&r, &f)) == 1) {
        if (f.field == 2 && f.wire == 2) p->charsmap = f.s, p->charsmap_len = f.n;
        else if (f.field == 3 && f.wire == 0) p->add_dummy_prefix = f.v != 0;
        else if (f.field == 4 && f.wire == 0) p->remove_extra_ws = f.v != 0;
        else if (f.field == 5 && f.wire == 0) p->escape_ws = f.v != 0;
    }
    return rc < 0 ? -1 : 0;
}

// The ModelProto in buf[0..n) into p (arrays malloc'ed). 0, or -1 with the reason in why.
static int read_model(SpmProto *p, const uint8_t *buf, size_t n, char *why, size_t wn) {
    *p = (SpmProto){.model_type = 1, .unk_id = 0, .bos_id = 1, .eos_id = 2, .pad_id = -1,
                    .add_dummy_prefix = 1, .remove_extra_ws = 1, .escape_ws = 1};  // the proto's defaults
    PbReader r = pb_reader(buf, n);
    PbField f;
    int rc, cap = 0;
    while ((rc = pb_next(&r, &f)) == 1) {
        if (f.wire != 2) continue;
        if (f.field == 1) {
            if (p->n == cap) {
                cap = cap ? 2 * cap : 1024;
                p->text = realloc(p->text, (size_t)cap * sizeof *p->text);
                p->len = realloc(p->len, (size_t)cap * sizeof *p->len);
                p->score = realloc(p->score, (size_t)cap * sizeof *p->score);
                p->type = realloc(p->type, (size_t)cap);
                if (!p->text || !p->len || !p->score || !p->type) core_fatal("out of memory reading a tokenizer.model");
            }
            p->text[p->n] = NULL, p->score[p->n] = 0;
            if (read_piece(p, p->n, f.s, f.n)) {
                snprintf(why, wn, "piece %d is malformed (not a SentencePiece model file?)", p->n);
                return -1;
            }
            p->n++;
        } else if ((f.field == 2 && read_trainer(p, f.s, f.n)) || (f.field == 3 && read_normalizer(p, f.s, f.n))) {
            snprintf(why, wn, "malformed %s spec", f.field == 2 ? "trainer" : "normalizer");
            return -1;
        }
    }
    if (rc < 0 || p->n == 0) {
        snprintf(why, wn, "%s", rc < 0 ? "not a SentencePiece model file (malformed protobuf)" : "no pieces: not a SentencePiece model file");
        return -1;
    }
    if (p->model_type != 1 && p->model_type != 2) {
        snprintf(why, wn, "model_type %s is not supported (UNIGRAM and BPE are)", p->model_type == 3 ? "WORD" : p->model_type == 4 ? "CHAR" : "unknown");
        return -1;
    }
    if (p->ws_suffix) {
        snprintf(why, wn, "treat_whitespace_as_suffix is not supported");
        return -1;
    }
    if (p->unk_id < 0 || p->unk_id >= p->n || p->type[p->unk_id] != SPM_UNKNOWN) {
        snprintf(why, wn, "unk_id %d is not an UNKNOWN piece", p->unk_id);
        return -1;
    }
    return 0;
}

// The double-array charsmap (a little-endian uint32 trie size, the trie, the replacement
// strings) into s. 0, or -1 when its sizes do not fit.
static int set_charsmap(TokSpm *s, const uint8_t *b, size_t n) {
    if (n == 0) return 0;  // identity
    if (n < 4) return -1;
    size_t trie = (size_t)b[0] | (size_t)b[1] << 8 | (size_t)b[2] << 16 | (size_t)b[3] << 24;
    if (trie % 4 || trie > n - 4 || trie == 0) return -1;
    s->charsmap = core_calloc(n + 1, 1);  // the units first: aligned
    memcpy(s->charsmap, b + 4, n - 4);
    s->cm_units = (const uint32_t *)s->charsmap;
    s->n_units = trie / 4;
    s->cm_norm = (const char *)s->charsmap + trie;
    s->n_norm = n - 4 - trie;
    return 0;
}

// Megatron's SentencePieceTokenizer adds <CLS> <SEP> <EOD> <MASK> and the pad, bos and eos
// pieces (<PAD> <BOS> <EOS> when the model has none) as ids after the model's (an existing
// piece of that text keeps its id), and encodes them wherever they occur in a text.
static int megatron_extras(TokSpm *s, const SpmProto *p, const char **text, size_t *len, int *eod) {
    const char *want[7] = {"<CLS>", "<SEP>", "<EOD>", "<MASK>", "<PAD>", "<BOS>", "<EOS>"};
    size_t wlen[7];
    int ids[3] = {p->pad_id, p->bos_id, p->eos_id}, V = p->n;
    for (int j = 0; j < 7; j++) wlen[j] = strlen(want[j]);
    for (int j = 0; j < 3; j++)
        if (ids[j] >= 0 && ids[j] < p->n) want[4 + j] = p->text[ids[j]], wlen[4 + j] = p->len[ids[j]];
    for (int j = 0; j < 7; j++) {
        int id = -1;
        for (int i = 0; i < V && id < 0; i++)
            if (len[i] == wlen[j] && !memcmp(text[i], want[j], wlen[j])) id = i;
        if (id < 0) {
            id = V++;
            text[id] = want[j], len[id] = wlen[j];
        }
        int seen = 0;
        for (int k = 0; k < s->n_split; k++) seen |= s->split_id[k] == (uint32_t)id;
        if (!seen && len[id]) {
            s->split_text[s->n_split] = strndup(text[id], len[id]);
            s->split_id[s->n_split++] = (uint32_t)id;
        }
        if (j == 2) *eod = id;
    }
    return V;
}

// The Tokenizer of model bytes buf[0..n) for Megatron's type. NULL with the reason in why.
static Tokenizer *from_model(const uint8_t *buf, size_t n, const char *type, char *why, size_t wn) {
    SpmProto p;
    Tokenizer *t = NULL;
    TokSpm *s = core_calloc(1, sizeof *s);
    const char **text = NULL;
    size_t *len = NULL;
    if (read_model(&p, buf, n, why, wn)) goto done;
    s->algo = p.model_type == 2 ? SPM_BPE : SPM_UNIGRAM;
    s->n_pieces = p.n;
    s->type = p.type, s->score = p.score;
    p.type = NULL, p.score = NULL;
    s->unk_id = p.unk_id, s->fuse_unk = 1, s->byte_fallback = p.byte_fallback;
    s->add_dummy_prefix = p.add_dummy_prefix, s->remove_extra_ws = p.remove_extra_ws, s->escape_ws = p.escape_ws;
    if (set_charsmap(s, p.charsmap, p.charsmap_len)) {
        snprintf(why, wn, "malformed precompiled_charsmap");
        goto done;
    }
    text = core_calloc((size_t)p.n + 8, sizeof *text);
    len = core_calloc((size_t)p.n + 8, sizeof *len);
    memcpy(text, p.text, (size_t)p.n * sizeof *text);
    memcpy(len, p.len, (size_t)p.n * sizeof *len);
    if (tok_spm_index(s, text, len, why, wn)) goto done;
    int V = p.n, eod = p.eos_id;
    uint32_t bos = (uint32_t)p.bos_id;
    if (!strcmp(type, "SentencePieceTokenizer")) V = megatron_extras(s, &p, text, len, &eod);
    else if (eod < 0 || eod >= p.n) {
        snprintf(why, wn, "eos_id %d is not a piece: %s needs one (its end-of-document id)", eod, type);
        goto done;
    }
    int llama = !strcmp(type, "Llama2Tokenizer") && p.bos_id >= 0 && p.bos_id < p.n;
    s->megatron_type = strdup(type);
    s->src = core_calloc(n + 1, 1);
    memcpy(s->src, buf, n);
    s->src_len = n;
    t = tok_spm_wrap(s, V, text, len, eod, &bos, llama);
    s = NULL;
done:
    tok_spm_free(s);
    free(p.text), free(p.len), free(p.score), free(p.type);
    free(text), free(len);
    return t;
}

Tokenizer *tok_load_spm(const char *type, const char *path, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "%s: cannot open (--tokenizer-model: a SentencePiece tokenizer.model)", path);
        return NULL;
    }
    TokBytes buf = {0};
    uint8_t chunk[65536];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0 && buf.n < (1u << 30)) tok_bytes_append(&buf, chunk, n);
    fclose(f);
    char why[400] = "empty file: not a SentencePiece model";
    Tokenizer *t = buf.n ? from_model(buf.v, buf.n, type, why, sizeof why) : NULL;
    if (!t) snprintf(err, errlen, "%s: %s", path, why);
    free(buf.v);
    return t;
}

// ---- the self-description in datasets -------------------------------------------------------

static const char B64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static char *b64_encode(const uint8_t *s, size_t n) {
    char *o = core_calloc((n + 2) / 3 * 4 + 1, 1), *w = o;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)s[i] << 16 | (i + 1 < n ? (uint32_t)s[i + 1] << 8 : 0) | (i + 2 < n ? s[i + 2] : 0);
        *w++ = B64[v >> 18], *w++ = B64[(v >> 12) & 63];
        *w++ = i + 1 < n ? B64[(v >> 6) & 63] : '=';
        *w++ = i + 2 < n ? B64[v & 63] : '=';
    }
    return o;
}

// Decodes s into out; 0, or -1 on a character outside the alphabet.
static int b64_decode(const char *s, size_t n, TokBytes *out) {
    uint32_t v = 0;
    int bits = 0;
    for (size_t i = 0; i < n && s[i] != '='; i++) {
        const char *c = strchr(B64, s[i]);
        if (!c || !s[i]) return -1;
        v = v << 6 | (uint32_t)(c - B64), bits += 6;
        if (bits >= 8) {
            uint8_t b = (uint8_t)(v >> (bits - 8));
            tok_bytes_append(out, &b, 1);
            bits -= 8;
        }
    }
    return 0;
}

char *tok_spm_describe(const Tokenizer *t) {
    const TokSpm *s = t->spm;
    json_object *o = json_object_new_object();
    json_object_object_add(o, "format", json_object_new_string("megac-spm"));
    json_object_object_add(o, "version", json_object_new_int(1));
    json_object_object_add(o, "type", json_object_new_string(s->megatron_type));
    json_object_object_add(o, "vocab_size", json_object_new_int(t->vocab_size));
    json_object_object_add(o, "eod_id", json_object_new_int(t->eod_id));
    if (s->hf) {
        json_object_object_add(o, "eos", s->hf_eos ? json_object_new_string(s->hf_eos) : NULL);
        json_object_object_add(o, "tokenizer_json", json_object_new_string_len((const char *)s->src, (int)s->src_len));
    } else {
        char *b = b64_encode(s->src, s->src_len);
        json_object_object_add(o, "model", json_object_new_string(b));
        free(b);
    }
    char *r = strdup(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE));
    json_object_put(o);
    return r;
}

Tokenizer *tok_spm_from_desc(json_object *o, const char *origin, char *err, size_t errlen) {
    json_object *ty, *model, *hf, *eos, *v, *e;
    Tokenizer *t = NULL;
    char why[400] = "a megac-spm description without type and model (or tokenizer_json)";
    int ok = json_object_object_get_ex(o, "type", &ty) && json_object_is_type(ty, json_type_string);
    if (ok && json_object_object_get_ex(o, "tokenizer_json", &hf) && json_object_is_type(hf, json_type_string)) {
        json_object *j = json_tokener_parse(json_object_get_string(hf));
        const char *eos_text = json_object_object_get_ex(o, "eos", &eos) && json_object_is_type(eos, json_type_string)
                                   ? json_object_get_string(eos) : NULL;
        if (j) t = tok_hf_from_json(j, origin, eos_text, err, errlen);
        json_object_put(j);
        if (!t) return NULL;
    } else if (ok && json_object_object_get_ex(o, "model", &model) && json_object_is_type(model, json_type_string)) {
        TokBytes b = {0};
        if (b64_decode(json_object_get_string(model), (size_t)json_object_get_string_len(model), &b) == 0 && b.n)
            t = from_model(b.v, b.n, json_object_get_string(ty), why, sizeof why);
        free(b.v);
    }
    if (t && (!json_object_object_get_ex(o, "vocab_size", &v) || json_object_get_int(v) != t->vocab_size ||
              !json_object_object_get_ex(o, "eod_id", &e) || json_object_get_int(e) != t->eod_id)) {
        snprintf(why, sizeof why, "vocab_size / eod_id do not match the model it holds");
        tok_free(t);
        t = NULL;
    }
    if (!t) snprintf(err, errlen, "%s: %s", origin, why);
    return t;
}
