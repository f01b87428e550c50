// data/megatron.c: import of Megatron-LM indexed datasets (see preprocess.h): the documents
// of the reader (data/mmidx.h, the format described there) copied token for token.
#include "preprocess.h"
#include "core/check.h"   // defines: core_calloc
#include "core/timer.h"   // defines: core_now
#include "data/h5ds.h"
#include "data/mmidx.h"   // defines: mmidx_read
#include "data/progress.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define READ_TOKENS 65536

// Copies every document of ds, unchanged, counting those whose last token is not eod_id.
static int copy_documents(const H5Dataset *ds, H5dsWriter *w, DataProgress *pr,
                          DataPreprocessStats *st, char *err, size_t errlen) {
    uint32_t *ids = core_calloc(READ_TOKENS, sizeof(uint32_t));
    int rc = 0;
    for (int64_t d = 0; d < ds->n_docs && rc == 0; d++) {
        int64_t end = (int64_t)ds->doc_offsets[d + 1];
        uint32_t last = 0;
        for (int64_t at = (int64_t)ds->doc_offsets[d]; at < end && rc == 0;) {
            int64_t n = end - at < READ_TOKENS ? end - at : READ_TOKENS;
            int64_t bad = mmidx_read(ds, at, n, ids);
            if (bad >= 0) {
                snprintf(err, errlen, "%s.bin: token %lld of document %lld is outside [0, vocab_size %lld)",
                         ds->path, (long long)(at + bad - (int64_t)ds->doc_offsets[d]), (long long)d,
                         (long long)ds->vocab_size);
                rc = -1;
            } else {
                rc = h5ds_writer_append(w, ids, (size_t)n, err, errlen);
                last = ids[n - 1];
            }
            at += n;
        }
        if (rc) break;
        st->docs_without_eod += last != (uint32_t)ds->eod_id;
        h5ds_writer_end_doc(w);
        data_progress_update(pr, (uint64_t)end * (uint64_t)ds->token_bytes, h5ds_writer_docs(w),
                             h5ds_writer_tokens(w));
    }
    free(ids);
    return rc;
}

int data_from_megatron(const char *prefix, const char *output, int64_t vocab_size, int64_t eod_id,
                       const char *tokenizer, int progress, DataPreprocessStats *st, char *err,
                       size_t errlen) {
    double t0 = core_now();
    memset(st, 0, sizeof *st);
    H5dsVocab v = {vocab_size, eod_id};
    char idx[4200];
    snprintf(idx, sizeof idx, "%s.idx", prefix);
    if (access(idx, F_OK) != 0) {
        snprintf(err, errlen, "%s: %s", idx, strerror(errno));
        return -1;
    }
    H5Dataset *ds = h5ds_open_serial(prefix, &v, err, errlen);
    if (!ds) return -1;
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", output, (int)getpid());
    H5dsWriter *w = h5ds_writer_create(tmp, vocab_size, eod_id, tokenizer, err, errlen);
    if (!w) {
        h5ds_close(ds);
        return -1;
    }
    DataProgress pr;
    data_progress_init(&pr, "import", ds->bin_bytes, progress);
    int rc = copy_documents(ds, w, &pr, st, err, errlen);
    data_progress_done(&pr);
    st->n_docs = h5ds_writer_docs(w);
    st->n_tokens = h5ds_writer_tokens(w);
    st->unigram_entropy = h5ds_writer_unigram_entropy(w);
    st->n_bytes = ds->bin_bytes;
    char werr[1024] = "";
    if (h5ds_writer_close(w, werr, sizeof werr) != 0 && rc == 0) {
        snprintf(err, errlen, "%s (nothing written: the partial file was removed)", werr);
        rc = -1;
    }
    h5ds_close(ds);
    if (rc == 0 && rename(tmp, output) != 0) {
        snprintf(err, errlen, "%s: cannot rename %s to it: %s", output, tmp, strerror(errno));
        rc = -1;
    }
    if (rc) remove(tmp);
    st->seconds = core_now() - t0;
    return rc;
}
