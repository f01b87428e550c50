// bench/bench_checksum.c: the cost of Fletcher-32 checksums on megac's HDF5 I/O (issue 15).
//     megac-mpiexec -n 2 bench/bench_checksum [DIR] [PARAMS_M] [TOKENS_M]
// Checkpoint: PARAMS_M (default 4) million float32 parameters as 16 square tensors, written
// three times (model, m, v) as megac writes them, each rank holding half of every tensor's
// rows: contiguous datasets with independent writes (megac before checksums) against
// 2^18-element chunks with Fletcher-32 and one collective write per dataset (now); then read
// back by every rank (independent). Tokens (rank 0, serial, as `megac preprocess` writes
// them): TOKENS_M (default 8) million uint16 tokens in 2^20-element unfiltered chunks
// (before) against 2^16-element chunks with Fletcher-32 (now), then 2000 random samples of
// 1025 tokens read with the chunk cache off, as the trainer reads them. Prints MB/s.
#include <hdf5.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>  // defines: stat, S_ISDIR
#include <unistd.h>

#define NT 16

static double now(void) { return MPI_Wtime(); }

// Writes (mode 1: checksummed) NT tensors x 3 groups of n x n floats; returns seconds.
static double ckpt_write(const char *path, int n, int mode, int rank, int size, float *buf) {
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    H5Pset_fapl_mpio(fapl, MPI_COMM_WORLD, MPI_INFO_NULL);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = now();
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    hsize_t dims[2] = {(hsize_t)n, (hsize_t)n}, rows = (hsize_t)n / (hsize_t)size;
    hid_t space = H5Screate_simple(2, dims, NULL), dcpl = H5Pcreate(H5P_DATASET_CREATE);
    if (mode) {
        hsize_t chunk[2] = {((hsize_t)1 << 18) / (hsize_t)n, (hsize_t)n};  // as megac's
        if (chunk[0] > (hsize_t)n) chunk[0] = (hsize_t)n;
        H5Pset_chunk(dcpl, 2, chunk);
        if (!getenv("BENCH_NO_FILTER")) H5Pset_fletcher32(dcpl);  // chunking alone, for comparison
        H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_INCR);
    } else {
        H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_EARLY);
    }
    H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER);
    hid_t dxpl = H5Pcreate(H5P_DATASET_XFER);
    H5Pset_dxpl_mpio(dxpl, mode ? H5FD_MPIO_COLLECTIVE : H5FD_MPIO_INDEPENDENT);
    if (mode && getenv("BENCH_INDIVIDUAL_IO"))  // collective in HDF5, independent in MPI-IO
        H5Pset_dxpl_mpio_collective_opt(dxpl, H5FD_MPIO_INDIVIDUAL_IO);
    for (int i = 0; i < 3 * NT; i++) {
        char name[32];
        snprintf(name, sizeof name, "t%d", i);
        hid_t ds = H5Dcreate2(f, name, H5T_IEEE_F32LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
        hid_t fs = H5Dget_space(ds);
        hsize_t start[2] = {rows * (hsize_t)rank, 0}, count[2] = {rows, (hsize_t)n}, m = rows * n;
        hid_t ms = H5Screate_simple(1, &m, NULL);
        H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, count, NULL);
        if (H5Dwrite(ds, H5T_NATIVE_FLOAT, ms, fs, dxpl, buf) < 0) MPI_Abort(MPI_COMM_WORLD, 1);
        H5Sclose(ms);
        H5Sclose(fs);
        H5Dclose(ds);
    }
    H5Fflush(f, H5F_SCOPE_GLOBAL);
    H5Fclose(f);
    MPI_Barrier(MPI_COMM_WORLD);
    double t = now() - t0;
    H5Pclose(dxpl);
    H5Pclose(dcpl);
    H5Sclose(space);
    H5Pclose(fapl);
    return t;
}

static double ckpt_read(const char *path, int n, int rank, int size, float *buf) {
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    H5Pset_fapl_mpio(fapl, MPI_COMM_WORLD, MPI_INFO_NULL);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = now();
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, fapl);
    hsize_t rows = (hsize_t)n / (hsize_t)size;
    for (int i = 0; i < 3 * NT; i++) {
        char name[32];
        snprintf(name, sizeof name, "t%d", i);
        hid_t ds = H5Dopen2(f, name, H5P_DEFAULT), fs = H5Dget_space(ds);
        hsize_t start[2] = {rows * (hsize_t)rank, 0}, count[2] = {rows, (hsize_t)n}, m = rows * n;
        hid_t ms = H5Screate_simple(1, &m, NULL);
        H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, count, NULL);
        if (H5Dread(ds, H5T_NATIVE_FLOAT, ms, fs, H5P_DEFAULT, buf) < 0) MPI_Abort(MPI_COMM_WORLD, 1);
        H5Sclose(ms);
        H5Sclose(fs);
        H5Dclose(ds);
    }
    H5Fclose(f);
    MPI_Barrier(MPI_COMM_WORLD);
    H5Pclose(fapl);
    return now() - t0;
}

