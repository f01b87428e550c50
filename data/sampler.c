// data/sampler.c: sample construction and batch assembly (see sampler.h): megac's order
// here, Megatron-Core's in data/order_megatron.c.
#include "sampler.h"
#include "core/check.h"   // defines: core_usage_error, core_fatal, core_calloc
#include "core/philox.h"  // defines: core_philox4x32
#include "data/nprand.h"  // defines: np_normalize, np_py_round
#include "parallel_state/pgrid.h"  // defines: pgrid_micro_first

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *SPLIT_NAMES[3] = {"train", "valid", "test"};
#define STREAM_DOCS 1ull     // Philox stream kinds: per-epoch document order ...
#define STREAM_SAMPLES 2ull  // ... and per-block sample order
#define MAX_SLOTS ((int64_t)1 << 31)

int data_parse_split(const char *s, double w[3], char *err, size_t errlen) {
    w[0] = w[1] = w[2] = 0;
    const char *p = s, *stop = s + strlen(s);
    while (*p == ' ') p++;
    while (stop > p && stop[-1] == ' ') stop--;
    // '99,1,0' with its quotes, as a launch script's word splitting leaves it (Megatron reads
    // only the numbers too)
    if (stop - p >= 2 && (*p == '\'' || *p == '"') && stop[-1] == *p) p++, stop--;
    int n = 0;
    double sum = 0;
    while (p < stop) {
        if (n == 3) {
            snprintf(err, errlen, "--split '%s': at most 3 weights (train,valid,test)", s);
            return -1;
        }
        char *end;
        double x = strtod(p, &end);
        if (end == p || !isfinite(x) || x < 0) {
            snprintf(err, errlen, "--split '%s': weight %d is not a non-negative number", s, n + 1);
            return -1;
        }
        w[n++] = x;
        sum += x;
        while (end < stop && *end == ' ') end++;
        if (end < stop && *end != ',' && *end != '/') {
            snprintf(err, errlen, "--split '%s': weights are separated by ',' or '/'", s);
            return -1;
        }
        p = end < stop ? end + 1 : end;
    }
    if (!(sum > 0)) {
        snprintf(err, errlen, "--split '%s': the weights must add up to more than 0", s);
        return -1;
    }
    return 0;
}

void data_split_bounds(const double w[3], int64_t n_docs, int64_t bounds[4]) {
    double sum = w[0] + w[1] + w[2], cum = 0;
    bounds[0] = 0;
    for (int k = 0; k < 3; k++) {
        cum += w[k];
        int64_t b = (int64_t)llround((double)n_docs * cum / sum);
        bounds[k + 1] = b < bounds[k] ? bounds[k] : (b > n_docs ? n_docs : b);
    }
    bounds[3] = n_docs;
}

void data_split_bounds_megatron(const double w[3], int64_t n, int64_t bounds[4]) {
    double v[3] = {w[0], w[1], w[2]}, e = 0;  // Megatron's parse_and_normalize_split
    np_normalize(v, 3);
    for (int k = 0; k < 4; k++) {  // its split matrix's bookends, then get_split_indices
        int64_t b = np_py_round(e * (double)n);
        bounds[k] = b > n ? n : b;  // e_3 may round a hair above 1
        if (k < 3) e += v[k];
    }
}

// Uniform integer in [0, n) for element i of a Philox stream. Pure.
static uint64_t uniform_below(uint64_t seed, uint64_t stream, uint64_t i, uint64_t n) {
    uint32_t r[4];
    core_philox4x32(seed, stream, i, r);
    return (((uint64_t)r[0] << 32) | r[1]) % n;
}

static uint64_t stream_id(DataSplitKind kind, uint64_t what, int64_t index) {
    return ((uint64_t)(kind + 1) << 60) | (what << 56) | (uint64_t)index;
}

// Fisher-Yates on a[0..n) driven by (seed, stream). Pure function of its inputs.
static void shuffle_i32(int32_t *a, int64_t n, uint64_t seed, uint64_t stream) {
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)uniform_below(seed, stream, (uint64_t)i, (uint64_t)i + 1);
        int32_t t = a[i]; a[i] = a[j]; a[j] = t;
    }
}

static void shuffle_i64(int64_t *a, int64_t n, uint64_t seed, uint64_t stream) {
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)uniform_below(seed, stream, (uint64_t)i, (uint64_t)i + 1);
        int64_t t = a[i]; a[i] = a[j]; a[j] = t;
    }
}

static int64_t doc_len(const DataSplit *sp, int64_t rel) {
    const uint64_t *o = sp->unit_off + sp->doc_begin + rel;
    return (int64_t)(o[1] - o[0]);
}

