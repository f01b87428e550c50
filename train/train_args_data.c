// train/train_args_data.c: the data group of `megac train`'s flags (train_args_flags.h):
// the sources (files, blends, mock data) and --split, Megatron's --vocab-size and tokenizer
// flags, the loss's and attention's document flags; the checks: one source, a --split and
// blends that parse, the tokenizer loaded to learn its vocabulary and end-of-document id.
#include "train_args_flags.h"
#include "core/check.h"
#include "data/blend.h"
#include "data/sampler.h"    // defines: data_parse_split
#include "data/tokenizer.h"  // defines: tok_load_megatron

#include <stdint.h>  // defines: INT32_MAX
#include <stdio.h>   // defines: printf
#include <string.h>

_Static_assert(TRAIN_MOCK_VOCAB_DEFAULT == TOK_N_BYTES + 1, "the byte tokenizer's vocabulary");

static int specs(ArgSpec *out, int cap, TrainArgs *a, TrainFlagText *x) {
    (void)x;
    a->split = "969,30,1";
    a->mock_vocab = TRAIN_MOCK_VOCAB_DEFAULT;
    const ArgSpec own[] = {
        {"--data-path", ARG_LIST, &a->data_path, "HDF5 token file(s) from `megac preprocess` or Megatron .bin/.idx PREFIXes (with --vocab-size): FILE, or a blend W1 FILE1 W2 FILE2 ... (cut by --split)"},
        {"--train-data-path", ARG_LIST, &a->train_data_path, "training files (blend syntax), used whole; instead of --data-path"},
        {"--valid-data-path", ARG_LIST, &a->valid_data_path, "validation files (blend syntax), used whole; with --train-data-path"},
        {"--test-data-path", ARG_LIST, &a->test_data_path, "test files (blend syntax), used whole, evaluated at the end; with --train-data-path"},
        {"--split", ARG_STR, &a->split, "train,valid,test weights of the documents: commas or slashes, spaces allowed ('969, 30, 1', Megatron's legacy default)"},
        {"--vocab-size", ARG_I64, &a->data_vocab, "for Megatron .bin/.idx data, which holds no vocabulary: token ids 0..N-1 and the end-of-document id N, N + 1 ids (Megatron's NullTokenizer); HDF5 files carry theirs (N + 1 must equal it); with --mock-data: --mock-vocab-size N + 1; beside a --tokenizer-type of files: ignored, as Megatron does (a notice when it differs)"},
        {"--tokenizer-type", ARG_STR, &a->tok_type, "GPT2BPETokenizer, HuggingFaceTokenizer, Llama2Tokenizer, GPTSentencePieceTokenizer, SentencePieceTokenizer or NullTokenizer (with --vocab-size): train reads token ids; the tokenizer is loaded to check that the data's vocabulary and end-of-document id are its own (and gives them to Megatron .bin/.idx data and --mock-data)"},
        {"--vocab-file", ARG_STR, &a->vocab_file, "GPT2BPETokenizer: GPT-2's vocab.json"},
        {"--merge-file", ARG_STR, &a->merge_file, "GPT2BPETokenizer: GPT-2's merges.txt"},
        {"--tokenizer-model", ARG_STR, &a->tok_model, "HuggingFaceTokenizer: tokenizer.json or its directory; the SentencePiece types: tokenizer.model"},
        {"--calculate-per-token-loss", ARG_BOOL, &a->per_token_loss, "the loss (and gradient) is the sum over the global batch's tokens over their count (Megatron's); differs from the default mean of micro-batch means only with --eod-mask-loss"},
        {"--eod-mask-loss", ARG_BOOL, &a->eod_mask_loss, "targets equal to the data's end-of-document id get loss weight 0; a micro-batch's loss is the mean over its other tokens (Megatron's)"},
        {"--reset-position-ids", ARG_BOOL, &a->reset_position_ids, "positions restart at 0 after each end-of-document token inside a sample (Megatron's)"},
        {"--reset-attention-mask", ARG_BOOL, &a->reset_attention_mask, "a token attends only to the earlier tokens of its own document; the EOD token ends its document (Megatron's)"},
        {"--mock-data", ARG_BOOL, &a->mock_data, "synthetic tokens instead of --data-path"},
        {"--mock-vocab-size", ARG_INT, &a->mock_vocab, "vocabulary of --mock-data"},
        {"--mock-samples", ARG_INT, &a->mock_samples, "distinct --mock-data samples (0: unlimited)"},
    };
    return train_args_put(out, cap, own, (int)(sizeof own / sizeof own[0]));
}

