// data/h5ds_read.c: opening, validating and reading megac token datasets (see h5ds.h).
//
// With MPI, rank 0 validates the file serially and broadcasts the verdict, the attributes and
// doc_offsets; then every rank opens the file with MPI-IO and reads only its own token
// ranges (independent hyperslab reads, chunk cache off so a read touches only its bytes).
// A Megatron prefix takes the same steps with data/mmidx.c: rank 0 validates the index,
// every rank maps PREFIX.bin.
#include "h5ds.h"
#include "data/mmidx.h"  // defines: mmidx_is_prefix, mmidx_validate, mmidx_map, mmidx_read
#include "core/check.h"  // defines: H5_CHECK, MPI_CHECK, core_usage_error, core_calloc

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>  // defines: stat, S_ISDIR, S_ISREG
#include <unistd.h>    // defines: access

#define ERRLEN 1024

// The innermost message of HDF5's error stack ("truncated file ...").
static const char *h5_message(char buf[256]) {
    core_hdf5_last_error(buf, 256);
    return buf;
}

// Reads a scalar integer attribute of the root group; -1 with a message when absent or wrong.
static int attr_int(hid_t file, const char *name, int64_t *out, const char *path, char *err) {
    hid_t a = H5Aexists(file, name) > 0 ? H5Aopen(file, name, H5P_DEFAULT) : -1;
    hid_t t = a >= 0 ? H5Aget_type(a) : -1, s = a >= 0 ? H5Aget_space(a) : -1;
    int ok = t >= 0 && s >= 0 && H5Tget_class(t) == H5T_INTEGER && H5Sget_simple_extent_npoints(s) == 1 &&
             H5Aread(a, H5T_NATIVE_INT64, out) >= 0;
    if (s >= 0) H5Sclose(s);
    if (t >= 0) H5Tclose(t);
    if (a >= 0) H5Aclose(a);
    if (!ok) snprintf(err, ERRLEN, "%s: attribute '%s' is missing or not an integer", path, name);
    return ok ? 0 : -1;
}

// Reads a scalar string attribute (fixed or variable length) into a malloc'ed string. A
// fixed length larger than the file is damage, not a string.
static char *attr_str(hid_t file, const char *name, const char *path, char *err) {
    hsize_t file_size = 0;
    H5Fget_filesize(file, &file_size);
    char *out = NULL;
    hid_t a = H5Aexists(file, name) > 0 ? H5Aopen(file, name, H5P_DEFAULT) : -1;
    hid_t t = a >= 0 ? H5Aget_type(a) : -1, s = a >= 0 ? H5Aget_space(a) : -1;
    if (t >= 0 && s >= 0 && H5Tget_class(t) == H5T_STRING && H5Sget_simple_extent_npoints(s) == 1) {
        hid_t mt = H5Tcopy(H5T_C_S1);
        if (H5Tis_variable_str(t) > 0) {
            char *v = NULL;
            H5Tset_size(mt, H5T_VARIABLE);
            if (H5Aread(a, mt, &v) >= 0 && v) out = strdup(v);
            if (v) H5free_memory(v);
        } else {
            size_t n = H5Tget_size(t);
            if (n > 0 && n <= file_size) {
                out = core_calloc(n + 1, 1);
                H5Tset_size(mt, n);
                H5Tset_strpad(mt, H5T_STR_NULLPAD);  // all n bytes, whatever the padding
                if (H5Aread(a, mt, out) < 0) { free(out); out = NULL; }
            }
        }
        H5Tclose(mt);
    }
    if (s >= 0) H5Sclose(s);
    if (t >= 0) H5Tclose(t);
    if (a >= 0) H5Aclose(a);
    if (!out) snprintf(err, ERRLEN, "%s: attribute '%s' is missing or not a string", path, name);
    return out;
}

