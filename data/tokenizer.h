// data/tokenizer.h: megac's tokenizers: byte-level and byte-level BPE.
//
// Ids 0..255 are the bytes themselves and id 256 is the end-of-document token (EOD), in both
// kinds. A BPE tokenizer adds merges: merge k turns the adjacent pair (a, b) into id 257 + k,
// so vocab_size = 257 + n_merges. Encoding splits the text into pieces (pretok.h), then
// applies, inside each piece, the lowest-numbered merge present until none applies (the same
// as applying merges in training order). Any byte string round-trips: decode(encode(s)) == s.
// Encoding never produces EOD; callers append it after each document.
//
// That is megac's own id layout. A tokenizer read from a Hugging Face tokenizer.json or a
// GPT-2 vocab.json + merges.txt (tok_hf.c) is the same machinery with another layout
// (TokLayout): any id for each byte, merge k (rank k) making any id, special tokens (EOD among
// them) that text never encodes to, and Hugging Face's ignore_merges (a piece that is a whole
// vocabulary token is that token). Encoding stays "lowest-ranked merge first", which is Hugging
// Face's BPE as long as every merge joins bytes or tokens made by lower-ranked merges (checked).
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

// TOK_SPM: the SentencePiece family (tok_spm.h): a tokenizer.model, or a Hugging Face
// tokenizer.json with Metaspace / byte_fallback BPE; its own encoder, the same decode tables.
typedef enum { TOK_BYTE, TOK_BPE, TOK_SPM } TokKind;
struct TokSpm;

// Growable arrays for encode / decode output.
typedef struct { uint32_t *v; size_t n, cap; } TokIds;   // (n) token ids
typedef struct { uint8_t *v; size_t n, cap; } TokBytes;  // (n) bytes

#define TOK_MAX_AFFIX 4
// GPT-2's pre-tokenisation (Hugging Face's ByteLevel with use_regex), in PCRE2 syntax.
#define TOK_GPT2_PATTERN "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"
             // most ids a tokenizer puts before / after each document

// Any byte-level BPE id layout (tok_bpe_new_layout). Every id's bytes are given; the bytes of
// a single-byte non-special id are the symbols encoding starts from (each byte needs one).
typedef struct {
    int vocab_size, eod_id;
    const uint64_t *tok_off;    // (vocab_size + 1): bytes of id i = tok_bytes[tok_off[i] .. tok_off[i+1])
    const uint8_t *tok_bytes;
    const uint8_t *special;     // (vocab_size) 1: never produced by encoding (EOD, BOS, ...)
    const uint32_t *merges;     // (n_merges, 3): merge k, rank k, joins [a, b] into id c
    int n_merges;
    int ignore_merges;          // Hugging Face's BPE ignore_merges (Llama-3)
    const char *pattern;
    int max_piece;
    const uint32_t *prefix, *suffix;  // ids put before / after each document's text (Hugging
    int n_prefix, n_suffix;           // Face's TemplateProcessing, e.g. Llama-3's BOS); EOD after
} TokLayout;

typedef struct {
    TokKind kind;
    int vocab_size;        // 257 + n_merges (megac's layout)
    int eod_id;            // TOK_EOD (megac's layout)
    int n_merges;          // 0 for TOK_BYTE
    uint32_t *merges;      // (n_merges, 2): merge k makes id merge_ids[k] from (a, b)
    uint32_t *merge_ids;   // (n_merges): 257 + k in megac's layout
    char *pattern;         // pre-tokenisation pattern (BPE)
    int max_piece;         // longest piece in bytes (BPE)
    int megac_layout;      // 1: megac's own layout (tokenizer.h's first paragraph)
    uint32_t byte_ids[TOK_N_BYTES];  // the id of each byte
    uint8_t *special;      // (vocab_size) or NULL (megac's layout: only EOD)
    int ignore_merges;
    uint32_t prefix[TOK_MAX_AFFIX], suffix[TOK_MAX_AFFIX];  // put around each document by callers
    int n_prefix, n_suffix;
    // Derived tables.
    DataU64Map merge_id;   // (a << 32 | b) -> rank of that merge
    DataStrMap whole;      // ignore_merges: bytes of a non-special id -> its index in whole_id
    uint32_t *whole_id;
    uint64_t *tok_off;     // (vocab_size + 1): bytes of id i = tok_bytes[tok_off[i] .. tok_off[i+1])
    uint8_t *tok_bytes;    // (tok_off[vocab_size])
    TokPretok *pre;
    // Encode cache: piece -> ids (bounded; cleared when full).
    DataStrMap cache;
    uint64_t *cache_start; // (cache capacity) where a cached piece's ids start in cache_ids
    TokIds cache_ids;
    uint32_t *scratch;     // (max_piece) symbols of the piece being merged
    struct TokSpm *spm;    // TOK_SPM: the model and its encoder (pattern, merges unused)
} Tokenizer;

