// tests/data/test_sampler.c: the dataset reader and the sampler on synthetic files where
// token = file position, run under mpiexec -n 1, 2 and 4:
//   every sample holds exactly stream tokens [s*T, s*T + T] of the shuffled-document stream;
//   every epoch's document order and every shuffle block is a permutation (nothing repeated
//   or lost); the batches the DP ranks get, gathered, equal the single-rank batches (and so
//   do simulated DP = 2, 4, 8); any iteration can be asked for first (resume); the order does
//   not depend on how many samples were requested; uint16 and uint32 files.
#include "data/sampler.h"
#include "tests/data/synth.h"
#include "tests/testing.h"

#include <mpi.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define T 16      // seq_length
#define G 8       // global batch
#define MB 2      // micro batch
#define ITERS 40

// The expected token stream of a split: its epochs' documents back to back. (n_epochs * L)
static uint32_t *expected_stream(const DataSplit *sp) {
    const H5Dataset *ds = sp->ds;
    uint32_t *s = malloc(sizeof(uint32_t) * (size_t)(sp->n_epochs * sp->tokens_per_epoch));
    int64_t n = 0;
    for (int64_t e = 0; e < sp->n_epochs; e++)
        for (int64_t k = 0; k < sp->n_docs; k++) {
            int64_t d = data_split_doc_at(sp, e, k);
            for (uint64_t t = ds->doc_offsets[d]; t < ds->doc_offsets[d + 1]; t++)
                s[n++] = (uint32_t)(t % (uint64_t)ds->vocab_size);
        }
    return s;
}

// Each epoch lists each of the split's documents exactly once.
static void check_doc_orders(const DataSplit *sp) {
    size_t n = sp->n_docs > 0 ? (size_t)sp->n_docs : 1;
    char *seen = malloc(n);
    for (int64_t e = 0; e < sp->n_epochs; e++) {
        memset(seen, 0, n);
        for (int64_t k = 0; k < sp->n_docs; k++) {
            int64_t d = data_split_doc_at(sp, e, k) - sp->doc_begin;
            EXPECT(d >= 0 && d < sp->n_docs && !seen[d], "epoch %lld slot %lld: doc %lld", (long long)e,
                   (long long)k, (long long)d);
            if (d >= 0 && d < sp->n_docs) seen[d] = 1;
        }
    }
    free(seen);
}

// Every block of S order positions is a permutation of that block's sample ids.
static void check_blocks(const DataSplit *sp) {
    int64_t S = sp->block;
    size_t n = S > 0 ? (size_t)S : 1;
    char *seen = malloc(n);
    for (int64_t b = 0; b * S < sp->n_samples_built; b++) {
        memset(seen, 0, n);
        for (int64_t p = b * S; p < (b + 1) * S; p++) {
            int64_t r = data_split_sample_at(sp, p) - b * S;
            EXPECT(r >= 0 && r < S && !seen[r], "block %lld position %lld: sample %lld", (long long)b,
                   (long long)p, (long long)(r + b * S));
            if (r >= 0 && r < S) seen[r] = 1;
        }
    }
    free(seen);
}

// Every sample built, read back, equals the expected stream slice.
static void check_samples(DataSplit *sp) {
    uint32_t *stream = expected_stream(sp), tok[T + 1];
    int bad = 0;
    for (int64_t s = 0; s < sp->n_samples_built && bad < 5; s++) {
        data_read_sample(sp, s, tok);
        if (memcmp(tok, stream + s * T, sizeof tok)) bad++;
        EXPECT(!memcmp(tok, stream + s * T, sizeof tok), "sample %lld differs from stream [%lld, %lld]",
               (long long)s, (long long)(s * T), (long long)(s * T + T));
    }
    free(stream);
}

// Batch `it` as DP = dp ranks would see it, concatenated in rank order. (G, T) each.
static void batch_as_layout(DataSplit *sp, int64_t it, int dp, int *in, int *tg) {
    int share = G / dp;
    for (int r = 0; r < dp; r++)
        for (int m = 0; m < share / MB; m++) {
            size_t at = ((size_t)r * share + (size_t)m * MB) * T;
            data_get_batch(sp, it, G, r, dp, MB, m, in + at, tg + at);
        }
}

