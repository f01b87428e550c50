// data/tok_megatron.c: Megatron's tokenizer flags (--tokenizer-type, --vocab-file,
// --merge-file, --tokenizer-model) to the loader of that kind of file (tokenizer.h).
#include "tokenizer.h"

#include <stdio.h>
#include <string.h>

Tokenizer *tok_load_megatron(const char *type, const char *vocab_file, const char *merge_file,
                             const char *model, char *err, size_t errlen) {
    int spm = !strcmp(type, "SentencePieceTokenizer") || !strcmp(type, "GPTSentencePieceTokenizer") ||
              !strcmp(type, "Llama2Tokenizer");
    if (!strcmp(type, "GPT2BPETokenizer")) {
        if (!vocab_file || !merge_file || model) {
            snprintf(err, errlen, "--tokenizer-type GPT2BPETokenizer needs --vocab-file and --merge-file (and no --tokenizer-model)");
            return NULL;
        }
        return tok_load_gpt2(vocab_file, merge_file, err, errlen);
    }
    if (!strcmp(type, "HuggingFaceTokenizer") || spm) {
        if (!model || vocab_file || merge_file) {
            snprintf(err, errlen, "--tokenizer-type %s needs --tokenizer-model (%s; no --vocab-file, --merge-file)",
                     type, spm ? "a SentencePiece tokenizer.model" : "a tokenizer.json or its directory");
            return NULL;
        }
        return spm ? tok_load_spm(type, model, err, errlen) : tok_load_hf(model, err, errlen);
    }
    snprintf(err, errlen, "--tokenizer-type %s is not supported: megac reads GPT2BPETokenizer (--vocab-file, "
             "--merge-file), HuggingFaceTokenizer (--tokenizer-model tokenizer.json), SentencePieceTokenizer, "
             "GPTSentencePieceTokenizer and Llama2Tokenizer (--tokenizer-model tokenizer.model)", type);
    return NULL;
}
