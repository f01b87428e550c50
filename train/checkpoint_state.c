// train/checkpoint_state.c: the trainer state a checkpoint keeps beside the tensors and
// the iteration counters: the --fp16 dynamic loss scale (Megatron saves its grad scaler) and
// the count of steps skipped for an overflow (where the learning-rate schedule stands).
#include "checkpoint_state.h"

#include <stdio.h>

void ckpt_loss_scale_to_meta(const Trainer *t, CkptMeta *m) {
    const TrainArgs *a = &t->args;
    m->skipped_iterations = t->skipped_total;
    m->skipped_samples = t->skipped_samples;
    if (a->fp16 && t->scaler.dynamic) {  // the dynamic loss scale goes on where it was
        m->has_loss_scale = 1;
        m->loss_scale = t->scaler.scale;
        m->loss_scale_good_steps = t->scaler.good_steps;
        m->loss_scale_overflows_left = t->scaler.overflows_left;
    }
}

// --fp16 with a dynamic scale: the saved scaler state, or (older checkpoints, other
// precisions) --initial-loss-scale as it is. Rank 0 says which.
void ckpt_loss_scale_restore(Trainer *t, const CkptMeta *got, int rank0) {
    t->skipped_total = (int)got->skipped_iterations;  // the schedule skips them (any precision)
    t->skipped_samples = got->skipped_samples;
    if (!t->args.fp16 || !t->scaler.dynamic) return;
    if (got->has_loss_scale) {
        t->scaler.scale = got->loss_scale < t->scaler.min_scale ? t->scaler.min_scale : got->loss_scale;
        t->scaler.good_steps = (int)got->loss_scale_good_steps;
        t->scaler.overflows_left = (int)got->loss_scale_overflows_left;
    }
    if (!rank0) return;
    if (got->has_loss_scale)
        printf(" fp16 loss scale restored: %g (%d clean steps, %d overflows left before it halves)\n",
               t->scaler.scale, t->scaler.good_steps, t->scaler.overflows_left);
    else
        printf(" the checkpoint holds no fp16 loss scale: starting from --initial-loss-scale %g\n",
               t->scaler.scale);
}

