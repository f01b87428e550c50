// ckpt/ckpt_state.c: the run state a checkpoint keeps beside the tensors: the model config
// and layout, the iteration counters, the --fp16 dynamic loss scale (Megatron saves its
// grad scaler) and the count of steps skipped for an overflow (where the learning-rate
// schedule stands).
#include "ckpt_state.h"

#include <stdio.h>

void ckpt_state_to_meta(const CkptModel *m, const CkptRun *r, CkptMeta *meta) {
    const GPTConfig *c = m->config;
    const PGridDims *d = &m->grid->dims;
    const Optimizer *o = m->opts[0];
    *meta = (CkptMeta){.format_version = CKPT_VERSION, .iteration = r->iteration,
                       .consumed_samples = r->consumed_samples, .adam_step = o->step,
                       .nan_iterations = r->nan_total, .seed = (int64_t)r->seed,
                       .global_batch_size = r->global_batch, .num_layers = c->num_layers,
                       .hidden_size = c->hidden_size, .num_attention_heads = c->num_heads,
                       .ffn_hidden_size = c->ffn_hidden_size, .seq_length = c->seq_length,
                       .max_position_embeddings = c->max_position_embeddings,
                       .vocab_size = c->vocab_size, .saved_tp = d->tp, .saved_pp = d->pp,
                       .saved_dp = d->dp, .saved_zero1 = o->sharding,  // ZeRO stage, 0: DDP
                       .untie = c->untie_embeddings};
    ckpt_arch_from_config(meta, c);  // Llama-style settings
    meta->decoupled_lr = r->decoupled_lr;
    meta->decoupled_min_lr = r->decoupled_min_lr;
    meta->per_token_loss = r->per_token_loss;
    meta->skipped_iterations = r->skipped_total;
    meta->skipped_samples = r->skipped_samples;
    if (r->scaler.dynamic) {  // (--fp16 only) the dynamic loss scale goes on where it was
        meta->has_loss_scale = 1;
        meta->loss_scale = r->scaler.scale;
        meta->loss_scale_good_steps = r->scaler.good_steps;
        meta->loss_scale_overflows_left = r->scaler.overflows_left;
    }
}

// A dynamic --fp16 scale: the saved scaler state, or (older checkpoints, other precisions)
// --initial-loss-scale as it is. Rank 0 says which.
void ckpt_loss_scale_restore(CkptRun *r, const CkptMeta *got, int rank0) {
    r->skipped_total = (int)got->skipped_iterations;  // the schedule skips them (any precision)
    r->skipped_samples = got->skipped_samples;
    LossScaler *s = &r->scaler;
    if (!s->dynamic) return;
    if (got->has_loss_scale) {
        s->scale = got->loss_scale < s->min_scale ? s->min_scale : got->loss_scale;
        s->good_steps = (int)got->loss_scale_good_steps;
        s->overflows_left = (int)got->loss_scale_overflows_left;
    }
    if (!rank0) return;
    if (got->has_loss_scale)
        printf(" fp16 loss scale restored: %g (%d clean steps, %d overflows left before it halves)\n",
               s->scale, s->good_steps, s->overflows_left);
    else
        printf(" the checkpoint holds no fp16 loss scale: starting from --initial-loss-scale %g\n",
               s->scale);
}
