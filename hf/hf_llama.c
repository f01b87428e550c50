// hf/hf_llama.c: Llama and Mixtral names, layouts and config.json between megac and
// transformers (see the tables in hf_llama.h). A megac tensor maps to 1 to 3 Hugging Face
// tensors, each a block of its rows (q/k/v of the fused QKV, gate/up of SwiGLU's fc), or to
// 1 to 2 per expert (an expert's w1/w3 of the stacked fc, its w2 of the stacked proj), so
// both directions copy rows.
#include "hf_llama.h"
#include "hf_gpt2.h"     // defines: hf_write_json, hf_json_field, hf_json_int, hf_st_*
#include "core/check.h"  // defines: core_calloc, core_fatal
#include "model/gpt_moe.h"  // defines: gpt_moe_layer, gpt_moe_ffn

#include <json-c/json.h>  // defines: json_object_*
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HF_EOD 256  // megac's end-of-document id (data/tokenizer.h)

// The Hugging Face tensors of one megac tensor: n blocks of consecutive rows, block k
// rows[k % nf] rows long and named by part_name. Dense tensors have 1 to 3 blocks; a
// Mixtral expert tensor has nf blocks per expert, expert e's being blocks [e nf, (e + 1) nf).
typedef struct {
    const char *hf[3];  // the names after "model.layers.L." (after "...experts.e." for experts)
    int nf, n;          // names per expert (or per tensor); blocks
    int rows[3];        // block k is rows[k % nf] rows long
    int layer;          // -1: a model-level tensor
    int experts;        // 1: block k belongs to expert k / nf
} Parts;

static const struct { const char *megac, *hf[3]; int experts; } BLOCK_NAMES[] = {
    {"ln1.weight", {"input_layernorm.weight"}, 0},
    {"attn.qkv.weight", {"self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight"}, 0},
    {"attn.proj.weight", {"self_attn.o_proj.weight"}, 0},
    {"ln2.weight", {"post_attention_layernorm.weight"}, 0},
    {"mlp.fc.weight", {"mlp.gate_proj.weight", "mlp.up_proj.weight"}, 0},
    {"mlp.proj.weight", {"mlp.down_proj.weight"}, 0},
    // Mixtral: expert e's fc rows are [gate (Fe); up (Fe)] = w1, w3; its (C, Fe) proj is w2
    {"mlp.router.weight", {"block_sparse_moe.gate.weight"}, 0},
    {"mlp.experts.fc.weight", {"w1.weight", "w3.weight"}, 1},
    {"mlp.experts.proj.weight", {"w2.weight"}, 1},
};
static const struct { const char *megac, *hf; } TOP_NAMES[] = {
    {"wte", "model.embed_tokens.weight"}, {"final_ln.weight", "model.norm.weight"},
    {"output_layer", "lm_head.weight"},
};

// The parts of table entry p of a model with E experts. Returns 0, or -1 for a tensor
// Llama / Mixtral does not have.
static int parts_of(const ParamInfo *p, int E, Parts *out) {
    memset(out, 0, sizeof *out);
    out->layer = -1;
    for (size_t i = 0; i < sizeof TOP_NAMES / sizeof TOP_NAMES[0]; i++)
        if (!strcmp(p->name, TOP_NAMES[i].megac)) {
            out->hf[0] = TOP_NAMES[i].hf;
            out->rows[0] = p->rows;
            out->nf = out->n = 1;
            return 0;
        }
    int layer, used = 0;
    if (sscanf(p->name, "layers.%d.%n", &layer, &used) != 1 || used == 0) return -1;
    for (size_t i = 0; i < sizeof BLOCK_NAMES / sizeof BLOCK_NAMES[0]; i++) {
        if (strcmp(p->name + used, BLOCK_NAMES[i].megac)) continue;
        out->layer = layer;
        out->experts = BLOCK_NAMES[i].experts;
        for (int k = 0; k < 3 && BLOCK_NAMES[i].hf[k]; k++) {
            out->hf[k] = BLOCK_NAMES[i].hf[k];
            out->nf = k + 1;
        }
        out->n = out->experts ? out->nf * E : out->nf;
        for (int k = 0; k < out->nf; k++)
            out->rows[k] = p->sections[0] > 0 ? p->sections[k] : p->rows / out->n;
        return 0;
    }
    return -1;
}

