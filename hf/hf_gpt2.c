// hf/hf_gpt2.c: GPT-2 names, layouts and config.json between megac and transformers (see
// the table in hf_gpt2.h).
#include "hf_gpt2.h"
#include "core/check.h"  // defines: core_calloc

#include <json-c/json.h>  // defines: json_object_*
#include <math.h>
#include <stdint.h>  // defines: int64_t
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HF_EOD 256  // megac's end-of-document id (data/tokenizer.h)

static const struct { const char *megac, *hf; int transpose; } BLOCK_NAMES[] = {
    {"ln1.weight", "ln_1.weight", 0},           {"ln1.bias", "ln_1.bias", 0},
    {"attn.qkv.weight", "attn.c_attn.weight", 1}, {"attn.qkv.bias", "attn.c_attn.bias", 0},
    {"attn.proj.weight", "attn.c_proj.weight", 1}, {"attn.proj.bias", "attn.c_proj.bias", 0},
    {"ln2.weight", "ln_2.weight", 0},           {"ln2.bias", "ln_2.bias", 0},
    {"mlp.fc.weight", "mlp.c_fc.weight", 1},    {"mlp.fc.bias", "mlp.c_fc.bias", 0},
    {"mlp.proj.weight", "mlp.c_proj.weight", 1}, {"mlp.proj.bias", "mlp.c_proj.bias", 0},
};
static const struct { const char *megac, *hf; } TOP_NAMES[] = {
    {"wte", "transformer.wte.weight"}, {"wpe", "transformer.wpe.weight"},
    {"final_ln.weight", "transformer.ln_f.weight"}, {"final_ln.bias", "transformer.ln_f.bias"},
};

int hf_gpt2_name(const char *name, char *hf, size_t n, int *transpose) {
    *transpose = 0;
    for (size_t i = 0; i < sizeof TOP_NAMES / sizeof TOP_NAMES[0]; i++)
        if (!strcmp(name, TOP_NAMES[i].megac)) return snprintf(hf, n, "%s", TOP_NAMES[i].hf) < (int)n ? 0 : -1;
    int layer, used = 0;
    if (sscanf(name, "layers.%d.%n", &layer, &used) != 1 || used == 0) return -1;
    for (size_t i = 0; i < sizeof BLOCK_NAMES / sizeof BLOCK_NAMES[0]; i++)
        if (!strcmp(name + used, BLOCK_NAMES[i].megac)) {
            *transpose = BLOCK_NAMES[i].transpose;
            return snprintf(hf, n, "transformer.h.%d.%s", layer, BLOCK_NAMES[i].hf) < (int)n ? 0 : -1;
        }
    return -1;
}

// out (cols, rows) = in (rows, cols) transposed.
static void transpose(float *out, const float *in, int rows, int cols) {
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) out[(size_t)c * rows + r] = in[(size_t)r * cols + c];
}

int hf_gpt2_write_weights(const char *dir, const HfCkpt *c, char *err, size_t errlen) {
    HfStOut *t = core_calloc((size_t)c->n, sizeof *t);
    char (*names)[96] = core_calloc((size_t)c->n, sizeof *names);
    float **owned = core_calloc((size_t)c->n, sizeof *owned);
    for (int i = 0; i < c->n; i++) {
        const ParamInfo *p = &c->table[i];
        int tr;
        if (hf_gpt2_name(p->name, names[i], sizeof names[i], &tr) != 0)
            core_fatal("no Hugging Face name for megac tensor %s", p->name);  // table and map disagree
        t[i].name = names[i];
        t[i].ndim = p->cols == 1 ? 1 : 2;
        t[i].shape[0] = tr ? p->cols : p->rows;
        t[i].shape[1] = tr ? p->rows : p->cols;
        t[i].data = c->data[i];
        if (tr) {
            owned[i] = core_calloc((size_t)p->rows * p->cols, sizeof(float));
            transpose(owned[i], c->data[i], p->rows, p->cols);
            t[i].data = owned[i];
        }
    }
    char path[4200], it[32], T[32];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    snprintf(it, sizeof it, "%lld", (long long)c->meta.iteration);
    snprintf(T, sizeof T, "%lld", (long long)c->meta.seq_length);
    const char *meta[] = {"format", "pt", "megac_iteration", it, "megac_seq_length", T};
    int rc = hf_st_write(path, t, c->n, meta, 3, err, errlen);
    for (int i = 0; i < c->n; i++) free(owned[i]);
    free(owned);
    free(names);
    free(t);
    return rc;
}

