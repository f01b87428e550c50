// data/preprocess.h: text / JSON Lines -> megac token dataset (HDF5), and the import of
// Megatron-LM indexed datasets (PREFIX.bin + PREFIX.idx).
//
// Both stream (bounded memory), write to "<output>.tmp.<pid>" and rename it to output only
// when everything succeeded, so output is never a half-written file. Serial; no MPI.
#pragma once
#include <stdint.h>

#include "data/docs.h"
#include "data/tokenizer.h"

typedef struct {
    const char *const *inputs;
    int n_inputs;
    const char *output;
    Tokenizer *tok;          // encodes the documents (tok->prefix before each, tok->suffix
                             // and EOD after each)
    DataDocsOptions docs;    // chunk_bytes is set by data_preprocess
    int progress;            // progress line on stderr
} DataPreprocessOptions;

typedef struct {
    int64_t n_docs, n_tokens;
    uint64_t n_bytes;        // input bytes read
    double unigram_entropy;  // nats per token (NaN when not counted)
    double seconds;
    int64_t docs_without_eod; // import: documents whose last token is not eod_id
} DataPreprocessStats;

// Tokenizes every input into output. Returns 0, or -1 with "file[:line]: problem" in err
// for a bad input, or -2 when writing failed (a full disk: "tmp: cannot write: No space
// left on device ..."); output is then left untouched and the temporary file removed.
int data_preprocess(const DataPreprocessOptions *o, DataPreprocessStats *st, char *err, size_t errlen);

// Converts PREFIX.bin / PREFIX.idx (Megatron's "MMIDIDX" indexed dataset, integer token
// types, read as data/mmidx.h reads it) to output: the same documents, token for token (no
// end-of-document id is added: st->docs_without_eod counts the documents lacking one).
// Every token must be < vocab_size. tokenizer is stored as the dataset's tokenizer
// attribute. Returns 0, or -1 with "file: problem" in err.
int data_from_megatron(const char *prefix, const char *output, int64_t vocab_size, int64_t eod_id,
                       const char *tokenizer, int progress, DataPreprocessStats *st, char *err,
                       size_t errlen);