// The real DP ranks' batches, gathered on rank 0, equal rank 0's single-rank batches; and
// asking for the iterations backwards (resume) gives the same.
static void check_batches(DataSplit *sp, int64_t iters, MPI_Comm comm) {
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    int share = G / size, mine_in[G * T], mine_tg[G * T], all_in[G * T], all_tg[G * T];
    int ref_in[G * T], ref_tg[G * T], back_in[G * T], back_tg[G * T];
    for (int64_t it = 0; it < iters; it++) {
        for (int m = 0; m < share / MB; m++)
            data_get_batch(sp, it, G, rank, size, MB, m, mine_in + m * MB * T, mine_tg + m * MB * T);
        MPI_Gather(mine_in, share * T, MPI_INT, all_in, share * T, MPI_INT, 0, comm);
        MPI_Gather(mine_tg, share * T, MPI_INT, all_tg, share * T, MPI_INT, 0, comm);
        if (rank != 0) continue;
        batch_as_layout(sp, it, 1, ref_in, ref_tg);
        EXPECT(!memcmp(all_in, ref_in, sizeof ref_in) && !memcmp(all_tg, ref_tg, sizeof ref_tg),
               "iteration %lld: DP=%d batch differs from DP=1", (long long)it, size);
        for (int p = 0; p < G; p++) {
            uint32_t tok[T + 1];
            data_read_sample(sp, data_split_sample_at(sp, it * G + p), tok);
            for (int t = 0; t < T; t++)
                if (ref_in[p * T + t] != (int)tok[t] || ref_tg[p * T + t] != (int)tok[t + 1]) {
                    EXPECT(0, "iteration %lld row %d token %d: not order position %lld", (long long)it, p, t,
                           (long long)(it * G + p));
                    break;
                }
        }
        for (int dp = 2; dp <= 8; dp *= 2) {
            batch_as_layout(sp, it, dp, all_in, all_tg);
            EXPECT(!memcmp(all_in, ref_in, sizeof ref_in) && !memcmp(all_tg, ref_tg, sizeof ref_tg),
                   "iteration %lld: simulated DP=%d differs", (long long)it, dp);
        }
    }
    if (rank == 0)
        for (int64_t it = iters - 1; it >= 0; it -= 3) {  // resume anywhere, in any order
            batch_as_layout(sp, it, 1, back_in, back_tg);
            DataSplit *fresh = data_split_new(sp->ds, "8,1,1", sp->kind, T, sp->seed, sp->num_samples);
            batch_as_layout(fresh, it, 2, ref_in, ref_tg);
            EXPECT(!memcmp(back_in, ref_in, sizeof ref_in) && !memcmp(back_tg, ref_tg, sizeof ref_tg),
                   "resume at iteration %lld differs", (long long)it);
            data_split_free(fresh);
        }
}

// Asking for fewer samples gives a prefix of the same order (and the same document orders).
static void check_prefix(H5Dataset *ds, const DataSplit *big) {
    DataSplit *small = data_split_new(ds, "8,1,1", DATA_TRAIN, T, big->seed, 5);
    EXPECT_EQ_INT(small->n_samples_built, big->block);
    for (int64_t p = 0; p < small->n_samples_built; p++)
        if (data_split_sample_at(small, p) != data_split_sample_at(big, p)) {
            EXPECT(0, "order position %lld depends on num_samples", (long long)p);
            break;
        }
    for (int64_t k = 0; k < small->n_docs; k++)
        EXPECT_EQ_INT(data_split_doc_at(small, 0, k), data_split_doc_at(big, 0, k));
    DataSplit *other = data_split_new(ds, "8,1,1", DATA_TRAIN, T, big->seed + 1, 5);
    int same = 1;
    for (int64_t p = 0; p < other->n_samples_built; p++) same &= data_split_sample_at(other, p) == data_split_sample_at(big, p);
    EXPECT(!same, "seed %llu and %llu give the same order", (unsigned long long)big->seed,
           (unsigned long long)big->seed + 1);
    data_split_free(small);
    data_split_free(other);
}

