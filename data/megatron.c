// data/megatron.c: import of Megatron-LM indexed datasets (see preprocess.h).
//
// PREFIX.idx, little endian: the 9 magic bytes "MMIDIDX\0\0", uint64 version (1), uint8 token
// type code, uint64 n_seq, uint64 n_doc_idx, then int32 sizes[n_seq] (tokens per sequence),
// int64 pointers[n_seq] (byte offset of each sequence in PREFIX.bin) and int64
// doc_idx[n_doc_idx] (document d = sequences [doc_idx[d], doc_idx[d+1])).
// PREFIX.bin: the tokens. Read sequentially through three cursors into the .idx arrays.
#include "preprocess.h"
#include "core/check.h"   // defines: core_calloc
#include "core/timer.h"   // defines: core_now
#include "data/h5ds.h"
#include "data/progress.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define HEADER_BYTES 34
#define READ_TOKENS 65536

typedef struct {
    char idx_path[4096], bin_path[4096];
    FILE *sizes, *pointers, *docs, *bin;   // cursors
    int elem, is_signed;                   // token type
    uint64_t n_seq, n_doc_idx, bin_bytes;
    uint8_t *raw;                          // (READ_TOKENS * elem) tokens as stored
    uint32_t *ids;                         // (READ_TOKENS) tokens as ids
} MegaIn;

// Element size and signedness of Megatron's dtype codes (integer types only).
static int dtype_info(uint8_t code, int *elem, int *is_signed) {
    static const int sizes[9] = {0, 1, 1, 2, 4, 8, 0, 0, 2}, signs[9] = {0, 0, 1, 1, 1, 1, 0, 0, 0};
    if (code > 8 || !sizes[code]) return -1;
    *elem = sizes[code];
    *is_signed = signs[code];
    return 0;
}

// Reads an unsigned little-endian integer of `bytes` bytes.
static int read_le(FILE *f, int bytes, uint64_t *v) {
    uint8_t b[8];
    if (fread(b, 1, (size_t)bytes, f) != (size_t)bytes) return -1;
    *v = 0;
    for (int i = bytes - 1; i >= 0; i--) *v = *v << 8 | b[i];
    return 0;
}
static int read_u64(FILE *f, uint64_t *v) { return read_le(f, 8, v); }

static int open_input(MegaIn *in, const char *prefix, char *err, size_t errlen) {
    snprintf(in->idx_path, sizeof in->idx_path, "%s.idx", prefix);
    snprintf(in->bin_path, sizeof in->bin_path, "%s.bin", prefix);
    struct stat si, sb;
    const char *bad = stat(in->idx_path, &si) ? in->idx_path : stat(in->bin_path, &sb) ? in->bin_path : NULL;
    if (bad) {
        snprintf(err, errlen, "%s: %s", bad, strerror(errno));
        return -1;
    }
    in->bin_bytes = (uint64_t)sb.st_size;
    FILE *h = fopen(in->idx_path, "rb");
    uint8_t magic[9], code = 0;
    uint64_t version = 0;
    int ok = h && fread(magic, 1, 9, h) == 9 && !memcmp(magic, "MMIDIDX\0\0", 9) &&
             read_u64(h, &version) == 0 && fread(&code, 1, 1, h) == 1 && read_u64(h, &in->n_seq) == 0 &&
             read_u64(h, &in->n_doc_idx) == 0;
    if (h) fclose(h);
    if (!ok || version != 1) {
        snprintf(err, errlen, "%s: not a Megatron indexed dataset (version 1, magic MMIDIDX)", in->idx_path);
        return -1;
    }
    if (dtype_info(code, &in->elem, &in->is_signed)) {
        snprintf(err, errlen, "%s: token type code %d is not an integer type", in->idx_path, code);
        return -1;
    }
    uint64_t want = HEADER_BYTES + 12 * in->n_seq + 8 * in->n_doc_idx;
    if (in->n_seq > ((uint64_t)1 << 40) || in->n_doc_idx > ((uint64_t)1 << 40) || (uint64_t)si.st_size != want ||
        in->n_doc_idx < 1) {
        snprintf(err, errlen, "%s: size %lld does not match its header (%llu sequences, %llu document "
                 "indices)", in->idx_path, (long long)si.st_size, (unsigned long long)in->n_seq,
                 (unsigned long long)in->n_doc_idx);
        return -1;
    }
    in->sizes = fopen(in->idx_path, "rb");
    in->pointers = fopen(in->idx_path, "rb");
    in->docs = fopen(in->idx_path, "rb");
    in->bin = fopen(in->bin_path, "rb");
    if (!in->sizes || !in->pointers || !in->docs || !in->bin) {
        snprintf(err, errlen, "%s: cannot open: %s", in->bin ? in->idx_path : in->bin_path, strerror(errno));
        return -1;
    }
    fseeko(in->sizes, HEADER_BYTES, SEEK_SET);
    fseeko(in->pointers, HEADER_BYTES + 4 * (off_t)in->n_seq, SEEK_SET);
    fseeko(in->docs, HEADER_BYTES + 12 * (off_t)in->n_seq, SEEK_SET);
    in->raw = core_calloc(READ_TOKENS, (size_t)in->elem);
    in->ids = core_calloc(READ_TOKENS, sizeof(uint32_t));
    return 0;
}

