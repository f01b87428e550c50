// data/tok_spm.h: the SentencePiece family inside megac's Tokenizer (kind TOK_SPM): the state
// shared by the model-file reader (tok_spm.c), the Hugging Face tokenizer.json reader of the
// same family (tok_hf_spm.c), the normalizer (tok_spm_norm.c) and the encoder
// (tok_spm_encode.c).
//
// Encoding one text: normalize (SentencePiece: the model's precompiled_charsmap, e.g.
// nmt_nfkc, or identity; spaces to U+2581 "▁", a dummy "▁" prefix, extra spaces removed;
// Hugging Face: Metaspace / Prepend + Replace), then segment the normalized string:
//   SPM_UNIGRAM:   Viterbi over the pieces (float scores, unknown characters cost
//                  min_score - 10, as SentencePiece's unigram model);
//   SPM_BPE:       SentencePiece's BPE: merge, highest score first (then leftmost), any two
//                  adjacent symbols whose concatenation is a piece;
//   SPM_BPE_RANKS: Hugging Face's BPE: merge the listed pair of lowest rank first.
// Symbols that are no piece are the unknown id, or with byte fallback the <0xNN> ids of
// their UTF-8 bytes.
#pragma once
#include "data/map.h"
#include "data/tokenizer.h"

typedef enum { SPM_UNIGRAM = 1, SPM_BPE = 2, SPM_BPE_RANKS = 3 } SpmAlgo;
// ModelProto.SentencePiece.Type
enum { SPM_NORMAL = 1, SPM_UNKNOWN = 2, SPM_CONTROL = 3, SPM_USER = 4, SPM_UNUSED = 5, SPM_BYTE = 6 };
#define SPM_MAX_SPLIT 8  // Megatron SentencePieceTokenizer's special strings cut out of texts

// One symbol of the segmentation: bytes norm[start .. start + len), a doubly linked list.
typedef struct {
    uint32_t start, len;
    int32_t prev, next, id;  // id: the piece (SPM_BPE_RANKS), else resolved at the end
} SpmSym;

typedef struct {
    float prio;              // higher first: a piece's score, or minus a merge's rank
    int32_t left, right;
    uint32_t size, id;       // bytes of the merged symbol; its id (SPM_BPE_RANKS)
} SpmPair;

typedef struct TokSpm {
    SpmAlgo algo;
    int n_pieces;            // the model's ids 0 .. n_pieces-1 (Megatron's additions follow)
    uint8_t *type;           // (n_pieces) SPM_NORMAL ...
    float *score;            // (n_pieces)
    float min_score, max_score;  // over NORMAL pieces
    DataStrMap pieces;       // text of the NORMAL, USER and UNUSED pieces -> key k
    int32_t *piece_id;       // (pieces.n) key k -> id
    DataU64Map trie;         // the same texts as a byte trie: node << 8 | byte -> child node
    int32_t *node_id;        // (n_nodes) a node's piece id, or -1
    int n_nodes;
    int has_user;            // USER pieces exist: matched whole, before normalization
    int32_t root[256];       // the trie's children of the root (node, or -1): every walk's
                             // first step without a hash lookup
    uint8_t plain[128];      // ASCII bytes the normalizer keeps as they are (tok_spm_norm_index):
                             // 1 always (no USER piece, no charsmap key starts with it); 2 when
                             // the next byte is ASCII c with bit c of pair[b] clear, or none
                             // (a key starts with it but is longer, e.g. 'a' + a combining mark)
    uint8_t pair[128][16];   // bit c of pair[b]: a charsmap key starts with the bytes b c
    DataU64Map merges;       // SPM_BPE_RANKS: (a << 32 | b) -> rank
    uint32_t *merge_out;     // (n_merges) rank -> the merged id
    int ignore_merges;       // SPM_BPE_RANKS: a word that is a piece is that piece
    int unk_id, fuse_unk;    // fuse_unk: a run of unknown symbols is one unknown id
    int byte_fallback;
    int32_t byte_id[TOK_N_BYTES];  // <0xNN> pieces, -1 where absent
    // Normalizer (SentencePiece's NormalizerSpec, or Hugging Face's).
    int hf;                  // 1: Hugging Face: ' ' -> "▁", then hf_prepend, no other rule
    int hf_prepend;          // 0 never, 1 unless the text starts with "▁", 2 always (Prepend)
    int hf_split;            // Metaspace split: each "▁" starts a word merged on its own
    int add_dummy_prefix, remove_extra_ws, escape_ws;
    const uint32_t *cm_units;  // precompiled_charsmap: a double-array trie (n_units units)
    size_t n_units;
    const char *cm_norm;       // its replacement strings, NUL-terminated
    size_t n_norm;
    uint8_t *charsmap;         // the owned bytes behind cm_units / cm_norm
    // Megatron's SentencePieceTokenizer: strings encoded as one id wherever they occur.
    int n_split;
    char *split_text[SPM_MAX_SPLIT];
    uint32_t split_id[SPM_MAX_SPLIT];
    // Where it came from (for tok_serialize): a model file's bytes or a tokenizer.json's text.
    char *megatron_type;     // "Llama2Tokenizer" ..., or "HuggingFaceTokenizer"
    uint8_t *src;
    size_t src_len;
    char *hf_eos;            // the end-of-document text given to the tokenizer.json reader
    // Scratch of one encode call (grown as needed).
    TokBytes norm;
    SpmSym *sym;
    size_t sym_cap;
    SpmPair *heap;
    size_t heap_cap;
    float *best;             // unigram: (bytes + 1) best path scores, start, id
    int32_t *best_start, *best_id;
    size_t best_cap;
} TokSpm;

