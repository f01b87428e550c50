// train/rampup.c: the global batch size of each iteration (see rampup.h).
#include "rampup.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// 1 while the batch may still change after `consumed` samples.
static int variable(const TrainRampup *r, int64_t consumed) {
    if (r->n_steps) return consumed < r->step_at[r->n_steps - 1];
    return r->start && consumed <= r->samples;
}

// "2.4B" -> 2400000000 (K, M, B, T suffixes, as Megatron reads them); -1 if not a number.
static double scaled(const char *s, size_t len) {
    char buf[64], *end;
    if (len == 0 || len >= sizeof buf) return -1;
    memcpy(buf, s, len);
    buf[len] = 0;
    double mult = 1;
    char last = buf[len - 1];
    const char *suffix = "KMBT";
    const char *at = strchr(suffix, last >= 'a' ? last - 32 : last);
    if (last && at) mult = pow(1e3, (double)(at - suffix) + 1), buf[len - 1] = 0;
    double v = strtod(buf, &end);
    return end == buf || *end || !(v >= 0) ? -1 : v * mult;
}

int train_step_schedule_parse(TrainRampup *r, const char *const *words, int n_words,
                              int seq_length, char *err, int errlen) {
    r->n_steps = 0;
    for (int w = 0; w < n_words; w++)
        for (const char *p = words[w]; *p;) {
            p += strspn(p, " ,\t'\"");  // quotes kept by a shell array are Megatron's too
            size_t len = strcspn(p, " ,\t'\"");
            if (!len) continue;
            const char *colon = memchr(p, ':', len);
            double at = colon ? scaled(p, (size_t)(colon - p)) : -1;
            double b = colon ? scaled(colon + 1, len - (size_t)(colon - p) - 1) : -1;
            int64_t samples = (int64_t)(at / seq_length);
            int i = r->n_steps;
            if (!colon || at < 0 || b < 1 || b > 1e9 || at > 9e18)
                return snprintf(err, (size_t)errlen, "--step-batch-size-schedule: '%.*s' is not "
                                "TOKENS:BATCH (e.g. 0:16 2.4B:320)", (int)len, p), -1;
            if (i == TRAIN_STEPS_MAX)
                return snprintf(err, (size_t)errlen, "--step-batch-size-schedule: more than %d entries",
                                TRAIN_STEPS_MAX), -1;
            if ((i == 0 && at != 0) || (i > 0 && samples <= r->step_at[i - 1]))
                return snprintf(err, (size_t)errlen, "--step-batch-size-schedule: thresholds must "
                                "start at 0 and increase by at least one sample of %d tokens "
                                "('%.*s')", seq_length, (int)len, p), -1;
            r->step_at[i] = samples, r->step_batch[i] = (int)b, r->n_steps++;
            p += len;
        }
    if (!r->n_steps) return snprintf(err, (size_t)errlen, "--step-batch-size-schedule: no entries"), -1;
    r->global_batch = r->step_batch[r->n_steps - 1];
    return 0;
}

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
    if (r->n_steps) {
        int b = r->step_batch[0];
        for (int i = 1; i < r->n_steps && consumed >= r->step_at[i]; i++) b = r->step_batch[i];
        return b;
    }
    if (r->start == 0 || r->start == r->global_batch || consumed > r->samples) return r->global_batch;
    int64_t increments = (r->global_batch - r->start) / r->incr;
    double per_increment = (double)r->samples / (double)increments;  // samples per step up
    int64_t steps = per_increment > 0 ? (int64_t)((double)consumed / per_increment) : increments;
    int64_t b = r->start + (steps < increments ? steps : increments) * r->incr;
    return (int)b;
}

int64_t train_rampup_iters(const TrainRampup *r, int64_t consumed, int64_t target, int64_t *end) {
    int64_t n = 0;
    for (; consumed < target && variable(r, consumed); n++) consumed += train_rampup_batch(r, consumed);
    int64_t left = target - consumed, fixed = left > 0 ? (left + r->global_batch - 1) / r->global_batch : 0;
    n += fixed;  // fixed batch from here: no need to walk
    consumed += fixed * r->global_batch;
    if (end) *end = consumed;
    return n;
}

int64_t train_rampup_after(const TrainRampup *r, int64_t consumed, int64_t iters) {
    for (; iters > 0 && variable(r, consumed); iters--)
        consumed += train_rampup_batch(r, consumed);
    return consumed + iters * r->global_batch;
}