int hf_write_json(const char *path, json_object *o, char *err, size_t errlen) {
    char tmp[4400];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    const char *s = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED |
                                                   JSON_C_TO_STRING_NOSLASHESCAPE);
    FILE *f = fopen(tmp, "wb");
    int ok = f && fputs(s, f) >= 0 && fputc('\n', f) != EOF;
    if (f) ok = (fclose(f) == 0) && ok;
    json_object_put(o);
    if (!ok || rename(tmp, path) != 0) {
        snprintf(err, errlen, "%s: cannot write", path);
        remove(tmp);
        return -1;
    }
    return 0;
}

int hf_gpt2_write_config(const char *dir, const HfCkpt *c, char *err, size_t errlen) {
    const GPTConfig *g = &c->cfg;
    json_object *o = json_object_new_object(), *arch = json_object_new_array();
    json_object_array_add(arch, json_object_new_string("GPT2LMHeadModel"));
    json_object_object_add(o, "architectures", arch);
    json_object_object_add(o, "model_type", json_object_new_string("gpt2"));
    json_object_object_add(o, "vocab_size", json_object_new_int(g->vocab_size));
    json_object_object_add(o, "n_positions", json_object_new_int(g->max_position_embeddings));
    json_object_object_add(o, "n_ctx", json_object_new_int(g->max_position_embeddings));
    json_object_object_add(o, "n_embd", json_object_new_int(g->hidden_size));
    json_object_object_add(o, "n_layer", json_object_new_int(g->num_layers));
    json_object_object_add(o, "n_head", json_object_new_int(g->num_heads));
    json_object_object_add(o, "n_inner", json_object_new_int(g->ffn_hidden_size));
    json_object_object_add(o, "activation_function", json_object_new_string("gelu_new"));
    json_object_object_add(o, "layer_norm_epsilon", json_object_new_double_s(1e-5, "1e-05"));
    json_object_object_add(o, "resid_pdrop", json_object_new_double_s(0, "0.0"));
    json_object_object_add(o, "embd_pdrop", json_object_new_double_s(0, "0.0"));
    json_object_object_add(o, "attn_pdrop", json_object_new_double_s(0, "0.0"));
    json_object_object_add(o, "initializer_range", json_object_new_double_s(0.02, "0.02"));
    json_object_object_add(o, "scale_attn_weights", json_object_new_boolean(1));
    json_object_object_add(o, "scale_attn_by_inverse_layer_idx", json_object_new_boolean(0));
    json_object_object_add(o, "reorder_and_upcast_attn", json_object_new_boolean(0));
    json_object_object_add(o, "tie_word_embeddings", json_object_new_boolean(1));
    json_object_object_add(o, "use_cache", json_object_new_boolean(1));
    if (g->vocab_size > HF_EOD) {
        json_object_object_add(o, "bos_token_id", json_object_new_int(HF_EOD));
        json_object_object_add(o, "eos_token_id", json_object_new_int(HF_EOD));
    }
    json_object_object_add(o, "torch_dtype", json_object_new_string("float32"));
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", dir);
    return hf_write_json(path, o, err, errlen);
}

// ---- import --------------------------------------------------------------------------------

int hf_json_field(json_object *o, const char *key, json_object **v) {
    return json_object_object_get_ex(o, key, v) && !json_object_is_type(*v, json_type_null);
}

int hf_json_kinds(json_object *o, const HfJsonKind *k, int n, const char *path, char *err,
                  size_t errlen) {
    for (int i = 0; i < n; i++) {
        json_object *v;
        if (!hf_json_field(o, k[i].key, &v)) continue;
        json_type t = json_object_get_type(v);
        int ok = k[i].kind == 'n' ? t == json_type_double || t == json_type_int
                 : k[i].kind == 'i' ? t == json_type_int
                 : k[i].kind == 'b' ? t == json_type_boolean
                                    : t == json_type_string;
        if (!ok) {
            const char *want = k[i].kind == 'n' ? "a number" : k[i].kind == 'i' ? "an integer"
                               : k[i].kind == 'b' ? "true or false" : "a string";
            snprintf(err, errlen, "%s: '%s' is %.40s, expected %s", path, k[i].key,
                     json_object_to_json_string(v), want);
            return -1;
        }
    }
    return 0;
}

