// data/sampler.h: GPT samples over a token dataset, and the micro-batches each
// data-parallel rank reads. One mechanism, two orders chosen by the file's format
// (DataOrder): an HDF5 file takes megac's order, a Megatron .bin/.idx prefix takes
// Megatron-Core's GPTDataset order exactly (data/order_megatron.c). Both cut a stream of
// "units" (megac: documents; Megatron: the sequences of PREFIX.idx, empty ones included, as
// GPTDataset splits by sequence) into samples the same way (step 3).
//
// megac's order (HDF5):
//  1. Split.   --split "a,b,c" weights cut the documents into contiguous train / valid / test
//              ranges: boundary k = round(n_docs * (w_0 + ... + w_k) / (w_0 + w_1 + w_2)).
//  2. Stream.  Every epoch lists the split's documents in a fresh shuffled order (Philox keyed
//              by seed, split and epoch); the epochs back to back form one token stream.
//  3. Samples. With T = seq_length, sample s is stream tokens [s*T, s*T + T + 1): T + 1 tokens
//              that may cross document (and epoch) boundaries; consecutive samples share one
//              token. inputs = its first T tokens, targets = its last T.
//  4. Order.   Samples are shuffled in blocks of S = (L - 1) / T, one epoch's worth (L = tokens
//              in the split): order positions [b*S, (b+1)*S) hold block b's samples permuted
//              by Philox(seed, split, block). As many epochs are built as the requested number
//              of samples needs. The order depends only on the data, split, T and seed: never on
//              the layout, nor on how many samples were requested (so a longer run extends a
//              shorter one).
//  5. Batches. Global batch i is order positions [i*G, (i+1)*G). Data-parallel rank r of DP
//              takes the contiguous share [r*G/DP, (r+1)*G/DP), read as micro-batches of mb
//              (pgrid_micro_first in parallel_state/pgrid.h, the one rule for it).
//              Batches are computed, not iterated: resuming at iteration k asks for batch k.
//
// Megatron-Core's order (a Megatron prefix; numpy's RandomState(seed) draws: data/nprand.h):
//  1. Split.   w = --split normalised; bookends e_k = w_0 + ... + w_{k-1}; split k is
//              sequences [round(e_k * n), round(e_{k+1} * n)) (Python's round: ties to even).
//  2. Stream.  E = the fewest epochs with E * L >= N * T + 1 (N = samples requested). The
//              document index is the split's sequences repeated E times, shuffled as one
//              array; when E > 1 and the last epoch gives fewer than int(0.8 * (L-1)/T) of the
//              N samples (separate_final_epoch), the first E - 1 epochs are shuffled together
//              and the last epoch alone after them.
//  3. Samples. As above: (E * L - 1) / T samples (helpers' build_sample_idx).
//  4. Order.   The shuffle index: a permutation of [0, P) then one of [P, all samples), with P
//              the samples before the last epoch if it was separated, else all of them. The
//              order depends on N (as Megatron's does): a longer run is a different order.
//  5. Batches. As above: global batch i is order positions [i*G, (i+1)*G), which are
//              Megatron's dataset indices i*G ... (its MegatronPretrainingSampler).
//
// Worked example (megac's order): documents 0, 1, 2 holding tokens [0..4], [5..7], [8..11]
// (L = 12), T = 4, so S = (12 - 1) / 4 = 2. If epoch 0's order is 2, 0, 1, the stream starts
// 8 9 10 11 0 1 2 3 4 5 6 7 | (epoch 1) ...; sample 0 = 8 9 10 11 0 (inputs 8 9 10 11,
// targets 9 10 11 0) and sample 1 = 0 1 2 3 4; block 0 is samples {0, 1} in some order.
#pragma once
#include <stdint.h>

#include "data/h5ds.h"

typedef enum { DATA_TRAIN = 0, DATA_VALID = 1, DATA_TEST = 2 } DataSplitKind;
typedef enum { DATA_ORDER_MEGAC = 0, DATA_ORDER_MEGATRON = 1 } DataOrder;

// num_samples of a Megatron split built as Megatron-Core builds one of an unweighted blend
// (its size None): one epoch, all of its samples.
#define DATA_ONE_EPOCH ((int64_t)-1)

