// data/h5ds_write.c: writes a megac token dataset (layout in h5ds.h and data/FORMAT.md).
//
// Tokens and document offsets are buffered and appended to extendible chunked datasets, so
// memory stays bounded whatever the corpus size. The datasets are created at the first flush:
// a dataset smaller than a chunk gets exactly one chunk of its own size (small files stay
// small), larger ones get H5DS_CHUNK-element chunks. Every chunk carries a Fletcher-32
// checksum that HDF5 verifies whenever the chunk is read.
#include "h5ds.h"
#include "core/check.h"  // defines: H5_CHECK, core_calloc

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>
#include <unistd.h>  // defines: ftruncate

#define H5DS_CHUNK ((size_t)1 << 16)   // elements per chunk (128 or 256 KiB of tokens): a
                                       // sample read reads and checksums its whole chunks
#define H5DS_BUFFER ((size_t)1 << 20)  // elements buffered before a write (whole chunks)

typedef struct {
    const char *name;
    hid_t file_type, mem_type;
    hid_t dset;           // -1 until the first flush
    void *buf;            // (H5DS_BUFFER) elements not yet written, of mem_type
    size_t elem, n_buf;   // element size in memory, elements buffered
    int64_t n_written;
} Appender;

struct H5dsWriter {
    char *path;
    hid_t file;
    int64_t vocab_size, eod_id;
    Appender tokens, offsets;
    int64_t n_tokens, n_docs;   // including buffered ones
    int64_t doc_end;            // tokens up to the end of the last finished document
    uint64_t *counts;           // (vocab_size) occurrences of each id, for the unigram entropy;
                                // NULL for vocabularies above H5DS_COUNT_MAX
    char why[512];              // the first write failure ("No space left on device"), or ""
    H5E_auto2_t old_fn;         // HDF5's error printing, off while the file is open
    void *old_data;
};

#define H5DS_COUNT_MAX (1 << 24)

static void app_init(Appender *a, const char *name, hid_t file_type, hid_t mem_type, size_t elem) {
    a->name = name;
    a->file_type = file_type;
    a->mem_type = mem_type;
    a->dset = -1;
    a->buf = core_calloc(H5DS_BUFFER, elem);
    a->elem = elem;
}

// Records the first write failure: the system's reason from HDF5's error stack (its
// innermost entry names errno's message for the sec2 driver), else the HDF5 call.
static void fail_io(H5dsWriter *w, const char *call) {
    if (w->why[0]) return;
    char h5[1024];
    core_hdf5_last_error(h5, sizeof h5);
    const char *m = strstr(h5, "error message = '");
    if (m) snprintf(w->why, sizeof w->why, "%.*s", (int)strcspn(m + 17, "'"), m + 17);
    else snprintf(w->why, sizeof w->why, "%s failed: %.400s", call, h5);
}