static void close_input(MegaIn *in) {
    FILE *f[4] = {in->sizes, in->pointers, in->docs, in->bin};
    for (int i = 0; i < 4; i++)
        if (f[i]) fclose(f[i]);
    free(in->raw);
    free(in->ids);
}

// Little-endian integer i of a raw token buffer; -1 for negative values.
static int64_t token_at(const uint8_t *b, int elem, int is_signed, size_t i) {
    uint64_t v = 0;
    for (int k = elem - 1; k >= 0; k--) v = v << 8 | b[i * (size_t)elem + (size_t)k];
    if (is_signed && elem < 8 && (v >> (8 * elem - 1))) return -1;
    if (is_signed && elem == 8 && (v >> 63)) return -1;
    return (int64_t)v;
}

// Copies sequence seq (size tokens at byte offset ptr) into the writer.
static int copy_sequence(MegaIn *in, H5dsWriter *w, uint64_t seq, int64_t size, int64_t ptr,
                         int64_t vocab, uint32_t *last, char *err, size_t errlen) {
    if (size < 0 || ptr < 0 || (uint64_t)ptr + (uint64_t)size * (uint64_t)in->elem > in->bin_bytes) {
        snprintf(err, errlen, "%s: sequence %llu (%lld tokens at byte %lld) lies outside %s", in->idx_path,
                 (unsigned long long)seq, (long long)size, (long long)ptr, in->bin_path);
        return -1;
    }
    const size_t n_buf = READ_TOKENS;
    uint8_t *raw = in->raw;
    uint32_t *ids = in->ids;
    fseeko(in->bin, (off_t)ptr, SEEK_SET);
    for (int64_t done = 0; done < size;) {
        size_t n = (size_t)(size - done) < n_buf ? (size_t)(size - done) : n_buf;
        if (fread(raw, (size_t)in->elem, n, in->bin) != n) {
            snprintf(err, errlen, "%s: read error at sequence %llu", in->bin_path, (unsigned long long)seq);
            return -1;
        }
        for (size_t i = 0; i < n; i++) {
            int64_t v = token_at(raw, in->elem, in->is_signed, i);
            if (v < 0 || v >= vocab) {
                snprintf(err, errlen, "%s: token %lld of sequence %llu is %lld, outside [0, vocab_size %lld)",
                         in->bin_path, (long long)(done + (int64_t)i), (unsigned long long)seq, (long long)v,
                         (long long)vocab);
                return -1;
            }
            ids[i] = (uint32_t)v;
        }
        if (h5ds_writer_append(w, ids, n, err, errlen)) return -1;
        *last = ids[n - 1];
        done += (int64_t)n;
    }
    return 0;
}