// The Hugging Face name of block k into buf (truncated to len).
static void part_name(const Parts *pt, int k, char *buf, size_t len) {
    const char *hf = pt->hf[k % pt->nf];
    if (pt->layer < 0) snprintf(buf, len, "%s", hf);
    else if (pt->experts)
        snprintf(buf, len, "model.layers.%d.block_sparse_moe.experts.%d.%s", pt->layer, k / pt->nf, hf);
    else snprintf(buf, len, "model.layers.%d.%s", pt->layer, hf);
}

// The first MoE setting Mixtral cannot represent, as one line in buf; NULL when none. Pure.
static const char *moe_unexportable(const GPTConfig *c, char *buf, size_t len) {
    if (c->moe_sigmoid) return "--moe-router-score-function sigmoid (Mixtral's router is a softmax)";
    if (c->moe_pre_softmax)
        return "--moe-router-pre-softmax (Mixtral renormalises the top-k of the softmax)";
    if (c->moe_topk_scaling != 0.0) {
        snprintf(buf, len, "--moe-router-topk-scaling-factor %g (Mixtral does not scale)", c->moe_topk_scaling);
        return buf;
    }
    if (c->moe_shared_ffn > 0) return "--moe-shared-expert-intermediate-size (Mixtral has no shared expert)";
    if (c->moe_expert_bias) return "--moe-router-enable-expert-bias (Mixtral routes without an expert bias)";
    for (int l = 0; l < c->num_layers; l++)
        if (!gpt_moe_layer(c, l)) {
            snprintf(buf, len, "--moe-layer-freq '%s' (layer %d is dense; every Mixtral layer is "
                     "mixture-of-experts)", c->moe_layer_freq, l);
            return buf;
        }
    if (c->kv_channels > 0)  // transformers' Mixtral takes head_dim = hidden_size / heads
        return "--kv-channels (MixtralForCausalLM's head size is hidden_size / num_attention_heads)";
    return NULL;
}

int hf_llama_check_exportable(const GPTConfig *c, char *err, size_t errlen) {
    if (c->activation == BACKEND_ACT_RELU2) {
        snprintf(err, errlen, "squared ReLU (--squared-relu) has no Hugging Face equivalent: "
                 "neither GPT2LMHeadModel nor LlamaForCausalLM can represent this model");
        return -1;
    }
    const char *cls = c->num_experts > 0 ? "MixtralForCausalLM" : "LlamaForCausalLM";
    if (c->rmsnorm && c->activation == BACKEND_ACT_SWIGLU && c->rope && c->disable_bias_linear && c->rotary_percent == 1.0) {
        char buf[160];
        const char *why = c->num_experts > 0 ? moe_unexportable(c, buf, sizeof buf) : NULL;
        if (!why) return 0;
        snprintf(err, errlen, "%s has no MixtralForCausalLM equivalent: this mixture-of-experts "
                 "model cannot be exported", why);
        return -1;
    }
    snprintf(err, errlen, "this model cannot be represented as %s (it needs "
             "--normalization RMSNorm, --swiglu, --position-embedding-type rope with "
             "--rotary-percent 1 and --disable-bias-linear; this one has%s%s%s%s%s) nor as "
             "GPT2LMHeadModel", cls, c->rmsnorm ? "" : " LayerNorm", c->activation == BACKEND_ACT_SWIGLU ? "" : " GELU",
             c->rope ? "" : " learned positions", c->disable_bias_linear ? "" : " biases",
             c->rope && c->rotary_percent != 1.0 ? " partial rotary" : "");
    return -1;
}