// Writes the buffered elements of a (creating its dataset at the first flush). On an I/O
// failure records it in w->why and writes nothing more.
static void app_flush(H5dsWriter *w, Appender *a) {
    if (w->why[0]) return;
    if (a->dset < 0) {  // created even when empty: an empty dataset is reported as such
        hid_t space, dcpl;
        hsize_t dims = 0, maxdims = H5S_UNLIMITED;
        hsize_t chunk = a->n_buf >= H5DS_CHUNK ? H5DS_CHUNK : (a->n_buf ? a->n_buf : 1);
        H5_CHECK(space = H5Screate_simple(1, &dims, &maxdims));
        H5_CHECK(dcpl = H5Pcreate(H5P_DATASET_CREATE));
        H5_CHECK(H5Pset_chunk(dcpl, 1, &chunk));
        H5_CHECK(H5Pset_fletcher32(dcpl));  // a checksum per chunk, verified on every read
        a->dset = H5Dcreate2(w->file, a->name, a->file_type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
        H5_CHECK(H5Pclose(dcpl));
        H5_CHECK(H5Sclose(space));
        if (a->dset < 0) {
            fail_io(w, "H5Dcreate2");
            return;
        }
    }
    if (a->n_buf == 0) return;
    hsize_t start = (hsize_t)a->n_written, count = a->n_buf, total = start + count;
    if (H5Dset_extent(a->dset, &total) < 0) {
        fail_io(w, "H5Dset_extent");
        return;
    }
    hid_t fspace, mspace;
    H5_CHECK(fspace = H5Dget_space(a->dset));
    H5_CHECK(H5Sselect_hyperslab(fspace, H5S_SELECT_SET, &start, NULL, &count, NULL));
    H5_CHECK(mspace = H5Screate_simple(1, &count, NULL));
    herr_t rc = H5Dwrite(a->dset, a->mem_type, mspace, fspace, H5P_DEFAULT, a->buf);
    if (rc < 0) fail_io(w, "H5Dwrite");  // before the closes clear the error stack
    H5_CHECK(H5Sclose(mspace));
    H5_CHECK(H5Sclose(fspace));
    if (rc < 0) return;
    a->n_written += (int64_t)a->n_buf;
    a->n_buf = 0;
}

static void app_push(H5dsWriter *w, Appender *a, const void *x) {
    memcpy((char *)a->buf + a->n_buf * a->elem, x, a->elem);
    if (++a->n_buf == H5DS_BUFFER) {
        app_flush(w, a);
        a->n_buf = 0;  // after a failure the elements are dropped: the file is abandoned
    }
}

static void write_attr(hid_t obj, const char *name, hid_t file_type, hid_t mem_type, const void *v) {
    hid_t space, attr;
    H5_CHECK(space = H5Screate(H5S_SCALAR));
    H5_CHECK(attr = H5Acreate2(obj, name, file_type, space, H5P_DEFAULT, H5P_DEFAULT));
    H5_CHECK(H5Awrite(attr, mem_type, v));
    H5_CHECK(H5Aclose(attr));
    H5_CHECK(H5Sclose(space));
}

static void write_str_attr(hid_t obj, const char *name, const char *s) {
    hid_t type;
    H5_CHECK(type = H5Tcopy(H5T_C_S1));
    H5_CHECK(H5Tset_size(type, strlen(s) ? strlen(s) : 1));
    H5_CHECK(H5Tset_strpad(type, H5T_STR_NULLPAD));
    write_attr(obj, name, type, type, s);
    H5_CHECK(H5Tclose(type));
}

H5dsWriter *h5ds_writer_create(const char *path, int64_t vocab_size, int64_t eod_id,
                               const char *tokenizer, char *err, size_t errlen) {
    if (vocab_size < 1 || vocab_size > ((int64_t)1 << 32) || eod_id < 0 || eod_id >= vocab_size) {
        snprintf(err, errlen, "%s: vocab_size %lld / eod_id %lld out of range", path,
                 (long long)vocab_size, (long long)eod_id);
        return NULL;
    }
    FILE *probe = fopen(path, "wb");  // a clear message for a bad directory or permissions
    if (!probe) {
        snprintf(err, errlen, "%s: cannot create: %s", path, strerror(errno));
        return NULL;
    }
    fclose(probe);
    hid_t fapl;
    H5_CHECK(fapl = H5Pcreate(H5P_FILE_ACCESS));
    // Format >= 1.8: checksummed metadata, and attributes larger than 64 KiB (the tokenizer).
    H5_CHECK(H5Pset_libver_bounds(fapl, H5F_LIBVER_V18, H5F_LIBVER_LATEST));
    H5dsWriter *w = core_calloc(1, sizeof *w);
    H5Eget_auto2(H5E_DEFAULT, &w->old_fn, &w->old_data);  // one line instead of HDF5's stack
    if (!getenv("MEGAC_HDF5_DEBUG")) H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    w->file = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    H5_CHECK(H5Pclose(fapl));
    if (w->file < 0) {
        char h5[512];
        core_hdf5_last_error(h5, sizeof h5);
        snprintf(err, errlen, "%s: cannot create: %s", path, h5);
        H5Eset_auto2(H5E_DEFAULT, w->old_fn, w->old_data);
        free(w);
        return NULL;
    }
    w->path = strdup(path);
    w->vocab_size = vocab_size;
    w->eod_id = eod_id;
    if (vocab_size <= H5DS_COUNT_MAX) w->counts = core_calloc((size_t)vocab_size, sizeof(uint64_t));
    hid_t tok_type = vocab_size <= 65536 ? H5T_STD_U16LE : H5T_STD_U32LE;
    app_init(&w->tokens, "tokens", tok_type, H5T_NATIVE_UINT32, sizeof(uint32_t));
    app_init(&w->offsets, "doc_offsets", H5T_STD_U64LE, H5T_NATIVE_UINT64, sizeof(uint64_t));
    uint64_t zero = 0;
    app_push(w, &w->offsets, &zero);
    int32_t version = H5DS_VERSION;
    write_str_attr(w->file, "format", H5DS_FORMAT);
    write_attr(w->file, "version", H5T_STD_I32LE, H5T_NATIVE_INT32, &version);
    write_attr(w->file, "vocab_size", H5T_STD_I64LE, H5T_NATIVE_INT64, &vocab_size);
    write_attr(w->file, "eod_id", H5T_STD_I64LE, H5T_NATIVE_INT64, &eod_id);
    write_str_attr(w->file, "tokenizer", tokenizer);
    return w;
}

int h5ds_writer_append(H5dsWriter *w, const uint32_t *ids, size_t n, char *err, size_t errlen) {
    if (w->why[0]) {
        snprintf(err, errlen, "%s: cannot write: %s", w->path, w->why);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        if ((int64_t)ids[i] >= w->vocab_size) {
            snprintf(err, errlen, "token id %u at position %lld is >= vocab_size %lld", ids[i],
                     (long long)w->n_tokens, (long long)w->vocab_size);
            return -1;
        }
        app_push(w, &w->tokens, &ids[i]);
        if (w->counts) w->counts[ids[i]]++;
        w->n_tokens++;
    }
    return 0;
}

void h5ds_writer_end_doc(H5dsWriter *w) {
    uint64_t end = (uint64_t)w->n_tokens;
    app_push(w, &w->offsets, &end);
    w->n_docs++;
    w->doc_end = w->n_tokens;
}

int64_t h5ds_writer_tokens(const H5dsWriter *w) { return w->n_tokens; }
int64_t h5ds_writer_docs(const H5dsWriter *w) { return w->n_docs; }

double h5ds_writer_unigram_entropy(const H5dsWriter *w) {
    if (!w->counts || w->n_tokens == 0) return NAN;
    double h = 0.0, n = (double)w->n_tokens;
    for (int64_t i = 0; i < w->vocab_size; i++)
        if (w->counts[i]) h -= (double)w->counts[i] / n * log((double)w->counts[i] / n);
    return h;
}

int h5ds_writer_close(H5dsWriter *w, char *err, size_t errlen) {
    if (!w) return 0;
    app_flush(w, &w->tokens);
    app_flush(w, &w->offsets);
    // Drop the tokens of an unfinished document.
    hsize_t committed = (hsize_t)w->doc_end;
    if (!w->why[0] && (int64_t)committed < w->tokens.n_written &&
        H5Dset_extent(w->tokens.dset, &committed) < 0)
        fail_io(w, "H5Dset_extent");
    if (w->tokens.dset >= 0 && H5Dclose(w->tokens.dset) < 0) fail_io(w, "H5Dclose");
    if (w->offsets.dset >= 0 && H5Dclose(w->offsets.dset) < 0) fail_io(w, "H5Dclose");
    if (w->why[0]) {  // the file is abandoned: free its space so HDF5 can close it cleanly
        int *fd = NULL;   // (else HDF5 keeps it open and says "infinite loop closing library")
        if (H5Fget_vfd_handle(w->file, H5P_DEFAULT, (void **)&fd) >= 0 && fd && ftruncate(*fd, 0)) {}
    }
    if (H5Fclose(w->file) < 0) fail_io(w, "H5Fclose");  // metadata goes out here
    H5Eset_auto2(H5E_DEFAULT, w->old_fn, w->old_data);
    int rc = w->why[0] ? -1 : 0;
    if (rc) snprintf(err, errlen, "%s: cannot write: %s", w->path, w->why);
    free(w->counts);
    free(w->tokens.buf);
    free(w->offsets.buf);
    free(w->path);
    free(w);
    return rc;
}
