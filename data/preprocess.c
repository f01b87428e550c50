// data/preprocess.c: documents -> tokens -> HDF5 (see preprocess.h).
#include "preprocess.h"
#include "core/timer.h"   // defines: core_now
#include "data/h5ds.h"
#include "data/progress.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>     // defines: stat, S_ISDIR
#include <unistd.h>       // defines: getpid

#define CHUNK_BYTES ((size_t)1 << 20)  // long documents are encoded in parts of ~1 MiB

typedef struct {
    Tokenizer *tok;
    H5dsWriter *w;
    TokIds ids;
    DataProgress progress;
    uint64_t bytes_before;   // bytes of the inputs already finished
    char *err;
    size_t errlen;
    int failed;
    int in_doc;              // the current document's prefix ids are written
} Job;

static void on_text(void *ctx, const uint8_t *s, size_t n) {
    Job *j = ctx;
    if (j->failed) return;
    j->ids.n = 0;
    for (int i = 0; !j->in_doc && i < j->tok->n_prefix; i++) tok_ids_push(&j->ids, j->tok->prefix[i]);
    j->in_doc = 1;
    tok_encode(j->tok, s, n, &j->ids);
    if (h5ds_writer_append(j->w, j->ids.v, j->ids.n, j->err, j->errlen)) j->failed = 1;
}

static void on_end_doc(void *ctx) {
    Job *j = ctx;
    uint32_t end[TOK_MAX_AFFIX + 1];  // the suffix ids, then EOD
    int n = j->tok->n_suffix;
    for (int i = 0; i < n; i++) end[i] = j->tok->suffix[i];
    end[n] = (uint32_t)j->tok->eod_id;
    j->in_doc = 0;
    if (j->failed || h5ds_writer_append(j->w, end, (size_t)n + 1, j->err, j->errlen)) {
        j->failed = 1;
        return;
    }
    h5ds_writer_end_doc(j->w);
}

static void on_progress(void *ctx, uint64_t file_bytes) {
    Job *j = ctx;
    data_progress_update(&j->progress, j->bytes_before + file_bytes, h5ds_writer_docs(j->w),
                         h5ds_writer_tokens(j->w));
}

// Every input must exist and be a readable file before any work starts; sums their sizes.
// The output, when it exists, must be a regular file that is none of the inputs (it is
// replaced at the end).
static int check_inputs(const char *const *inputs, int n, const char *output, uint64_t *total,
                        char *err, size_t errlen) {
    *total = 0;
    struct stat out;
    int have_out = stat(output, &out) == 0;
    if (have_out && !S_ISREG(out.st_mode)) {
        snprintf(err, errlen, "--output %s: %s", output, S_ISDIR(out.st_mode) ? "is a directory"
                 : "not a regular file (a FIFO or device)");
        return -1;
    }
    for (int i = 0; i < n; i++) {
        struct stat st;
        if (stat(inputs[i], &st) != 0) {
            snprintf(err, errlen, "%s: %s", inputs[i], strerror(errno));
            return -1;
        }
        if (S_ISDIR(st.st_mode)) {
            snprintf(err, errlen, "%s: is a directory (pass the files in it)", inputs[i]);
            return -1;
        }
        if (have_out && st.st_dev == out.st_dev && st.st_ino == out.st_ino) {
            snprintf(err, errlen, "--output %s is the input %s: refusing to replace an input",
                     output, inputs[i]);
            return -1;
        }
        *total += (uint64_t)st.st_size;
    }
    return 0;
}

int data_preprocess(const DataPreprocessOptions *o, DataPreprocessStats *st, char *err, size_t errlen) {
    double t0 = core_now();
    uint64_t total;
    if (check_inputs(o->inputs, o->n_inputs, o->output, &total, err, errlen)) return -1;
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", o->output, (int)getpid());
    char *desc = tok_serialize(o->tok);
    Job j = {.tok = o->tok, .err = err, .errlen = errlen};
    j.w = h5ds_writer_create(tmp, o->tok->vocab_size, o->tok->eod_id, desc, err, errlen);
    free(desc);
    if (!j.w) return -1;
    DataDocsOptions docs = o->docs;
    // Cutting long documents is exact only for pre-tokenisation that never joins "\n" + "x".
    // (SentencePiece: never; a document's spaces and prefix depend on all of it.)
    int exact_cuts = o->tok->kind == TOK_BYTE || (o->tok->kind == TOK_BPE && !strcmp(o->tok->pattern, TOK_DEFAULT_PATTERN));
    docs.chunk_bytes = exact_cuts ? CHUNK_BYTES : 0;
    DataDocSink sink = {on_text, on_end_doc, on_progress, &j};
    data_progress_init(&j.progress, "preprocess", total, o->progress);
    int rc = 0;
    for (int i = 0; i < o->n_inputs && rc == 0 && !j.failed; i++) {
        rc = data_docs_read(o->inputs[i], &docs, &sink, err, errlen);
        struct stat sb;
        if (stat(o->inputs[i], &sb) == 0) j.bytes_before += (uint64_t)sb.st_size;
    }
    data_progress_done(&j.progress);
    if (rc == 0 && !j.failed && h5ds_writer_docs(j.w) == 0) {
        snprintf(err, errlen, "%s: no documents in the input (empty files?)", o->n_inputs == 1 ? o->inputs[0] : "inputs");
        rc = -1;
    }
    st->n_docs = h5ds_writer_docs(j.w);
    st->n_tokens = h5ds_writer_tokens(j.w);
    st->unigram_entropy = h5ds_writer_unigram_entropy(j.w);
    st->n_bytes = j.bytes_before;
    char werr[1024] = "";
    if (h5ds_writer_close(j.w, werr, sizeof werr) != 0 && rc == 0) {
        snprintf(err, errlen, "%s (nothing written: the partial file was removed)", werr);
        rc = -2;
    }
    free(j.ids.v);
    if (rc || j.failed) {
        remove(tmp);
        return rc == -2 ? -2 : -1;
    }
    if (rename(tmp, o->output) != 0) {
        snprintf(err, errlen, "%s: cannot rename %s to it: %s", o->output, tmp, strerror(errno));
        remove(tmp);
        return -1;
    }
    st->seconds = core_now() - t0;
    return 0;
}
