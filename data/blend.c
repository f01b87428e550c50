// data/blend.c: weighted blends of token files (see blend.h).
#include "blend.h"
#include "core/check.h"  // defines: core_usage_error, core_fatal, core_calloc
#include "data/nprand.h"  // defines: np_normalize

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *SPLIT_NAMES[3] = {"train", "valid", "test"};

// 1 if s is a whole number token ("0.3", "1", "2e-1"), with its value in *x. Pure.
static int parse_weight(const char *s, double *x) {
    char *end;
    *x = strtod(s, &end);
    return end != s && *end == 0;
}

int data_blend_parse(const char *flag, const char *const *items, int n_items, DataBlendSpec *out,
                     char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    double w;
    if (n_items < 1) {
        snprintf(err, errlen, "%s needs a file (or weights and files: %s 0.5 a.h5 0.5 b.h5)", flag, flag);
        return -1;
    }
    out->weighted = n_items > 1 && parse_weight(items[0], &w);
    int n = out->weighted ? n_items / 2 : n_items;
    if ((out->weighted && n_items % 2) || n > DATA_BLEND_MAX) {
        snprintf(err, errlen, "%s: %s", flag, n > DATA_BLEND_MAX ? "more than 256 files in one blend"
                 : "a blend is pairs of a weight and a file (an odd number of values was given)");
        return -1;
    }
    double sum = 0;
    for (int k = 0; k < n; k++) {
        const char *path = out->weighted ? items[2 * k + 1] : items[k];
        if (out->weighted) {
            if (!parse_weight(items[2 * k], &out->weights[k]) || !isfinite(out->weights[k]) ||
                out->weights[k] < 0) {
                snprintf(err, errlen, "%s: weight %d ('%s') is not a non-negative number (the syntax is "
                         "%s W1 FILE1 W2 FILE2 ...)", flag, k + 1, items[2 * k], flag);
                return -1;
            }
            if (parse_weight(path, &w)) {
                snprintf(err, errlen, "%s: '%s' stands where a file belongs (the syntax is %s W1 FILE1 "
                         "W2 FILE2 ...)", flag, path, flag);
                return -1;
            }
            sum += out->weights[k];
            out->given[k] = out->weights[k];
        }
        out->paths[k] = path;
    }
    out->n = n;
    if (out->weighted && !(sum > 0)) {
        snprintf(err, errlen, "%s: the blend's weights add up to 0", flag);
        return -1;
    }
    for (int k = 0; k < n; k++) out->weights[k] = out->weighted ? out->weights[k] / sum : 0;
    return 0;
}

// Assigns blended positions [0, N) to files (blend.h, step 2; Megatron's step 4 counts
// max(i, 1) where megac counts i + 1); counts (n) get each file's total.
static void assign(DataBlend *b, int64_t *counts) {
    for (int64_t i = 0; i < b->num_samples; i++) {
        int best = 0;
        double best_lag = -INFINITY, x = b->megatron ? (double)(i > 1 ? i : 1) : (double)(i + 1);
        for (int k = 0; k < b->n; k++) {
            double lag = b->weights[k] * x - (double)counts[k];
            if (lag > best_lag) best_lag = lag, best = k;
        }
        b->file[i] = (uint16_t)best;
        b->pos[i] = counts[best]++;
    }
}

// Megatron-Core's sizes (blend.h, step 4): want[k] samples of file k's split, b's weights and
// b->num_samples. 1 when the positions must be assigned (a weighted or several-file blend).
static int megatron_sizes(DataBlend *b, const DataBlendSpec *spec, int64_t N, int64_t *want) {
    if (b->n == 1 && !spec->weighted) {
        want[0] = N, b->weights[0] = 1;
        return 0;
    }
    if (!spec->weighted) {  // sizes None: one epoch each, weighed by their samples (below)
        for (int k = 0; k < b->n; k++) want[k] = DATA_ONE_EPOCH;
        return 1;
    }
    for (int k = 0; k < b->n; k++) b->weights[k] = spec->given[k];
    np_normalize(b->weights, b->n);  // the builder's normalize
    const double surplus = 0.005;    // mid_level_dataset_surplus
    b->num_samples = 0;
    for (int k = 0; k < b->n; k++) {
        double target = ceil((double)N * b->weights[k]);
        want[k] = (int64_t)ceil(target * (1.0 + surplus));
        b->num_samples += (int64_t)target;
    }
    np_normalize(b->weights, b->n);  // BlendedDataset's own
    return 1;
}

// megac's weights (blend.h, step 1): the flag's, else by tokens. Pure.
static void megac_weights(DataBlend *b, H5Dataset **ds, const DataBlendSpec *spec) {
    double total = 0;
    for (int k = 0; k < b->n; k++) total += spec->weighted ? spec->weights[k] : (double)ds[k]->n_tokens;
    for (int k = 0; k < b->n; k++)
        b->weights[k] = (spec->weighted ? spec->weights[k] : (double)ds[k]->n_tokens) / total;
}