int hf_llama_write_weights(const char *dir, const HfCkpt *c, char *err, size_t errlen) {
    int total = 0, E = c->cfg.num_experts;
    Parts *parts = core_calloc((size_t)c->n, sizeof *parts);
    for (int i = 0; i < c->n; i++) {
        if (parts_of(&c->table[i], E, &parts[i]) != 0)  // table and map disagree
            core_fatal("no Hugging Face Llama name for megac tensor %s", c->table[i].name);
        total += parts[i].n;
    }
    enum { NAME = 112 };
    HfStOut *t = core_calloc((size_t)total, sizeof *t);
    char *names = core_calloc((size_t)total, NAME);
    int k = 0;
    for (int i = 0; i < c->n; i++) {
        const ParamInfo *p = &c->table[i];
        for (int j = 0, row = 0; j < parts[i].n; row += parts[i].rows[j++ % parts[i].nf], k++) {
            part_name(&parts[i], j, names + (size_t)k * NAME, NAME);
            t[k].name = names + (size_t)k * NAME;
            t[k].ndim = p->cols == 1 ? 1 : 2;
            t[k].shape[0] = parts[i].rows[j % parts[i].nf];
            t[k].shape[1] = p->cols;
            t[k].data = c->data[i] + (size_t)row * p->cols;
        }
    }
    char path[4200], it[32], T[32];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    snprintf(it, sizeof it, "%lld", (long long)c->meta.iteration);
    snprintf(T, sizeof T, "%lld", (long long)c->meta.seq_length);
    const char *meta[] = {"format", "pt", "megac_iteration", it, "megac_seq_length", T};
    int rc = hf_st_write(path, t, k, meta, 3, err, errlen);
    free(names);
    free(parts);
    free(t);
    return rc;
}

int hf_llama_write_config(const char *dir, const HfCkpt *c, char *err, size_t errlen) {
    const GPTConfig *g = &c->cfg;
    json_object *o = json_object_new_object(), *arch = json_object_new_array();
    int moe = g->num_experts > 0;  // Mixtral: Llama's fields and the experts'
    json_object_array_add(arch, json_object_new_string(moe ? "MixtralForCausalLM" : "LlamaForCausalLM"));
    json_object_object_add(o, "architectures", arch);
    json_object_object_add(o, "model_type", json_object_new_string(moe ? "mixtral" : "llama"));
    json_object_object_add(o, "vocab_size", json_object_new_int(g->vocab_size));
    json_object_object_add(o, "hidden_size", json_object_new_int(g->hidden_size));
    json_object_object_add(o, "intermediate_size", json_object_new_int(moe ? gpt_moe_ffn(g) : g->ffn_hidden_size));
    if (moe) {
        json_object_object_add(o, "num_local_experts", json_object_new_int(g->num_experts));
        json_object_object_add(o, "num_experts_per_tok", json_object_new_int(g->moe_topk));
        json_object_object_add(o, "router_aux_loss_coef", json_object_new_double_s(0, "0.0"));
        json_object_object_add(o, "router_jitter_noise", json_object_new_double_s(0, "0.0"));
        json_object_object_add(o, "output_router_logits", json_object_new_boolean(0));
        json_object_object_add(o, "sliding_window", NULL);
    }
    json_object_object_add(o, "num_hidden_layers", json_object_new_int(g->num_layers));
    json_object_object_add(o, "num_attention_heads", json_object_new_int(g->num_heads));
    json_object_object_add(o, "num_key_value_heads", json_object_new_int(gpt_kv_heads(g)));
    json_object_object_add(o, "head_dim", json_object_new_int(gpt_head_size(g)));
    json_object_object_add(o, "hidden_act", json_object_new_string("silu"));
    json_object_object_add(o, "max_position_embeddings", json_object_new_int(g->max_position_embeddings));
    json_object_object_add(o, "initializer_range", json_object_new_double_s(0.02, "0.02"));
    json_object_object_add(o, "rms_norm_eps", json_object_new_double_s(1e-5, "1e-05"));
    json_object_object_add(o, "rope_theta", json_object_new_double(g->rotary_base));
    json_object_object_add(o, "rope_scaling", NULL);
    json_object_object_add(o, "attention_bias", json_object_new_boolean(0));
    json_object_object_add(o, "mlp_bias", json_object_new_boolean(0));
    json_object_object_add(o, "attention_dropout", json_object_new_double_s(0, "0.0"));
    json_object_object_add(o, "pretraining_tp", json_object_new_int(1));
    json_object_object_add(o, "tie_word_embeddings", json_object_new_boolean(!g->untie_embeddings));
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

// DIR/config.json parsed, or NULL with one line in err.
static json_object *read_json(const char *path, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "%s: cannot open (is --hf a Hugging Face model folder?)", path);
        return NULL;
    }
    fclose(f);
    json_object *o = json_object_from_file(path);
    if (!o || !json_object_is_type(o, json_type_object)) {
        snprintf(err, errlen, "%s: not a JSON object", path);
        json_object_put(o);
        return NULL;
    }
    return o;
}