// Length of a 1-D integer dataset of element size in sizes[]; -1 with a message otherwise.
static int64_t dset_len(hid_t d, const char *name, int want_unsigned, const int *sizes, int n_sizes,
                        int *elem, const char *path, char *err) {
    hid_t t = H5Dget_type(d), s = H5Dget_space(d);
    hsize_t dims[2] = {0, 0};
    int rank = s >= 0 ? H5Sget_simple_extent_ndims(s) : -1;
    if (rank == 1) H5Sget_simple_extent_dims(s, dims, NULL);
    int ok = t >= 0 && rank == 1 && H5Tget_class(t) == H5T_INTEGER &&
             (!want_unsigned || H5Tget_sign(t) == H5T_SGN_NONE);
    *elem = t >= 0 ? (int)H5Tget_size(t) : 0;
    int size_ok = 0;
    for (int i = 0; i < n_sizes; i++) size_ok |= (*elem == sizes[i]);
    if (s >= 0) H5Sclose(s);
    if (t >= 0) H5Tclose(t);
    if (!ok || !size_ok) {
        snprintf(err, ERRLEN, "%s: dataset '%s' must be 1-D %s (got %d-D, %d-byte elements)", path, name,
                 want_unsigned ? "uint16 or uint32" : "64-bit integers", rank, *elem);
        return -1;
    }
    return (int64_t)dims[0];
}

// Damaged metadata can claim more bytes than the file holds, and HDF5 would then allocate
// them: the dataset's storage must fit in the file, and (unfiltered or only checksummed,
// as the writer makes them) hold all n elements.
static int check_storage(hid_t file, hid_t d, const char *name, int64_t n, int elem, const char *path,
                         char *err) {
    hsize_t file_size = 0, stored = H5Dget_storage_size(d);
    H5Fget_filesize(file, &file_size);
    hid_t dcpl = H5Dget_create_plist(d);
    int filters = dcpl >= 0 ? H5Pget_nfilters(dcpl) : 0, compressing = 0;
    for (int i = 0; i < filters; i++) {  // Fletcher-32 only adds 4 bytes per chunk
        unsigned flags = 0;
        size_t nv = 0;
        compressing |= H5Pget_filter2(dcpl, (unsigned)i, &flags, &nv, NULL, 0, NULL, NULL) !=
                       H5Z_FILTER_FLETCHER32;
    }
    if (dcpl >= 0) H5Pclose(dcpl);
    if (stored > file_size || (!compressing && (hsize_t)n * (hsize_t)elem > stored)) {
        snprintf(err, ERRLEN, "%s: damaged file: dataset '%s' has %lld elements, %llu bytes stored, in a "
                 "%llu-byte file", path, name, (long long)n, (unsigned long long)stored,
                 (unsigned long long)file_size);
        return -1;
    }
    return 0;
}

// Checks doc_offsets: starts at 0, strictly increasing (every document has its EOD), ends at
// n_tokens.
static int check_offsets(const H5Dataset *ds, const char *path, char *err) {
    const uint64_t *o = ds->doc_offsets;
    if (o[0] != 0) {
        snprintf(err, ERRLEN, "%s: doc_offsets[0] = %llu, expected 0", path, (unsigned long long)o[0]);
        return -1;
    }
    for (int64_t d = 0; d < ds->n_docs; d++)
        if (o[d + 1] <= o[d]) {
            snprintf(err, ERRLEN, "%s: doc_offsets not increasing at document %lld (%llu then %llu)",
                     path, (long long)d, (unsigned long long)o[d], (unsigned long long)o[d + 1]);
            return -1;
        }
    if (o[ds->n_docs] != (uint64_t)ds->n_tokens) {
        snprintf(err, ERRLEN, "%s: doc_offsets ends at %llu but there are %lld tokens", path,
                 (unsigned long long)o[ds->n_docs], (long long)ds->n_tokens);
        return -1;
    }
    return 0;
}

