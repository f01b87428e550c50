// megac/cmd_generate.c: `megac generate`: text from a checkpoint on one CPU rank. The prompt
// runs the training forward (model/gpt.h) once; each new token then runs one row through
// the model against a key/value cache (hf/hf_kv.h) until the context is full, after which
// each token re-runs the forward over the last seq_length tokens (--no-kv-cache: always).
// The next token comes from the last position's logits: greedy, or sampled (temperature,
// top-k, top-p) from a seeded counter-based RNG, so a seed fixes the text.
#include "commands.h"
#include "core/args.h"
#include "core/check.h"  // defines: core_usage_error, MPI_CHECK
#include "core/host.h"   // defines: core_check_threads
#include "core/outpath.h"  // defines: core_out_check_file, core_out_open, core_out_publish
#include "hf/hf_kv.h"
#include "hf/hf_lm.h"
#include "hf/hf_sample.h"
#include "hf/hf_tokenizer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *USAGE =
    "usage: megac generate --load CKPT (--prompt TEXT | --prompt-ids 1,2,3) [--max-new-tokens N]\n"
    "                      [--temperature T] [--top-k K] [--top-p P] [--seed S]\n"
    "                      [--tokenizer byte|tok.json|tokenizer.json|data.h5 | TOKENIZER]\n"
    "                      [--print-ids] [--dump-logits FILE]\n"
    "  TOKENIZER: Megatron's flags, --tokenizer-type GPT2BPETokenizer --vocab-file F --merge-file F\n"
    "  or --tokenizer-type HuggingFaceTokenizer --tokenizer-model tokenizer.json, or --tokenizer-type\n"
    "  Llama2Tokenizer|GPTSentencePieceTokenizer|SentencePieceTokenizer --tokenizer-model tokenizer.model.\n"
    "  Prints the prompt and its continuation. Temperature 0 is greedy. Generation stops at the\n"
    "  end-of-document token (unless --ignore-eos). --dump-logits writes the final context's\n"
    "  logits, (tokens, vocab) float32 little-endian, row i predicting token i + 1.";

typedef struct {
    const char *load, *prompt, *prompt_ids, *tok_spec, *dump;
    const char *tok_type, *vocab_file, *merge_file, *tok_model;
    int64_t iteration, seed;
    int divisible;  // --make-vocab-size-divisible-by (0: not given)
    int max_new, top_k, print_ids, ignore_eos, threads, no_kv_cache;
    double temperature, top_p;
} GenArgs;

// "1,2,3" -> ids (each < V). Usage error on anything else.
static void parse_ids(const char *s, int V, TokIds *out) {
    for (const char *p = s; *p;) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v >= V)
            core_usage_error("--prompt-ids: '%s' is not a comma-separated list of ids in [0, %d)", s, V);
        tok_ids_push(out, (uint32_t)v);
        p = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') core_usage_error("--prompt-ids: unexpected '%c' in '%s'", *end, s);
    }
}

// Through the output guard's temporary file (checked before the model ran, see main).
static void write_logits(const char *path, const float *logits, int n, int V, int Vp) {
    FILE *f;
    char tmp[4200], err[4600];
    if (core_out_open("--dump-logits", path, &f, tmp, sizeof tmp, err, sizeof err) != 0) core_usage_error("%s", err);
    for (int i = 0; i < n; i++) fwrite(logits + (size_t)i * Vp, sizeof(float), (size_t)V, f);
    if (core_out_publish("--dump-logits", path, f, tmp, err, sizeof err) != 0) {
        fprintf(stderr, "megac: %s\n", err);
        exit(1);
    }
}

static void print_result(const GenArgs *a, Tokenizer *tok, const TokIds *ids) {
    if (a->print_ids || !tok) {
        for (size_t i = 0; i < ids->n; i++) printf("%s%u", i ? " " : "", ids->v[i]);
        printf("\n");
    }
    if (tok) {
        TokBytes text = {0};
        tok_decode(tok, ids->v, ids->n, &text);
        fwrite(text.v, 1, text.n, stdout);
        printf("\n");
        free(text.v);
    }
}

