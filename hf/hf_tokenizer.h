// hf/hf_tokenizer.h: megac's tokenizers as a Hugging Face `tokenizers` file (tokenizer.json).
//
// megac's byte-level BPE (data/tokenizer.h) maps onto the "BPE" model with byte-level
// pre-tokenisation: ids keep their numbers (0..255 the bytes, 256 end-of-document as the
// special token <|endoftext|>, 257 + k the token merge k makes), each byte is written as
// the printable character of the byte-level alphabet (bytes_to_unicode of GPT-2), a token as
// the characters of its bytes, and the merges in training order (the lowest-numbered merge
// present applies first in both). The pre-tokenisation pattern becomes a Split(Regex,
// Isolated) step before the ByteLevel step. The byte tokenizer is the same with no merges and
// no Split. Not representable: megac's cut of pieces longer than max_piece bytes (only text
// with such long runs tokenizes differently), and two merges making the same byte string (a
// Hugging Face vocabulary maps each string to one id): refused.
#pragma once
#include <stddef.h>
#include "data/tokenizer.h"

#define HF_EOD_TOKEN "<|endoftext|>"
#define HF_TOK_CKPT_FILE "megac-tokenizer.json"  // a checkpoint directory's tokenizer

// Writes DIR/tokenizer.json and DIR/tokenizer_config.json (model_max_length = max_len).
// Returns 0, or -1 with one line in err (a tokenizer that cannot be represented, or a write
// failure); then nothing is written.
int hf_tok_write(const char *dir, const Tokenizer *t, int max_len, char *err, size_t errlen);

// The tokenizer `spec` names: "byte", a megac tokenizer JSON file, or a token dataset (.h5,
// from `megac preprocess`) whose tokenizer it reads; spec NULL: ckpt_dir/HF_TOK_CKPT_FILE if
// that exists (written by `megac import --tokenizer`). Returns NULL with one line in err
// (nothing found: a message saying to pass --tokenizer).
Tokenizer *hf_tok_resolve(const char *spec, const char *ckpt_dir, char *err, size_t errlen);

// The reverse of hf_tok_write: DIR/tokenizer.json (and the eos_token of its
// tokenizer_config.json) as a megac tokenizer: megac's own layout when the file is in it,
// else any byte-level BPE data/tok_hf.c reads (GPT-2's, Llama-3's). Returns NULL with one
// line in err otherwise (missing file, another model type such as WordPiece or Unigram).
Tokenizer *hf_tok_read(const char *dir, char *err, size_t errlen);

// The UTF-8 encoding of byte b's character in the byte-level alphabet into out (3 bytes
// room); returns its length (1 or 2). Pure.
int hf_tok_byte_char(unsigned b, char out[3]);