// Checks /tokens and /doc_offsets (types, shapes, storage) and reads + checks the offsets.
static int validate_datasets(hid_t file, H5Dataset *ds, const char *path, char *err) {
    if (H5Lexists(file, "tokens", H5P_DEFAULT) <= 0 || H5Lexists(file, "doc_offsets", H5P_DEFAULT) <= 0) {
        snprintf(err, ERRLEN, "%s: dataset 'tokens' or 'doc_offsets' is missing", path);
        return -1;
    }
    hid_t tok = H5Dopen2(file, "tokens", H5P_DEFAULT), off = H5Dopen2(file, "doc_offsets", H5P_DEFAULT);
    const int tok_sizes[2] = {2, 4}, off_sizes[1] = {8};
    int elem = 0, rc = -1;
    int64_t n_off = -1;
    char m[256];
    if (tok < 0 || off < 0) {
        snprintf(err, ERRLEN, "%s: cannot open 'tokens' / 'doc_offsets': %s", path, h5_message(m));
    } else if ((ds->n_tokens = dset_len(tok, "tokens", 1, tok_sizes, 2, &ds->token_bytes, path, err)) >= 0 &&
               (n_off = dset_len(off, "doc_offsets", 0, off_sizes, 1, &elem, path, err)) >= 0) {
        ds->n_docs = n_off - 1;
        if (ds->n_docs < 1 || ds->n_tokens < 1) {
            snprintf(err, ERRLEN, "%s: empty dataset (%lld documents, %lld tokens)", path,
                     (long long)(ds->n_docs > 0 ? ds->n_docs : 0), (long long)ds->n_tokens);
        } else if (check_storage(file, tok, "tokens", ds->n_tokens, ds->token_bytes, path, err) == 0 &&
                   check_storage(file, off, "doc_offsets", n_off, elem, path, err) == 0) {
            ds->doc_offsets = core_calloc((size_t)n_off, sizeof(uint64_t));
            if (H5Dread(off, H5T_NATIVE_UINT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, ds->doc_offsets) >= 0)
                rc = check_offsets(ds, path, err);
            else if (strstr(h5_message(m), "Fletcher32"))  // a chunk's checksum did not match
                snprintf(err, ERRLEN, "%s: dataset /doc_offsets: checksum mismatch (Fletcher-32): "
                         "the file is damaged", path);
            else
                snprintf(err, ERRLEN, "%s: cannot read doc_offsets: %s", path, m);
        }
    }
    if (tok >= 0) H5Dclose(tok);
    if (off >= 0) H5Dclose(off);
    return rc;
}

// Validates the attributes and datasets of an open file and fills ds (except handles).
static int validate(hid_t file, H5Dataset *ds, const char *path, char *err) {
    char *format = attr_str(file, "format", path, err);
    if (!format || strcmp(format, H5DS_FORMAT)) {
        snprintf(err, ERRLEN, "%s: not a megac token dataset (attribute 'format' %s%s%s)", path,
                 format ? "is '" : "is missing", format ? format : "", format ? "'" : "");
        free(format);
        return -1;
    }
    free(format);
    int64_t version;
    if (attr_int(file, "version", &version, path, err)) return -1;
    if (version != H5DS_VERSION) {
        snprintf(err, ERRLEN, "%s: format version %lld is not supported (this megac reads version %d)",
                 path, (long long)version, H5DS_VERSION);
        return -1;
    }
    if (attr_int(file, "vocab_size", &ds->vocab_size, path, err) ||
        attr_int(file, "eod_id", &ds->eod_id, path, err))
        return -1;
    if (ds->vocab_size < 1 || ds->vocab_size > ((int64_t)1 << 32) || ds->eod_id < 0 ||
        ds->eod_id >= ds->vocab_size) {
        snprintf(err, ERRLEN, "%s: vocab_size %lld / eod_id %lld out of range", path,
                 (long long)ds->vocab_size, (long long)ds->eod_id);
        return -1;
    }
    if (!(ds->tokenizer = attr_str(file, "tokenizer", path, err))) return -1;
    return validate_datasets(file, ds, path, err);
}

static void dataset_free(H5Dataset *ds) {
    if (!ds) return;
    free(ds->path);
    free(ds->doc_offsets);
    free(ds->tokenizer);
    free(ds);
}

// Validates a Megatron prefix (mmidx_validate); NULL with a message on any problem.
static H5Dataset *open_megatron(const char *path, const H5dsVocab *v, char *err) {
    H5Dataset *ds = core_calloc(1, sizeof *ds);
    ds->path = strdup(path);
    ds->file = ds->tokens = -1;
    if (mmidx_validate(ds, path, v ? v->vocab_size : 0, v ? v->eod_id : 0, err, ERRLEN) == 0) return ds;
    dataset_free(ds);
    return NULL;
}