// Generates into ids (holding the prompt); returns the number of new tokens.
static int generate(const GenArgs *a, HfLm *lm, TokIds *ids, int eod) {
    HfSampler s = {a->temperature, a->top_k, a->top_p, (uint64_t)a->seed};
    int *ctx = core_calloc((size_t)lm->T, sizeof(int));  // (T) the last T tokens
    HfKv *kv = a->no_kv_cache ? NULL : hf_kv_create(lm);
    int made = 0;
    for (; made < a->max_new; made++) {
        size_t n = ids->n < (size_t)lm->T ? ids->n : (size_t)lm->T, start = ids->n - n;
        const float *row;  // (Vp) logits predicting the next token
        if (kv && kv->n > 0 && ids->n <= (size_t)lm->T) {  // the last token joins the cache
            row = hf_kv_step(kv, (int)ids->v[ids->n - 1]);
        } else {  // the prompt (cached from here), or a full context: the whole forward
            for (size_t i = 0; i < n; i++) ctx[i] = (int)ids->v[start + i];
            row = (kv && kv->n == 0 ? hf_kv_prefill(kv, ctx, (int)n) : hf_lm_forward(lm, ctx, (int)n)) +
                  (n - 1) * (size_t)lm->Vp;
        }
        int next = hf_sample(&s, row, lm->V, (uint64_t)made);
        tok_ids_push(ids, (uint32_t)next);
        if (next == eod && !a->ignore_eos) {
            made++;
            break;
        }
    }
    free(ctx);
    hf_kv_free(kv);
    return made;
}

// generate's flags into *a, checked (exit 2 on a bad one).
static void parse_args(GenArgs *a, int argc, char **argv) {
    *a = (GenArgs){.iteration = -1, .seed = 1234, .max_new = 64, .temperature = 1.0, .top_p = 1.0, .threads = 1};
    ArgSpec specs[] = {
        {"--load", ARG_STR, &a->load, "checkpoint directory"},
        {"--iteration", ARG_I64, &a->iteration, "checkpoint iteration (-1: the latest)"},
        {"--prompt", ARG_STR, &a->prompt, "text to continue (needs a tokenizer)"},
        {"--prompt-ids", ARG_STR, &a->prompt_ids, "token ids to continue, comma-separated"},
        {"--max-new-tokens", ARG_INT, &a->max_new, "tokens to generate"},
        {"--temperature", ARG_FLOAT, &a->temperature, "softmax temperature (0: greedy)"},
        {"--top-k", ARG_INT, &a->top_k, "sample among the k most likely tokens (0: all)"},
        {"--top-p", ARG_FLOAT, &a->top_p, "nucleus: the most likely tokens holding probability p"},
        {"--seed", ARG_I64, &a->seed, "sampling seed"},
        {"--tokenizer", ARG_STR, &a->tok_spec, "byte, a tokenizer JSON or the training data .h5 "
                                              "(default: CKPT/" HF_TOK_CKPT_FILE ")"},
        {"--print-ids", ARG_BOOL, &a->print_ids, "also print the token ids"},
        {"--ignore-eos", ARG_BOOL, &a->ignore_eos, "do not stop at the end-of-document token"},
        {"--dump-logits", ARG_STR, &a->dump, "write the final context's logits to FILE"},
        {"--num-threads", ARG_INT, &a->threads, "CPU threads"},
        {"--tokenizer-type", ARG_STR, &a->tok_type, "Megatron's: GPT2BPETokenizer, HuggingFaceTokenizer, Llama2Tokenizer, GPTSentencePieceTokenizer or SentencePieceTokenizer (instead of --tokenizer)"},
        {"--vocab-file", ARG_STR, &a->vocab_file, "GPT2BPETokenizer: GPT-2's vocab.json"},
        {"--merge-file", ARG_STR, &a->merge_file, "GPT2BPETokenizer: GPT-2's merges.txt"},
        {"--tokenizer-model", ARG_STR, &a->tok_model, "HuggingFaceTokenizer: tokenizer.json or its directory; the SentencePiece types: tokenizer.model"},
        {"--make-vocab-size-divisible-by", ARG_INT, &a->divisible, "accepted as Megatron's; no effect: checkpoints hold the V real rows, padding ids are never sampled"},
        {"--no-kv-cache", ARG_BOOL, &a->no_kv_cache, "re-run the whole forward for every new token (no key/value cache)"},
    };
    core_args_parse(USAGE, specs, (int)(sizeof specs / sizeof specs[0]), argc, argv);
    if (!a->load || (!a->prompt == !a->prompt_ids))
        core_usage_error("generate needs --load CKPT and one of --prompt TEXT, --prompt-ids IDS (see --help)");
    if (a->max_new < 0 || a->temperature < 0 || a->top_k < 0 || a->top_p <= 0 || a->top_p > 1 || a->threads < 1)
        core_usage_error("--max-new-tokens, --temperature, --top-k >= 0, --top-p in (0, 1], --num-threads >= 1");
    core_check_threads("--num-threads", a->threads);  // the upper limit every command has
}