static void check_split_strings(void) {
    double w[3];
    char err[256];
    int64_t b[4];
    EXPECT_EQ_INT(data_parse_split("969,30,1", w, err, sizeof err), 0);
    data_split_bounds(w, 1000, b);
    EXPECT(b[0] == 0 && b[1] == 969 && b[2] == 999 && b[3] == 1000, "%lld %lld %lld", (long long)b[1],
           (long long)b[2], (long long)b[3]);
    EXPECT_EQ_INT(data_parse_split("90/10", w, err, sizeof err), 0);
    data_split_bounds(w, 7, b);
    EXPECT(b[1] == 6 && b[2] == 7 && b[3] == 7, "%lld %lld", (long long)b[1], (long long)b[2]);
    // Megatron's forms: spaces (its legacy default), quotes a launch script's word splitting kept
    const char *good[] = {"969, 30, 1", " 969 , 30 ,1 ", "'969,30,1'", "\"969, 30, 1\""};
    for (int i = 0; i < 4; i++) {
        EXPECT(data_parse_split(good[i], w, err, sizeof err) == 0, "'%s' refused: %s", good[i], err);
        EXPECT(w[0] == 969 && w[1] == 30 && w[2] == 1, "'%s': %g %g %g", good[i], w[0], w[1], w[2]);
    }
    const char *bad[] = {"0,0,0", "1,-1", "a,b", "1,2,3,4", "1;2", "", "'1,2", "'1,2\"", "''"};
    for (int i = 0; i < 9; i++) EXPECT(data_parse_split(bad[i], w, err, sizeof err) == -1, "'%s' accepted", bad[i]);
}

// One file: build train / valid / test and check them all.
static void check_file(const char *path, MPI_Comm comm) {
    H5Dataset *ds = h5ds_open(path, NULL, comm);
    int rank;
    MPI_Comm_rank(comm, &rank);
    DataSplit *train = data_split_new(ds, "8,1,1", DATA_TRAIN, T, 1234, (int64_t)ITERS * G);
    EXPECT(train->n_epochs >= 2, "want several epochs, got %lld", (long long)train->n_epochs);
    check_batches(train, ITERS, comm);
    if (rank == 0) {
        check_doc_orders(train);
        check_blocks(train);
        check_samples(train);
        check_prefix(ds, train);
        for (int k = DATA_VALID; k <= DATA_TEST; k++) {
            DataSplit *sp = data_split_new(ds, "8,1,1", (DataSplitKind)k, T, 1234, 3 * G);
            check_doc_orders(sp);
            check_blocks(sp);
            check_samples(sp);
            EXPECT(sp->doc_begin >= train->doc_begin + train->n_docs, "splits overlap");
            data_split_free(sp);
        }
    }
    data_split_free(train);
    h5ds_close(ds);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    char dir[256] = "/tmp/megac-test-sampler-XXXXXX", p32[300], p16[300];
    if (rank == 0 && !mkdtemp(dir)) return 1;
    MPI_Bcast(dir, sizeof dir, MPI_CHAR, 0, MPI_COMM_WORLD);
    snprintf(p32, sizeof p32, "%s/u32.h5", dir);
    snprintf(p16, sizeof p16, "%s/u16.h5", dir);
    if (rank == 0) {
        synth_write(p32, 300, 40, 1 << 20, 7);   // ~6000 tokens, uint32, token = position
        synth_write(p16, 120, 25, 65536, 8);     // uint16
        check_split_strings();
    }
    MPI_Barrier(MPI_COMM_WORLD);
    check_file(p32, MPI_COMM_WORLD);
    check_file(p16, MPI_COMM_WORLD);
    int fails = test_failures_, all = 0;
    MPI_Allreduce(&fails, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) {
        remove(p32);
        remove(p16);
        rmdir(dir);
    }
    int rc = rank == 0 ? test_result("test_sampler") : (all ? 1 : 0);
    MPI_Finalize();
    return all ? 1 : rc;
}
