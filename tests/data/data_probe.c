// tests/data/data_probe.c: a small tool for the data CLI tests.
//   data_probe make KIND OUT        writes a synthetic dataset, good or damaged in one way:
//                                   good, version2, format, badtoken, empty, short, offsets;
//                                   or good with its string attributes in UTF-8, as h5py
//                                   writes a str: utf8 (variable length), utf8fixed
//   data_probe read FILE T N SPLIT  (under mpiexec) opens FILE on every rank, builds the train
//                                   split for N samples of T + 1 tokens, every rank reads its
//                                   share; prints "ok" on rank 0. Problems exit with code 2.
#include "core/check.h"
#include "data/sampler.h"
#include "tests/data/synth.h"

#include <hdf5.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void set_int_attr(hid_t f, const char *name, int64_t v) {
    hid_t a;
    H5_CHECK(a = H5Aopen(f, name, H5P_DEFAULT));
    H5_CHECK(H5Awrite(a, H5T_NATIVE_INT64, &v));
    H5_CHECK(H5Aclose(a));
}

// Writes value v at index i of a 1-D dataset.
static void poke(hid_t f, const char *dset, hsize_t i, uint64_t v) {
    hid_t d, fs, ms;
    hsize_t one = 1;
    H5_CHECK(d = H5Dopen2(f, dset, H5P_DEFAULT));
    H5_CHECK(fs = H5Dget_space(d));
    H5_CHECK(H5Sselect_hyperslab(fs, H5S_SELECT_SET, &i, NULL, &one, NULL));
    H5_CHECK(ms = H5Screate_simple(1, &one, NULL));
    H5_CHECK(H5Dwrite(d, H5T_NATIVE_UINT64, ms, fs, H5P_DEFAULT, &v));
    H5_CHECK(H5Sclose(ms));
    H5_CHECK(H5Sclose(fs));
    H5_CHECK(H5Dclose(d));
}

// Replaces string attribute `name` by `value` in UTF-8, of variable or fixed length.
static void set_utf8_attr(hid_t f, const char *name, const char *value, int variable) {
    hid_t t, s, a;
    H5_CHECK(H5Adelete(f, name));
    H5_CHECK(t = H5Tcopy(H5T_C_S1));
    H5_CHECK(H5Tset_size(t, variable ? H5T_VARIABLE : strlen(value)));
    H5_CHECK(H5Tset_cset(t, H5T_CSET_UTF8));
    H5_CHECK(s = H5Screate(H5S_SCALAR));
    H5_CHECK(a = H5Acreate2(f, name, t, s, H5P_DEFAULT, H5P_DEFAULT));
    H5_CHECK(variable ? H5Awrite(a, t, &value) : H5Awrite(a, t, value));
    H5Aclose(a); H5Sclose(s); H5Tclose(t);
}

static int make(const char *kind, const char *out) {
    if (!strcmp(kind, "empty")) return synth_write(out, 0, 10, 257, 1), 0;
    if (!strcmp(kind, "short")) return synth_write(out, 1, 5, 257, 1), 0;
    synth_write(out, 50, 20, 257, 1);  // token = position mod 257: ids up to 256
    hid_t f;
    H5_CHECK(f = H5Fopen(out, H5F_ACC_RDWR, H5P_DEFAULT));
    if (!strcmp(kind, "version2")) set_int_attr(f, "version", 2);
    else if (!strcmp(kind, "badtoken")) poke(f, "tokens", 300, 4000);
    else if (!strcmp(kind, "offsets")) poke(f, "doc_offsets", 3, 0);
    else if (!strcmp(kind, "utf8") || !strcmp(kind, "utf8fixed")) {
        set_utf8_attr(f, "format", "megac-tokens", !strcmp(kind, "utf8"));
        set_utf8_attr(f, "tokenizer", "byte", !strcmp(kind, "utf8"));
    } else if (!strcmp(kind, "format")) {
        H5_CHECK(H5Adelete(f, "format"));
        hid_t t, s, a;
        H5_CHECK(t = H5Tcopy(H5T_C_S1));
        H5_CHECK(H5Tset_size(t, 5));
        H5_CHECK(s = H5Screate(H5S_SCALAR));
        H5_CHECK(a = H5Acreate2(f, "format", t, s, H5P_DEFAULT, H5P_DEFAULT));
        H5_CHECK(H5Awrite(a, t, "other"));
        H5Aclose(a); H5Sclose(s); H5Tclose(t);
    } else if (strcmp(kind, "good")) {
        fprintf(stderr, "data_probe: unknown kind %s\n", kind);
        return 1;
    }
    H5_CHECK(H5Fclose(f));
    return 0;
}

static int read_all(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    H5Dataset *ds = h5ds_open(argv[2], NULL, MPI_COMM_WORLD);
    DataSplit *sp = data_split_new(ds, argv[5], DATA_TRAIN, atoi(argv[3]), 1234, atoll(argv[4]));
    uint32_t *tok = core_calloc((size_t)sp->seq_length + 1, sizeof(uint32_t));
    for (int64_t p = rank; p < sp->num_samples; p += size) data_read_sample(sp, data_split_sample_at(sp, p), tok);
    free(tok);
    data_split_free(sp);
    h5ds_close(ds);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) printf("ok\n");
    MPI_Finalize();
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 4 && !strcmp(argv[1], "make")) return make(argv[2], argv[3]);
    if (argc == 6 && !strcmp(argv[1], "read")) return read_all(argc, argv);
    fprintf(stderr, "usage: data_probe make KIND OUT | data_probe read FILE T N SPLIT\n");
    return 1;
}
