// train/batches.h: where a micro-batch's tokens come from: the HDF5 dataset (data/) or
// synthetic --mock-data. Global batch i holds samples [i*G, (i+1)*G) of the split's order;
// data-parallel rank r takes the contiguous share [r*G/DP, (r+1)*G/DP), cut into
// micro-batches. So the samples of a step never depend on the layout.
// Within a tensor-parallel group only tp rank 0 reads; the batch is broadcast to the others
// (Megatron's broadcast_data), so file reads happen once per data-parallel rank and stage.
#pragma once
#include <stdint.h>
#include "comm/comm.h"

typedef enum { SPLIT_TRAIN = 0, SPLIT_VALID = 1, SPLIT_TEST = 2 } SplitKind;

typedef struct BatchSource BatchSource;

typedef struct {
    BatchSource *src;
    SplitKind split;
    int64_t iteration;     // global batch index (0-based)
    int global_batch, dp_rank, dp, micro_batch, seq_length;
    Comm *tp;              // tensor-parallel group: rank 0 reads, broadcasts (NULL: read)
    int *bcast;            // (2, micro_batch, seq_length) host staging for the broadcast
} BatchCursor;

// Synthetic data: token t of sample s is a hash of (seed, s mod n_samples, t) mod V.
// n_samples = 0 means every sample differs. Never fails.
BatchSource *batches_mock_create(uint64_t seed, int vocab, int n_samples, int seq_length);
// An HDF5 token dataset (megac preprocess) opened collectively over MPI_COMM_WORLD, with its
// train split built for train_samples order positions and its validation split for
// valid_samples (0: no validation). Bad files or splits: one line naming the file, exit 2.
BatchSource *batches_hdf5_create(const char *path, const char *split, uint64_t seed,
                                 int seq_length, int64_t train_samples, int64_t valid_samples);
// Vocabulary size of the source. Pure.
int batches_vocab_size(const BatchSource *s);
void batches_destroy(BatchSource *s);

// PPBatchFn: fills tokens (B, T) and targets (B, T) of micro-batch `micro` at the cursor.
void batches_get(void *cursor, int micro, int *tokens, int *targets);
