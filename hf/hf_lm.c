// hf/hf_lm.c: the checkpoint's GPT forward for generation and logit checks (see hf_lm.h).
#include "hf_lm.h"
#include "core/check.h"  // defines: core_calloc, core_fatal, MPI_CHECK

#include <stdlib.h>
#include <string.h>

HfLm *hf_lm_create(const HfCkpt *c, int nthreads) {
    HfLm *lm = core_calloc(1, sizeof *lm);
    GPTConfig cfg = c->cfg;
    cfg.vocab_divisible_by = 128;  // the trainer's default padding; the padding rows stay zero
    lm->be = backend_cpu_create(nthreads, BACKEND_F32);
    int self = 0;
    lm->tp = comm_mpi_create(MPI_COMM_SELF, "tp", &self, 0);
    lm->m = gpt_create(&cfg, lm->be, NULL,
                       &(GPTStage){.n_stages = 1, .micro_batch = 1,
                                   .n_slots = 1, .seed = (uint64_t)c->meta.seed, .pad_multiple = 16});
    GPT *m = lm->m;
    for (int i = 0; i < m->n_params; i++) {  // tp = 1: local = full, but wte has Vp rows
        const ParamInfo *p = &m->params[i];
        int k = hf_ckpt_find(c, p->name);
        if (k < 0) core_fatal("checkpoint tensor %s not found", p->name);  // same table
        size_t n = (size_t)c->table[k].rows * c->table[k].cols;
        memset(m->param_mem + p->offset, 0, p->numel * sizeof(float));
        memcpy(m->param_mem + p->offset, c->data[k], n * sizeof(float));
    }
    gpt_refresh_weight_copies(m);
    lm->T = cfg.seq_length;
    lm->V = cfg.vocab_size;
    lm->Vp = m->Vp;
    lm->tokens = core_calloc((size_t)lm->T, sizeof(int));
    lm->targets = core_calloc((size_t)lm->T, sizeof(int));
    lm->logits = core_calloc((size_t)lm->T * lm->Vp, sizeof(float));  // (T, Vp)
    return lm;
}

const float *hf_lm_forward(HfLm *lm, const int *tokens, int n) {
    if (n < 1 || n > lm->T) core_fatal("hf_lm_forward: %d tokens, context is 1..%d", n, lm->T);
    memset(lm->tokens, 0, (size_t)lm->T * sizeof(int));
    memcpy(lm->tokens, tokens, (size_t)n * sizeof(int));
    gpt_forward(lm->m, lm->tp, 0, lm->tokens, lm->targets, 0.0f);  // the logits are read
    // The logits (N, Vp) of the last stage, in be->act (fp32 on the CPU backend).
    lm->be->ops->copy(lm->be, lm->logits, lm->m->slots[0].logits,
                      (size_t)lm->T * lm->Vp * sizeof(float), BACKEND_D2H);
    return lm->logits;
}

void hf_lm_free(HfLm *lm) {
    if (!lm) return;
    gpt_destroy(lm->m);
    comm_destroy(lm->tp);
    backend_destroy(lm->be);
    free(lm->tokens);
    free(lm->targets);
    free(lm->logits);
    free(lm);
}
