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

enum { TRAIN_STEPS_MAX = 32 };
typedef struct {
    int64_t start, incr, samples;  // start == 0: no ramp-up
    int global_batch;              // the final (or fixed) global batch size G
    int n_steps;                   // --step-batch-size-schedule entries (0: none): the batch
    int64_t step_at[TRAIN_STEPS_MAX];  // is step_batch[i] from step_at[i] consumed samples
    int step_batch[TRAIN_STEPS_MAX];   // (increasing, step_at[0] = 0) until the next entry
} TrainRampup;

// Megatron's --step-batch-size-schedule "THRESHOLD:BATCH ..." (spaces or commas between
// entries; THRESHOLD in tokens with an optional K, M, B or T suffix, turned into samples of
// seq_length tokens; the first 0, strictly increasing) into r's steps, r->global_batch the
// last entry's batch. words: the flag's values (one string or several). Returns 0, or -1 with
// one line in err. Pure.
int train_step_schedule_parse(TrainRampup *r, const char *const *words, int n_words,
                              int seq_length, char *err, int errlen);

// --rampup-batch-size: the batch grows from START as above; --step-batch-size-schedule: in
// steps. Without either the batch is G throughout.
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
