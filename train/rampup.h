// train/rampup.h: the global batch size of each iteration: fixed, or growing with Megatron's
// --rampup-batch-size START INCR SAMPLES (the batch starts at START and grows by INCR each
// time another SAMPLES / ((G - START) / INCR) samples have been consumed, reaching
// --global-batch-size G once more than SAMPLES samples have been consumed).
//
// Batches are placed by consumed samples, not by iteration: global batch k takes the order
// positions [consumed_k, consumed_k + G_k) of the training split. So a run that changes
// --global-batch-size on resume (Megatron allows it) continues the same sample order.
#pragma once
#include <stdint.h>

typedef struct {
    int64_t start, incr, samples;  // start == 0: no ramp-up
    int global_batch;              // the final (or fixed) global batch size G
} TrainRampup;

// Checks a ramp-up against G: START and INCR > 0, START <= G, G - START divisible by INCR,
// SAMPLES >= 0. Returns 0, or -1 with one line in err. Pure.
int train_rampup_check(const TrainRampup *r, char *err, int errlen);

// Global batch size of the iteration that starts after `consumed` samples. Pure.
int train_rampup_batch(const TrainRampup *r, int64_t consumed);

// Iterations from `consumed` until at least `target` samples are consumed; *end (if not
// NULL) gets the samples consumed then. Pure.
int64_t train_rampup_iters(const TrainRampup *r, int64_t consumed, int64_t target, int64_t *end);

// Samples consumed after `iters` more iterations from `consumed`. Pure.
int64_t train_rampup_after(const TrainRampup *r, int64_t consumed, int64_t iters);
