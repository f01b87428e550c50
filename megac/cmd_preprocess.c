// megac/cmd_preprocess.c: `megac preprocess`: text / JSON Lines (or a Megatron-LM indexed
// dataset) -> one megac token dataset in HDF5 (layout: data/FORMAT.md).
#include "commands.h"
#include "core/args.h"
#include "core/check.h"
#include "core/outpath.h"  // defines: core_out_check_file
#include "data/preprocess.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>  // defines: isatty

static const char *USAGE =
    "usage: megac preprocess --input FILES... --output data.h5 [--tokenizer byte|tok.json|tokenizer.json]\n"
    "                        [--json-keys text] [--doc-separator LINE] [--input-format auto|text|jsonl]\n"
    "       megac preprocess --from-megatron PREFIX (--vocab-size N [--eod-id N] | TOKENIZER) --output data.h5\n"
    "  TOKENIZER (Megatron's flags, instead of --tokenizer): --tokenizer-type GPT2BPETokenizer\n"
    "  --vocab-file vocab.json --merge-file merges.txt, or --tokenizer-type HuggingFaceTokenizer\n"
    "  --tokenizer-model tokenizer.json (GPT-2, Llama-3, Llama-2, Mistral), or --tokenizer-type\n"
    "  Llama2Tokenizer|GPTSentencePieceTokenizer|SentencePieceTokenizer --tokenizer-model\n"
    "  tokenizer.model (SentencePiece; docs/data-format.md).\n\n"
    "Text files hold one document each, or documents separated by --doc-separator lines (e.g. '%'\n"
    "for /usr/share/games/fortunes). *.jsonl / *.json files are JSON Lines with the text under\n"
    "--json-keys. Every document ends with the end-of-document token.";

static DataInputFormat parse_format(const char *s) {
    if (!strcmp(s, "auto")) return DATA_FMT_AUTO;
    if (!strcmp(s, "text")) return DATA_FMT_TEXT;
    if (!strcmp(s, "jsonl")) return DATA_FMT_JSONL;
    core_usage_error("--input-format must be auto, text or jsonl, got '%s'", s);
}

static void report(const char *output, const DataPreprocessStats *st, int64_t vocab, const char *tok) {
    printf("megac preprocess: wrote %s: %lld documents, %lld tokens (%s, vocab %lld, tokenizer %s) "
           "from %.2f MB in %.2f s (%.2f MB/s, %.2fM tokens/s)\n",
           output, (long long)st->n_docs, (long long)st->n_tokens, vocab <= 65536 ? "uint16" : "uint32",
           (long long)vocab, tok, st->n_bytes / 1e6, st->seconds, st->n_bytes / 1e6 / (st->seconds + 1e-9),
           st->n_tokens / 1e6 / (st->seconds + 1e-9));
    printf("megac preprocess: unigram entropy %.4f nats/token (the loss of a frequency-only model)\n",
           st->unigram_entropy);
}

// The output guard (core/outpath.h): not a checkpoint, not the tokenizer or the Megatron
// files; an earlier dataset may be replaced. (The --input files and a directory are refused
// by data_preprocess itself, in its own words.) Usage error (exit 2) otherwise.
static void check_output(const char *output, const char *tok, const char *prefix) {
    char err[4600], idx[4200], bin[4200];
    struct stat st;
    if (stat(output, &st) == 0 && S_ISDIR(st.st_mode)) return;
    CoreOutInput in[3] = {{"--tokenizer", tok}};
    int n = 1;
    if (prefix) {
        snprintf(idx, sizeof idx, "%s.idx", prefix);
        snprintf(bin, sizeof bin, "%s.bin", prefix);
        in[n++] = (CoreOutInput){"--from-megatron", idx};
        in[n++] = (CoreOutInput){"--from-megatron", bin};
    }
    if (core_out_check_file("--output", output, in, n, 1, err, sizeof err) != 0) core_usage_error("%s", err);
}

