// train/batches.c: micro-batches from an HDF5 token dataset (data/sampler.h) or from
// --mock-data.
#include "batches.h"
#include "core/check.h"
#include "core/philox.h"
#include "data/sampler.h"

#include <stdlib.h>
#include <string.h>

struct BatchSource {
    uint64_t seed;
    int vocab, n_samples;
    int *sample;              // (T + 1) scratch, allocated once (mock data)
    H5Dataset *ds;            // NULL for mock data
    DataSplit *splits[2];     // train, valid (NULL when unused)
};

BatchSource *batches_hdf5_create(const char *path, const char *split, uint64_t seed,
                                 int seq_length, int64_t train_samples, int64_t valid_samples) {
    BatchSource *s = core_calloc(1, sizeof *s);
    s->ds = h5ds_open(path, MPI_COMM_WORLD);
    s->vocab = (int)s->ds->vocab_size;
    s->seed = seed;
    s->splits[0] = data_split_new(s->ds, split, DATA_TRAIN, seq_length, seed, train_samples);
    if (valid_samples > 0)
        s->splits[1] = data_split_new(s->ds, split, DATA_VALID, seq_length, seed, valid_samples);
    return s;
}

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
    for (int i = 0; i < 2; i++)
        if (s->splits[i]) data_split_free(s->splits[i]);
    if (s->ds) h5ds_close(s->ds);
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

// Reads micro-batch `micro` at the cursor from the source.
static void read_batch(const BatchCursor *c, int micro, int *tokens, int *targets) {
    if (c->src->ds) {
        DataSplit *sp = c->src->splits[c->split == SPLIT_TRAIN ? 0 : 1];
        if (!sp) core_fatal("no %s split built", c->split == SPLIT_TRAIN ? "train" : "validation");
        data_get_batch(sp, c->iteration, c->global_batch, c->dp_rank, c->dp, c->micro_batch, micro,
                       tokens, targets);
        return;
    }
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

void batches_get(void *cursor, int micro, int *tokens, int *targets) {
    const BatchCursor *c = cursor;
    if (!c->tp || c->tp->size == 1) {
        read_batch(c, micro, tokens, targets);
        return;
    }
    size_t n = (size_t)c->micro_batch * c->seq_length;
    if (c->tp->rank == 0) {
        read_batch(c, micro, c->bcast, c->bcast + n);
    }
    comm_broadcast(c->tp, c->bcast, 2 * n, COMM_I32, 0);
    memcpy(tokens, c->bcast, n * sizeof(int));
    memcpy(targets, c->bcast + n, n * sizeof(int));
}
