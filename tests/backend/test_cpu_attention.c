// tests/backend/test_cpu_attention.c: CPU backend causal self-attention. The forward (out
// and the saved probabilities) against a double-precision reference; the backward against
// central finite differences of that reference; dqkv overwritten even when it starts as
// NaN; scratch needs no initialisation; bitwise repeatability.
#include "backend/backend.h"
#include "backend/cpu/cpu_blas.h"
#include "tests/backend/attention_ref.h"  // defines: AttnRef, attention_ref

#include <math.h>

static void test_attention(Backend *be, TestRng *r, int B, int T, int NH, int hs) {
    int C = NH * hs;
    size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, natt = (size_t)B * NH * T * T;
    float *qkv = test_floats(nqkv), *out = test_floats(nout), *att = test_floats(natt);
    float *g = test_floats(nout), *dqkv = test_floats(nqkv), *scratch = test_floats(natt);
    rng_fill(r, qkv, nqkv, -2, 2), rng_fill(r, g, nout, -1, 1);
    AttnRef c = {.B = B, .T = T, .NH = NH, .hs = hs, .qkv = to_double(qkv, nqkv),
                 .out = test_doubles(nout), .att = test_doubles(natt), .g = g};
    for (size_t i = 0; i < natt; i++) att[i] = NAN, scratch[i] = NAN;

    be->ops->attention_forward(be, out, att, qkv, B, T, NH, hs, NULL, NULL);
    attention_ref(&c);
    EXPECT_CLOSE(out, c.out, nout, 1e-6, "attention out");
    EXPECT_CLOSE(att, c.att, natt, 1e-6, "attention probabilities");
    int above = 0;
    for (size_t row = 0; row < (size_t)B * NH * T; row++)
        for (int u = (int)(row % T) + 1; u < T; u++) above += att[row * T + u] != 0.0f;
    EXPECT(above == 0, "%d probabilities above the diagonal are not exactly 0", above);

    for (size_t i = 0; i < nqkv; i++) dqkv[i] = NAN;
    be->ops->attention_backward(be, dqkv, scratch, g, qkv, att, B, T, NH, hs, NULL);
    double *want = test_doubles(nqkv);
    fd_grad(c.qkv, nqkv, attention_ref_loss, &c, want);
    EXPECT_CLOSE(dqkv, want, nqkv, 5e-6, "attention dqkv vs finite differences");
    free(qkv), free(out), free(att), free(g), free(dqkv), free(scratch), free(want);
    free(c.qkv), free(c.out), free(c.att);
}

// Twice on the same backend and once on a 1-thread one: bitwise equal outputs,
// probabilities and gradients (each head is one thread's work). T = 150: three causal
// blocks, the last one ragged.
static void test_repeatable(Backend *be, Backend *be1, TestRng *r) {
    const int B = 2, T = 150, NH = 4, hs = 16, C = NH * hs;
    size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, natt = (size_t)B * NH * T * T;
    float *qkv = test_floats(nqkv), *g = test_floats(nout), *scratch = test_floats(natt);
    float *out[3], *att[3], *dqkv[3];
    Backend *bes[3] = {be, be, be1};
    rng_fill(r, qkv, nqkv, -2, 2), rng_fill(r, g, nout, -1, 1);
    for (int k = 0; k < 3; k++) {
        out[k] = test_floats(nout), att[k] = test_floats(natt), dqkv[k] = test_floats(nqkv);
        bes[k]->ops->attention_forward(bes[k], out[k], att[k], qkv, B, T, NH, hs, NULL, NULL);
        bes[k]->ops->attention_backward(bes[k], dqkv[k], scratch, g, qkv, att[k], B, T, NH, hs,
                                        NULL);
    }
    EXPECT_SAME_BITS(out[0], out[2], nout, "attention out, 2 vs 1 threads");
    EXPECT_SAME_BITS(att[0], att[2], natt, "attention probabilities, 2 vs 1 threads");
    EXPECT_SAME_BITS(dqkv[0], dqkv[2], nqkv, "attention dqkv, 2 vs 1 threads");
    EXPECT_SAME_BITS(out[0], out[1], nout, "attention out");
    EXPECT_SAME_BITS(att[0], att[1], natt, "attention probabilities");
    EXPECT_SAME_BITS(dqkv[0], dqkv[1], nqkv, "attention dqkv");
    for (int k = 0; k < 3; k++) free(out[k]), free(att[k]), free(dqkv[k]);
    free(qkv), free(g), free(scratch);
}

int main(int argc, char **argv) {
    backend_cpu_select_blas_kernels(argc, argv);
    Backend *be1 = backend_cpu_create(1, BACKEND_F32), *be = backend_cpu_create(2, BACKEND_F32);
    TestRng r = {7};
    test_attention(be, &r, 2, 5, 3, 4);
    test_attention(be, &r, 1, 1, 2, 3);   // a single token attends to itself only
    test_attention(be, &r, 1, 9, 1, 8);   // one head
    test_attention(be, &r, 1, 70, 2, 4);  // two causal blocks (64 + 6 query rows)
    test_repeatable(be, be1, &r);
    backend_destroy(be), backend_destroy(be1);
    return test_result("test_cpu_attention");
}