// --vocab-size N as Megatron's NullTokenizer: ids 0..N-1 and the end-of-document id N (or
// --eod-id), N + 1 ids; or the vocabulary and end-of-document id of tok.
static int from_megatron(const char *prefix, const char *output, int64_t null_vocab, int64_t eod,
                         const Tokenizer *tok) {
    if (null_vocab < 1 && !tok)
        core_usage_error("--from-megatron needs --vocab-size N (Megatron's NullTokenizer: ids 0..N-1, "
                         "end of document N) or the tokenizer the data was made with (--tokenizer-type ...)");
    if (null_vocab > 0 && tok) core_usage_error("--vocab-size (Megatron's NullTokenizer) and a tokenizer exclude each other");
    int64_t vocab = tok ? tok->vocab_size : null_vocab + 1;
    if (eod < 0) eod = tok ? tok->eod_id : null_vocab;
    if (eod >= vocab) core_usage_error("--eod-id %lld must be <= --vocab-size %lld", (long long)eod, (long long)vocab - 1);
    DataPreprocessStats st = {0};
    char err[1024];
    char *desc = tok ? tok_serialize(tok) : strdup("external");
    if (data_from_megatron(prefix, output, vocab, eod, desc, isatty(2), &st, err, sizeof err))
        core_usage_error("%s", err);
    free(desc);
    report(output, &st, vocab, tok ? "given" : "external");
    if (st.docs_without_eod)  // Megatron's preprocess_data.py writes none unless --append-eod
        printf("megac preprocess: notice: %lld of the %lld documents do not end with the end-of-document "
               "id %lld; they were kept as they are (no id added), so samples run from one document "
               "into the next without a separator, as in Megatron\n", (long long)st.docs_without_eod,
               (long long)st.n_docs, (long long)eod);
    return 0;
}

// preprocess's flags.
typedef struct {
    CoreStrList inputs, keys;
    const char *output, *tokenizer, *sep, *format, *megatron;
    const char *tok_type, *vocab_file, *merge_file, *tok_model;
    int allow_invalid, divisible;
    int64_t vocab, eod;
} PrepArgs;

// preprocess's flags into *a, checked (exit 2 on a bad one).
static void parse_args(PrepArgs *a, int argc, char **argv) {
    *a = (PrepArgs){.format = "auto", .divisible = 128, .eod = -1};
    ArgSpec specs[] = {
        {"--input", ARG_LIST, &a->inputs, "input files (text or JSON Lines)"},
        {"--output", ARG_STR, &a->output, "the HDF5 dataset to write"},
        {"--tokenizer", ARG_STR, &a->tokenizer, "'byte' or a tokenizer file from `megac tokenizer train`"},
        {"--json-keys", ARG_LIST, &a->keys, "JSON Lines: the key holding the text (default text)"},
        {"--doc-separator", ARG_STR, &a->sep, "text: a line equal to this separates documents"},
        {"--input-format", ARG_STR, &a->format, "auto (by extension), text or jsonl"},
        {"--allow-invalid-utf8", ARG_BOOL, &a->allow_invalid, "tokenize invalid UTF-8 as raw bytes"},
        {"--from-megatron", ARG_STR, &a->megatron, "convert PREFIX.bin/PREFIX.idx (Megatron-LM)"},
        {"--vocab-size", ARG_I64, &a->vocab, "--from-megatron: Megatron's NullTokenizer: ids 0..N-1 and the end-of-document id N (N + 1 ids)"},
        {"--eod-id", ARG_I64, &a->eod, "--from-megatron: end-of-document id (default: N, or the tokenizer's)"},
        {"--tokenizer-type", ARG_STR, &a->tok_type, "Megatron's: GPT2BPETokenizer, HuggingFaceTokenizer, Llama2Tokenizer, GPTSentencePieceTokenizer or SentencePieceTokenizer (instead of --tokenizer)"},
        {"--vocab-file", ARG_STR, &a->vocab_file, "GPT2BPETokenizer: GPT-2's vocab.json"},
        {"--merge-file", ARG_STR, &a->merge_file, "GPT2BPETokenizer: GPT-2's merges.txt"},
        {"--tokenizer-model", ARG_STR, &a->tok_model, "HuggingFaceTokenizer: tokenizer.json or its directory; the SentencePiece types: tokenizer.model"},
        {"--make-vocab-size-divisible-by", ARG_INT, &a->divisible, "as Megatron: report the padded vocabulary (a multiple of this x the tensor-parallel size, 1 here) that train will use"},
    };
    core_args_parse(USAGE, specs, (int)(sizeof specs / sizeof specs[0]), argc, argv);
    if (!a->output) core_usage_error("--output is required (see --help)");
    if (a->divisible < 1) core_usage_error("--make-vocab-size-divisible-by must be >= 1, got %d", a->divisible);
    if (!a->tok_type && (a->vocab_file || a->merge_file || a->tok_model))
        core_usage_error("--vocab-file, --merge-file and --tokenizer-model need --tokenizer-type");
    if (a->tok_type && a->tokenizer) core_usage_error("--tokenizer and --tokenizer-type exclude each other");
}

