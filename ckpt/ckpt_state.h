// ckpt/ckpt_state.h: the run's state in the checkpoint's root attributes (CkptMeta): the
// model config, the writer's layout and the counters of CkptRun, among them the --fp16
// dynamic loss scale (attributes fp16_loss_scale, fp16_loss_scale_good_steps,
// fp16_loss_scale_overflows_left) and the steps skipped for an overflow
// (fp16_skipped_iterations, fp16_skipped_samples). Internal to ckpt/.
#pragma once
#include "ckpt.h"
#include "ckpt_format.h"

// Fills *meta: m's model config (Llama-style settings too), layout, ZeRO stage and Adam step,
// and r's counters; the loss-scale fields (has_loss_scale = 1) only for a dynamic scale.
// Pure.
void ckpt_state_to_meta(const CkptModel *m, const CkptRun *r, CkptMeta *meta);

// After a load, on every rank: the skipped-step counts restored into r (0 if absent); a
// dynamic --fp16 scale continues from the saved scale, clean-step count and hysteresis
// counter; a checkpoint without them (older, or written without --fp16) leaves
// --initial-loss-scale. Rank 0 prints which. Never fails.
void ckpt_loss_scale_restore(CkptRun *r, const CkptMeta *got, int rank0);
