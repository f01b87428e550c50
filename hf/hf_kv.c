// hf/hf_kv.c: incremental decoding with a key/value cache (see hf_kv.h).
#include "hf_kv.h"
#include "core/check.h"  // defines: core_calloc, core_fatal

#include <float.h>  // defines: FLT_MAX
#include <math.h>
#include <stdlib.h>
#include <string.h>

HfKv *hf_kv_create(HfLm *lm) {
    const GPT *m = lm->m;
    if (m->tp != 1 || !m->first || !m->last || lm->be->act != BACKEND_F32 || lm->be->kind != BACKEND_CPU)
        core_fatal("hf_kv_create: needs the whole model on one fp32 CPU rank");
    HfKv *kv = core_calloc(1, sizeof *kv);
    kv->lm = lm;
    kv->L = m->n_layers, kv->C = m->cfg.hidden_size, kv->NH = m->cfg.num_heads, kv->F = m->cfg.ffn_hidden_size;
    size_t cache = (size_t)kv->L * lm->T * kv->C, C = (size_t)kv->C, F = (size_t)kv->F;
    kv->k = core_calloc(cache, sizeof(float));
    kv->v = core_calloc(cache, sizeof(float));
    kv->x = core_calloc(C, sizeof(float));
    kv->ln = core_calloc(C, sizeof(float));
    kv->qkv = core_calloc(3 * C, sizeof(float));
    kv->y = core_calloc(C, sizeof(float));
    kv->h = core_calloc(2 * F, sizeof(float));  // SwiGLU: [gate | up]
    kv->qin = core_calloc(3 * C, sizeof(float));  // (NH + 2G) hs <= 3C
    kv->hg = core_calloc(F, sizeof(float));
    kv->tmp = core_calloc(C, sizeof(float));
    kv->mean = core_calloc(1, sizeof(float));
    kv->rstd = core_calloc(1, sizeof(float));
    kv->scores = core_calloc((size_t)lm->T, sizeof(float));
    kv->logits = core_calloc((size_t)lm->Vp, sizeof(float));
    return kv;
}

// Row p of layer l's cache.
static float *k_row(HfKv *kv, int l, int p) { return kv->k + ((size_t)l * kv->lm->T + p) * kv->C; }
static float *v_row(HfKv *kv, int l, int p) { return kv->v + ((size_t)l * kv->lm->T + p) * kv->C; }

const float *hf_kv_prefill(HfKv *kv, const int *tokens, int n) {
    const float *logits = hf_lm_forward(kv->lm, tokens, n);
    const GPT *m = kv->lm->m;
    int C = kv->C;
    for (int l = 0; l < kv->L; l++) {
        const float *qkv = m->slots[0].layers[l].qkv;  // (T, 3C): q | k | v per row
        for (int p = 0; p < n; p++) {
            memcpy(k_row(kv, l, p), qkv + (size_t)p * 3 * C + C, (size_t)C * sizeof(float));
            memcpy(v_row(kv, l, p), qkv + (size_t)p * 3 * C + 2 * C, (size_t)C * sizeof(float));
        }
    }
    kv->n = n;
    return logits;
}

// ln (C) = the model's norm (LayerNorm or RMSNorm) of x (C).
static void norm(HfKv *kv, const void *w, const void *b) {
    Backend *be = kv->lm->be;
    if (kv->lm->m->cfg.rmsnorm) be->ops->rmsnorm_forward(be, kv->ln, kv->rstd, kv->x, w, 1, kv->C);
    else be->ops->layernorm_forward(be, kv->ln, kv->mean, kv->rstd, kv->x, w, b, 1, kv->C);
}

// qkv (3C) in attention's layout for the row ln at position p: the QKV linear, then (rope or
// grouped-query) rope_gqa_forward at position p, as gpt_qkv_forward does for a sequence.
static void qkv_row(HfKv *kv, const GPTBlockW *w, int p) {
    const GPT *m = kv->lm->m;
    Backend *be = kv->lm->be;
    int C = kv->C;
    if (!m->remap_qkv) {
        be->ops->matmul_forward(be, kv->qkv, kv->ln, w->qkvw, w->qkvb, 1, C, 3 * C);
        return;
    }
    be->ops->matmul_forward(be, kv->qin, kv->ln, w->qkvw, w->qkvb, 1, C, m->QKV_tp);
    be->ops->rope_gqa_forward(be, kv->qkv, kv->qin, 1, 1, m->NH_tp, m->G_tp, m->hs, m->rot,
                              (float)m->cfg.rotary_base, p);
}