// A file's split too small for the positions the blend gives it: one line, exit 2.
static void check_counts(const DataBlend *b, const int64_t *counts) {
    for (int k = 0; k < b->n; k++)
        if (counts[k] > b->splits[k]->n_samples_built)
            core_usage_error("%s: the %s blend takes %lld samples from it, more than its split's %lld (Megatron: "
                             "\"the blend oversamples the contributing datasets\")", b->splits[k]->ds->path,
                             SPLIT_NAMES[b->splits[k]->kind], (long long)counts[k],
                             (long long)b->splits[k]->n_samples_built);
}

DataBlend *data_blend_new(H5Dataset **ds, const DataBlendSpec *spec, const char *split,
                          DataSplitKind kind, int seq_length, uint64_t seed, int64_t num_samples) {
    int n = spec->n;
    if (n < 1 || n > DATA_BLEND_MAX) core_fatal("a blend of %d files", n);
    for (int k = 1; k < n; k++)
        if (ds[k]->vocab_size != ds[0]->vocab_size || ds[k]->eod_id != ds[0]->eod_id)
            core_usage_error("the blend's files disagree on the vocabulary: %s has %lld ids (end of "
                             "document %lld), %s has %lld (%lld); preprocess them with one tokenizer",
                             ds[0]->path, (long long)ds[0]->vocab_size, (long long)ds[0]->eod_id,
                             ds[k]->path, (long long)ds[k]->vocab_size, (long long)ds[k]->eod_id);
    DataBlend *b = core_calloc(1, sizeof *b);
    b->n = n;
    b->num_samples = num_samples;
    b->seq_length = seq_length;
    b->megatron = 1;
    for (int k = 0; k < n; k++) b->megatron &= ds[k]->megatron;
    b->splits = core_calloc((size_t)n, sizeof *b->splits);
    b->weights = core_calloc((size_t)n, sizeof *b->weights);
    b->buf = core_calloc((size_t)seq_length + 1, sizeof(uint32_t));
    int64_t *counts = core_calloc((size_t)n, sizeof(int64_t)), *want = core_calloc((size_t)n, sizeof(int64_t));
    int blended = n > 1;
    if (b->megatron) {
        blended = megatron_sizes(b, spec, num_samples, want);
        for (int k = 0; k < n; k++) b->splits[k] = data_split_new(ds[k], split, kind, seq_length, seed, want[k]);
        if (blended && !spec->weighted) {  // weights = the splits' sizes, normalised by BlendedDataset
            int64_t total = 0;
            for (int k = 0; k < n; k++) total += b->splits[k]->n_samples_built;
            for (int k = 0; k < n; k++) {
                b->weights[k] = (double)b->splits[k]->n_samples_built;
                if (b->weights[k] == 0)  // Megatron's BlendedDataset asserts positive weights
                    core_usage_error("%s: its %s split holds no sample of %d tokens, so the unweighted blend "
                                     "weighs it 0, which Megatron refuses: give weights or more data",
                                     ds[k]->path, SPLIT_NAMES[kind], seq_length + 1);
            }
            np_normalize(b->weights, n);
            b->num_samples = num_samples < total ? num_samples : total;
        }
    } else {
        megac_weights(b, ds, spec);
    }
    if (!blended) {
        counts[0] = b->num_samples;  // one file: its own order, position for position
    } else {
        b->file = core_calloc((size_t)(b->num_samples ? b->num_samples : 1), sizeof *b->file);
        b->pos = core_calloc((size_t)(b->num_samples ? b->num_samples : 1), sizeof *b->pos);
        assign(b, counts);
    }
    if (b->megatron) {
        check_counts(b, counts);
    } else {
        for (int k = 0; k < n; k++)
            b->splits[k] = data_split_new(ds[k], split, kind, seq_length, seed + (uint64_t)k, counts[k]);
    }
    free(counts);
    free(want);
    return b;
}

void data_blend_free(DataBlend *b) {
    if (!b) return;
    for (int k = 0; k < b->n; k++) data_split_free(b->splits[k]);
    free(b->splits);
    free(b->weights);
    free(b->file);
    free(b->pos);
    free(b->buf);
    free(b);
}

int64_t data_blend_count(const DataBlend *b, int k) {
    if (k < 0 || k >= b->n) return 0;
    if (!b->file) return b->num_samples;
    int64_t c = 0;
    for (int64_t i = 0; i < b->num_samples; i++) c += b->file[i] == k;
    return c;
}

void data_blend_sample(DataBlend *b, int64_t p, uint32_t *tokens) {
    if (p < 0 || p >= b->num_samples)
        core_fatal("blended position %lld outside the %lld built", (long long)p, (long long)b->num_samples);
    DataSplit *sp = b->splits[b->file ? b->file[p] : 0];
    data_read_sample(sp, data_split_sample_at(sp, b->pos ? b->pos[p] : p), tokens);
}

void data_blend_get_batch(DataBlend *b, int64_t batch_start, int global_batch, int dp_rank,
                          int dp_size, int micro_batch, int micro_index, int *inputs, int *targets) {
    char what[32];
    snprintf(what, sizeof what, "%s blend", SPLIT_NAMES[b->splits[0]->kind]);
    int64_t first = data_micro_first(what, batch_start, global_batch, dp_rank, dp_size, micro_batch,
                                     micro_index, b->num_samples);
    for (int j = 0; j < micro_batch; j++) {
        data_blend_sample(b, first + j, b->buf);
        data_sample_to_rows(b->buf, b->seq_length, j, inputs, targets);
    }
}