// Checks the split has enough data and sizes blocks, samples and epochs.
static void plan(DataSplit *sp, const char *split) {
    const char *path = sp->ds->path, *name = SPLIT_NAMES[sp->kind];
    if (sp->n_docs == 0)
        core_usage_error("%s: --split '%s' leaves the %s split no documents (of %lld); it needs "
                         "%lld samples", path, split, name, (long long)sp->ds->n_docs,
                         (long long)sp->num_samples);
    sp->tokens_per_epoch = (int64_t)(sp->unit_off[sp->doc_begin + sp->n_docs] -
                                     sp->unit_off[sp->doc_begin]);
    sp->block = (sp->tokens_per_epoch - 1) / sp->seq_length;
    if (sp->block < 1)
        core_usage_error("%s: the %s split has %lld tokens, fewer than one sample needs "
                         "(seq_length + 1 = %d)", path, name, (long long)sp->tokens_per_epoch,
                         sp->seq_length + 1);
    int64_t n_blocks = (sp->num_samples + sp->block - 1) / sp->block;
    sp->n_samples_built = n_blocks * sp->block;
    // The last sample ends at stream token n_samples_built * T (inclusive).
    double need = (double)sp->n_samples_built * sp->seq_length + 1;
    sp->n_epochs = (int64_t)ceil(need / (double)sp->tokens_per_epoch);
    if ((double)sp->n_epochs * (double)sp->n_docs > (double)MAX_SLOTS)
        core_usage_error("%s: %lld samples of the %s split need %lld epochs of %lld documents: "
                         "too many (ask for fewer samples or use more data)", path,
                         (long long)sp->num_samples, name, (long long)sp->n_epochs,
                         (long long)sp->n_docs);
    sp->n_slots = sp->n_epochs * sp->n_docs;
}

void data_split_index_samples(DataSplit *sp) {
    sp->sample_slot = core_calloc((size_t)sp->n_samples_built, sizeof(int64_t));
    sp->sample_skip = core_calloc((size_t)sp->n_samples_built, sizeof(int64_t));
    int64_t slot = 0, slot_start = 0;  // stream token where slot's document starts
    for (int64_t s = 0; s < sp->n_samples_built; s++) {
        int64_t start = s * sp->seq_length;
        while (slot_start + doc_len(sp, sp->doc_order[slot]) <= start)
            slot_start += doc_len(sp, sp->doc_order[slot++]);
        sp->sample_slot[s] = slot;
        sp->sample_skip[s] = start - slot_start;
    }
}

// Document order per epoch; where each sample starts; the shuffled sample order.
static void build(DataSplit *sp) {
    int64_t n = sp->n_docs;
    sp->doc_order = core_calloc((size_t)sp->n_slots, sizeof(int32_t));
    for (int64_t e = 0; e < sp->n_epochs; e++) {
        int32_t *o = sp->doc_order + e * n;
        for (int64_t k = 0; k < n; k++) o[k] = (int32_t)k;
        shuffle_i32(o, n, sp->seed, stream_id(sp->kind, STREAM_DOCS, e));
    }
    data_split_index_samples(sp);
    sp->order = core_calloc((size_t)sp->n_samples_built, sizeof(int64_t));
    for (int64_t s = 0; s < sp->n_samples_built; s++) sp->order[s] = s;
    for (int64_t b = 0; b * sp->block < sp->n_samples_built; b++)
        shuffle_i64(sp->order + b * sp->block, sp->block, sp->seed,
                    stream_id(sp->kind, STREAM_SAMPLES, b));
}

// The split's unit ranges under ds's order (megac: documents; Megatron: sequences). Pure.
static void split_bounds(const H5Dataset *ds, const double w[3], int64_t bounds[4]) {
    if (ds->megatron)
        data_split_bounds_megatron(w, ds->n_seqs, bounds);
    else
        data_split_bounds(w, ds->n_docs, bounds);
}

DataSplit *data_split_new(H5Dataset *ds, const char *split, DataSplitKind kind, int seq_length,
                          uint64_t seed, int64_t num_samples) {
    double w[3];
    char err[512];
    if (data_parse_split(split, w, err, sizeof err)) core_usage_error("%s", err);
    if (seq_length < 1) core_usage_error("--seq-length must be >= 1, got %d", seq_length);
    DataOrder order = ds->megatron ? DATA_ORDER_MEGATRON : DATA_ORDER_MEGAC;
    if (num_samples < 0 && !(order == DATA_ORDER_MEGATRON && num_samples == DATA_ONE_EPOCH))
        core_usage_error("number of samples must be >= 0, got %lld", (long long)num_samples);
    int64_t bounds[4];
    split_bounds(ds, w, bounds);
    DataSplit *sp = core_calloc(1, sizeof *sp);
    sp->ds = ds;
    sp->kind = kind;
    sp->order_kind = order;
    sp->unit_off = order == DATA_ORDER_MEGATRON ? ds->seq_offsets : ds->doc_offsets;
    sp->seq_length = seq_length;
    sp->seed = seed;
    sp->doc_begin = bounds[kind];
    sp->n_docs = bounds[kind + 1] - bounds[kind];
    sp->num_samples = num_samples;
    sp->buf = core_calloc((size_t)seq_length + 1, sizeof(uint32_t));
    if (num_samples == 0) return sp;
    if (order == DATA_ORDER_MEGATRON) {
        data_order_megatron_build(sp, split);
    } else {
        plan(sp, split);
        build(sp);
    }
    return sp;
}

