// train/rampup.c: the global batch size of each iteration (see rampup.h).
#include "rampup.h"

#include <stdio.h>

int train_rampup_check(const TrainRampup *r, char *err, int errlen) {
    if (r->start == 0) return 0;
    if (r->start < 0 || r->incr <= 0 || r->samples < 0 || r->start > r->global_batch ||
        (r->global_batch - r->start) % r->incr) {
        snprintf(err, (size_t)errlen, "--rampup-batch-size %lld %lld %lld: need START > 0, INCR > 0, "
                 "SAMPLES >= 0, START <= --global-batch-size %d and (%d - START) divisible by INCR",
                 (long long)r->start, (long long)r->incr, (long long)r->samples, r->global_batch,
                 r->global_batch);
        return -1;
    }
    return 0;
}

int train_rampup_batch(const TrainRampup *r, int64_t consumed) {
    if (r->start == 0 || r->start == r->global_batch || consumed > r->samples) return r->global_batch;
    int64_t increments = (r->global_batch - r->start) / r->incr;
    double per_increment = (double)r->samples / (double)increments;  // samples per step up
    int64_t steps = per_increment > 0 ? (int64_t)((double)consumed / per_increment) : increments;
    int64_t b = r->start + (steps < increments ? steps : increments) * r->incr;
    return (int)b;
}

int64_t train_rampup_iters(const TrainRampup *r, int64_t consumed, int64_t target, int64_t *end) {
    int64_t n = 0;
    if (r->start == 0 || consumed > r->samples) {  // fixed batch: no need to walk
        int64_t left = target - consumed;
        n = left > 0 ? (left + r->global_batch - 1) / r->global_batch : 0;
        consumed += n * r->global_batch;
    } else {
        while (consumed < target) {
            consumed += train_rampup_batch(r, consumed);
            n++;
        }
    }
    if (end) *end = consumed;
    return n;
}

int64_t train_rampup_after(const TrainRampup *r, int64_t consumed, int64_t iters) {
    for (; iters > 0 && r->start && consumed <= r->samples; iters--)
        consumed += train_rampup_batch(r, consumed);
    return consumed + iters * r->global_batch;
}
