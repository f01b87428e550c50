// data/blend.h: weighted blends of several token files into one sample order (Megatron's
// `--data-path 0.3 a.h5 0.7 b.h5`). megac's rule (steps 1-3) for blends holding an HDF5
// file; Megatron-Core's BlendedDataset (step 4) when every file is a Megatron prefix.
//
//  1. Each file k of the blend gets its own split (data/sampler.h: the same --split, seq
//     length and seed + k), so each file's own order never depends on the blend.
//  2. Blended order position i takes the next unused sample of the file whose share is most
//     behind: the k maximising w_k * (i + 1) - n_k, where n_k counts the positions already
//     given to file k (ties: the lowest k). After i + 1 positions every n_k is within one of
//     w_k * (i + 1). The assignment of position i never depends on how many positions are
//     built, so a longer run extends a shorter one, as with one file.
//  3. A global batch is G consecutive blended positions, cut over DP and micro-batches exactly
//     as for one file. A blend of one file is that file's order, position for position.
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "data/h5ds.h"
#include "data/sampler.h"

enum { DATA_BLEND_MAX = 256 };  // files in one blend

// A parsed blend: paths and weights (normalised to sum 1; NULL weights until the files are
// open when none were given: then each file weighs by its number of tokens).
typedef struct {
    int n;
    const char *paths[DATA_BLEND_MAX];  // point into argv
    double weights[DATA_BLEND_MAX];     // normalised (sum 1)
    double given[DATA_BLEND_MAX];       // as the flag gave them (Megatron normalises with numpy)
    int weighted;                       // 1 if the flag gave weights
} DataBlendSpec;

// Parses Megatron's blend syntax: "PATH", "W1 PATH1 W2 PATH2 ..." or "PATH1 PATH2 ..." (no
// weights: by size). items point into argv. 0, or -1 with one line in err naming flag. Pure.
int data_blend_parse(const char *flag, const char *const *items, int n_items, DataBlendSpec *out,
                     char *err, size_t errlen);

typedef struct {
    int n;
    DataSplit **splits;     // (n) one per file (not owning the files)
    double *weights;        // (n) normalised
    int megatron;           // 1: every file a Megatron prefix, Megatron-Core's rule (step 4)
    int64_t num_samples;    // blended positions available: [0, num_samples)
    uint16_t *file;         // (num_samples) file of each position; NULL for one file
    int64_t *pos;           // (num_samples) its position in that file's order; NULL for one file
    int seq_length;
    uint32_t *buf;          // (T + 1) one sample
} DataBlend;

// Builds the blend of the open files ds[0..n) with spec's weights for split `kind` over
// num_samples positions (see the top of this file; Megatron's rule may build more). Files
// whose vocabularies differ, or a split of a file too small for its share, are usage errors
// naming the files (exit 2).
DataBlend *data_blend_new(H5Dataset **ds, const DataBlendSpec *spec, const char *split,
                          DataSplitKind kind, int seq_length, uint64_t seed, int64_t num_samples);
// Frees b (NULL is fine); the files stay open.
void data_blend_free(DataBlend *b);

// Positions given to file k among the first num_samples (its n_k). Pure.
int64_t data_blend_count(const DataBlend *b, int k);

// Reads the sample (T + 1 tokens) at blended position p (0 <= p < num_samples, else the job
// stops naming it) into tokens.
void data_blend_sample(DataBlend *b, int64_t p, uint32_t *tokens /* (T + 1) */);

// data_get_batch (data/sampler.h) over the blended order: micro-batch micro_index of DP rank
// dp_rank's share (pgrid_micro_first) of the global batch at blended positions [batch_start,
// batch_start + global_batch), batches being placed by consumed samples (train/rampup.h). Bad
// arguments stop the job naming them.
void data_blend_get_batch(DataBlend *b, int64_t batch_start, int global_batch, int dp_rank,
                          int dp_size, int micro_batch, int micro_index,
                          int *inputs /* (mb, T) */, int *targets /* (mb, T) */);
