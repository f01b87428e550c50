// data/h5ds.h: megac token datasets in HDF5: the writer (preprocessing) and the reader
// every training rank opens. The reader reads a second format too, Megatron-LM's indexed
// datasets (PREFIX.bin + PREFIX.idx, memory-mapped: data/mmidx.h), through the same calls.
// Layout of the HDF5 files (data/FORMAT.md):
//
//   /tokens        1-D, uint16 when vocab_size <= 65536 else uint32, chunked: all documents
//                  back to back (megac's tokenizers end each with the end-of-document id;
//                  an import holds exactly the tokens of its source)
//   /doc_offsets   1-D uint64, n_docs + 1 entries: document d is tokens[off[d] .. off[d+1])
//   attributes of "/": format = "megac-tokens", version = 1, vocab_size, eod_id,
//                      tokenizer ("byte" or the tokenizer's JSON)
//
// The reader validates the whole layout at open (not the token ids: that would read the
// whole file); each read checks its ids against vocab_size and names the file and position.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <hdf5.h>  // defines: hid_t
#include <mpi.h>   // defines: MPI_Comm

#define H5DS_FORMAT "megac-tokens"
#define H5DS_VERSION 1

// ---- writer --------------------------------------------------------------------------------

typedef struct H5dsWriter H5dsWriter;

// Creates path (truncating it) for a vocabulary of vocab_size ids. tokenizer is stored as the
// "tokenizer" attribute. Returns NULL with "path: problem" in err when the file cannot be
// created or vocab_size / eod_id are out of range. Serial (no MPI needed).
H5dsWriter *h5ds_writer_create(const char *path, int64_t vocab_size, int64_t eod_id,
                               const char *tokenizer, char *err, size_t errlen);
// Appends ids[0..n) to the current document. Every id must be < vocab_size (checked:
// returns -1 with a message in err otherwise).
int h5ds_writer_append(H5dsWriter *w, const uint32_t *ids /* (n) */, size_t n, char *err, size_t errlen);
// Ends the current document (its tokens become one entry of doc_offsets). Never fails.
void h5ds_writer_end_doc(H5dsWriter *w);
// Tokens and documents written so far. Pure.
int64_t h5ds_writer_tokens(const H5dsWriter *w);
int64_t h5ds_writer_docs(const H5dsWriter *w);
// Unigram entropy (nats per token) of the ids appended so far: the loss of a model that
// knows only token frequencies, the bar a language model must beat. NaN if not counted.
double h5ds_writer_unigram_entropy(const H5dsWriter *w);
// Flushes and closes; the file is complete. Tokens after the last end_doc are dropped.
// Returns 0, or -1 with "path: cannot write: <the system's reason>" in err when any write
// failed (a full disk): the file is then incomplete and the caller removes it. Appends after
// a failure write nothing (h5ds_writer_append returns -1). HDF5's error stack is not printed
// while the writer is open (MEGAC_HDF5_DEBUG=1 prints it). Frees w.
int h5ds_writer_close(H5dsWriter *w, char *err, size_t errlen);


// ---- reader --------------------------------------------------------------------------------

typedef struct {
    char *path;                // the HDF5 file, or the Megatron PREFIX
    hid_t file, tokens;        // open HDF5 handles (-1 for a Megatron prefix)
    int64_t n_tokens, n_docs;
    int64_t vocab_size, eod_id;
    int token_bytes;           // HDF5: 2 (uint16) or 4 (uint32); Megatron: 1, 2, 4 or 8
    uint64_t *doc_offsets;     // (n_docs + 1): document d is tokens [off[d], off[d+1])
    char *tokenizer;           // "byte", the tokenizer JSON, or "external"
    int parallel;              // opened with MPI-IO (1) or serially (0)
    int megatron;              // 1: a Megatron PREFIX (data/mmidx.h), 0: HDF5
    int token_signed;          // Megatron: the token type is signed
    int64_t n_seqs;            // Megatron: sequences in PREFIX.idx, empty ones included (0: HDF5)
    uint64_t *seq_offsets;     // Megatron: (n_seqs + 1) sequence s is tokens [off[s], off[s+1])
                               // (Megatron-Core's GPTDataset samples sequences: data/sampler.h)
    const uint8_t *bin;        // Megatron: PREFIX.bin mapped read-only (bin_bytes)
    size_t bin_bytes;
} H5Dataset;

// The vocabulary of a Megatron prefix, which its files do not hold (unused for HDF5 files,
// which carry their own): ids < vocab_size, end of document eod_id.
typedef struct {
    int64_t vocab_size, eod_id;
} H5dsVocab;

// Opens and validates a token dataset: an HDF5 file, or (when path names no file but
// PATH.idx exists) a Megatron prefix read with vocab (NULL: none given, an error for a
// prefix). comm != MPI_COMM_NULL: collective over comm; rank 0 validates and broadcasts
// doc_offsets, then every rank opens the HDF5 file with MPI-IO or maps PREFIX.bin.
// comm == MPI_COMM_NULL: serial open without MPI (tools, tests). A missing, damaged or
// invalid file is a usage error ("megac: <path>: <problem>", exit 2) on every rank.
H5Dataset *h5ds_open(const char *path, const H5dsVocab *vocab, MPI_Comm comm);
// Same checks, but returns NULL with "path: problem" in err instead of exiting. Serial.
H5Dataset *h5ds_open_serial(const char *path, const H5dsVocab *vocab, char *err, size_t errlen);
// Reads tokens[start .. start + n) (HDF5: independent I/O, only those chunks; Megatron: from
// the mapped .bin) into out and checks
// each id < vocab_size; a bad id or a failed read stops the job with exit code 2 and a
// message naming the file and the token position.
void h5ds_read(H5Dataset *ds, int64_t start, int64_t n, uint32_t *out /* (n) */);
// Closes the file (collective over the open's comm when opened with one).
void h5ds_close(H5Dataset *ds);