// The tokenizer generate encodes and decodes with (--tokenizer-type, --tokenizer or the
// checkpoint's; NULL when there is none and none is needed), checked against checkpoint c's
// vocabulary; *eod its end-of-document id (-1: none). Exits 2 on a bad one.
static Tokenizer *load_tokenizer(const GenArgs *a, const HfCkpt *c, int *eod) {
    char err[4600];
    int V = c->cfg.vocab_size;
    *eod = V > TOK_EOD ? TOK_EOD : -1;
    if (a->divisible < 0) core_usage_error("--make-vocab-size-divisible-by must be >= 1, got %d", a->divisible);
    if (!a->tok_type && (a->vocab_file || a->merge_file || a->tok_model))
        core_usage_error("--vocab-file, --merge-file and --tokenizer-model need --tokenizer-type");
    if (a->tok_type && a->tok_spec) core_usage_error("--tokenizer and --tokenizer-type exclude each other");
    Tokenizer *tok = a->tok_type ? tok_load_megatron(a->tok_type, a->vocab_file, a->merge_file, a->tok_model, err, sizeof err)
                                : hf_tok_resolve(a->tok_spec, a->load, err, sizeof err);
    if (!tok && (a->tok_spec || a->tok_type || a->prompt)) core_usage_error("%s", err);
    if (tok && tok->vocab_size != V)
        core_usage_error("the tokenizer has %d ids, the checkpoint's model %d: not the model's "
                         "tokenizer", tok->vocab_size, V);
    if (tok) *eod = tok->eod_id;
    return tok;
}

int cmd_generate(int argc, char **argv) {
    GenArgs a;
    parse_args(&a, argc, argv);
    char err[4600];
    CoreOutInput in[1] = {{"--tokenizer", a.tok_spec}};  // checkpoints and data: by their looks
    if (a.dump && core_out_check_file("--dump-logits", a.dump, in, 1, 0, err, sizeof err) != 0)
        core_usage_error("%s", err);
    HfCkpt *c = hf_ckpt_read(a.load, a.iteration, err, sizeof err);
    if (!c) core_usage_error("%s", err);
    int V = c->cfg.vocab_size, eod;
    Tokenizer *tok = load_tokenizer(&a, c, &eod);
    TokIds ids = {0};
    for (int i = 0; a.prompt && i < tok->n_prefix; i++) tok_ids_push(&ids, tok->prefix[i]);  // e.g. BOS
    if (a.prompt) tok_encode(tok, (const uint8_t *)a.prompt, strlen(a.prompt), &ids);
    else parse_ids(a.prompt_ids, V, &ids);
    if (ids.n == 0 && eod < 0) core_usage_error("empty prompt and no end-of-document token to start from");
    if (ids.n == 0) tok_ids_push(&ids, (uint32_t)eod);  // start of a document
    if (ids.n > (size_t)c->cfg.seq_length)
        fprintf(stderr, "megac generate: the prompt has %zu tokens, the context %d: the model sees "
                "the last %d\n", ids.n, c->cfg.seq_length, c->cfg.seq_length);
    MPI_CHECK(MPI_Init(NULL, NULL));
    HfLm *lm = hf_lm_create(c, a.threads);
    generate(&a, lm, &ids, a.ignore_eos ? -1 : eod);
    if (a.dump) {
        size_t n = ids.n < (size_t)lm->T ? ids.n : (size_t)lm->T;
        int *ctx = core_calloc(n, sizeof(int));
        for (size_t i = 0; i < n; i++) ctx[i] = (int)ids.v[ids.n - n + i];
        write_logits(a.dump, hf_lm_forward(lm, ctx, (int)n), (int)n, lm->V, lm->Vp);
        free(ctx);
    }
    print_result(&a, tok, &ids);
    hf_lm_free(lm);
    MPI_CHECK(MPI_Finalize());
    free(ids.v);
    tok_free(tok);
    hf_ckpt_free(c);
    return 0;
}
