// tests/data/test_preprocess.c: preprocess -> read back equals the tokenizer's output, for
// fortunes-style ("%"-separated, CRLF too), JSON Lines (escapes, blank lines, empty texts),
// one-document files and a multi-MiB document encoded in parts; byte and BPE tokenizers;
// the Megatron import; and every bad input refused with a message naming the file.
#include "data/preprocess.h"
#include "data/tok_train.h"
#include "data/h5ds.h"
#include "tests/testing.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[] = "/tmp/megac-test-preprocess-XXXXXX";

static const char *path_of(const char *name) {
    static char buf[8][512];
    static int i = 0;
    i = (i + 1) % 8;
    snprintf(buf[i], sizeof buf[i], "%s/%s", dir, name);
    return buf[i];
}

static void write_file(const char *name, const void *data, size_t n) {
    FILE *f = fopen(path_of(name), "wb");
    fwrite(data, 1, n, f);
    fclose(f);
}

static const char *FORTUNES = "First fortune.\n%\nSecond, with unicode: caf\xc3\xa9 \xe6\x9d\xb1\xe4\xba\xac "
                              "\xf0\x9f\x98\x80\nand two lines.\n%\n%\nThird\r\n%\r\n";
static const char *JSONL = "{\"text\": \"hello\\nworld\", \"id\": 1}\n\n"
                           "{\"id\": 2, \"text\": \"caf\\u00e9 \\ud83d\\ude00 tab\\t\"}\n"
                           "{\"text\": \"\"}\n{\"text\": \"last\"}";
static const char *PLAIN = "Just one document.\nTwo lines.\n";

// The documents the inputs above hold, in order, then the big one.
static TokBytes expected[8];
static int n_expected = 0;

static void expect_doc(const char *s) {
    expected[n_expected] = (TokBytes){0};
    tok_bytes_append(&expected[n_expected++], (const uint8_t *)s, strlen(s));
}

static void make_inputs(void) {
    write_file("f.txt", FORTUNES, strlen(FORTUNES));
    write_file("j.jsonl", JSONL, strlen(JSONL));
    write_file("p.txt", PLAIN, strlen(PLAIN));
    expect_doc("First fortune.\n");
    expect_doc("Second, with unicode: caf\xc3\xa9 \xe6\x9d\xb1\xe4\xba\xac \xf0\x9f\x98\x80\nand two lines.\n");
    expect_doc("Third\r\n");
    expect_doc("hello\nworld");
    expect_doc("caf\xc3\xa9 \xf0\x9f\x98\x80 tab\t");
    expect_doc("last");
    expect_doc(PLAIN);
    TokBytes big = {0};  // ~2.5 MB: handed to the tokenizer in ~1 MiB parts
    char line[128];
    for (int i = 0; big.n < 2500000; i++) {
        int n = snprintf(line, sizeof line, "%sline %d: the quick brown fox, %d  jumps\n", i % 7 ? "" : "  ", i, i * 37);
        tok_bytes_append(&big, (const uint8_t *)line, (size_t)n);
    }
    write_file("big.txt", big.v, big.n);
    expected[n_expected++] = big;
}

static const char *INPUTS[] = {NULL, NULL, NULL, NULL};

static void check_roundtrip(Tokenizer *tok, const char *what) {
    INPUTS[0] = path_of("f.txt");
    INPUTS[1] = path_of("j.jsonl");
    INPUTS[2] = path_of("p.txt");
    INPUTS[3] = path_of("big.txt");
    DataPreprocessOptions o = {.inputs = INPUTS, .n_inputs = 4, .output = path_of("out.h5"), .tok = tok,
                               .docs = {.json_key = "text", .doc_separator = "%"}};
    DataPreprocessStats st;
    char err[1024];
    EXPECT(data_preprocess(&o, &st, err, sizeof err) == 0, "%s: %s", what, err);
    H5Dataset *ds = h5ds_open_serial(o.output, NULL, err, sizeof err);
    EXPECT(ds != NULL, "%s", err);
    if (!ds) return;
    EXPECT_EQ_INT(ds->n_docs, n_expected);
    EXPECT_EQ_INT(st.n_docs, n_expected);
    EXPECT_EQ_INT(ds->vocab_size, tok->vocab_size);
    EXPECT_EQ_INT(ds->eod_id, TOK_EOD);
    EXPECT_EQ_INT(ds->token_bytes, 2);
    char *desc = tok_serialize(tok);
    EXPECT(!strcmp(ds->tokenizer, desc), "%s: tokenizer attribute differs", what);
    free(desc);
    for (int d = 0; d < n_expected && d < ds->n_docs; d++) {
        TokIds want = {0};
        tok_encode(tok, expected[d].v, expected[d].n, &want);
        tok_ids_push(&want, TOK_EOD);
        int64_t n = (int64_t)(ds->doc_offsets[d + 1] - ds->doc_offsets[d]);
        uint32_t *got = malloc(sizeof(uint32_t) * (size_t)(n + 1));
        h5ds_read(ds, (int64_t)ds->doc_offsets[d], n, got);
        EXPECT(n == (int64_t)want.n && !memcmp(got, want.v, want.n * sizeof(uint32_t)),
               "%s: document %d: %lld tokens read, %zu expected", what, d, (long long)n, want.n);
        free(got);
        free(want.v);
    }
    h5ds_close(ds);
}