int hf_llama_is_config(const char *dir) {
    char path[4200], err[4400];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    fclose(f);
    json_object *o = read_json(path, err, sizeof err), *v;
    int yes = o && hf_json_field(o, "model_type", &v) && (!strcmp(json_object_get_string(v), "llama") ||
                                                          !strcmp(json_object_get_string(v), "mixtral"));
    json_object_put(o);
    return yes;
}

// The settings megac cannot represent. Returns 0, or -1 with the first one in err.
static int check_representable(json_object *o, int C, int NH, int moe, const char *path,
                               char *err, size_t errlen) {
    static const HfJsonKind KINDS[] = {
        {"hidden_act", 's'}, {"rms_norm_eps", 'n'}, {"head_dim", 'i'},
        {"partial_rotary_factor", 'n'}, {"pretraining_tp", 'i'}, {"attention_bias", 'b'},
        {"mlp_bias", 'b'}, {"sliding_window", 'i'}, {"rope_theta", 'n'},
        {"tie_word_embeddings", 'b'},
    };
    if (hf_json_kinds(o, KINDS, (int)(sizeof KINDS / sizeof KINDS[0]), path, err, errlen)) return -1;
    json_object *v, *v2;
    const char *act = hf_json_field(o, "hidden_act", &v) ? json_object_get_string(v) : "silu";
    double eps = hf_json_field(o, "rms_norm_eps", &v) ? json_object_get_double(v) : moe ? 1e-5 : 1e-6;
    int hd = hf_json_field(o, "head_dim", &v) ? json_object_get_int(v) : C / NH;
    double partial = hf_json_field(o, "partial_rotary_factor", &v) ? json_object_get_double(v) : 1.0;
    int tp = hf_json_field(o, "pretraining_tp", &v) ? json_object_get_int(v) : 1;
    const char *why = NULL;
    char what[160];
    if (strcmp(act, "silu")) snprintf(what, sizeof what, "hidden_act '%s' (megac's SwiGLU uses silu)", act), why = what;
    else if (fabs(eps - 1e-5) > 1e-12) snprintf(what, sizeof what, "rms_norm_eps %g (megac's RMSNorm uses 1e-5)", eps), why = what;
    else if (hf_json_field(o, "rope_scaling", &v)) why = "rope_scaling (megac's rope is unscaled)";
    else if (hf_json_field(o, "attention_bias", &v) && json_object_get_boolean(v)) why = "attention_bias = true";
    else if (hf_json_field(o, "mlp_bias", &v) && json_object_get_boolean(v)) why = "mlp_bias = true";
    else if (hd <= 0) snprintf(what, sizeof what, "head_dim %d", hd), why = what;
    else if (partial != 1.0) snprintf(what, sizeof what, "partial_rotary_factor %g", partial), why = what;
    else if (tp != 1) snprintf(what, sizeof what, "pretraining_tp %d", tp), why = what;
    else if (moe && hf_json_field(o, "sliding_window", &v) && json_object_get_int(v) > 0 &&
             hf_json_field(o, "max_position_embeddings", &v2) && json_object_get_int(v) < json_object_get_int(v2))
        snprintf(what, sizeof what, "sliding_window %d (megac attends to every earlier position)",
                 json_object_get_int(v)), why = what;
    if (!why) return 0;
    snprintf(err, errlen, "%s: %s cannot be represented", path, why);
    return -1;
}