// Opens path (serially) and validates it; NULL with a message on any problem.
static H5Dataset *open_checked(const char *path, const H5dsVocab *v, char *err) {
    struct stat st;
    if (mmidx_is_prefix(path)) return open_megatron(path, v, err);
    if (stat(path, &st) != 0) {
        snprintf(err, ERRLEN, "%s: %s (neither an HDF5 token file nor a Megatron prefix with "
                 "%s.idx and %s.bin)", path, strerror(errno), path, path);
        return NULL;
    }
    if (S_ISDIR(st.st_mode)) {
        snprintf(err, ERRLEN, "%s: is a directory, not a token dataset", path);
        return NULL;
    }
    if (!S_ISREG(st.st_mode)) {  // a FIFO would block the open forever, a device never ends
        snprintf(err, ERRLEN, "%s: not a regular file (a FIFO, socket or device): give the "
                 "token file from `megac preprocess`", path);
        return NULL;
    }
    if (access(path, R_OK) != 0) {  // HDF5 would call it "not an HDF5 file"
        snprintf(err, ERRLEN, "%s: %s", path, strerror(errno));
        return NULL;
    }
    if (H5Fis_hdf5(path) <= 0) {
        snprintf(err, ERRLEN, "%s: not an HDF5 file", path);
        return NULL;
    }
    H5Dataset *ds = core_calloc(1, sizeof *ds);
    ds->path = strdup(path);
    ds->file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    ds->tokens = -1;
    if (ds->file < 0) {
        char m[256];
        snprintf(err, ERRLEN, "%s: damaged HDF5 file: %s", path, h5_message(m));
        dataset_free(ds);
        return NULL;
    }
    if (validate(ds->file, ds, path, err) == 0) return ds;
    H5Fclose(ds->file);
    dataset_free(ds);
    return NULL;
}

// Opens /tokens for reading with the chunk cache off (reads touch only the selected bytes).
static hid_t open_tokens(hid_t file) {
    hid_t dapl = H5Pcreate(H5P_DATASET_ACCESS);
    H5Pset_chunk_cache(dapl, 0, 0, H5D_CHUNK_CACHE_W0_DEFAULT);
    hid_t d = H5Dopen2(file, "tokens", dapl);
    H5Pclose(dapl);
    return d;
}

H5Dataset *h5ds_open_serial(const char *path, const H5dsVocab *vocab, char *err, size_t errlen) {
    char msg[ERRLEN];
    if (mmidx_is_prefix(path)) {
        H5Dataset *ds = open_megatron(path, vocab, msg);
        if (ds && mmidx_map(ds, msg, sizeof msg)) {
            dataset_free(ds);
            ds = NULL;
        }
        if (!ds) snprintf(err, errlen, "%s", msg);
        return ds;
    }
    H5E_auto2_t fn;
    void *fn_data;
    H5Eget_auto2(H5E_DEFAULT, &fn, &fn_data);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);  // our own one-line messages instead of HDF5's stack
    H5Dataset *ds = open_checked(path, vocab, msg);
    if (ds && (ds->tokens = open_tokens(ds->file)) < 0) {
        snprintf(msg, sizeof msg, "%s: cannot open dataset 'tokens'", path);
        H5Fclose(ds->file);
        dataset_free(ds);
        ds = NULL;
    }
    H5Eset_auto2(H5E_DEFAULT, fn, fn_data);
    if (!ds) snprintf(err, errlen, "%s", msg);
    return ds;
}

// A problem every rank of comm agrees on: one message (from rank 0 of comm), exit code 2.
static CORE_NORETURN void fail_all(MPI_Comm comm, const char *msg) {
    int rank = 0;
    MPI_Comm_rank(comm, &rank);
    if (rank == 0 && core_world_rank() != 0) fprintf(stderr, "megac: %s\n", msg);
    core_usage_error("%s", msg);
}

