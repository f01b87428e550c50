// train/checkpoint_state.h: trainer state saved in the checkpoint's root attributes beside
// CkptMeta's counters: the --fp16 dynamic loss scale (attributes fp16_loss_scale,
// fp16_loss_scale_good_steps, fp16_loss_scale_overflows_left) and the steps skipped for an
// overflow (fp16_skipped_iterations, fp16_skipped_samples). Internal to train/.
#pragma once
#include "checkpoint_format.h"
#include "trainer.h"

// Fills m's loss-scale fields from t (has_loss_scale = 1 only for --fp16 with a dynamic
// scale) and the skipped-step counts. Pure.
void ckpt_loss_scale_to_meta(const Trainer *t, CkptMeta *m);

// After a load, on every rank: the skipped-step counts restored (0 if absent); --fp16 with a
// dynamic scale continues from the saved scale, clean-step count and hysteresis counter; a
// checkpoint without them (older, or written without --fp16) leaves --initial-loss-scale.
// Rank 0 prints which. Never fails.
void ckpt_loss_scale_restore(Trainer *t, const CkptMeta *got, int rank0);