typedef struct {
    H5Dataset *ds;              // not owned
    DataSplitKind kind;
    DataOrder order_kind;       // MEGATRON for a Megatron prefix, MEGAC for an HDF5 file
    int seq_length;             // T
    uint64_t seed;
    const uint64_t *unit_off;   // the file's units: documents (megac) or sequences (Megatron)
    int64_t doc_begin, n_docs;  // the split's units [doc_begin, doc_begin + n_docs)
    int64_t tokens_per_epoch;   // L
    int64_t block;              // megac: S = (L - 1) / T samples per shuffle block
    int64_t num_samples;        // order positions available: [0, num_samples)
    int64_t n_samples_built;    // >= num_samples (megac: whole blocks; Megatron: (E*L - 1) / T)
    int64_t n_epochs;           // E
    int separate_final_epoch;   // Megatron: the last epoch shuffled apart (step 2)
    int64_t n_slots;            // units in the stream: n_epochs * n_docs
    int32_t *doc_order;         // (n_slots) unit (relative to doc_begin) at each stream slot
                                // (megac: epoch e's at [e * n_docs, (e+1) * n_docs))
    int64_t *sample_slot;       // (n_samples_built) stream slot where sample s starts
    int64_t *sample_skip;       // (n_samples_built) tokens of that document before sample s starts
    int64_t *order;             // (n_samples_built) sample id at each order position
    uint32_t *buf;              // (T + 1) one sample
} DataSplit;

// Parses "a,b,c" (or "a/b/c"; missing parts count 0; spaces around the numbers and one pair
// of enclosing quotes allowed, as Megatron reads them) into non-negative weights with a
// positive sum. Returns 0, or -1 with a message in err. Pure.
int data_parse_split(const char *s, double w[3], char *err, size_t errlen);
// megac's split: split k holds documents [bounds[k], bounds[k+1]); bounds[0] = 0,
// bounds[3] = n_docs. Pure.
void data_split_bounds(const double w[3], int64_t n_docs, int64_t bounds[4]);
// Megatron-Core's split of n sequences (step 1 of its order; bounds[3] is round(e_3 * n)). Pure.
void data_split_bounds_megatron(const double w[3], int64_t n, int64_t bounds[4]);

// Builds split `kind` of ds for num_samples order positions (0 is allowed: an unused split;
// DATA_ONE_EPOCH for a Megatron prefix: see above), in the order of ds's format. The same on
// every rank (no communication). A bad split string, an empty split, a split shorter than one
// sample or (Megatron) a seed outside numpy's [0, 2^32) is a usage error naming the file
// (exit code 2).
DataSplit *data_split_new(H5Dataset *ds, const char *split, DataSplitKind kind, int seq_length,
                          uint64_t seed, int64_t num_samples);
// 1 if split `kind` of ds has documents and at least one sample of seq_length + 1 tokens
// (Megatron's order: at least 2 tokens, repeated for as many epochs as its samples need), so
// that data_split_new would accept it, else 0 (also for a bad split string). Pure.
int data_split_usable(const H5Dataset *ds, const char *split, DataSplitKind kind, int seq_length);
// Frees sp (NULL is fine); the dataset stays open.
void data_split_free(DataSplit *sp);

// Sample id at order position p (0 <= p < n_samples_built). Pure.
int64_t data_split_sample_at(const DataSplit *sp, int64_t p);
// Unit id (in the file: document, or Megatron sequence) at stream slot e * n_docs + k. Pure.
int64_t data_split_doc_at(const DataSplit *sp, int64_t epoch, int64_t k);
// Fills sp->sample_slot and sp->sample_skip from sp->doc_order (step 3; both orders).
void data_split_index_samples(DataSplit *sp);
// Megatron-Core's steps 2-4 for sp (split and units set, num_samples > 0 or DATA_ONE_EPOCH):
// epochs, document index, samples, shuffle index (data/order_megatron.c). Usage errors as
// data_split_new's.
void data_order_megatron_build(DataSplit *sp, const char *split);
// Reads sample s (stream tokens [s*T, s*T + T + 1)) into tokens.
void data_read_sample(DataSplit *sp, int64_t s, uint32_t *tokens /* (T + 1) */);

// Fills micro-batch micro_index of this DP rank's share of global batch `iteration`:
// inputs[j*T + t] = sample[t], targets[j*T + t] = sample[t + 1] for the mb samples j at order
// positions iteration*G + dp_rank*(G/DP) + micro_index*mb + j. Bad arguments (G not divisible
// by DP * mb, a position beyond num_samples) stop the job naming them.
void data_get_batch(DataSplit *sp, int64_t iteration, int global_batch, int dp_rank, int dp_size,
                    int micro_batch, int micro_index, int *inputs /* (mb, T) */,
                    int *targets /* (mb, T) */);
// pgrid_micro_first (the order position of the first sample of micro-batch micro_index of
// DP rank dp_rank's share of the global batch at [batch_start, batch_start + global_batch)),
// checked: bad arguments, or a micro-batch beyond `available` positions, stop the job (the
// message names `what`).
int64_t data_micro_first(const char *what, int64_t batch_start, int global_batch, int dp_rank,
                         int dp_size, int micro_batch, int micro_index, int64_t available);
// Row j of inputs (mb, T) = sample[0..T), of targets (mb, T) = sample[1..T] (T + 1 tokens).
void data_sample_to_rows(const uint32_t *sample, int T, int j, int *inputs, int *targets);
