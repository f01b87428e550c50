// train/batches.c: micro-batches from --mock-data (the HDF5 path plugs in here too).
#include "batches.h"
#include "core/check.h"
#include "core/philox.h"

#include <stdlib.h>

struct BatchSource {
    uint64_t seed;
    int vocab, n_samples;
    int *sample;  // (T + 1) scratch, allocated once
};

BatchSource *batches_mock_create(uint64_t seed, int vocab, int n_samples, int seq_length) {
    BatchSource *s = core_calloc(1, sizeof *s);
    s->sample = core_calloc((size_t)seq_length + 1, sizeof(int));
    s->seed = seed;
    s->vocab = vocab;
    s->n_samples = n_samples;
    return s;
}

int batches_vocab_size(const BatchSource *s) { return s->vocab; }

void batches_destroy(BatchSource *s) {
    if (!s) return;
    free(s->sample);
    free(s);
}

// One sample of T + 1 tokens.
static void mock_sample(const BatchSource *s, SplitKind split, int64_t sample, int T, int *out) {
    int64_t k = s->n_samples ? sample % s->n_samples : sample;
    for (int t = 0; t <= T; t++) {
        uint32_t r[4];
        core_philox4x32(s->seed, 0x6d6f636bull + (uint64_t)split, (uint64_t)k * (uint64_t)(T + 1) + (uint64_t)t, r);
        out[t] = (int)(r[0] % (uint32_t)s->vocab);
    }
}

void batches_get(void *cursor, int micro, int *tokens, int *targets) {
    const BatchCursor *c = cursor;
    int T = c->seq_length, per_rank = c->global_batch / c->dp;
    int *buf = c->src->sample;
    for (int b = 0; b < c->micro_batch; b++) {
        int64_t sample = c->iteration * c->global_batch + (int64_t)c->dp_rank * per_rank +
                         (int64_t)micro * c->micro_batch + b;
        mock_sample(c->src, c->split, sample, T, buf);
        for (int t = 0; t < T; t++) {
            tokens[b * T + t] = buf[t];
            targets[b * T + t] = buf[t + 1];
        }
    }
}
