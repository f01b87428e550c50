// ckpt/ckpt_arch.c: the optional checkpoint attributes of a Llama-style architecture
// (RMSNorm, SwiGLU, rope, grouped-query attention, no linear biases), of squared ReLU, of
// --kv-channels and --apply-layernorm-1p, and of the run settings --decoupled-lr and
// --calculate-per-token-loss. A GPT-2 checkpoint of a default run carries none of them, so
// older files read as that; a run whose settings differ from the file's is refused by the
// validator (ckpt_check.c) with one line naming them.
#include "ckpt_format.h"
#include "core/check.h"  // defines: H5_CHECK

#include <stdio.h>
#include <string.h>

static const struct {
    const char *attr, *flag;
    size_t off;
} INTS[] = {
    {"normalization_rmsnorm", "normalization RMSNorm", offsetof(CkptMeta, rmsnorm)},
    {"swiglu", "swiglu", offsetof(CkptMeta, swiglu)},
    {"squared_relu", "squared-relu", offsetof(CkptMeta, squared_relu)},
    {"position_embedding_rope", "position-embedding-type rope", offsetof(CkptMeta, rope)},
    {"num_query_groups", "num-query-groups", offsetof(CkptMeta, num_query_groups)},
    {"disable_bias_linear", "disable-bias-linear", offsetof(CkptMeta, disable_bias_linear)},
    {"kv_channels", "kv-channels", offsetof(CkptMeta, kv_channels)},
    {"apply_layernorm_1p", "apply-layernorm-1p", offsetof(CkptMeta, layernorm_1p)},
    {"calculate_per_token_loss", "calculate-per-token-loss", offsetof(CkptMeta, per_token_loss)},
    {"num_experts", "num-experts", offsetof(CkptMeta, num_experts)},
    {"moe_topk", "moe-router-topk", offsetof(CkptMeta, moe_topk)},
    {"moe_ffn_hidden_size", "moe-ffn-hidden-size", offsetof(CkptMeta, moe_ffn_hidden_size)},
    {"moe_router_sigmoid", "moe-router-score-function sigmoid", offsetof(CkptMeta, moe_sigmoid)},
    {"moe_router_pre_softmax", "moe-router-pre-softmax", offsetof(CkptMeta, moe_pre_softmax)},
    {"moe_shared_expert_intermediate_size", "moe-shared-expert-intermediate-size",
     offsetof(CkptMeta, moe_shared_ffn)},
    {"moe_router_enable_expert_bias", "moe-router-enable-expert-bias",
     offsetof(CkptMeta, moe_expert_bias)},
};
#define N_INTS (sizeof INTS / sizeof INTS[0])
static const struct {
    const char *attr;
    size_t off;
    int decoupled;  // written with --decoupled-lr (1), with --num-experts (2), else with rope
} DOUBLES[] = {
    {"rotary_base", offsetof(CkptMeta, rotary_base), 0},
    {"rotary_percent", offsetof(CkptMeta, rotary_percent), 0},
    {"decoupled_lr", offsetof(CkptMeta, decoupled_lr), 1},
    {"decoupled_min_lr", offsetof(CkptMeta, decoupled_min_lr), 1},
    {"moe_router_topk_scaling_factor", offsetof(CkptMeta, moe_topk_scaling), 2},
};
#define N_DOUBLES (sizeof DOUBLES / sizeof DOUBLES[0])
#define D64(m, i) (*(double *)((char *)(m) + DOUBLES[i].off))
#define CD64(m, i) (*(const double *)((const char *)(m) + DOUBLES[i].off))

#define I64(m, i) (*(int64_t *)((char *)(m) + INTS[i].off))
#define CI64(m, i) (*(const int64_t *)((const char *)(m) + INTS[i].off))

void ckpt_arch_from_config(CkptMeta *m, const GPTConfig *c) {
    m->rmsnorm = c->rmsnorm;
    m->swiglu = c->activation == BACKEND_ACT_SWIGLU;
    m->squared_relu = c->activation == BACKEND_ACT_RELU2;
    m->rope = c->rope;
    m->num_query_groups = gpt_kv_heads(c) != c->num_heads ? gpt_kv_heads(c) : 0;
    m->disable_bias_linear = c->disable_bias_linear;
    m->kv_channels = c->kv_channels;
    m->layernorm_1p = c->layernorm_1p;
    m->rotary_base = c->rope ? c->rotary_base : 0.0;
    m->rotary_percent = c->rope ? c->rotary_percent : 0.0;
    int moe = c->num_experts > 0;
    m->num_experts = c->num_experts;
    m->moe_topk = moe ? c->moe_topk : 0;
    m->moe_ffn_hidden_size = moe ? c->moe_ffn_hidden_size : 0;
    m->moe_sigmoid = moe ? c->moe_sigmoid : 0;
    m->moe_pre_softmax = moe ? c->moe_pre_softmax : 0;
    m->moe_topk_scaling = moe ? c->moe_topk_scaling : 0.0;
    m->moe_shared_ffn = moe ? c->moe_shared_ffn : 0;
    m->moe_expert_bias = moe ? c->moe_expert_bias : 0;
    snprintf(m->moe_layer_freq, sizeof m->moe_layer_freq, "%s", moe ? c->moe_layer_freq : "");
}

