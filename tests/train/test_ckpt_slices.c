// tests/train/test_ckpt_slices.c: the checkpoint's map from a rank's local elements to the
// full tensor (ckpt_h5_transfer), checked exactly on one process with serial HDF5.
//
// For TP = 1, 2, 4 every tp rank writes its shard of every parameter of a small model in
// randomly cut ranges (as ZeRO-1 slices cut them: mid-row, across slices), each local
// element carrying the code of its full-tensor position. The file must then hold every
// element's code at its place; reading back in other random ranges must give each rank its
// shard, with the vocabulary padding rows left untouched.
#include "ckpt/ckpt_format.h"
#include "tests/testing.h"

#include <stdlib.h>
#include <string.h>

#define UNTOUCHED -7.0f

static float code(const ParamInfo *p, int row, int col) {
    return 1.0f + (float)((p->tensor_id * 131u + (unsigned)(row * p->cols + col)) % 100003u);
}

// Local buffer of p on tp_rank: slice elements carry their code, padding is UNTOUCHED.
static void fill_local(const ParamInfo *p, int tp, int tp_rank, float *buf) {
    for (size_t i = 0; i < p->numel; i++) buf[i] = UNTOUCHED;
    ParamSlice sl[3];
    int ns = gpt_param_slices(p, tp, tp_rank, sl);
    for (int s = 0; s < ns; s++)
        for (int r = 0; r < sl[s].nrows; r++)
            for (int c = 0; c < sl[s].ncols; c++)
                buf[(size_t)(sl[s].local_row0 + r) * p->local_cols + c] =
                    code(p, sl[s].row0 + r, sl[s].col0 + c);
}

// Moves [0, numel) in random pieces of 1 .. 2*local_cols+3 elements.
static void transfer_random(hid_t ds, const ParamInfo *p, int tp, int tp_rank, float *buf,
                            int write, unsigned *seed) {
    size_t e = 0;
    while (e < p->numel) {
        *seed = *seed * 1103515245u + 12345u;
        size_t len = 1 + (*seed >> 8) % (size_t)(2 * p->local_cols + 3);
        if (len > p->numel - e) len = p->numel - e;
        EXPECT(ckpt_h5_transfer(ds, p, tp, tp_rank, e, e + len, buf + e, write) == 0,
               "%s: transfer [%zu, %zu)", p->name, e, e + len);
        e += len;
    }
}

static void check_file_holds_codes(hid_t f, const ParamInfo *full, int n) {
    for (int i = 0; i < n; i++) {
        const ParamInfo *p = &full[i];
        char path[96];
        snprintf(path, sizeof path, "/model/%s", p->name);
        hid_t ds = H5Dopen2(f, path, H5P_DEFAULT);
        float *all = calloc((size_t)p->rows * p->cols, sizeof(float));
        H5Dread(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, all);
        int bad = 0;
        for (int r = 0; r < p->rows; r++)
            for (int c = 0; c < p->cols; c++) bad += all[(size_t)r * p->cols + c] != code(p, r, c);
        EXPECT(bad == 0, "%s: %d elements of %d x %d misplaced or unwritten", p->name, bad, p->rows, p->cols);
        free(all);
        H5Dclose(ds);
    }
}

static void run_tp(const GPTConfig *cfg, int tp, const char *file) {
    int n_full = 0;
    ParamInfo *full = ckpt_full_table(cfg, &n_full);
    hid_t f = H5Fcreate(file, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    char err[512];
    EXPECT(ckpt_h5_create_datasets(f, full, n_full, err, sizeof err) == 0, "create: %s", err);
    unsigned seed = 42u + (unsigned)tp;
    for (int pass = 0; pass < 2; pass++)  // write, then read back
        for (int rank = 0; rank < tp; rank++) {
            int n = 0;
            size_t total = 0;
            ParamInfo *t = gpt_params_build(cfg, tp, gpt_padded_vocab(cfg, tp), 0, cfg->num_layers,
                                            1, 1, &n, &total);
            for (int i = 0; i < n; i++) {
                float *want = malloc(t[i].numel * sizeof(float)), *got = malloc(t[i].numel * sizeof(float));
                fill_local(&t[i], tp, rank, want);
                char path[96];
                snprintf(path, sizeof path, "/model/%s", t[i].name);
                hid_t ds = H5Dopen2(f, path, H5P_DEFAULT);
                if (pass == 0) {
                    transfer_random(ds, &t[i], tp, rank, want, 1, &seed);
                } else {
                    for (size_t e = 0; e < t[i].numel; e++) got[e] = UNTOUCHED;
                    transfer_random(ds, &t[i], tp, rank, got, 0, &seed);
                    EXPECT(memcmp(want, got, t[i].numel * sizeof(float)) == 0,
                           "tp %d rank %d %s: read-back differs", tp, rank, t[i].name);
                }
                H5Dclose(ds);
                free(want);
                free(got);
            }
            free(t);
        }
    check_file_holds_codes(f, full, n_full);
    H5Fclose(f);
    free(full);
    remove(file);
}

int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : ".";
    // V = 37 with padding to 4*tp: the last vocab shard has padding rows (and at tp = 4,
    // a shard of 12 rows holds only 1 real one).
    GPTConfig cfg = {.num_layers = 2, .hidden_size = 8, .num_heads = 4, .ffn_hidden_size = 32,
                     .seq_length = 4, .max_position_embeddings = 6, .vocab_size = 37,
                     .vocab_divisible_by = 4};
    for (int tp = 1; tp <= 4; tp *= 2) {
        char file[512];
        snprintf(file, sizeof file, "%s/test_ckpt_slices_tp%d.h5", dir, tp);
        run_tp(&cfg, tp, file);
    }
    return test_result("test_ckpt_slices");
}