// tmp (C) = the MLP of ln: fc, GELU or SwiGLU, proj.
static void mlp_row(HfKv *kv, const GPTBlockW *w) {
    const GPT *m = kv->lm->m;
    Backend *be = kv->lm->be;
    int C = kv->C, F = kv->F;
    if (m->cfg.swiglu) {
        be->ops->matmul_forward(be, kv->h, kv->ln, w->fcw, w->fcb, 1, C, 2 * F);
        be->ops->swiglu_forward(be, kv->hg, kv->h, 1, F);
    } else {
        be->ops->matmul_forward(be, kv->h, kv->ln, w->fcw, w->fcb, 1, C, F);
        be->ops->gelu_forward(be, kv->hg, kv->h, (size_t)F);
    }
    be->ops->matmul_forward(be, kv->tmp, kv->hg, w->fcprojw, w->fcprojb, 1, F, C);
}

// y (C) = causal attention of the query in qkv (3C) over positions 0..p of layer l's cache,
// per head: softmax(q . k_t / sqrt(hs)) weighted sum of v_t.
static void attend(HfKv *kv, int l, int p) {
    int C = kv->C, hs = C / kv->NH;
    float scale = 1.0f / sqrtf((float)hs), *s = kv->scores;
    for (int h = 0; h < kv->NH; h++) {
        const float *q = kv->qkv + h * hs;
        float mx = -FLT_MAX, sum = 0.0f;
        for (int t = 0; t <= p; t++) {
            const float *k = k_row(kv, l, t) + h * hs;
            float d = 0.0f;
            for (int i = 0; i < hs; i++) d += q[i] * k[i];
            s[t] = d * scale;
            mx = s[t] > mx ? s[t] : mx;
        }
        for (int t = 0; t <= p; t++) sum += (s[t] = expf(s[t] - mx));
        float *y = kv->y + h * hs;
        memset(y, 0, (size_t)hs * sizeof(float));
        for (int t = 0; t <= p; t++) {
            const float *v = v_row(kv, l, t) + h * hs;
            float a = s[t] / sum;
            for (int i = 0; i < hs; i++) y[i] += a * v[i];
        }
    }
}

const float *hf_kv_step(HfKv *kv, int token) {
    HfLm *lm = kv->lm;
    GPT *m = lm->m;
    Backend *be = lm->be;
    const BackendOps *o = be->ops;
    int C = kv->C, p = kv->n;
    if (p >= lm->T || token < 0 || token >= lm->V)
        core_fatal("hf_kv_step: position %d (context %d), token %d (vocabulary %d)", p, lm->T, token, lm->V);
    const float *wte = m->w.wte, *wpe = m->w.wpe;
    for (int c = 0; c < C; c++)  // no position table with rope
        kv->x[c] = wte[(size_t)token * C + c] + (wpe ? wpe[(size_t)p * C + c] : 0.0f);
    for (int l = 0; l < kv->L; l++) {  // the block of model/gpt.c, on one row
        const GPTBlockW *w = &m->w.blocks[l];
        norm(kv, w->ln1w, w->ln1b);
        qkv_row(kv, w, p);
        memcpy(k_row(kv, l, p), kv->qkv + C, (size_t)C * sizeof(float));
        memcpy(v_row(kv, l, p), kv->qkv + 2 * C, (size_t)C * sizeof(float));
        attend(kv, l, p);
        o->matmul_forward(be, kv->tmp, kv->y, w->projw, w->projb, 1, C, C);
        o->add(be, kv->x, kv->x, kv->tmp, (size_t)C);
        norm(kv, w->ln2w, w->ln2b);
        mlp_row(kv, w);
        o->add(be, kv->x, kv->x, kv->tmp, (size_t)C);
    }
    norm(kv, m->w.lnfw, m->w.lnfb);
    o->matmul_forward(be, kv->logits, kv->ln, m->w.out ? m->w.out : m->w.wte, NULL, 1, C,
                      lm->Vp);  // the output layer, tied or untied
    kv->n = p + 1;
    return kv->logits;
}

void hf_kv_free(HfKv *kv) {
    if (!kv) return;
    float *bufs[] = {kv->k, kv->v, kv->x, kv->ln, kv->qkv, kv->qin, kv->y, kv->h, kv->hg, kv->tmp,
                     kv->mean, kv->rstd, kv->scores, kv->logits};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
    free(kv);
}
