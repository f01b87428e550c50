// model/gpt_loss_mask.c: --eod-mask-loss (Megatron's meaning: targets equal to the
// end-of-document id weigh 0). Folded into the existing per-token loss gradient (dscale) and
// the per-token losses the step sums: each unmasked token of a micro-batch weighs N / n_kept
// (n_kept = its unmasked targets), masked ones 0, so a micro-batch's loss is the mean over its
// unmasked tokens and the step's loss the mean of its micro-batches' (Megatron's default,
// without --calculate-per-token-loss). A micro-batch with every target masked weighs 0
// (Megatron would divide by zero). With --calculate-per-token-loss every unmasked token
// weighs the trainer's G T / (unmasked tokens of the global batch) instead, so the step's
// loss is their summed loss over their count (Megatron's per-token loss). The weights depend
// only on the micro-batch's targets, which every tensor-parallel rank holds, so every layout
// computes the same ones; under context parallelism each rank counts its two chunks of each
// sequence and the CP group sums the counts (over MPI: one int per micro-batch, last stage),
// so a rank's N = B T / CP tokens weigh B T / n_kept as on one rank. The
// weights are applied on the host: one copy of the N losses there and back per micro-batch
// (on CUDA a wait for the stream), and the dscale copy, only with the flag.
#include "gpt_block.h"
#include "core/check.h"  // defines: core_calloc

#include <math.h>
#include <stdlib.h>

void gpt_set_loss_mask(GPT *m, int64_t eod_id) {
    if (m->mask.on) return;
    m->mask.on = 1;
    m->mask.id = (int)eod_id;
    m->mask.w = core_calloc((size_t)m->n_slots * (size_t)m->N, sizeof(float));
    m->mask.loss_host = core_calloc((size_t)m->N, sizeof(float));
}

void gpt_set_loss_mask_global(GPT *m, double w) { m->mask.global_weight = w; }

void gpt_loss_mask_weights(GPT *m, int slot, const int *targets) {
    int N = m->N, kept = 0;
    float *w = m->mask.w + (size_t)slot * N;
    for (int i = 0; i < N; i++) kept += targets[i] != m->mask.id;
    if (m->mask.global_weight <= 0 && m->cp_host)  // the whole sequences' count (CP's chunks)
        comm_all_reduce(m->cp_host, &kept, 1, COMM_I32, COMM_SUM);
    float weight = m->mask.global_weight > 0 ? (float)m->mask.global_weight  // per token
                 : kept ? (float)(N * m->cp) / (float)kept : 0.0f;
    for (int i = 0; i < N; i++) w[i] = targets[i] != m->mask.id ? weight : 0.0f;
}

void gpt_loss_mask_forward(GPT *m, int slot) {
    int N = m->N;
    const float *w = m->mask.w + (size_t)slot * N;
    float *loss = m->mask.loss_host;
    Backend *be = m->be;
    float *dev = m->slots[slot].xent.loss;  // (N) per-token losses: weighted in place
    be->ops->copy(be, loss, dev, (size_t)N * sizeof(float), BACKEND_D2H);
    for (int i = 0; i < N; i++) loss[i] = w[i] != 0.0f ? loss[i] * w[i] : 0.0f;
    be->ops->copy(be, dev, loss, (size_t)N * sizeof(float), BACKEND_H2D);
}

void gpt_loss_mask_dscale(GPT *m, int slot, float loss_scale) {
    const float *w = m->mask.w + (size_t)slot * m->N;
    for (int i = 0; i < m->N; i++) m->s.dscale_host[i] = loss_scale * w[i];
    m->be->ops->copy(m->be, m->s.dscale, m->s.dscale_host, (size_t)m->N * sizeof(float), BACKEND_H2D);
    m->s.dscale_value = NAN;  // not one value: the next uniform dscale is copied again
}
