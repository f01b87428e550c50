// megac/cmd_tokenizer.c: `megac tokenizer train|encode|decode`: learn a byte-level BPE
// tokenizer from a corpus, or run one on stdin (to inspect and test tokenizers by hand).
#include "commands.h"
#include "core/args.h"
#include "core/check.h"
#include "core/outpath.h"  // defines: core_out_check_file
#include "core/timer.h"
#include "data/docs.h"
#include "data/progress.h"
#include "data/tok_train.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>  // defines: isatty

static const char *USAGE =
    "usage: megac tokenizer train --input FILES... --vocab-size N --output tok.json\n"
    "                             [--doc-separator LINE] [--json-keys text] [--input-format F]\n"
    "       megac tokenizer encode [--tokenizer byte|tok.json] [--input FILE]   (ids to stdout)\n"
    "       megac tokenizer decode [--tokenizer byte|tok.json] [--input FILE]   (bytes to stdout)";

typedef struct {
    TokTrainer *tr;
    DataProgress progress;
    uint64_t before;
    int64_t docs;
} TrainJob;

static void on_text(void *ctx, const uint8_t *s, size_t n) { tok_trainer_add(((TrainJob *)ctx)->tr, s, n); }
static void on_end_doc(void *ctx) { ((TrainJob *)ctx)->docs++; }
static void on_progress(void *ctx, uint64_t bytes) {
    TrainJob *j = ctx;
    data_progress_update(&j->progress, j->before + bytes, j->docs, -1);
}

static int train(int argc, char **argv) {
    CoreStrList inputs = {0}, keys = {0};
    const char *output = NULL, *sep = NULL, *format = "auto";
    int vocab = 0, allow_invalid = 0;
    ArgSpec specs[] = {
        {"--input", ARG_LIST, &inputs, "training text (text or JSON Lines)"},
        {"--vocab-size", ARG_INT, &vocab, "vocabulary size: 256 bytes + end-of-document + merges"},
        {"--output", ARG_STR, &output, "tokenizer file to write (JSON)"},
        {"--doc-separator", ARG_STR, &sep, "text: a line equal to this separates documents"},
        {"--json-keys", ARG_LIST, &keys, "JSON Lines: the key holding the text (default text)"},
        {"--input-format", ARG_STR, &format, "auto (by extension), text or jsonl"},
        {"--allow-invalid-utf8", ARG_BOOL, &allow_invalid, "train on invalid UTF-8 as raw bytes"},
    };
    core_args_parse(USAGE, specs, (int)(sizeof specs / sizeof specs[0]), argc, argv);
    if (!inputs.n || !output) core_usage_error("tokenizer train needs --input and --output (see --help)");
    if (vocab < TOK_FIRST_MERGE || vocab > TOK_MAX_VOCAB)
        core_usage_error("--vocab-size must be in [%d, %d], got %d", TOK_FIRST_MERGE, TOK_MAX_VOCAB, vocab);
    if (keys.n > 1) core_usage_error("--json-keys: one key (got %d)", keys.n);
    DataInputFormat fmt = !strcmp(format, "text") ? DATA_FMT_TEXT : !strcmp(format, "jsonl") ? DATA_FMT_JSONL : DATA_FMT_AUTO;
    if (fmt == DATA_FMT_AUTO && strcmp(format, "auto")) core_usage_error("--input-format must be auto, text or jsonl");
    char err[4600];
    CoreOutInput *in = core_calloc((size_t)inputs.n, sizeof *in);
    for (int i = 0; i < inputs.n; i++) in[i] = (CoreOutInput){"--input", inputs.items[i]};
    if (core_out_check_file("--output", output, in, inputs.n, 0, err, sizeof err) != 0) core_usage_error("%s", err);
    free(in);
    uint64_t total = 0;
    for (int i = 0; i < inputs.n; i++) {
        struct stat st;
        if (stat(inputs.items[i], &st)) core_usage_error("%s: %s", inputs.items[i], strerror(errno));
        total += (uint64_t)st.st_size;
    }
    TrainJob j = {0};
    j.tr = tok_trainer_new(TOK_DEFAULT_PATTERN, TOK_DEFAULT_MAX_PIECE, err, sizeof err);
    if (!j.tr) core_fatal("%s", err);
    DataDocsOptions o = {.format = fmt, .json_key = keys.n ? keys.items[0] : "text", .doc_separator = sep,
                         .allow_invalid_utf8 = allow_invalid, .chunk_bytes = (size_t)1 << 20};
    DataDocSink sink = {on_text, on_end_doc, on_progress, &j};
    double t0 = core_now();
    data_progress_init(&j.progress, "tokenizer", total, isatty(2));
    for (int i = 0; i < inputs.n; i++) {
        if (data_docs_read(inputs.items[i], &o, &sink, err, sizeof err)) core_usage_error("%s", err);
        struct stat st;
        if (!stat(inputs.items[i], &st)) j.before += (uint64_t)st.st_size;
    }
    data_progress_done(&j.progress);
    double t_read = core_now() - t0;
    TokTrainStats ts;
    Tokenizer *tok = tok_trainer_finish(j.tr, vocab, isatty(2), &ts);
    if (tok_save(tok, output, err, sizeof err)) core_usage_error("%s", err);
    printf("megac tokenizer: wrote %s: vocab %d (%d merges%s) from %.2f MB, %lld documents, %lld "
           "unique words; reading + pre-tokenising %.2f s (%.1f MB/s), merging %.2f s; total %.2f s "
           "(%.2f MB/s)\n", output, tok->vocab_size, ts.n_merges,
           tok->vocab_size < vocab ? ": no pair occurs twice any more" : "", ts.n_bytes / 1e6,
           (long long)j.docs, (long long)ts.n_words, t_read, ts.n_bytes / 1e6 / (t_read + 1e-9),
           ts.merge_seconds, core_now() - t0, ts.n_bytes / 1e6 / (core_now() - t0));
    tok_free(tok);
    tok_trainer_free(j.tr);
    return 0;
}

