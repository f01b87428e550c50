// tests/data/test_blend.c: weighted blends (data/blend.h) on synthetic files, serial:
//   the flag syntax (weights and files, files only, bad weights, odd counts);
//   the assignment: after every prefix of i positions, each file's count is within one of
//   w_k * i, and a shorter blend is a prefix of a longer one (resume, longer runs);
//   a blend of one file gives exactly that file's batches;
//   the DP ranks' shares of a blended global batch, put together, are the DP = 1 batch;
//   files weighted by size when the flag gives no weights.
#include "data/blend.h"
#include "tests/data/synth.h"
#include "tests/testing.h"

#include <mpi.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define T 16
#define G 8
#define MB 2

static void test_parse(void) {
    DataBlendSpec s;
    char err[512];
    const char *one[] = {"a.h5"};
    EXPECT_EQ_INT(data_blend_parse("--data-path", one, 1, &s, err, sizeof err), 0);
    EXPECT(s.n == 1 && !s.weighted && !strcmp(s.paths[0], "a.h5"), "one file");
    const char *two[] = {"0.3", "a.h5", "0.9", "b.h5"};
    EXPECT_EQ_INT(data_blend_parse("--data-path", two, 4, &s, err, sizeof err), 0);
    EXPECT(s.n == 2 && s.weighted && !strcmp(s.paths[1], "b.h5"), "two files");
    EXPECT_NEAR(s.weights[0], 0.25, 1e-12);
    EXPECT_NEAR(s.weights[1], 0.75, 1e-12);
    const char *plain[] = {"a.h5", "b.h5", "c.h5"};
    EXPECT_EQ_INT(data_blend_parse("--data-path", plain, 3, &s, err, sizeof err), 0);
    EXPECT(s.n == 3 && !s.weighted, "files without weights");
    const char *odd[] = {"0.3", "a.h5", "0.7"};
    EXPECT_EQ_INT(data_blend_parse("--data-path", odd, 3, &s, err, sizeof err), -1);
    EXPECT(strstr(err, "pairs of a weight and a file") != NULL, "%s", err);
    const char *neg[] = {"0.3", "a.h5", "-1", "b.h5"};
    EXPECT_EQ_INT(data_blend_parse("--data-path", neg, 4, &s, err, sizeof err), -1);
    EXPECT(strstr(err, "weight 2 ('-1') is not a non-negative number") != NULL, "%s", err);
    const char *swapped[] = {"0.3", "0.7", "a.h5", "b.h5"};
    EXPECT_EQ_INT(data_blend_parse("--train-data-path", swapped, 4, &s, err, sizeof err), -1);
    EXPECT(strstr(err, "--train-data-path: '0.7' stands where a file belongs") != NULL, "%s", err);
    const char *zero[] = {"0", "a.h5", "0", "b.h5"};
    EXPECT_EQ_INT(data_blend_parse("--data-path", zero, 4, &s, err, sizeof err), -1);
    EXPECT(strstr(err, "add up to 0") != NULL, "%s", err);
}

