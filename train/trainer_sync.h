// train/trainer_sync.h: the step's communication outside the schedule (train/trainer_sync.c):
// the gradient reductions after the backward, the global sums of the norm and the loss, and
// the --overlap-param-gather bookkeeping (trainer_settle_params, declared in trainer.h, is
// defined there too).
#pragma once
#include "trainer.h"

// The gradient reductions that follow the schedule: ZeRO-2/3 the sums on the shard (sequence
// parallel LayerNorm over TP, tied embedding over the embedding group); else each chunk's
// sequence-parallel LayerNorm sums (those the --overlap-grad-reduce hook has not done), the
// tied-embedding sum, then the DP reduction (every bucket finished; trace spans with --trace).
// Ends with a backend sync. Never fails (a comm failure aborts the job).
void trainer_reduce_grads(Trainer *t);

// Global sums of [grad norm^2, loss sum] over all ranks (each adds its unique share; the
// loss counts on the last stage's TP rank 0 only). Collective over the world.
void trainer_global_sums(Trainer *t, double *sq, double *loss_sum);

// --overlap-param-gather (ZeRO-1): the bucket gathers completed since the last call (trace
// spans with --trace) and the time the forward waited for them (returned, ms). Never fails.
double trainer_take_gathers(Trainer *t);