// Copies every document; a document whose last token is not eod_id gets one appended.
static int copy_documents(MegaIn *in, H5dsWriter *w, int64_t vocab, int64_t eod, DataProgress *pr,
                          char *err, size_t errlen) {
    uint64_t prev, end = 0, seq = 0, size = 0, ptr = 0;
    if (read_u64(in->docs, &prev) || prev != 0) {
        snprintf(err, errlen, "%s: doc_idx[0] must be 0", in->idx_path);
        return -1;
    }
    for (uint64_t d = 1; d < in->n_doc_idx; d++, prev = end) {
        if (read_u64(in->docs, &end) || end < prev || end > in->n_seq) {
            snprintf(err, errlen, "%s: doc_idx[%llu] = %llu is not in [%llu, %llu]", in->idx_path,
                     (unsigned long long)d, (unsigned long long)end, (unsigned long long)prev,
                     (unsigned long long)in->n_seq);
            return -1;
        }
        int64_t before = h5ds_writer_tokens(w);
        uint32_t last = 0;
        for (; seq < end; seq++) {
            if (read_le(in->sizes, 4, &size) || read_u64(in->pointers, &ptr)) {
                snprintf(err, errlen, "%s: read error at sequence %llu", in->idx_path, (unsigned long long)seq);
                return -1;
            }
            if (copy_sequence(in, w, seq, (int64_t)(int32_t)size, (int64_t)ptr, vocab, &last, err, errlen))
                return -1;
        }
        if (h5ds_writer_tokens(w) == before) continue;  // empty document
        uint32_t e = (uint32_t)eod;
        if (last != e && h5ds_writer_append(w, &e, 1, err, errlen)) return -1;
        h5ds_writer_end_doc(w);
        data_progress_update(pr, ptr + size * (uint64_t)in->elem, h5ds_writer_docs(w), h5ds_writer_tokens(w));
    }
    if (seq != in->n_seq) {
        snprintf(err, errlen, "%s: doc_idx ends at sequence %llu of %llu", in->idx_path,
                 (unsigned long long)seq, (unsigned long long)in->n_seq);
        return -1;
    }
    return 0;
}

int data_from_megatron(const char *prefix, const char *output, int64_t vocab_size, int64_t eod_id,
                       const char *tokenizer, int progress, DataPreprocessStats *st, char *err,
                       size_t errlen) {
    double t0 = core_now();
    MegaIn in = {0};
    if (open_input(&in, prefix, err, errlen)) {
        close_input(&in);
        return -1;
    }
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", output, (int)getpid());
    H5dsWriter *w = h5ds_writer_create(tmp, vocab_size, eod_id, tokenizer, err, errlen);
    if (!w) {
        close_input(&in);
        return -1;
    }
    DataProgress pr;
    data_progress_init(&pr, "import", in.bin_bytes, progress);
    int rc = copy_documents(&in, w, vocab_size, eod_id, &pr, err, errlen);
    data_progress_done(&pr);
    if (rc == 0 && h5ds_writer_docs(w) == 0) {
        snprintf(err, errlen, "%s: no documents", in.idx_path);
        rc = -1;
    }
    st->n_docs = h5ds_writer_docs(w);
    st->n_tokens = h5ds_writer_tokens(w);
    st->unigram_entropy = h5ds_writer_unigram_entropy(w);
    st->n_bytes = in.bin_bytes;
    char werr[1024] = "";
    if (h5ds_writer_close(w, werr, sizeof werr) != 0 && rc == 0) {
        snprintf(err, errlen, "%s (nothing written: the partial file was removed)", werr);
        rc = -1;
    }
    close_input(&in);
    if (rc == 0 && rename(tmp, output) != 0) {
        snprintf(err, errlen, "%s: cannot rename %s to it: %s", output, tmp, strerror(errno));
        rc = -1;
    }
    if (rc) remove(tmp);
    st->seconds = core_now() - t0;
    return rc;
}