void ckpt_arch_to_config(const CkptMeta *m, GPTConfig *c) {
    c->rmsnorm = (int)m->rmsnorm;
    c->activation = m->swiglu         ? BACKEND_ACT_SWIGLU
                  : m->squared_relu ? BACKEND_ACT_RELU2
                                    : BACKEND_ACT_GELU;
    c->rope = (int)m->rope;
    c->num_query_groups = (int)m->num_query_groups;
    c->disable_bias_linear = (int)m->disable_bias_linear;
    c->kv_channels = (int)m->kv_channels;
    c->layernorm_1p = (int)m->layernorm_1p;
    c->rotary_base = m->rope ? m->rotary_base : 10000.0;
    c->rotary_percent = m->rope ? m->rotary_percent : 1.0;
    c->num_experts = (int)m->num_experts;
    c->moe_topk = (int)m->moe_topk;
    c->moe_ffn_hidden_size = (int)m->moe_ffn_hidden_size;
    c->moe_sigmoid = (int)m->moe_sigmoid;
    c->moe_pre_softmax = (int)m->moe_pre_softmax;
    c->moe_topk_scaling = m->moe_topk_scaling;
    c->moe_shared_ffn = (int)m->moe_shared_ffn;
    c->moe_expert_bias = (int)m->moe_expert_bias;
    snprintf(c->moe_layer_freq, sizeof c->moe_layer_freq, "%s", m->moe_layer_freq);
}

static void write_attr(hid_t f, const char *name, hid_t file_type, hid_t mem_type, const void *v) {
    hid_t scalar = H5Screate(H5S_SCALAR);
    H5_CHECK(scalar);
    hid_t a = H5Acreate2(f, name, file_type, scalar, H5P_DEFAULT, H5P_DEFAULT);
    H5_CHECK(a);
    H5_CHECK(H5Awrite(a, mem_type, v));
    H5_CHECK(H5Aclose(a));
    H5_CHECK(H5Sclose(scalar));
}

void ckpt_arch_write(hid_t f, const CkptMeta *m) {
    for (size_t i = 0; i < N_INTS; i++)
        if (CI64(m, i)) write_attr(f, INTS[i].attr, H5T_STD_I64LE, H5T_NATIVE_INT64, &CI64(m, i));
    for (size_t i = 0; i < N_DOUBLES; i++)
        if (DOUBLES[i].decoupled == 2 ? m->num_experts > 0
            : DOUBLES[i].decoupled ? m->decoupled_lr > 0 : (int)m->rope)
            write_attr(f, DOUBLES[i].attr, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &CD64(m, i));
    if (m->num_experts > 0) {  // the layer pattern, as text
        hid_t t = H5Tcopy(H5T_C_S1);
        H5_CHECK(t);
        H5_CHECK(H5Tset_size(t, sizeof m->moe_layer_freq));
        write_attr(f, "moe_layer_freq", t, t, m->moe_layer_freq);
        H5_CHECK(H5Tclose(t));
    }
}

// The optional scalar attribute `name` as mem_type into v; 0 when absent or unreadable.
static void read_attr(hid_t f, const char *name, hid_t mem_type, void *v, size_t size) {
    hid_t a = H5Aexists(f, name) > 0 ? H5Aopen(f, name, H5P_DEFAULT) : -1;
    hid_t s = a < 0 ? -1 : H5Aget_space(a);
    int ok = s >= 0 && H5Sget_simple_extent_npoints(s) == 1 && H5Aread(a, mem_type, v) >= 0;
    if (s >= 0) H5Sclose(s);
    if (a >= 0) H5Aclose(a);
    if (!ok) memset(v, 0, size);
}

void ckpt_arch_read(hid_t f, CkptMeta *m) {
    for (size_t i = 0; i < N_INTS; i++)
        read_attr(f, INTS[i].attr, H5T_NATIVE_INT64, &I64(m, i), sizeof(int64_t));
    for (size_t i = 0; i < N_DOUBLES; i++)
        read_attr(f, DOUBLES[i].attr, H5T_NATIVE_DOUBLE, &D64(m, i), sizeof(double));
    hid_t t = H5Tcopy(H5T_C_S1);
    H5_CHECK(t);
    H5_CHECK(H5Tset_size(t, sizeof m->moe_layer_freq));
    read_attr(f, "moe_layer_freq", t, m->moe_layer_freq, sizeof m->moe_layer_freq);
    m->moe_layer_freq[sizeof m->moe_layer_freq - 1] = '\0';
    H5_CHECK(H5Tclose(t));
}

int ckpt_arch_compare(const CkptMeta *got, const CkptMeta *want, char *err, size_t n, size_t *used,
                      int bad) {
    for (size_t i = 0; i < N_INTS; i++) {
        if (CI64(got, i) == CI64(want, i) || *used >= n) continue;
        *used += (size_t)snprintf(err + *used, n - *used, "%s%s %lld (this run %lld)",
                                  bad ? ", " : " ", INTS[i].flag, (long long)CI64(got, i),
                                  (long long)CI64(want, i));
        bad++;
    }
    for (size_t i = 0; i < N_DOUBLES; i++) {
        if (CD64(got, i) == CD64(want, i) || *used >= n) continue;
        *used += (size_t)snprintf(err + *used, n - *used, "%s%s %g (this run %g)", bad ? ", " : " ",
                                  DOUBLES[i].attr, CD64(got, i), CD64(want, i));
        bad++;
    }
    if (strcmp(got->moe_layer_freq, want->moe_layer_freq) && *used < n) {
        *used += (size_t)snprintf(err + *used, n - *used, "%smoe-layer-freq '%s' (this run '%s')",
                                  bad ? ", " : " ", got->moe_layer_freq, want->moe_layer_freq);
        bad++;
    }
    return bad;
}

int ckpt_arch_is_attr(const char *name) {
    if (!strcmp(name, "moe_layer_freq")) return 1;
    for (size_t i = 0; i < N_INTS; i++)
        if (!strcmp(name, INTS[i].attr)) return 1;
    for (size_t i = 0; i < N_DOUBLES; i++)
        if (!strcmp(name, DOUBLES[i].attr)) return 1;
    return 0;
}
