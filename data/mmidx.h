// data/mmidx.h: Megatron-LM indexed datasets (PREFIX.bin + PREFIX.idx, "MMIDIDX") as the
// second format of the token-dataset reader (h5ds.h). Used through h5ds_open / h5ds_read,
// never directly by the trainer: the sampler sees documents and tokens, not the format.
//
// PREFIX.idx, little endian: the 9 magic bytes "MMIDIDX\0\0", uint64 version (1), uint8 token
// type code (1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 8 uint16), uint64 n_seq, uint64
// n_doc_idx, then int32 sizes[n_seq] (tokens per sequence), int64 pointers[n_seq] (byte offset
// of each sequence in PREFIX.bin) and int64 doc_idx[n_doc_idx] (document d = sequences
// [doc_idx[d], doc_idx[d+1])). PREFIX.bin: the tokens, sequences back to back (as Megatron's
// writer stores them; megac requires it). The format has no checksums and no vocabulary: the
// caller gives vocab_size and eod_id. Empty documents are dropped (as the import always did),
// so document d of the reader is the d-th non-empty one.
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "data/h5ds.h"

// 1 if path names no file but PATH.idx exists (a Megatron prefix), else 0. Pure (stat only).
int mmidx_is_prefix(const char *path);
// Validates PREFIX.idx against PREFIX.bin (magic, version, type code, sizes and pointers
// consistent with the .bin size, doc_idx monotone from 0 to n_seq) and fills ds's metadata
// (n_tokens, n_docs, doc_offsets, token_bytes, token_signed, vocab_size, eod_id, tokenizer
// "external"); does not map the .bin. 0, or -1 with "file: problem" in err.
int mmidx_validate(H5Dataset *ds, const char *prefix, int64_t vocab_size, int64_t eod_id,
                   char *err, size_t errlen);
// Maps PREFIX.bin read-only into ds (its size must be n_tokens * token_bytes). 0, or -1 with
// "file: problem" in err.
int mmidx_map(H5Dataset *ds, char *err, size_t errlen);
// Copies tokens [start, start + n) of the mapped .bin into out. Returns -1, or the index i of
// the first token that is negative or >= vocab_size (out[i] then holds its low 32 bits).
int64_t mmidx_read(const H5Dataset *ds, int64_t start, int64_t n, uint32_t *out /* (n) */);
// Unmaps the .bin (the rest of ds is the caller's).
void mmidx_unmap(H5Dataset *ds);