// A failing run returns -1, names `name` and `needle` in the message, and leaves no output.
static void expect_error(const char *name, const char *content, const char *needle, const char *sep) {
    if (content) write_file(name, content, strlen(content));
    const char *in[1] = {path_of(name)};
    const char *out = path_of("bad.h5");
    remove(out);
    Tokenizer *tok = tok_byte_new();
    DataPreprocessOptions o = {.inputs = in, .n_inputs = 1, .output = out, .tok = tok,
                               .docs = {.json_key = "text", .doc_separator = sep}};
    DataPreprocessStats st;
    char err[1024] = "";
    int rc = data_preprocess(&o, &st, err, sizeof err);
    EXPECT(rc == -1 && strstr(err, name) && strstr(err, needle), "%s: rc %d, message '%s' (want '%s')", name, rc, err, needle);
    EXPECT(access(out, F_OK) != 0, "%s: output written despite the error", name);
    tok_free(tok);
}

static void check_errors(void) {
    expect_error("missing.txt", NULL, "No such file", NULL);
    expect_error("badutf8.txt", "fine\nbad \xff byte\n", ":2: invalid UTF-8", NULL);
    expect_error("badjson.jsonl", "{\"text\": \"ok\"}\n{\"text\": \"unterminated}\n", ":2: invalid JSON", NULL);
    expect_error("array.jsonl", "[1, 2]\n", "expected a JSON object", NULL);
    expect_error("nokey.jsonl", "{\"body\": \"x\"}\n", "no \"text\" key", NULL);
    expect_error("number.jsonl", "{\"text\": 5}\n", "not a string", NULL);
    expect_error("two.jsonl", "{\"text\": \"a\"} {\"text\": \"b\"}\n", "invalid JSON", NULL);
    expect_error("rawbad.jsonl", "{\"text\": \"raw \xc3\"}\n", "invalid JSON", NULL);
    expect_error("empty.txt", "", "no documents", NULL);
    expect_error("seps.txt", "%\n%\n", "no documents", "%");
    // Invalid UTF-8 is accepted, byte for byte, when asked for.
    const char *raw = "bad \xff byte\n";
    write_file("allowed.txt", raw, strlen(raw));
    const char *in[1] = {path_of("allowed.txt")};
    Tokenizer *tok = tok_byte_new();
    DataPreprocessOptions o = {.inputs = in, .n_inputs = 1, .output = path_of("allowed.h5"), .tok = tok,
                               .docs = {.allow_invalid_utf8 = 1}};
    DataPreprocessStats st;
    char err[1024];
    EXPECT(data_preprocess(&o, &st, err, sizeof err) == 0 && st.n_tokens == (int64_t)strlen(raw) + 1, "%s", err);
    o.output = "/nonexistent-dir/x.h5";
    EXPECT(data_preprocess(&o, &st, err, sizeof err) == -1 && strstr(err, "/nonexistent-dir/x.h5"), "%s", err);
    tok_free(tok);
}