// Every prefix stays within one position of its weight; counts add up.
static void check_assignment(const DataBlend *b) {
    int64_t cnt[3] = {0, 0, 0}, worst_dev = 0;
    double worst = 0;
    for (int64_t i = 0; i < b->num_samples; i++) {
        EXPECT_EQ_INT(b->pos[i], cnt[b->file[i]]);  // each file's positions in order
        cnt[b->file[i]]++;
        for (int k = 0; k < b->n; k++) {
            double d = fabs((double)cnt[k] - b->weights[k] * (double)(i + 1));
            if (d > worst) worst = d, worst_dev = i;
        }
    }
    EXPECT(worst <= 1.0, "a file is %.3f positions off its share after %lld", worst, (long long)worst_dev + 1);
    for (int k = 0; k < b->n; k++) EXPECT_EQ_INT(data_blend_count(b, k), cnt[k]);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    test_parse();
    char dir[] = "/tmp/megac_blend_XXXXXX", pa[512], pb[512], pc[512];
    if (!mkdtemp(dir)) return 1;
    snprintf(pa, sizeof pa, "%s/a.h5", dir);
    snprintf(pb, sizeof pb, "%s/b.h5", dir);
    snprintf(pc, sizeof pc, "%s/c.h5", dir);
    int64_t na = synth_write(pa, 300, 40, 1000, 1), nb = synth_write(pb, 200, 90, 1000, 2);
    synth_write(pc, 50, 30, 1000, 3);
    char err[512];
    H5Dataset *ds[3] = {h5ds_open_serial(pa, NULL, err, sizeof err), h5ds_open_serial(pb, NULL, err, sizeof err),
                        h5ds_open_serial(pc, NULL, err, sizeof err)};
    EXPECT(ds[0] && ds[1] && ds[2], "%s", err);

    // Three files, weights 0.2 / 0.5 / 0.3: shares and prefix stability.
    const char *items[] = {"0.2", pa, "0.5", pb, "0.3", pc};
    DataBlendSpec spec;
    EXPECT_EQ_INT(data_blend_parse("--data-path", items, 6, &spec, err, sizeof err), 0);
    DataBlend *big = data_blend_new(ds, &spec, "90,10,0", DATA_TRAIN, T, 7, 2000);
    DataBlend *small = data_blend_new(ds, &spec, "90,10,0", DATA_TRAIN, T, 7, 300);
    check_assignment(big);
    check_assignment(small);
    int prefix_ok = 1;
    for (int64_t i = 0; i < 300; i++)
        prefix_ok &= small->file[i] == big->file[i] && small->pos[i] == big->pos[i];
    EXPECT(prefix_ok, "a 300-position blend is not a prefix of a 2000-position one");
    int *in1 = malloc(sizeof(int) * G * T), *tg1 = malloc(sizeof(int) * G * T);
    int *in2 = malloc(sizeof(int) * G * T), *tg2 = malloc(sizeof(int) * G * T);
    for (int64_t it = 0; it < 30; it++) {  // the batches agree too
        for (int m = 0; m < G / MB; m++) {
            data_blend_get_batch(big, it * G, G, 0, 1, MB, m, in1 + m * MB * T, tg1 + m * MB * T);
            if (it * G + G <= 300)
                data_blend_get_batch(small, it * G, G, 0, 1, MB, m, in2 + m * MB * T, tg2 + m * MB * T);
        }
        if (it * G + G <= 300)
            EXPECT(!memcmp(in1, in2, sizeof(int) * G * T), "iteration %lld differs", (long long)it);
        // DP = 2 and 4: the shares, in rank order, are the DP = 1 batch
        for (int dp = 2; dp <= 4; dp *= 2) {
            int per = G / dp;
            for (int r = 0; r < dp; r++)
                for (int m = 0; m < per / MB; m++)
                    data_blend_get_batch(big, it * G, G, r, dp, MB, m, in2 + (r * per + m * MB) * T,
                                         tg2 + (r * per + m * MB) * T);
            EXPECT(!memcmp(in1, in2, sizeof(int) * G * T) && !memcmp(tg1, tg2, sizeof(int) * G * T),
                   "DP %d batch %lld differs from DP 1", dp, (long long)it);
        }
    }
    data_blend_free(small);
    data_blend_free(big);

    // One file: exactly the plain sampler's batches.
    DataBlendSpec one;
    const char *one_item[] = {pb};
    EXPECT_EQ_INT(data_blend_parse("--data-path", one_item, 1, &one, err, sizeof err), 0);
    DataBlend *b1 = data_blend_new(ds + 1, &one, "90,10,0", DATA_VALID, T, 5, 80);
    DataSplit *sp = data_split_new(ds[1], "90,10,0", DATA_VALID, T, 5, 80);
    for (int64_t it = 0; it < 10; it++)
        for (int m = 0; m < G / MB; m++) {
            data_blend_get_batch(b1, it * G, G, 0, 1, MB, m, in1, tg1);
            data_get_batch(sp, it, G, 0, 1, MB, m, in2, tg2);
            EXPECT(!memcmp(in1, in2, sizeof(int) * MB * T), "one-file blend differs at %lld", (long long)it);
        }
    data_split_free(sp);
    data_blend_free(b1);

    // No weights: by size (tokens per file).
    const char *plain[] = {pa, pb};
    EXPECT_EQ_INT(data_blend_parse("--data-path", plain, 2, &spec, err, sizeof err), 0);
    DataBlend *bs = data_blend_new(ds, &spec, "100,0,0", DATA_TRAIN, T, 9, 1000);
    EXPECT_NEAR(bs->weights[0], (double)na / (double)(na + nb), 1e-12);
    check_assignment(bs);
    data_blend_free(bs);

    free(in1), free(tg1), free(in2), free(tg2);
    for (int k = 0; k < 3; k++) h5ds_close(ds[k]);
    unlink(pa), unlink(pb), unlink(pc), rmdir(dir);
    int rc = test_result("data_blend");
    MPI_Finalize();
    return rc;
}
