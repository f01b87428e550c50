// data/order_megatron.c: Megatron-Core's GPTDataset indices over a split of a Megatron prefix
// (sampler.h, "Megatron-Core's order"): the number of epochs, the document index (numpy
// RandomState(seed) shuffles, the separate final epoch), the sample index and the shuffle
// index, built as gpt_dataset.py and helpers.cpp build them, so that order position p holds
// the tokens of Megatron's dataset[p].
#include "sampler.h"
#include "core/check.h"   // defines: core_usage_error, core_calloc
#include "data/nprand.h"  // defines: NpRandom, np_random_seed, np_random_shuffle_i32/_i64

#include <stdio.h>

static const char *SPLIT_NAMES[3] = {"train", "valid", "test"};
#define MAX_SLOTS ((int64_t)1 << 31)  // the document index is int32

// GPTDataset._get_num_epochs: the fewest epochs E with E * L >= N * T + 1. Pure.
static int64_t num_epochs(int64_t L, int T, int64_t N) {
    int64_t e = 1;
    if (N == DATA_ONE_EPOCH) return e;
    for (int64_t tokens = L; tokens < N * T + 1; tokens += L) e++;
    return e;
}

// Checks the split and sizes epochs and samples (the first half of
// _build_document_sample_shuffle_indices).
static void plan(DataSplit *sp, const char *split) {
    const char *path = sp->ds->path, *name = SPLIT_NAMES[sp->kind];
    if (sp->seed > 0xffffffffull)
        core_usage_error("%s: --seed %llu: Megatron-Core's sample order for .bin/.idx data draws from numpy's "
                         "RandomState, which takes seeds in [0, 2^32)", path, (unsigned long long)sp->seed);
    if (sp->n_docs == 0)
        core_usage_error("%s: --split '%s' leaves the %s split no sequences (of %lld)", path, split, name,
                         (long long)sp->ds->n_seqs);
    int64_t L = (int64_t)(sp->unit_off[sp->doc_begin + sp->n_docs] - sp->unit_off[sp->doc_begin]);
    int T = sp->seq_length;
    if (L < 2)  // helpers.cpp asserts it; a shorter split is repeated for epochs enough (as Megatron)
        core_usage_error("%s: the %s split has %lld tokens; Megatron's sample index needs at least 2", path,
                         name, (long long)L);
    sp->tokens_per_epoch = L;
    sp->n_epochs = num_epochs(L, T, sp->num_samples);
    if ((double)sp->n_epochs * (double)sp->n_docs >= (double)MAX_SLOTS)
        core_usage_error("%s: %lld samples of the %s split need %lld epochs of %lld sequences: too many "
                         "(ask for fewer samples or use more data)", path, (long long)sp->num_samples, name,
                         (long long)sp->n_epochs, (long long)sp->n_docs);
    sp->n_slots = sp->n_epochs * sp->n_docs;
    sp->n_samples_built = (sp->n_epochs * L - 1) / T;  // build_sample_idx, drop_last_partial_sequence
    if (sp->num_samples == DATA_ONE_EPOCH) sp->num_samples = sp->n_samples_built;
    if (sp->n_epochs > 1) {
        int64_t before_last = ((sp->n_epochs - 1) * L - 1) / T, per_epoch = (L - 1) / T;
        sp->separate_final_epoch = sp->num_samples - before_last < (int64_t)(0.80 * (double)per_epoch);
    }
}

// _build_document_index over `epochs` epochs of the split's sequences at out (n_docs * epochs
// entries, relative to doc_begin): the epochs back to back, shuffled as one array.
static void document_index(const DataSplit *sp, int64_t epochs, NpRandom *r, int32_t *out) {
    for (int64_t e = 0; e < epochs; e++)
        for (int64_t k = 0; k < sp->n_docs; k++) out[e * sp->n_docs + k] = (int32_t)k;
    np_random_shuffle_i32(r, out, epochs * sp->n_docs);
}

void data_order_megatron_build(DataSplit *sp, const char *split) {
    plan(sp, split);
    NpRandom r;  // one RandomState(seed) for the document index, then the shuffle index
    np_random_seed(&r, (uint32_t)sp->seed);
    sp->doc_order = core_calloc((size_t)sp->n_slots, sizeof(int32_t));
    if (sp->separate_final_epoch) {
        document_index(sp, sp->n_epochs - 1, &r, sp->doc_order);
        document_index(sp, 1, &r, sp->doc_order + (sp->n_epochs - 1) * sp->n_docs);
    } else {
        document_index(sp, sp->n_epochs, &r, sp->doc_order);
    }
    data_split_index_samples(sp);
    int64_t n = sp->n_samples_built;
    int64_t first = sp->separate_final_epoch ? ((sp->n_epochs - 1) * sp->tokens_per_epoch - 1) / sp->seq_length : n;
    sp->order = core_calloc((size_t)n, sizeof(int64_t));
    for (int64_t s = 0; s < n; s++) sp->order[s] = s;
    np_random_shuffle_i64(&r, sp->order, first);  // _build_shuffle_index
    np_random_shuffle_i64(&r, sp->order + first, n - first);
}