// Megatron indexed dataset: uint16 tokens, 3 documents (one of two sequences, one empty).
static void write_megatron(const char *prefix /* < 500 chars */, const uint16_t *tok, int n_tok, const int32_t *sizes, int n_seq,
                           const int64_t *doc_idx, int n_doc_idx) {
    char p[600];
    snprintf(p, sizeof p, "%s.bin", prefix);
    FILE *f = fopen(p, "wb");
    fwrite(tok, 2, (size_t)n_tok, f);
    fclose(f);
    snprintf(p, sizeof p, "%s.idx", prefix);
    f = fopen(p, "wb");
    uint64_t version = 1, ns = (uint64_t)n_seq, nd = (uint64_t)n_doc_idx;
    uint8_t code = 8;
    fwrite("MMIDIDX\0\0", 1, 9, f);
    fwrite(&version, 8, 1, f);
    fwrite(&code, 1, 1, f);
    fwrite(&ns, 8, 1, f);
    fwrite(&nd, 8, 1, f);
    fwrite(sizes, 4, (size_t)n_seq, f);
    int64_t ptr = 0;
    for (int i = 0; i < n_seq; i++, ptr += 2 * sizes[i - 1]) fwrite(&ptr, 8, 1, f);
    fwrite(doc_idx, 8, (size_t)n_doc_idx, f);
    fclose(f);
}

static void check_megatron(void) {
    const uint16_t tok[] = {5, 6, 7, 8, 9, 99, 1, 2, 3};
    const int32_t sizes[] = {3, 3, 2, 1};
    const int64_t doc_idx[] = {0, 1, 2, 2, 4};  // docs: [5 6 7], [8 9 99], (empty), [1 2][3]
    char prefix[512], err[1024];
    snprintf(prefix, sizeof prefix, "%s/mega", dir);
    write_megatron(prefix, tok, 9, sizes, 4, doc_idx, 5);
    DataPreprocessStats st;
    const char *out = path_of("mega.h5");
    EXPECT(data_from_megatron(prefix, out, 100, 99, "external", 0, &st, err, sizeof err) == 0, "%s", err);
    EXPECT(st.docs_without_eod == 2, "%lld documents without EOD counted, want 2", (long long)st.docs_without_eod);
    H5Dataset *ds = h5ds_open_serial(out, NULL, err, sizeof err);
    EXPECT(ds != NULL, "%s", err);
    if (ds) {  // the tokens exactly: no end-of-document id added (Megatron trains on these)
        const uint32_t want[] = {5, 6, 7, 8, 9, 99, 1, 2, 3};
        const uint64_t want_off[] = {0, 3, 6, 9};
        uint32_t got[9];
        EXPECT(ds->n_docs == 3 && ds->n_tokens == 9, "%lld docs, %lld tokens", (long long)ds->n_docs, (long long)ds->n_tokens);
        if (ds->n_tokens == 9) h5ds_read(ds, 0, 9, got);
        EXPECT(ds->n_tokens == 9 && !memcmp(got, want, sizeof want), "imported tokens differ");
        EXPECT(ds->n_docs == 3 && !memcmp(ds->doc_offsets, want_off, sizeof want_off), "document offsets differ");
        h5ds_close(ds);
    }
    EXPECT(data_from_megatron(prefix, out, 50, 49, "external", 0, &st, err, sizeof err) == -1 &&
           strstr(err, "mega.bin") && strstr(err, "vocab_size"), "%s", err);
    write_file("junk.idx", "not an index at all, clearly", 28);
    write_file("junk.bin", "", 0);
    snprintf(prefix, sizeof prefix, "%s/junk", dir);
    EXPECT(data_from_megatron(prefix, out, 100, 99, "external", 0, &st, err, sizeof err) == -1 &&
           strstr(err, "junk.idx") && strstr(err, "not a Megatron"), "%s", err);
    snprintf(prefix, sizeof prefix, "%s/absent", dir);
    EXPECT(data_from_megatron(prefix, out, 100, 99, "external", 0, &st, err, sizeof err) == -1 &&
           strstr(err, "absent.idx"), "%s", err);
}

int main(void) {
    if (!mkdtemp(dir)) return 1;
    make_inputs();
    Tokenizer *byte = tok_byte_new();
    check_roundtrip(byte, "byte");
    tok_free(byte);
    char err[256];
    TokTrainer *tr = tok_trainer_new(TOK_DEFAULT_PATTERN, TOK_DEFAULT_MAX_PIECE, err, sizeof err);
    for (int d = 0; d < n_expected; d++) tok_trainer_add(tr, expected[d].v, expected[d].n);
    Tokenizer *bpe = tok_trainer_finish(tr, 1000, 0, NULL);
    tok_trainer_free(tr);
    check_roundtrip(bpe, "bpe");
    tok_free(bpe);
    check_errors();
    check_megatron();
    for (int d = 0; d < n_expected; d++) free(expected[d].v);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return test_result("test_preprocess");
}