int hf_json_int(json_object *o, const char *key, int dflt, int *out, const char *path,
                     char *err, size_t errlen) {
    json_object *v;
    int found = hf_json_field(o, key, &v), is_int = found && json_object_is_type(v, json_type_int);
    int64_t big = is_int ? json_object_get_int64(v) : 0;  // 64-bit: an int would wrap
    *out = !found ? dflt : is_int && big <= HF_JSON_INT_MAX ? (int)big : -1;
    if (big > HF_JSON_INT_MAX) {
        snprintf(err, errlen, "%s: '%s' %lld is too large (at most %d)", path, key, (long long)big,
                 HF_JSON_INT_MAX);
        return -1;
    }
    if (*out > 0) return 0;
    snprintf(err, errlen, "%s: '%s' is missing or not a positive integer", path, key);
    return -1;
}

// The settings megac cannot represent. Returns 0, or -1 with the first one in err.
static int check_representable(json_object *o, const char *path, char *err, size_t errlen) {
    json_object *v;
    const char *type = hf_json_field(o, "model_type", &v) ? json_object_get_string(v) : "(none)";
    const char *arch = "";
    json_object *a;
    if (hf_json_field(o, "architectures", &a) && json_object_is_type(a, json_type_array) && json_object_array_length(a))
        arch = json_object_get_string(json_object_array_get_idx(a, 0));
    if (strcmp(type, "gpt2") != 0) {
        snprintf(err, errlen, "%s: model_type '%s' (%s) cannot be imported: megac imports GPT-2 "
                 "(GPT2LMHeadModel) and Llama (LlamaForCausalLM)", path, type, arch);
        return -1;
    }
    static const HfJsonKind KINDS[] = {
        {"activation_function", 's'}, {"layer_norm_epsilon", 'n'}, {"n_ctx", 'i'},
        {"tie_word_embeddings", 'b'}, {"scale_attn_weights", 'b'},
        {"scale_attn_by_inverse_layer_idx", 'b'}, {"add_cross_attention", 'b'},
    };
    if (hf_json_kinds(o, KINDS, (int)(sizeof KINDS / sizeof KINDS[0]), path, err, errlen)) return -1;
    const char *act = hf_json_field(o, "activation_function", &v) ? json_object_get_string(v) : "gelu_new";
    if (strcmp(act, "gelu_new") && strcmp(act, "gelu_pytorch_tanh")) {
        snprintf(err, errlen, "%s: activation_function '%s' cannot be represented: megac's GPT-2 "
                 "uses the tanh GELU (gelu_new)", path, act);
        return -1;
    }
    double eps = hf_json_field(o, "layer_norm_epsilon", &v) ? json_object_get_double(v) : 1e-5;
    if (fabs(eps - 1e-5) > 1e-12) {
        snprintf(err, errlen, "%s: layer_norm_epsilon %g cannot be represented: megac's "
                 "LayerNorm uses 1e-5", path, eps);
        return -1;
    }
    static const struct { const char *key; int want; const char *why; } FLAGS[] = {
        {"tie_word_embeddings", 1, "an untied output layer"},
        {"scale_attn_weights", 1, "unscaled attention"},
        {"scale_attn_by_inverse_layer_idx", 0, "attention scaled by layer index"},
        {"add_cross_attention", 0, "cross-attention"},
    };
    for (size_t i = 0; i < sizeof FLAGS / sizeof FLAGS[0]; i++)
        if (hf_json_field(o, FLAGS[i].key, &v) && json_object_get_boolean(v) != FLAGS[i].want) {
            snprintf(err, errlen, "%s: %s = %s cannot be represented (%s)", path, FLAGS[i].key,
                     FLAGS[i].want ? "false" : "true", FLAGS[i].why);
            return -1;
        }
    return 0;
}

int hf_gpt2_read_config(const char *dir, GPTConfig *cfg, char *err, size_t errlen) {
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "%s: cannot open (is --hf a Hugging Face model folder?)", path);
        return -1;
    }
    fclose(f);
    json_object *o = json_object_from_file(path);
    if (!o || !json_object_is_type(o, json_type_object)) {
        snprintf(err, errlen, "%s: not a JSON object", path);
        json_object_put(o);
        return -1;
    }
    memset(cfg, 0, sizeof *cfg);
    int rc = check_representable(o, path, err, errlen), P = 0;
    json_object *v;
    if (rc == 0) rc = hf_json_int(o, "n_embd", 0, &cfg->hidden_size, path, err, errlen);
    if (rc == 0) rc = hf_json_int(o, "n_layer", 0, &cfg->num_layers, path, err, errlen);
    if (rc == 0) rc = hf_json_int(o, "n_head", 0, &cfg->num_heads, path, err, errlen);
    if (rc == 0) rc = hf_json_int(o, "vocab_size", 0, &cfg->vocab_size, path, err, errlen);
    if (rc == 0) rc = hf_json_int(o, "n_positions", hf_json_field(o, "n_ctx", &v) ? json_object_get_int(v) : 0,
                                &P, path, err, errlen);
    if (rc == 0) rc = hf_json_int(o, "n_inner", 4 * cfg->hidden_size, &cfg->ffn_hidden_size, path, err, errlen);
    json_object_put(o);
    cfg->max_position_embeddings = P;
    cfg->vocab_divisible_by = 1;
    return rc;
}