int data_split_usable(const H5Dataset *ds, const char *split, DataSplitKind kind, int seq_length) {
    double w[3];
    char err[512];
    if (data_parse_split(split, w, err, sizeof err) || seq_length < 1) return 0;
    int64_t b[4];
    split_bounds(ds, w, b);
    const uint64_t *off = ds->megatron ? ds->seq_offsets : ds->doc_offsets;
    int64_t tokens = (int64_t)(off[b[kind + 1]] - off[b[kind]]);
    if (ds->megatron) return b[kind + 1] > b[kind] && tokens >= 2;  // Megatron repeats a short split
    return b[kind + 1] > b[kind] && tokens - 1 >= seq_length;
}

void data_split_free(DataSplit *sp) {
    if (!sp) return;
    free(sp->doc_order);
    free(sp->sample_slot);
    free(sp->sample_skip);
    free(sp->order);
    free(sp->buf);
    free(sp);
}

int64_t data_split_sample_at(const DataSplit *sp, int64_t p) {
    if (p < 0 || p >= sp->n_samples_built)
        core_fatal("order position %lld outside the %lld samples built", (long long)p,
                   (long long)sp->n_samples_built);
    return sp->order[p];
}

int64_t data_split_doc_at(const DataSplit *sp, int64_t epoch, int64_t k) {
    if (epoch < 0 || k < 0 || k >= sp->n_docs || epoch * sp->n_docs + k >= sp->n_slots)
        core_fatal("epoch %lld slot %lld outside the %lld x %lld built", (long long)epoch,
                   (long long)k, (long long)sp->n_epochs, (long long)sp->n_docs);
    return sp->doc_begin + sp->doc_order[epoch * sp->n_docs + k];
}

void data_read_sample(DataSplit *sp, int64_t s, uint32_t *tokens) {
    if (s < 0 || s >= sp->n_samples_built)
        core_fatal("sample %lld outside the %lld samples built", (long long)s, (long long)sp->n_samples_built);
    int64_t slot = sp->sample_slot[s], skip = sp->sample_skip[s], need = sp->seq_length + 1;
    while (need > 0) {
        int64_t doc = sp->doc_begin + sp->doc_order[slot++];
        int64_t len = (int64_t)(sp->unit_off[doc + 1] - sp->unit_off[doc]) - skip;
        int64_t take = len < need ? len : need;
        if (take > 0) h5ds_read(sp->ds, (int64_t)sp->unit_off[doc] + skip, take, tokens);
        tokens += take;
        need -= take;
        skip = 0;
    }
}

int64_t data_micro_first(const char *what, int64_t batch_start, int global_batch, int dp_rank,
                         int dp_size, int micro_batch, int micro_index, int64_t available) {
    int64_t first = pgrid_micro_first(batch_start, global_batch, dp_rank, dp_size, micro_batch, micro_index);
    if (first < 0)
        core_fatal("%s: no micro-batch %d of %d samples for data-parallel rank %d of %d in the global "
                   "batch of %d at sample %lld", what, micro_index, micro_batch, dp_rank, dp_size,
                   global_batch, (long long)batch_start);
    if (first + micro_batch > available)
        core_fatal("%s: the batch at sample %lld needs samples up to %lld but only %lld were built",
                   what, (long long)batch_start, (long long)(first + micro_batch), (long long)available);
    return first;
}

void data_sample_to_rows(const uint32_t *sample, int T, int j, int *inputs, int *targets) {
    for (int t = 0; t < T; t++) {
        inputs[(size_t)j * T + t] = (int)sample[t];
        targets[(size_t)j * T + t] = (int)sample[t + 1];
    }
}

void data_get_batch(DataSplit *sp, int64_t iteration, int global_batch, int dp_rank, int dp_size,
                    int micro_batch, int micro_index, int *inputs, int *targets) {
    char what[32];
    snprintf(what, sizeof what, "%s split", SPLIT_NAMES[sp->kind]);
    int64_t first = data_micro_first(what, iteration * global_batch, global_batch, dp_rank, dp_size,
                                     micro_batch, micro_index, sp->num_samples);
    for (int j = 0; j < micro_batch; j++) {
        data_read_sample(sp, sp->order[first + j], sp->buf);
        data_sample_to_rows(sp->buf, sp->seq_length, j, inputs, targets);
    }
}
