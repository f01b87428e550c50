// train/batches.h: where a micro-batch's tokens come from: the HDF5 dataset (data/) or
// synthetic --mock-data. A global batch of G samples starting at order position c (the
// samples consumed before it) holds positions [c, c + G) of the split's order;
// data-parallel rank r takes the contiguous share [r*G/DP, (r+1)*G/DP), cut into
// micro-batches (pgrid_micro_first). So the samples of a step never depend on the layout.
// Within a tensor-parallel group only tp rank 0 reads; the batch is broadcast to the others
// (Megatron's broadcast_data), so file reads happen once per data-parallel rank and stage.
#pragma once
#include <stdint.h>
#include <stdio.h>
#include "comm/comm.h"
#include "core/args.h"

typedef enum { SPLIT_TRAIN = 0, SPLIT_VALID = 1, SPLIT_TEST = 2 } SplitKind;

typedef struct BatchSource BatchSource;

typedef struct {
    BatchSource *src;
    SplitKind split;
    int64_t batch_start;   // order position of the global batch's first sample (batches are
                           // placed by consumed samples: train/rampup.h)
    int global_batch, dp_rank, dp, micro_batch, seq_length;
    Comm *tp;              // tensor-parallel group: rank 0 reads, broadcasts (NULL: read)
    int *bcast;            // (2, micro_batch, seq_length) host staging for the broadcast
    int cp, cp_rank;       // context parallelism: each micro-batch is read whole and this
                           // rank keeps its two chunks of each sequence (model/gpt_cp.h)
} BatchCursor;

// Synthetic data: token t of sample s is a hash of (seed, s mod n_samples, t) mod V.
// n_samples = 0 means every sample differs. Never fails.
BatchSource *batches_mock_create(uint64_t seed, int vocab, int n_samples, int seq_length);
// Where the tokens come from (Megatron's flags; data/blend.h for the blend syntax): either
// `data`, one blend whose files are each cut by `split`, or `train` (and optionally `valid`),
// blends of whole files per split.
typedef struct {
    CoreStrList data, train, valid, test;  // --data-path, --train/valid/test-data-path
    const char *split;               // --split
    int64_t megatron_vocab;          // --vocab-size N: a Megatron prefix holds ids < N + 1,
                                     // end of document N; an HDF5 file must have N + 1 ids
                                     // (0: not given)
    int64_t tok_vocab, tok_eod;      // a tokenizer's (--tokenizer-type): a Megatron prefix holds
                                     // ids < tok_vocab, an HDF5 file must have both (0: none)
    const char *tok_name;            // that tokenizer, for messages
} BatchDataPaths;

// HDF5 token datasets (megac preprocess) opened collectively over MPI_COMM_WORLD, with the
// train blend built for train_samples order positions and the validation and test blends
// for eval_samples each (none: eval_samples 0, no such files, or a --split weight of 0; the
// test split is also left out when a file's share is too small for one sample). Bad files,
// splits or blends: one line naming the file, exit 2.
BatchSource *batches_hdf5_create(const BatchDataPaths *paths, uint64_t seed, int seq_length,
                                 int64_t train_samples, int64_t eval_samples);
struct TrainArgs;
// batches_hdf5_create for `megac train`'s flags a (files, --split, --seed, --seq-length; the
// train order for the samples of --train-iters or --train-samples, the evaluation orders for
// --eval-iters global batches), as the trainer opens its data. Collective over
// MPI_COMM_WORLD; errors as batches_hdf5_create's.
BatchSource *batches_from_args(const struct TrainArgs *a);
// Reads the sample (seq_length + 1 tokens) at order position pos of split k into tokens: 0,
// or -1 (nothing read) for mock data, a split not built or pos outside [0, available).
int batches_read_sample(BatchSource *s, SplitKind k, int64_t pos, uint32_t *tokens);
// Order positions built for split k (0 for mock data or a split not built). Pure.
int64_t batches_available(const BatchSource *s, SplitKind k);
// Makes sure the training order has at least `samples` positions (a resume that changed the
// global batch may need more than were built at start); the order itself never changes.
void batches_reserve_train(BatchSource *s, int64_t samples);
// Prints one line per file of each blend: split, weight, path, documents, samples, epochs.
// Nothing for mock data.
void batches_print_summary(const BatchSource *s, FILE *f);
// 1 if batches of split k can be read (mock data: always). Pure.
int batches_has_split(const BatchSource *s, SplitKind k);
// Vocabulary size of the source. Pure.
int batches_vocab_size(const BatchSource *s);
// End-of-document id of the training data; -1 for mock data. Pure.
int64_t batches_eod_id(const BatchSource *s);
void batches_destroy(BatchSource *s);

// PPBatchFn: fills tokens (B, T) and targets (B, T) of micro-batch `micro` at the cursor
// (with context parallelism cp > 1: this rank's (2, B, T/(2 cp)) rows, gpt_cp_select).
void batches_get(void *cursor, int micro, int *tokens, int *targets);