// --tokenizer-type and its files: NullTokenizer's ids from --vocab-size, or the tokenizer
// loaded to learn its vocabulary and end-of-document id (the data is checked against them).
// One line, exit 2.
static void check_tokenizer(TrainArgs *a) {
    if (a->tok_type && !strcmp(a->tok_type, "NullTokenizer")) {  // ids 0..N-1 and EOD N: --vocab-size
        if (!a->data_vocab) core_usage_error("--tokenizer-type NullTokenizer needs --vocab-size N (N ids and the end-of-document id N)");
        if (a->vocab_file || a->merge_file || a->tok_model)
            core_usage_error("--tokenizer-type NullTokenizer reads no files (--vocab-file, --merge-file, --tokenizer-model)");
        a->tok_vocab = a->data_vocab + 1, a->tok_eod = a->data_vocab;  // (the run record's; the data checks use --vocab-size)
    } else if (a->tok_type || a->vocab_file || a->merge_file || a->tok_model) {  // checked against the data
        char err[1024];
        if (!a->tok_type && a->vocab_file && a->merge_file && !a->tok_model)
            a->tok_type = "GPT2BPETokenizer";  // what the two files are (Megatron's GPT-3 example)
        if (!a->tok_type) core_usage_error("--vocab-file, --merge-file and --tokenizer-model need --tokenizer-type");
        Tokenizer *tok = tok_load_megatron(a->tok_type, a->vocab_file, a->merge_file, a->tok_model, err, sizeof err);
        if (!tok) core_usage_error("%s", err);
        a->tok_vocab = tok->vocab_size, a->tok_eod = tok->eod_id;
        tok_free(tok);
        if (a->data_vocab) {  // as Megatron: the tokenizer's vocabulary wins (its Llama-3 example gives both)
            if (a->data_vocab != a->tok_vocab && core_world_rank() <= 0)
                printf("megac train: --vocab-size %lld: ignored, as Megatron does beside --tokenizer-type %s, "
                       "whose vocabulary has %lld ids\n", (long long)a->data_vocab, a->tok_type,
                       (long long)a->tok_vocab);
            a->data_vocab = 0;
        }
        if (a->mock_data) a->mock_vocab = (int)a->tok_vocab;  // Megatron's mock data: the tokenizer's
    }
}

// The sources, the split, the tokenizer (train_args_flags.h's data group). One line, exit 2.
static void check_data(TrainArgs *a) {
    double w[3];
    char msg[512];
    if (data_parse_split(a->split, w, msg, sizeof msg)) core_usage_error("%s", msg);  // before any file
    int data = a->data_path.n > 0,
        split_files = a->train_data_path.n || a->valid_data_path.n || a->test_data_path.n;
    if (a->mock_data && (data || split_files))
        core_usage_error("--mock-data and --data-path/--train-data-path exclude each other");
    if (a->data_vocab < 0 || a->data_vocab >= ((int64_t)1 << 32) - 1)
        core_usage_error("--vocab-size %lld must be in [1, 2^32 - 1)", (long long)a->data_vocab);
    if (a->mock_data && (a->eod_mask_loss || a->reset_position_ids || a->reset_attention_mask))
        core_usage_error("--%s needs --data-path data: --mock-data has no end-of-document id",
                         a->eod_mask_loss ? "eod-mask-loss" : a->reset_position_ids
                         ? "reset-position-ids" : "reset-attention-mask");
    int real_tok = (a->tok_type && strcmp(a->tok_type, "NullTokenizer")) || a->vocab_file || a->merge_file ||
                   a->tok_model;  // a tokenizer of files: it sets the vocabulary, not --vocab-size
    if (a->mock_data && a->data_vocab && !real_tok) {  // Megatron's --mock-data --tokenizer-type NullTokenizer
        // a --mock-vocab-size other than its default must agree with --vocab-size
        if (a->mock_vocab != TRAIN_MOCK_VOCAB_DEFAULT && a->mock_vocab != a->data_vocab + 1)
            core_usage_error("--vocab-size %lld (%lld ids with the end-of-document id) and "
                             "--mock-vocab-size %d disagree: give one", (long long)a->data_vocab,
                             (long long)a->data_vocab + 1, a->mock_vocab);
        if (a->data_vocab + 1 > INT32_MAX) core_usage_error("--vocab-size %lld: too large for --mock-data", (long long)a->data_vocab);
        a->mock_vocab = (int)a->data_vocab + 1;
    }
    check_tokenizer(a);
    if (a->mock_data) return;
    if (data && split_files)
        core_usage_error("give --data-path (cut by --split) or --train-data-path/--valid-data-path, not both");
    if (!data && !a->train_data_path.n)
        core_usage_error(split_files ? "--valid-data-path / --test-data-path need --train-data-path"
                                     : "give --data-path FILE.h5 or --mock-data");
    const struct { const char *flag; const CoreStrList *l; } f[] = {
        {"--data-path", &a->data_path}, {"--train-data-path", &a->train_data_path},
        {"--valid-data-path", &a->valid_data_path}, {"--test-data-path", &a->test_data_path}};
    for (int i = 0; i < 4; i++) {
        DataBlendSpec spec;
        char err[512];
        if (f[i].l->n && data_blend_parse(f[i].flag, f[i].l->items, f[i].l->n, &spec, err, sizeof err))
            core_usage_error("%s", err);
    }
}

static void finish(TrainArgs *a, TrainFlagText *x) {
    (void)x;
    check_data(a);
    if (a->mock_samples < 0 || a->mock_vocab < 2)
        core_usage_error("--mock-samples %d must be >= 0 and --mock-vocab-size %d >= 2", a->mock_samples,
                         a->mock_vocab);
}

const TrainFlagGroup TRAIN_ARGS_DATA = {specs, finish};
