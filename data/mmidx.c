// data/mmidx.c: Megatron-LM indexed datasets, memory-mapped (see mmidx.h).
#include "mmidx.h"
#include "core/check.h"  // defines: core_calloc

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define HEADER_BYTES 34
#define MAX_COUNT ((uint64_t)1 << 40)

int mmidx_is_prefix(const char *path) {
    struct stat st;
    char idx[4200];
    if (stat(path, &st) == 0 || strlen(path) > 4000) return 0;
    snprintf(idx, sizeof idx, "%s.idx", path);
    return stat(idx, &st) == 0;
}

// Element size and signedness of Megatron's dtype codes (integer types only).
static int dtype_info(uint8_t code, int *elem, int *is_signed) {
    static const int sizes[9] = {0, 1, 1, 2, 4, 8, 0, 0, 2}, signs[9] = {0, 0, 1, 1, 1, 1, 0, 0, 0};
    if (code > 8 || !sizes[code]) return -1;
    *elem = sizes[code];
    *is_signed = signs[code];
    return 0;
}

static uint64_t le64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

static int64_t le32s(const uint8_t *p) {
    return (int64_t)(int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
}

// Maps a whole file read-only; NULL with "path: reason" in err. *bytes gets its size.
static const uint8_t *map_file(const char *path, size_t *bytes, char *err, size_t errlen) {
    int fd = open(path, O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        if (fd >= 0) close(fd);
        return NULL;
    }
    if (!S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "%s: not a regular file", path);
        close(fd);
        return NULL;
    }
    *bytes = (size_t)st.st_size;
    void *p = *bytes ? mmap(NULL, *bytes, PROT_READ, MAP_PRIVATE, fd, 0) : (void *)"";
    int e = errno;
    close(fd);
    if (p == MAP_FAILED) {
        snprintf(err, errlen, "%s: cannot map: %s", path, strerror(e));
        return NULL;
    }
    return p;
}

static void unmap_file(const uint8_t *p, size_t bytes) {
    if (p && bytes) munmap((void *)p, bytes);
}

// Checks sizes, pointers (back to back from 0, ending at the .bin's size) and doc_idx, and
// builds seq_offsets over every sequence and doc_offsets over the non-empty documents.
static int check_index(H5Dataset *ds, const uint8_t *idx, uint64_t n_seq, uint64_t n_doc_idx,
                       uint64_t bin_bytes, const char *ipath, const char *bpath, char *err, size_t errlen) {
    const uint8_t *sizes = idx + HEADER_BYTES, *ptrs = sizes + 4 * n_seq, *docs = ptrs + 8 * n_seq;
    uint64_t at = 0, elem = (uint64_t)ds->token_bytes;
    ds->n_seqs = (int64_t)n_seq;
    ds->seq_offsets = core_calloc((size_t)n_seq + 1, sizeof(uint64_t));
    for (uint64_t s = 0; s < n_seq; s++) {
        int64_t size = le32s(sizes + 4 * s);
        uint64_t ptr = le64(ptrs + 8 * s);
        if (size < 0 || ptr != at) {
            snprintf(err, errlen, "%s: sequence %llu has %lld tokens at byte %llu of %s, expected a "
                     "non-negative size at byte %llu (sequences stored back to back, as Megatron writes "
                     "them)", ipath, (unsigned long long)s, (long long)size, (unsigned long long)ptr,
                     bpath, (unsigned long long)at);
            return -1;
        }
        at += (uint64_t)size * elem;
        ds->seq_offsets[s + 1] = ds->seq_offsets[s] + (uint64_t)size;
    }
    if (at != bin_bytes) {
        snprintf(err, errlen, "%s: %llu bytes, but %s describes %llu (%llu sequences of %llu-byte "
                 "tokens)", bpath, (unsigned long long)bin_bytes, ipath, (unsigned long long)at,
                 (unsigned long long)n_seq, (unsigned long long)elem);
        return -1;
    }
    if (le64(docs) != 0 || le64(docs + 8 * (n_doc_idx - 1)) != n_seq) {
        snprintf(err, errlen, "%s: doc_idx runs from %llu to %llu, expected 0 to the %llu sequences",
                 ipath, (unsigned long long)le64(docs), (unsigned long long)le64(docs + 8 * (n_doc_idx - 1)),
                 (unsigned long long)n_seq);
        return -1;
    }
    ds->doc_offsets = core_calloc((size_t)n_doc_idx, sizeof(uint64_t));
    int64_t n = 0;
    uint64_t tok = 0;  // tokens before sequence seq
    for (uint64_t d = 1, seq = 0; d < n_doc_idx; d++) {
        uint64_t end = le64(docs + 8 * d);
        if (end < seq || end > n_seq) {
            snprintf(err, errlen, "%s: doc_idx[%llu] = %llu is not in [%llu, %llu] (doc_idx must not "
                     "decrease)", ipath, (unsigned long long)d, (unsigned long long)end,
                     (unsigned long long)seq, (unsigned long long)n_seq);
            return -1;
        }
        for (; seq < end; seq++) tok += (uint64_t)le32s(sizes + 4 * seq);
        if (tok > ds->doc_offsets[n]) ds->doc_offsets[++n] = tok;  // empty documents dropped
    }
    ds->n_docs = n;
    ds->n_tokens = (int64_t)tok;
    if (n < 1) {
        snprintf(err, errlen, "%s: no documents with tokens (%llu document indices)", ipath,
                 (unsigned long long)n_doc_idx);
        return -1;
    }
    return 0;
}