int hf_llama_read_config(const char *dir, GPTConfig *cfg, char *err, size_t errlen) {
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", dir);
    json_object *o = read_json(path, err, errlen), *v;
    if (!o) return -1;
    memset(cfg, 0, sizeof *cfg);
    int moe = hf_json_field(o, "model_type", &v) && !strcmp(json_object_get_string(v), "mixtral");
    int rc = hf_json_int(o, "hidden_size", 0, &cfg->hidden_size, path, err, errlen), G = 0;
    if (rc == 0) rc = hf_json_int(o, "num_hidden_layers", 0, &cfg->num_layers, path, err, errlen);
    if (rc == 0) rc = hf_json_int(o, "num_attention_heads", 0, &cfg->num_heads, path, err, errlen);
    if (rc == 0) rc = hf_json_int(o, "num_key_value_heads", cfg->num_heads, &G, path, err, errlen);
    if (rc == 0) rc = hf_json_int(o, "intermediate_size", 0, &cfg->ffn_hidden_size, path, err, errlen);
    if (rc == 0) rc = hf_json_int(o, "vocab_size", 0, &cfg->vocab_size, path, err, errlen);
    if (rc == 0) rc = hf_json_int(o, "max_position_embeddings", 0, &cfg->max_position_embeddings, path, err, errlen);
    if (rc == 0 && moe) {  // MixtralConfig's defaults: 8 experts, top 2
        rc = hf_json_int(o, "num_local_experts", 8, &cfg->num_experts, path, err, errlen);
        if (rc == 0) rc = hf_json_int(o, "num_experts_per_tok", 2, &cfg->moe_topk, path, err, errlen);
        cfg->moe_ffn_hidden_size = cfg->ffn_hidden_size;  // each expert's; no dense MLP
        snprintf(cfg->moe_layer_freq, sizeof cfg->moe_layer_freq, "1");
    }
    if (rc == 0) rc = check_representable(o, cfg->hidden_size, cfg->num_heads, moe, path, err, errlen);
    cfg->rotary_base = hf_json_field(o, "rope_theta", &v) ? json_object_get_double(v) : moe ? 1e6 : 10000.0;
    cfg->untie_embeddings = !(hf_json_field(o, "tie_word_embeddings", &v) && json_object_get_boolean(v));
    int hd = hf_json_field(o, "head_dim", &v) ? json_object_get_int(v) : 0;  // --kv-channels
    cfg->kv_channels = hd > 0 && (long long)hd * cfg->num_heads != cfg->hidden_size ? hd : 0;
    json_object_put(o);
    cfg->rmsnorm = cfg->rope = cfg->disable_bias_linear = 1;
    cfg->activation = BACKEND_ACT_SWIGLU;
    cfg->rotary_percent = 1.0;
    cfg->num_query_groups = G != cfg->num_heads ? G : 0;
    cfg->vocab_divisible_by = 1;
    return rc;
}

// 1 if `name` is one of c's Hugging Face tensors. Pure.
static int known(const HfCkpt *c, const char *name) {
    Parts pt;
    char nm[112];
    for (int i = 0; i < c->n; i++)
        if (parts_of(&c->table[i], c->cfg.num_experts, &pt) == 0)
            for (int k = 0; k < pt.n; k++) {
                part_name(&pt, k, nm, sizeof nm);
                if (!strcmp(nm, name)) return 1;
            }
    return 0;
}

// Every tensor of f must be one c has, lm_head.weight equal to the embedding (tied), or a
// rotary buffer.
static int check_extra(HfStFile *f, const HfCkpt *c, char *err, size_t errlen) {
    for (int i = 0; i < f->n; i++) {
        const char *nm = f->t[i].name;
        size_t len = strlen(nm);
        if (known(c, nm) || (len > 20 && !strcmp(nm + len - 20, ".rotary_emb.inv_freq"))) continue;
        if (!strcmp(nm, "lm_head.weight") && !c->cfg.untie_embeddings) {
            if (hf_st_check_tied(f, c, nm, "differs from model.embed_tokens.weight although "
                                 "config.json ties them", err, errlen))
                return -1;
            continue;
        }
        snprintf(err, errlen, "%s: tensor %s is not part of %s as megac builds it", f->path, nm,
                 c->cfg.num_experts > 0 ? "Mixtral" : "Llama");
        return -1;
    }
    return 0;
}

int hf_llama_read_weights(const char *dir, HfCkpt *c, char *err, size_t errlen) {
    HfStFile *f = hf_st_open_model(dir, err, errlen);
    if (!f) return -1;
    int rc = 0;
    for (int i = 0; i < c->n && rc == 0; i++) {
        const ParamInfo *p = &c->table[i];
        Parts pt;
        char nm[112];
        if (parts_of(p, c->cfg.num_experts, &pt) != 0)
            core_fatal("no Hugging Face Llama name for megac tensor %s", p->name);
        for (int k = 0, row = 0; k < pt.n && rc == 0; row += pt.rows[k++ % pt.nf]) {
            part_name(&pt, k, nm, sizeof nm);
            rc = hf_st_read_checked(f, nm, p->cols == 1 ? 1 : 2, pt.rows[k % pt.nf], p->cols,
                                    c->data[i] + (size_t)row * p->cols, err, errlen);
        }
    }
    if (rc == 0) rc = check_extra(f, c, err, errlen);
    hf_st_close(f);
    return rc;
}
