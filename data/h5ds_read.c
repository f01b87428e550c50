// data/h5ds_read.c: opening, validating and reading megac token datasets (see h5ds.h).
//
// With MPI, rank 0 validates the file serially and broadcasts the verdict, the attributes and
// doc_offsets; then every rank opens the file on its own (HDF5's default driver, as
// checkpoints load: parallel HDF5 1.10 reads chunked datasets far slower through MPI-IO) and
// reads only its own token ranges (hyperslab reads, chunk cache off so a read touches only
// its bytes).
// A Megatron prefix takes the same steps with data/mmidx.c: rank 0 validates the index,
// every rank maps PREFIX.bin.
#include "h5ds.h"
#include "data/h5ds_check.h"  // defines: h5ds_validate, h5ds_h5_message, H5DS_ERRLEN
#include "data/mmidx.h"  // defines: mmidx_is_prefix, mmidx_validate, mmidx_map, mmidx_read
#include "core/check.h"  // defines: H5_CHECK, MPI_CHECK, core_usage_error, core_calloc

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>  // defines: stat, S_ISDIR, S_ISREG
#include <unistd.h>    // defines: access

#define ERRLEN H5DS_ERRLEN

static void dataset_free(H5Dataset *ds) {
    if (!ds) return;
    free(ds->path);
    free(ds->doc_offsets);
    free(ds->seq_offsets);
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
        snprintf(err, ERRLEN, "%s: damaged HDF5 file: %s", path, h5ds_h5_message(m));
        dataset_free(ds);
        return NULL;
    }
    if (h5ds_validate(ds->file, ds, path, err) == 0) return ds;
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
    int64_t hdr[9] = {0};
    if (rank == 0) {
        hdr[8] = ds->n_seqs;
        hdr[6] = ds->megatron;
        hdr[7] = ds->token_signed;
        hdr[0] = ds->n_tokens;
        hdr[1] = ds->n_docs;
        hdr[2] = ds->vocab_size;
        hdr[3] = ds->eod_id;
        hdr[4] = ds->token_bytes;
        hdr[5] = (int64_t)strlen(ds->tokenizer);
    }
    MPI_CHECK(MPI_Bcast(hdr, 9, MPI_INT64_T, 0, comm));
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
        ds->n_seqs = hdr[8];
        if (ds->megatron) ds->seq_offsets = core_calloc((size_t)ds->n_seqs + 1, sizeof(uint64_t));
    }
    bcast_big(ds->tokenizer, hdr[5], MPI_CHAR, 1, comm);
    bcast_big(ds->doc_offsets, ds->n_docs + 1, MPI_UINT64_T, sizeof(uint64_t), comm);
    if (ds->megatron) bcast_big(ds->seq_offsets, ds->n_seqs + 1, MPI_UINT64_T, sizeof(uint64_t), comm);
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
    // Every rank opens the file on its own; all must succeed (agreed below).
    H5E_auto2_t fn;
    void *fn_data;
    H5Eget_auto2(H5E_DEFAULT, &fn, &fn_data);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    ds->file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    ds->tokens = ds->file >= 0 ? open_tokens(ds->file) : -1;
    char m[256];
    int ok = ds->tokens >= 0, all_ok = 0;
    if (!ok) h5ds_h5_message(m);
    H5Eset_auto2(H5E_DEFAULT, fn, fn_data);
    MPI_CHECK(MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, comm));
    if (!all_ok) {
        snprintf(err, sizeof err, "%s: cannot be opened on every rank%s%s", path, ok ? "" : ": ", ok ? "" : m);
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
    if (rc < 0) h5ds_h5_message(m);  // before the closes clear HDF5's error stack
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