// The byte-level tokenizer (vocab 257). Never fails.
Tokenizer *tok_byte_new(void);
// A BPE tokenizer from its merges (copied). Returns NULL with a message in err when a merge
// refers to an id not yet defined or to EOD, repeats an earlier pair, or the pattern is bad.
Tokenizer *tok_bpe_new(const uint32_t *merges /* (n_merges, 2) */, int n_merges,
                       const char *pattern, int max_piece, char *err, size_t errlen);
// A BPE tokenizer in any id layout (copied). Returns NULL with a message in err when an id is
// out of range, a byte has no id, a merge's bytes are not its halves' bytes, or a merge uses
// a token that neither is a byte nor is made by a lower-ranked merge.
Tokenizer *tok_bpe_new_layout(const TokLayout *l, char *err, size_t errlen);
// Frees t (NULL is fine).
void tok_free(Tokenizer *t);

// Appends the ids of text[0..n) to out (no EOD, no prefix or suffix: callers add t->prefix
// before each document and t->suffix then EOD after it). Not thread-safe (uses the cache).
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

// Byte b as its character of the byte-level alphabet (GPT-2's bytes_to_unicode), UTF-8 in
// out (3 bytes room); returns the length (1 or 2). Pure.
int tok_byte_char(unsigned b, char out[3]);
// The bytes a byte-level alphabet string stands for, appended to out (a character outside the
// alphabet stands for its own UTF-8 bytes, as Hugging Face's ByteLevel decoder does).
void tok_alpha_decode(const char *s, size_t n, TokBytes *out);
// Hugging Face / Megatron tokenizer files (tok_hf.c). NULL with "file: problem" in err.
// tokenizer.json (or a directory holding it) in Hugging Face `tokenizers` format:
Tokenizer *tok_load_hf(const char *path, char *err, size_t errlen);
// GPT-2's vocab.json + merges.txt (end of document <|endoftext|>):
Tokenizer *tok_load_gpt2(const char *vocab_file, const char *merge_file, char *err, size_t errlen);
// A parsed tokenizer.json (a json-c object); eos: the end-of-document token's text, or NULL
// for the first of <|endoftext|>, <|end_of_text|>, </s>, <eos> that the file has.
struct json_object;
Tokenizer *tok_hf_from_json(struct json_object *o, const char *origin, const char *eos, char *err, size_t errlen);
// A SentencePiece tokenizer.model as Megatron's type (tok_spm.c): Llama2Tokenizer (BOS
// before each document, EOD = eos_id), GPTSentencePieceTokenizer (EOD = eos_id) or
// SentencePieceTokenizer (<CLS> <SEP> <EOD> <MASK> and pad/bos/eos added as Megatron does,
// EOD = <EOD>). NULL with "path: problem" in err (missing, corrupt, unsupported part).
Tokenizer *tok_load_spm(const char *type, const char *path, char *err, size_t errlen);
// Megatron's flags: type GPT2BPETokenizer (vocab_file, merge_file), HuggingFaceTokenizer
// (model) or one of tok_load_spm's (model); another type is refused naming it. NULL with one
// line in err.
Tokenizer *tok_load_megatron(const char *type, const char *vocab_file, const char *merge_file,
                             const char *model, char *err, size_t errlen);

// Growable-array helpers. Never fail (abort on out of memory).
void tok_ids_reserve(TokIds *a, size_t n);
void tok_ids_push(TokIds *a, uint32_t id);
void tok_bytes_append(TokBytes *a, const uint8_t *s, size_t n);
