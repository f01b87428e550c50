// data/pretok.h: pre-tokenisation: splitting text into the "words" BPE merges within.
//
// A PCRE2 pattern in the GPT-2 spirit: a word is an optional leading space plus a run of
// letters, or up to three digits, or a run of other symbols, or whitespace (the last space
// before a word stays with the word). The pattern is compiled in UTF + Unicode-property mode
// and tolerates invalid UTF-8: bytes no alternative matches become pieces of their own, so the
// pieces always cover the input exactly, byte for byte. Pieces longer than max_piece bytes are
// cut into max_piece-byte parts (bounds the cost of encoding one piece).
//
// Boundary rule used for streaming: in "x\ny" with x and y printable non-space ASCII, the
// "\n" is a piece of its own whatever follows y or precedes x (x ends a non-space piece, and
// a lone "\n" is a piece at the end of the text too), so text may be cut between "x\n" and
// "y" and encoded in parts with exactly the result of encoding it whole.
#pragma once
#include <stddef.h>
#include <stdint.h>

#define TOK_DEFAULT_PATTERN                                                             \
    "'(?:[sdmt]|ll|ve|re)(?![\\p{L}\\p{M}])| ?[\\p{L}\\p{M}]+| ?\\p{N}{1,3}"              \
    "| ?[^\\s\\p{L}\\p{M}\\p{N}]+|\\s+(?!\\S)|\\s+"
#define TOK_DEFAULT_MAX_PIECE 256

typedef struct TokPretok TokPretok;

// Called once per piece, in order.
typedef void (*TokPieceFn)(void *ctx, const uint8_t *piece, size_t n);

// Compiles the pattern (JIT when available). Returns NULL with a message in err when the
// pattern does not compile or max_piece < 1.
TokPretok *tok_pretok_new(const char *pattern, int max_piece, char *err, size_t errlen);
// Frees p (NULL is fine).
void tok_pretok_free(TokPretok *p);
// Calls fn for every piece of text[0..n); the pieces concatenate to the text exactly.
// Not thread-safe (one match buffer per TokPretok).
void tok_pretok_split(TokPretok *p, const uint8_t *text, size_t n, TokPieceFn fn, void *ctx);
