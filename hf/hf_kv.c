// hf/hf_kv.c: incremental decoding with a key/value cache (see hf_kv.h).
#include "hf_kv.h"
#include "core/check.h"  // defines: core_calloc, core_fatal

#include <stdlib.h>

HfKv *hf_kv_create(HfLm *lm) {
    const GPT *m = lm->m;
    if (m->tp != 1 || !m->first || !m->last || m->B != 1)
        core_fatal("hf_kv_create: needs the whole model and one sequence on one rank");
    HfKv *kv = core_calloc(1, sizeof *kv);
    kv->lm = lm;
    kv->logits = core_calloc((size_t)lm->Vp, sizeof(float));
    return kv;
}

const float *hf_kv_prefill(HfKv *kv, const int *tokens, int n) {
    const float *logits = hf_lm_forward(kv->lm, tokens, n);
    kv->n = n;
    return logits;
}

const float *hf_kv_step(HfKv *kv, int token) {
    HfLm *lm = kv->lm;
    int p = kv->n;
    if (p >= lm->T || token < 0 || token >= lm->V)
        core_fatal("hf_kv_step: position %d (context %d), token %d (vocabulary %d)", p, lm->T, token, lm->V);
    gpt_forward_positions(lm->m, lm->tp, 0, &token, p, 1);
    lm->be->ops->copy(lm->be, kv->logits, lm->m->slots[0].logits, (size_t)lm->Vp * sizeof(float),
                      BACKEND_D2H);  // row 0: position p
    kv->n = p + 1;
    return kv->logits;
}

void hf_kv_free(HfKv *kv) {
    if (!kv) return;
    free(kv->logits);
    free(kv);
}
