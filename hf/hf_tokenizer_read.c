// hf/hf_tokenizer_read.c: tokenizer.json back to a megac tokenizer (see hf_tok_read in
// hf_tokenizer.h): data/tok_hf.c reads any byte-level BPE file; megac's own export comes
// back as megac's own tokenizer.
#include "hf_tokenizer.h"

#include <stdio.h>

Tokenizer *hf_tok_read(const char *dir, char *err, size_t errlen) { return tok_load_hf(dir, err, errlen); }