// Serial token file: write time and the time of `samples` random 1025-token reads.
static void tokens(const char *path, size_t n, int mode, double *tw, double *tr, int samples) {
    unsigned short *tok = malloc(n * sizeof *tok);
    for (size_t i = 0; i < n; i++) tok[i] = (unsigned short)((i * 2654435761u) >> 20);
    double t0 = now();
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hsize_t dims = n, chunk = mode ? (hsize_t)1 << 16 : (hsize_t)1 << 20;
    hid_t space = H5Screate_simple(1, &dims, NULL), dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(dcpl, 1, &chunk);
    if (mode) H5Pset_fletcher32(dcpl);
    hid_t ds = H5Dcreate2(f, "tokens", H5T_STD_U16LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    H5Dwrite(ds, H5T_NATIVE_USHORT, H5S_ALL, H5S_ALL, H5P_DEFAULT, tok);
    H5Dclose(ds);
    H5Fclose(f);
    *tw = now() - t0;
    f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t dapl = H5Pcreate(H5P_DATASET_ACCESS);
    H5Pset_chunk_cache(dapl, 0, 0, H5D_CHUNK_CACHE_W0_DEFAULT);
    ds = H5Dopen2(f, "tokens", dapl);
    hid_t fs = H5Dget_space(ds);
    hsize_t count = 1025;
    hid_t ms = H5Screate_simple(1, &count, NULL);
    unsigned out[1025];
    srand(1);
    t0 = now();
    for (int s = 0; s < samples; s++) {
        hsize_t start = (hsize_t)rand() % (n - count);
        H5Sselect_hyperslab(fs, H5S_SELECT_SET, &start, NULL, &count, NULL);
        H5Dread(ds, H5T_NATIVE_UINT, ms, fs, H5P_DEFAULT, out);
    }
    *tr = now() - t0;
    H5Sclose(ms);
    H5Sclose(fs);
    H5Dclose(ds);
    H5Pclose(dapl);
    H5Pclose(dcpl);
    H5Sclose(space);
    H5Fclose(f);
    free(tok);
}

// Prints the usage (and `why` when not NULL) on rank 0; every rank exits, 0 for --help, else 2.
static void usage(int rank, const char *why) {
    if (rank == 0) {
        if (why) fprintf(stderr, "bench_checksum: %s\n", why);
        fprintf(why ? stderr : stdout, "usage: megac-mpiexec -n 2 bench_checksum [DIR] [PARAMS_M] [TOKENS_M]\n"
                "  DIR: an existing folder for the scratch files (default .); PARAMS_M: million\n"
                "  parameters in [0.1, 1000] (default 4), TOKENS_M: million tokens in [2, 1000] (default 8)\n");
    }
    MPI_Finalize();
    exit(why ? 2 : 0);
}

// A PARAMS_M / TOKENS_M argument: a number in [lo, 1000]; else the usage and exit 2.
static double arg_millions(const char *s, double lo, int rank) {
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end || !(v >= lo && v <= 1000))
        usage(rank, "PARAMS_M must be a number in [0.1, 1000], TOKENS_M in [2, 1000]");
    return v;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const char *dir = argc > 1 ? argv[1] : ".";
    double pm = argc > 2 ? arg_millions(argv[2], 0.1, rank) : 4, tm = argc > 3 ? arg_millions(argv[3], 2, rank) : 8;
    struct stat st;
    if (argc > 4 || !strcmp(dir, "-h") || !strcmp(dir, "--help")) usage(rank, argc > 4 ? "too many arguments" : NULL);
    if (stat(dir, &st) || !S_ISDIR(st.st_mode)) usage(rank, "DIR is not a folder");
    int n = 64;  // tensor side: NT tensors of n x n ~ pm million, rows divisible by size and chunk
    while ((double)NT * (n + 64) * (n + 64) <= pm * 1e6) n += 64;
    if (n % size) usage(rank, "the ranks must divide the tensors' rows (a multiple of 64): run 1, 2, 4, 8, ... ranks");
    float *buf = malloc((size_t)n * n * sizeof *buf);
    for (size_t i = 0; i < (size_t)n * n; i++) buf[i] = (float)i * 1e-3f;
    char path[2][4096];
    const char *label[2] = {"contiguous, independent writes (before)", "chunked + Fletcher-32, collective"};
    double mb = 3.0 * NT * n * n * 4 / 1e6;
    if (rank == 0) printf("checkpoint: %d ranks, 3 x %d tensors of %d x %d (%.2f M params, %.1f MB)\n",
                          size, NT, n, n, NT * (double)n * n / 1e6, mb);
    for (int mode = 0; mode < 2; mode++) {
        snprintf(path[mode], sizeof path[mode], "%s/bench_ckpt_%d.h5", dir, mode);
        double w = 1e30, r = 1e30;
        for (int rep = 0; rep < 3; rep++) {  // best of 3 (a shared machine)
            double tw = ckpt_write(path[mode], n, mode, rank, size, buf);
            double tr = ckpt_read(path[mode], n, rank, size, buf);
            w = tw < w ? tw : w;
            r = tr < r ? tr : r;
        }
        if (rank == 0) printf("  %-42s write %7.1f MB/s  read %7.1f MB/s\n", label[mode], mb / w, mb / r);
    }
    if (rank == 0) {
        size_t nt = (size_t)(tm * 1e6);
        const char *tl[2] = {"2^20 chunks, no filter (before)", "2^16 chunks + Fletcher-32"};
        printf("tokens: %.1f M uint16 (%.1f MB), 2000 random 1025-token samples, chunk cache off\n",
               nt / 1e6, nt * 2 / 1e6);
        for (int mode = 0; mode < 2; mode++) {
            char tp[4096];
            snprintf(tp, sizeof tp, "%s/bench_tokens_%d.h5", dir, mode);
            double tw = 1e30, tr = 1e30;
            for (int rep = 0; rep < 3; rep++) {
                double a, b;
                tokens(tp, nt, mode, &a, &b, 2000);
                tw = a < tw ? a : tw;
                tr = b < tr ? b : tr;
            }
            printf("  %-42s write %7.1f MB/s  samples %8.0f/s (%.1f us each)\n", tl[mode],
                   nt * 2 / 1e6 / tw, 2000 / tr, tr / 2000 * 1e6);
            unlink(tp);
        }
        unlink(path[0]);
        unlink(path[1]);
    }
    free(buf);
    MPI_Finalize();
    return 0;
}
