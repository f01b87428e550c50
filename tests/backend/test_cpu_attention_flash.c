// tests/backend/test_cpu_attention_flash.c: CPU backend fused causal attention
// (flash_attention_forward/backward). Against the materialised attention of the same
// backend: out and dqkv within 1e-5; lse against a double-precision reference; dqkv against
// central finite differences of a double-precision reference; out, lse, dqkv overwritten
// even when they start as NaN, scratch needs no initialisation; bitwise the same on a rerun
// and with 1 or 2 threads.
#include "backend/backend.h"
#include "backend/cpu/cpu_blas.h"
#include "tests/backend/attention_ref.h"  // defines: AttnRef, attention_ref

#include <math.h>

static void fill_nan(float *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = NAN;
}

// Fused against materialised (same backend) and the double reference; with fd = 1 also the
// backward against finite differences (small shapes only).
static void test_flash(Backend *be, TestRng *r, int B, int T, int NH, int hs, int fd) {
    int C = NH * hs;
    size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, natt = (size_t)B * NH * T * T;
    size_t nrow = (size_t)B * NH * T;
    float *qkv = test_floats(nqkv), *g = test_floats(nout);
    float *out = test_floats(nout), *lse = test_floats(nrow), *dqkv = test_floats(nqkv);
    float *scr = test_floats(nrow);
    float *mout = test_floats(nout), *att = test_floats(natt), *mdqkv = test_floats(nqkv);
    float *mscr = test_floats(natt);
    rng_fill(r, qkv, nqkv, -2, 2), rng_fill(r, g, nout, -1, 1);
    AttnRef c = {.B = B, .T = T, .NH = NH, .hs = hs, .qkv = to_double(qkv, nqkv),
                 .out = test_doubles(nout), .lse = test_doubles(nrow), .g = g};
    char what[128];

    be->ops->attention_forward(be, mout, att, qkv, B, T, NH, hs, NULL, NULL);
    be->ops->attention_backward(be, mdqkv, mscr, g, qkv, att, B, T, NH, hs, NULL);
    fill_nan(out, nout), fill_nan(lse, nrow), fill_nan(dqkv, nqkv), fill_nan(scr, nrow);
    be->ops->flash_attention_forward(be, out, lse, qkv, B, T, NH, hs, NULL, NULL);
    be->ops->flash_attention_backward(be, dqkv, scr, g, qkv, out, lse, B, T, NH, hs, NULL, NULL);

    double *want = to_double(mout, nout);
    snprintf(what, sizeof what, "flash out vs materialised (B%d T%d NH%d hs%d)", B, T, NH, hs);
    EXPECT_CLOSE(out, want, nout, 1e-5, what);
    free(want);
    want = to_double(mdqkv, nqkv);
    snprintf(what, sizeof what, "flash dqkv vs materialised (B%d T%d NH%d hs%d)", B, T, NH, hs);
    EXPECT_CLOSE(dqkv, want, nqkv, 1e-5, what);
    free(want);
    attention_ref(&c);
    EXPECT_CLOSE(out, c.out, nout, 1e-6, "flash out vs double reference");
    EXPECT_CLOSE(lse, c.lse, nrow, 1e-6, "flash lse vs double reference");
    if (fd) {
        want = test_doubles(nqkv);
        fd_grad(c.qkv, nqkv, attention_ref_loss, &c, want);
        EXPECT_CLOSE(dqkv, want, nqkv, 5e-6, "flash dqkv vs finite differences");
        free(want);
    }
    free(qkv), free(g), free(out), free(lse), free(dqkv), free(scr);
    free(mout), free(att), free(mdqkv), free(mscr);
    free(c.qkv), free(c.out), free(c.lse);
}

// Forward + backward on `be` into out, lse, dqkv (sizes of the shape below).
static void run_once(Backend *be, const float *qkv, const float *g, float *out, float *lse,
                     float *dqkv, float *scr, int B, int T, int NH, int hs) {
    be->ops->flash_attention_forward(be, out, lse, qkv, B, T, NH, hs, NULL, NULL);
    be->ops->flash_attention_backward(be, dqkv, scr, g, qkv, out, lse, B, T, NH, hs, NULL, NULL);
}

// Twice on `be`, once on a 1-thread backend: bitwise equal out, lse and dqkv.
static void test_repeatable(Backend *be, TestRng *r) {
    const int B = 2, T = 70, NH = 3, hs = 16, C = NH * hs;
    size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, nrow = (size_t)B * NH * T;
    float *qkv = test_floats(nqkv), *g = test_floats(nout), *scr = test_floats(nrow);
    float *out[3], *lse[3], *dqkv[3];
    rng_fill(r, qkv, nqkv, -2, 2), rng_fill(r, g, nout, -1, 1);
    Backend *one = backend_cpu_create(1, BACKEND_F32);
    for (int k = 0; k < 3; k++) {
        out[k] = test_floats(nout), lse[k] = test_floats(nrow), dqkv[k] = test_floats(nqkv);
        run_once(k == 2 ? one : be, qkv, g, out[k], lse[k], dqkv[k], scr, B, T, NH, hs);
    }
    backend_destroy(one);
    for (int k = 1; k < 3; k++) {
        const char *run = k == 1 ? "rerun" : "1 thread vs 2";
        EXPECT(!memcmp(out[0], out[k], nout * sizeof(float)), "flash out differs: %s", run);
        EXPECT(!memcmp(lse[0], lse[k], nrow * sizeof(float)), "flash lse differs: %s", run);
        EXPECT(!memcmp(dqkv[0], dqkv[k], nqkv * sizeof(float)), "flash dqkv differs: %s", run);
    }
    for (int k = 0; k < 3; k++) free(out[k]), free(lse[k]), free(dqkv[k]);
    free(qkv), free(g), free(scr);
}

int main(int argc, char **argv) {
    backend_cpu_select_blas_kernels(argc, argv);
    Backend *be = backend_cpu_create(2, BACKEND_F32);
    TestRng r = {11};
    test_flash(be, &r, 2, 5, 3, 4, 1);
    test_flash(be, &r, 1, 1, 2, 3, 1);  // a single token attends to itself only
    test_flash(be, &r, 1, 9, 1, 8, 1);  // one head
    test_flash(be, &r, 2, 65, 3, 24, 0);
    test_flash(be, &r, 2, 100, 3, 64, 0);
    test_flash(be, &r, 1, 33, 2, 128, 0);
    test_flash(be, &r, 1, 70, 1, 4, 1);     // two blocks of 64 (the second ragged)
    test_flash(be, &r, 1, 200, 2, 16, 0);  // four blocks
    test_repeatable(be, &r);
    backend_destroy(be);
    return test_result("test_cpu_attention_flash");
}