// Text or JSON Lines inputs into an HDF5 dataset with tokenizer tok (freed), and the report.
static int preprocess_text(const PrepArgs *a, Tokenizer *tok) {
    char err[1024];
    if (!a->inputs.n) core_usage_error("--input is required (see --help)");
    if (a->keys.n > 1) core_usage_error("--json-keys: one key per dataset (got %d)", a->keys.n);
    if (a->vocab || a->eod >= 0)
        core_usage_error("--vocab-size and --eod-id are for --from-megatron; the tokenizer sets the vocabulary of text");
    if (!tok && !(tok = tok_load(a->tokenizer ? a->tokenizer : "byte", err, sizeof err))) core_usage_error("%s", err);
    DataPreprocessOptions o = {
        .inputs = a->inputs.items, .n_inputs = a->inputs.n, .output = a->output, .tok = tok,
        .docs = {.format = parse_format(a->format), .json_key = a->keys.n ? a->keys.items[0] : "text",
                 .doc_separator = a->sep, .allow_invalid_utf8 = a->allow_invalid},
        .progress = isatty(2),
    };
    DataPreprocessStats st = {0};
    int rc = data_preprocess(&o, &st, err, sizeof err);
    if (rc != 0) {
        tok_free(tok);
        if (rc == -2) {  // the disk, not the user: exit 1. HDF5 leaks objects after a
            fprintf(stderr, "megac: %s\n", err);  // failed write and would print "infinite
            core_exit_all(1);                       // loop closing library" at exit: _exit
        }
        core_usage_error("%s", err);
    }
    report(a->output, &st, tok->vocab_size, tok->kind == TOK_BYTE ? "byte" : a->tok_type ? a->tok_type : a->tokenizer);
    int padded = (int)((tok->vocab_size + a->divisible - 1) / a->divisible * a->divisible);
    printf("megac preprocess: end-of-document id %d; padded vocabulary %d for --make-vocab-size-divisible-by "
           "%d (%d dummy ids; train pads to a multiple of %d x its tensor-parallel size)\n", tok->eod_id,
           padded, a->divisible, padded - tok->vocab_size, a->divisible);
    if (st.n_docs <= (int64_t)a->inputs.n && !a->sep && o.docs.format != DATA_FMT_JSONL)
        printf("megac preprocess: note: each text file became one document; if a file holds many, "
               "give the line that separates them with --doc-separator (e.g. %% for fortunes)\n");
    tok_free(tok);
    return 0;
}

int cmd_preprocess(int argc, char **argv) {
    PrepArgs a;
    parse_args(&a, argc, argv);
    check_output(a.output, a.tok_type ? (a.tok_model ? a.tok_model : a.vocab_file) : a.tokenizer, a.megatron);
    char err[1024];
    Tokenizer *tok = NULL;
    if (a.tok_type && !(tok = tok_load_megatron(a.tok_type, a.vocab_file, a.merge_file, a.tok_model, err, sizeof err)))
        core_usage_error("%s", err);
    if (!a.megatron) return preprocess_text(&a, tok);
    if (a.inputs.n) core_usage_error("--from-megatron and --input exclude each other");
    from_megatron(a.megatron, a.output, a.vocab, a.eod, tok);
    tok_free(tok);
    return 0;
}