// A problem only this rank sees (a bad token in its sample): message from here, exit code 2
// for the whole job (MPI_Abort, so no other rank waits forever in a collective).
static CORE_NORETURN void fail_here(const char *msg) {
    int init = 0, fin = 0, size = 1;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    if (init && !fin) MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size <= 1) core_usage_error("%s", msg);
    fprintf(stderr, "megac: [rank %d] %s\n", core_world_rank(), msg);
    core_abort_job(2);
}

// Broadcasts n elements from rank 0 in pieces that fit an int count.
static void bcast_big(void *buf, int64_t n, MPI_Datatype type, size_t elem, MPI_Comm comm) {
    const int64_t piece = (int64_t)1 << 26;
    for (int64_t i = 0; i < n; i += piece) {
        int count = (int)(n - i < piece ? n - i : piece);
        MPI_CHECK(MPI_Bcast((char *)buf + (size_t)i * elem, count, type, 0, comm));
    }
}

// Rank 0 validated ds; every other rank receives its fields.
static H5Dataset *share_metadata(H5Dataset *ds, const char *path, int rank, MPI_Comm comm) {
    if (rank != 0) {
        ds = core_calloc(1, sizeof *ds);
        ds->path = strdup(path);
    }
    int64_t hdr[8] = {0};
    if (rank == 0) {
        hdr[6] = ds->megatron;
        hdr[7] = ds->token_signed;
        hdr[0] = ds->n_tokens;
        hdr[1] = ds->n_docs;
        hdr[2] = ds->vocab_size;
        hdr[3] = ds->eod_id;
        hdr[4] = ds->token_bytes;
        hdr[5] = (int64_t)strlen(ds->tokenizer);
    }
    MPI_CHECK(MPI_Bcast(hdr, 8, MPI_INT64_T, 0, comm));
    if (rank != 0) {
        ds->megatron = (int)hdr[6];
        ds->token_signed = (int)hdr[7];
        ds->file = ds->tokens = -1;
        ds->n_tokens = hdr[0];
        ds->n_docs = hdr[1];
        ds->vocab_size = hdr[2];
        ds->eod_id = hdr[3];
        ds->token_bytes = (int)hdr[4];
        ds->tokenizer = core_calloc((size_t)hdr[5] + 1, 1);
        ds->doc_offsets = core_calloc((size_t)ds->n_docs + 1, sizeof(uint64_t));
    }
    bcast_big(ds->tokenizer, hdr[5], MPI_CHAR, 1, comm);
    bcast_big(ds->doc_offsets, ds->n_docs + 1, MPI_UINT64_T, sizeof(uint64_t), comm);
    return ds;
}

// Every rank of comm maps PREFIX.bin (collective); one message and exit 2 if any cannot.
static void map_everywhere(H5Dataset *ds, MPI_Comm comm) {
    char err[ERRLEN] = "";
    int ok = mmidx_map(ds, err, sizeof err) == 0, all_ok = 0;
    MPI_CHECK(MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, comm));
    if (all_ok) return;
    if (!ok) fail_here(err);  // this rank names its reason; the others wait to be ended
    MPI_CHECK(MPI_Barrier(comm));
}

H5Dataset *h5ds_open(const char *path, const H5dsVocab *vocab, MPI_Comm comm) {
    char err[ERRLEN] = "";
    if (comm == MPI_COMM_NULL) {
        H5Dataset *ds = h5ds_open_serial(path, vocab, err, sizeof err);
        if (!ds) core_usage_error("%s", err);
        return ds;
    }
    int rank;
    MPI_CHECK(MPI_Comm_rank(comm, &rank));
    H5Dataset *ds = NULL;
    if (rank == 0 && (ds = h5ds_open_serial(path, vocab, err, sizeof err))) {
        if (ds->megatron) {
            mmidx_unmap(ds);
        } else {
            H5Dclose(ds->tokens);
            H5Fclose(ds->file);
        }
    }
    MPI_CHECK(MPI_Bcast(err, ERRLEN, MPI_CHAR, 0, comm));
    if (err[0]) fail_all(comm, err);
    ds = share_metadata(ds, path, rank, comm);
    if (ds->megatron) {
        map_everywhere(ds, comm);
        ds->parallel = 1;
        return ds;
    }
    // Every rank opens the file with MPI-IO (collective).
    H5E_auto2_t fn;
    void *fn_data;
    H5Eget_auto2(H5E_DEFAULT, &fn, &fn_data);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    hid_t fapl;
    H5_CHECK(fapl = H5Pcreate(H5P_FILE_ACCESS));
    H5_CHECK(H5Pset_fapl_mpio(fapl, comm, MPI_INFO_NULL));
    ds->file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    ds->tokens = ds->file >= 0 ? open_tokens(ds->file) : -1;
    H5Pclose(fapl);
    char m[256];
    int ok = ds->tokens >= 0, all_ok = 0;
    if (!ok) h5_message(m);
    H5Eset_auto2(H5E_DEFAULT, fn, fn_data);
    MPI_CHECK(MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, comm));
    if (!all_ok) {
        snprintf(err, sizeof err, "%s: cannot open with MPI-IO on every rank%s%s", path, ok ? "" : ": ", ok ? "" : m);
        fail_all(comm, err);
    }
    ds->parallel = 1;
    return ds;
}