int hf_st_read_checked(HfStFile *f, const char *name, int ndim, int64_t d0, int64_t d1, float *out,
                        char *err, size_t errlen) {
    const HfStTensor *t = hf_st_find(f, name);
    if (!t) {
        snprintf(err, errlen, "%s: tensor %s is missing", f->path, name);
        return -1;
    }
    if (t->ndim != ndim || t->shape[0] != d0 || (ndim == 2 && t->shape[1] != d1)) {
        char got[96] = "(";
        for (int d = 0; d < t->ndim; d++)
            snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", d ? ", " : "", (long long)t->shape[d]);
        snprintf(err, errlen, "%s: tensor %s has shape %s), config.json makes it (%lld%s%.0lld)",
                 f->path, name, got, (long long)d0, ndim == 2 ? ", " : "", ndim == 2 ? (long long)d1 : 0LL);
        return -1;
    }
    return hf_st_read_f32(f, t, out, err, errlen);
}

// Every tensor of f must be one c has, lm_head.weight equal to wte, or an attention buffer.
int hf_st_check_tied(HfStFile *f, const HfCkpt *c, const char *name, const char *differs,
                     char *err, size_t errlen) {
    int w = hf_ckpt_find(c, "wte");
    size_t numel = (size_t)c->table[w].rows * c->table[w].cols;
    float *out = core_calloc(numel, sizeof(float));
    int rc = hf_st_read_checked(f, name, 2, c->table[w].rows, c->table[w].cols, out, err, errlen);
    if (rc == 0 && memcmp(out, c->data[w], numel * sizeof(float)) != 0) {
        snprintf(err, errlen, "%s: %s %s", f->path, name, differs);
        rc = -1;
    }
    free(out);
    return rc;
}

static int check_extra(HfStFile *f, const HfCkpt *c, char *err, size_t errlen) {
    for (int i = 0; i < f->n; i++) {
        const char *nm = f->t[i].name;
        int used = 0, tr, L;
        char hf[96];
        for (int k = 0; k < c->n && !used; k++)
            used = hf_gpt2_name(c->table[k].name, hf, sizeof hf, &tr) == 0 && !strcmp(hf, nm);
        size_t len = strlen(nm);
        int buffer = sscanf(nm, "transformer.h.%d.attn.", &L) == 1 &&
                     ((len > 9 && !strcmp(nm + len - 9, "attn.bias")) || strstr(nm, "attn.masked_bias"));
        if (used || buffer) continue;
        if (!strcmp(nm, "lm_head.weight")) {
            if (hf_st_check_tied(f, c, nm, "differs from transformer.wte.weight: an untied "
                                 "output layer cannot be represented", err, errlen))
                return -1;
            continue;
        }
        snprintf(err, errlen, "%s: tensor %s is not part of GPT-2 as megac builds it", f->path, nm);
        return -1;
    }
    return 0;
}

int hf_gpt2_read_weights(const char *dir, HfCkpt *c, char *err, size_t errlen) {
    HfStFile *f = hf_st_open_model(dir, err, errlen);
    if (!f) return -1;
    int rc = 0;
    for (int i = 0; i < c->n && rc == 0; i++) {
        const ParamInfo *p = &c->table[i];
        char hf[96];
        int tr;
        hf_gpt2_name(p->name, hf, sizeof hf, &tr);
        float *buf = tr ? core_calloc((size_t)p->rows * p->cols, sizeof(float)) : c->data[i];
        rc = hf_st_read_checked(f, hf, p->cols == 1 ? 1 : 2, tr ? p->cols : p->rows, tr ? p->rows : p->cols,
                          buf, err, errlen);
        if (tr) {
            if (rc == 0) transpose(c->data[i], buf, p->cols, p->rows);
            free(buf);
        }
    }
    if (rc == 0) rc = check_extra(f, c, err, errlen);
    hf_st_close(f);
    return rc;
}