// Appends the ids of text[0..n) to out (tokenizer.h's tok_encode for TOK_SPM).
void tok_spm_encode(TokSpm *s, const uint8_t *text, size_t n, TokIds *out);
// SentencePiece's normalization of text[0..n), appended to out (empty for empty text).
void tok_spm_normalize(const TokSpm *s, const uint8_t *text, size_t n, TokBytes *out);
// Fills s->plain from the USER pieces (the trie: after tok_spm_index) and the charsmap.
// Never fails.
void tok_spm_norm_index(TokSpm *s);
// The length of the longest USER piece at s[0..n), 0 when none. Pure.
size_t tok_spm_user_match(const TokSpm *s, const uint8_t *text, size_t n);
// Builds the piece map, the trie, min/max scores and byte ids from type / score and the
// texts texts[i] (len[i] bytes; NULL: a piece without text). 0, or -1 with the reason in why
// (two pieces with one text, a BYTE piece that is not <0xNN>).
int tok_spm_index(TokSpm *s, const char *const *texts, const size_t *len, char *why, size_t wn);
// The Tokenizer around s (s is taken): ids' bytes for decoding, eod_id, prefix, specials.
// vocab_size >= s->n_pieces (Megatron's extra ids); texts as for tok_spm_index.
Tokenizer *tok_spm_wrap(TokSpm *s, int vocab_size, const char *const *texts, const size_t *len,
                        int eod_id, const uint32_t *prefix, int n_prefix);
// tok_serialize of a TOK_SPM tokenizer: {"format": "megac-spm", "version": 1, "type": T,
// "vocab_size": V, "eod_id": E, "model": base64 of the tokenizer.model} or, from a
// tokenizer.json, "tokenizer_json": its text and "eos". malloc'ed.
char *tok_spm_describe(const Tokenizer *t);
// Inverse of tok_spm_describe (o: the parsed JSON). NULL with "origin: problem" in err.
struct json_object;
Tokenizer *tok_spm_from_desc(struct json_object *o, const char *origin, char *err, size_t errlen);
// 1 when the parsed tokenizer.json o is of the SentencePiece family (byte_fallback BPE, a
// Metaspace pre-tokenizer or Llama-2's Prepend + Replace normalizer). Pure.
int tok_hf_is_spm(struct json_object *o);
// Such a tokenizer.json as a TOK_SPM tokenizer (tok_hf_spm.c); eos: the end-of-document text
// or NULL; prefix / suffix: the ids put around each document. NULL with the reason in why.
Tokenizer *tok_hf_spm(struct json_object *o, const char *eos, const uint32_t *prefix, int n_prefix,
                      const uint32_t *suffix, int n_suffix, char *why, size_t wn);
// Frees s and everything it owns (NULL is fine).
void tok_spm_free(TokSpm *s);