void h5ds_read(H5Dataset *ds, int64_t start, int64_t n, uint32_t *out) {
    if (start < 0 || n < 0 || start + n > ds->n_tokens)
        core_fatal("h5ds_read: tokens [%lld, %lld) outside %s's %lld tokens", (long long)start,
                   (long long)(start + n), ds->path, (long long)ds->n_tokens);
    if (n == 0) return;
    char msg[ERRLEN];
    if (ds->megatron) {
        int64_t bad = mmidx_read(ds, start, n, out);
        if (bad < 0) return;
        snprintf(msg, sizeof msg, "%s.bin: the token at position %lld is outside [0, vocab_size %lld) "
                 "(damaged file, or --vocab-size too small)", ds->path, (long long)(start + bad),
                 (long long)ds->vocab_size);
        fail_here(msg);
    }
    hsize_t off = (hsize_t)start, count = (hsize_t)n;
    hid_t fs = H5Dget_space(ds->tokens), ms = H5Screate_simple(1, &count, NULL);
    herr_t rc = fs >= 0 && ms >= 0 ? H5Sselect_hyperslab(fs, H5S_SELECT_SET, &off, NULL, &count, NULL) : -1;
    H5E_auto2_t fn;
    void *fn_data;
    H5Eget_auto2(H5E_DEFAULT, &fn, &fn_data);  // one line below instead of HDF5's stack
    if (!getenv("MEGAC_HDF5_DEBUG")) H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    if (rc >= 0) rc = H5Dread(ds->tokens, H5T_NATIVE_UINT32, ms, fs, H5P_DEFAULT, out);
    char m[256] = "";
    if (rc < 0) h5_message(m);  // before the closes clear HDF5's error stack
    H5Eset_auto2(H5E_DEFAULT, fn, fn_data);
    if (ms >= 0) H5Sclose(ms);
    if (fs >= 0) H5Sclose(fs);
    if (rc < 0) {
        if (strstr(m, "Fletcher32"))  // a chunk's checksum did not match its bytes
            snprintf(msg, sizeof msg, "%s: dataset /tokens: checksum mismatch (Fletcher-32) in the "
                     "chunk holding tokens [%lld, %lld): the file is damaged", ds->path,
                     (long long)start, (long long)(start + n));
        else
            snprintf(msg, sizeof msg, "%s: cannot read tokens [%lld, %lld): %s", ds->path,
                     (long long)start, (long long)(start + n), m);
        fail_here(msg);
    }
    for (int64_t i = 0; i < n; i++)
        if (out[i] >= (uint64_t)ds->vocab_size) {
            snprintf(msg, sizeof msg, "%s: token id %u at position %lld is >= vocab_size %lld "
                     "(damaged file, or written for another vocabulary)", ds->path, out[i],
                     (long long)(start + i), (long long)ds->vocab_size);
            fail_here(msg);
        }
}

void h5ds_close(H5Dataset *ds) {
    if (!ds) return;
    if (ds->megatron) mmidx_unmap(ds);
    if (ds->tokens >= 0) H5Dclose(ds->tokens);
    if (ds->file >= 0) H5Fclose(ds->file);
    dataset_free(ds);
}