int mmidx_validate(H5Dataset *ds, const char *prefix, int64_t vocab_size, int64_t eod_id,
                   char *err, size_t errlen) {
    char ipath[4200], bpath[4200];
    snprintf(ipath, sizeof ipath, "%s.idx", prefix);
    snprintf(bpath, sizeof bpath, "%s.bin", prefix);
    struct stat sb;
    if (stat(bpath, &sb) != 0) {
        snprintf(err, errlen, "%s: %s (a Megatron prefix needs PREFIX.idx and PREFIX.bin)", bpath, strerror(errno));
        return -1;
    }
    if (vocab_size < 1 || vocab_size > ((int64_t)1 << 32) || eod_id < 0 || eod_id >= vocab_size) {
        snprintf(err, errlen, "%s: a Megatron .bin/.idx dataset carries no vocabulary: give --vocab-size "
                 "(got vocab_size %lld, end-of-document id %lld)", prefix, (long long)vocab_size, (long long)eod_id);
        return -1;
    }
    size_t bytes = 0;
    const uint8_t *idx = map_file(ipath, &bytes, err, errlen);
    if (!idx) return -1;
    int rc = -1, is_signed = 0;
    uint8_t code = bytes >= HEADER_BYTES ? idx[17] : 0;
    uint64_t version = bytes >= HEADER_BYTES ? le64(idx + 9) : 0;
    uint64_t n_seq = bytes >= HEADER_BYTES ? le64(idx + 18) : 0, n_doc = bytes >= HEADER_BYTES ? le64(idx + 26) : 0;
    if (bytes < HEADER_BYTES || memcmp(idx, "MMIDIDX\0\0", 9)) {
        snprintf(err, errlen, "%s: not a Megatron indexed dataset (magic MMIDIDX missing)", ipath);
    } else if (version != 1) {
        snprintf(err, errlen, "%s: Megatron index version %llu, megac reads version 1", ipath,
                 (unsigned long long)version);
    } else if (dtype_info(code, &ds->token_bytes, &is_signed)) {
        snprintf(err, errlen, "%s: token type code %d is not an integer type", ipath, code);
    } else if (n_seq > MAX_COUNT || n_doc > MAX_COUNT || n_doc < 1 ||
               (uint64_t)bytes != HEADER_BYTES + 12 * n_seq + 8 * n_doc) {
        snprintf(err, errlen, "%s: size %zu does not match its header (%llu sequences, %llu document "
                 "indices)", ipath, bytes, (unsigned long long)n_seq, (unsigned long long)n_doc);
    } else {
        ds->token_signed = is_signed;
        ds->vocab_size = vocab_size;
        ds->eod_id = eod_id;
        rc = check_index(ds, idx, n_seq, n_doc, (uint64_t)sb.st_size, ipath, bpath, err, errlen);
    }
    unmap_file(idx, bytes);
    if (rc == 0) ds->tokenizer = strdup("external");
    ds->megatron = 1;
    return rc;
}

int mmidx_map(H5Dataset *ds, char *err, size_t errlen) {
    char bpath[4200];
    snprintf(bpath, sizeof bpath, "%s.bin", ds->path);
    size_t bytes = 0;
    const uint8_t *p = map_file(bpath, &bytes, err, errlen);
    if (!p) return -1;
    if (bytes != (size_t)ds->n_tokens * (size_t)ds->token_bytes) {
        snprintf(err, errlen, "%s: %zu bytes, expected %lld tokens of %d bytes (changed since it was "
                 "checked?)", bpath, bytes, (long long)ds->n_tokens, ds->token_bytes);
        unmap_file(p, bytes);
        return -1;
    }
    ds->bin = p;
    ds->bin_bytes = bytes;
    return 0;
}

int64_t mmidx_read(const H5Dataset *ds, int64_t start, int64_t n, uint32_t *out) {
    const int elem = ds->token_bytes;
    const uint8_t *b = ds->bin + (size_t)start * (size_t)elem;
    const uint64_t vocab = (uint64_t)ds->vocab_size;
    for (int64_t i = 0; i < n; i++, b += elem) {
        uint64_t v = 0;
        for (int k = elem - 1; k >= 0; k--) v = v << 8 | b[k];
        int negative = ds->token_signed && (v >> (8 * elem - 1)) & 1;
        out[i] = (uint32_t)v;
        if (negative || v >= vocab) return i;
    }
    return -1;
}

void mmidx_unmap(H5Dataset *ds) {
    unmap_file(ds->bin, ds->bin_bytes);
    ds->bin = NULL;
    ds->bin_bytes = 0;
}
