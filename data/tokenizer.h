// data/tokenizer.h: megac's tokenizers: byte-level and byte-level BPE.
//
// Ids 0..255 are the bytes themselves and id 256 is the end-of-document token (EOD), in both
// kinds. A BPE tokenizer adds merges: merge k turns the adjacent pair (a, b) into id 257 + k,
// so vocab_size = 257 + n_merges. Encoding splits the text into pieces (pretok.h), then
// applies, inside each piece, the lowest-numbered merge present until none applies (the same
// as applying merges in training order). Any byte string round-trips: decode(encode(s)) == s.
// Encoding never produces EOD; callers append it after each document.
//
// Training lives in tok_train.c, the JSON file format in tok_json.c (see data/FORMAT.md).
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "data/map.h"
#include "data/pretok.h"

#define TOK_N_BYTES 256
#define TOK_EOD 256                 // end-of-document id (both kinds)
#define TOK_FIRST_MERGE 257         // id made by merge 0
#define TOK_MAX_VOCAB (1 << 24)
#define TOK_MAX_PIECE_LIMIT 65536   // largest max_piece a tokenizer file may ask for

typedef enum { TOK_BYTE, TOK_BPE } TokKind;

// Growable arrays for encode / decode output.
typedef struct { uint32_t *v; size_t n, cap; } TokIds;   // (n) token ids
typedef struct { uint8_t *v; size_t n, cap; } TokBytes;  // (n) bytes

typedef struct {
    TokKind kind;
    int vocab_size;        // 257 + n_merges
    int eod_id;            // TOK_EOD
    int n_merges;          // 0 for TOK_BYTE
    uint32_t *merges;      // (n_merges, 2): merge k makes id 257 + k from (a, b)
    char *pattern;         // pre-tokenisation pattern (BPE)
    int max_piece;         // longest piece in bytes (BPE)
    // Derived tables.
    DataU64Map merge_id;   // (a << 32 | b) -> id made by that merge
    uint64_t *tok_off;     // (vocab_size + 1): bytes of id i = tok_bytes[tok_off[i] .. tok_off[i+1])
    uint8_t *tok_bytes;    // (tok_off[vocab_size])
    TokPretok *pre;
    // Encode cache: piece -> ids (bounded; cleared when full).
    DataStrMap cache;
    uint64_t *cache_start; // (cache capacity) where a cached piece's ids start in cache_ids
    TokIds cache_ids;
    uint32_t *scratch;     // (max_piece) symbols of the piece being merged
} Tokenizer;

// The byte-level tokenizer (vocab 257). Never fails.
Tokenizer *tok_byte_new(void);
// A BPE tokenizer from its merges (copied). Returns NULL with a message in err when a merge
// refers to an id not yet defined or to EOD, repeats an earlier pair, or the pattern is bad.
Tokenizer *tok_bpe_new(const uint32_t *merges /* (n_merges, 2) */, int n_merges,
                       const char *pattern, int max_piece, char *err, size_t errlen);
// Frees t (NULL is fine).
void tok_free(Tokenizer *t);

// Appends the ids of text[0..n) to out (no EOD). Not thread-safe (uses the cache).
void tok_encode(Tokenizer *t, const uint8_t *text, size_t n, TokIds *out);
// Appends the bytes of ids[0..n) to out; EOD adds nothing. Returns 0, or -1 when an id is
// >= vocab_size (out then holds the bytes before it).
int tok_decode(const Tokenizer *t, const uint32_t *ids, size_t n, TokBytes *out);
// The bytes of one id (empty for EOD); *len gets the length. id must be < vocab_size.
const uint8_t *tok_token_bytes(const Tokenizer *t, uint32_t id, size_t *len);

// Replaces every non-overlapping occurrence of the pair (a, b) in s[0..n), scanning left to
// right, by z; returns the new length. The one merge rule shared by training and encoding.
size_t tok_merge_pair(uint32_t *s, size_t n, uint32_t a, uint32_t b, uint32_t z);

// Self-description stored in datasets: "byte", or the BPE tokenizer's JSON. malloc'ed.
char *tok_serialize(const Tokenizer *t);
// Inverse of tok_serialize. origin names the source in messages ("tok.json").
// Returns NULL with "origin: problem" in err on bad input.
Tokenizer *tok_deserialize(const char *text, size_t len, const char *origin, char *err, size_t errlen);
// "byte", or a tokenizer JSON file. NULL with "path: problem" in err on error.
Tokenizer *tok_load(const char *spec, char *err, size_t errlen);
// Writes the tokenizer JSON to path (via a temporary file renamed at the end).
// Returns 0, or -1 with "path: problem" in err.
int tok_save(const Tokenizer *t, const char *path, char *err, size_t errlen);

// Growable-array helpers. Never fail (abort on out of memory).
void tok_ids_reserve(TokIds *a, size_t n);
void tok_ids_push(TokIds *a, uint32_t id);
void tok_bytes_append(TokBytes *a, const uint8_t *s, size_t n);