// Whole input (a file or stdin) into memory.
static TokBytes slurp(const char *path) {
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    if (!f) core_usage_error("%s: %s", path, strerror(errno));
    TokBytes b = {0};
    uint8_t buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) tok_bytes_append(&b, buf, n);
    if (ferror(f)) core_usage_error("%s: read error", path);
    if (f != stdin) fclose(f);
    return b;
}

static int run(int argc, char **argv, int encode) {
    const char *spec = "byte", *input = "-";
    ArgSpec specs[] = {
        {"--tokenizer", ARG_STR, &spec, "'byte' or a tokenizer file"},
        {"--input", ARG_STR, &input, "input file ('-': stdin)"},
    };
    core_args_parse(USAGE, specs, 2, argc, argv);
    char err[1024];
    Tokenizer *tok = tok_load(spec, err, sizeof err);
    if (!tok) core_usage_error("%s", err);
    TokBytes in = slurp(input);
    if (encode) {
        TokIds ids = {0};
        tok_encode(tok, in.v, in.n, &ids);
        for (size_t i = 0; i < ids.n; i++) printf(i ? " %u" : "%u", ids.v[i]);
        printf("\n");
        free(ids.v);
    } else {
        TokIds ids = {0};
        tok_bytes_append(&in, (const uint8_t *)"", 1);  // NUL-terminate for strtoul
        for (char *p = (char *)in.v, *end;; p = end) {
            while (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r') p++;
            if (!*p) break;
            unsigned long v = strtoul(p, &end, 10);
            if (end == p || v >= (unsigned long)tok->vocab_size)
                core_usage_error("%s: '%.20s' is not a token id below %d", input, p, tok->vocab_size);
            tok_ids_push(&ids, (uint32_t)v);
        }
        TokBytes out = {0};
        tok_decode(tok, ids.v, ids.n, &out);
        fwrite(out.v, 1, out.n, stdout);
        free(out.v);
        free(ids.v);
    }
    free(in.v);
    tok_free(tok);
    return 0;
}

int cmd_tokenizer(int argc, char **argv) {
    if (argc < 1 || !strcmp(argv[0], "--help") || !strcmp(argv[0], "-h")) {
        printf("%s\n", USAGE);
        return argc < 1 ? 2 : 0;
    }
    if (!strcmp(argv[0], "train")) return train(argc - 1, argv + 1);
    if (!strcmp(argv[0], "encode")) return run(argc - 1, argv + 1, 1);
    if (!strcmp(argv[0], "decode")) return run(argc - 1, argv + 1, 0);
    core_usage_error("unknown tokenizer command '%s' (train, encode or decode)", argv[0]);
}
