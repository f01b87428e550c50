// data/tok_train.h: learning byte-level BPE merges from a corpus.
//
// Training counts the unique pre-tokenised words of the corpus (tok_trainer_add, streaming),
// then merges greedily: the most frequent adjacent pair (ties: smallest (a, b)) becomes the
// next id. Pair counts are kept incrementally: a merge revisits only the words that contain
// the merged pair (found through per-pair word lists) and a lazy max-heap finds the next best
// pair, so the cost per merge is the size of the words it touches, not of the corpus.
// Training stops at vocab_size, or earlier when no pair occurs at least twice.
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "data/tokenizer.h"

typedef struct TokTrainer TokTrainer;

typedef struct {
    int64_t n_pieces;    // pre-tokenised words seen (with repeats)
    int64_t n_words;     // unique words
    int64_t n_bytes;     // bytes added
    int n_merges;        // merges learned
    double merge_seconds;
} TokTrainStats;

// A trainer with the given pre-tokenisation. NULL with a message in err on a bad pattern.
TokTrainer *tok_trainer_new(const char *pattern, int max_piece, char *err, size_t errlen);
// Pre-tokenises text[0..n) and counts its words. Text may arrive in parts cut at the
// boundaries pretok.h allows.
void tok_trainer_add(TokTrainer *tr, const uint8_t *text, size_t n);
// Learns up to vocab_size - 257 merges and returns the tokenizer; fills *stats (if not NULL).
// progress != 0 prints merges/s to stderr while it runs. The trainer stays usable only for
// tok_trainer_free afterwards.
Tokenizer *tok_trainer_finish(TokTrainer *tr, int vocab_size, int progress, TokTrainStats *stats);
// Frees tr (NULL is fine).
void tok_trainer_free(TokTrainer *tr);
