// tests/backend/test_cpu_dropout.c: CPU backend dropout (backend/dropout.h): the (rows, C)
// op (kept fraction within 5 sigma of 1 - p, kept values scaled by 1/(1-p), the backward
// the same mask, p = 0 the identity bitwise, in place = out of place, a row shard with its
// row0 = the same rows of the whole), and attention with dropout on the probabilities,
// materialised and fused: forward against a double-precision reference using the same hash,
// backward against central finite differences of that reference (mask fixed), fused vs
// materialised to round-off with T not a multiple of the 64-row tile, a batch split into
// per-sample calls (sample0) giving the same bits, p = 0 the plain op bitwise. The
// vectorised span kernels (cpu_dropout_factors, cpu_dropout_span) against dropout_factor
// element for element, bitwise, on ragged lengths, offsets and thresholds.
#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"  // defines: cpu_dropout_factors, cpu_dropout_span
#include "tests/backend/attention_ref.h"  // defines: AttnRef, attention_ref

#include <math.h>

static BackendDropout make_drop(double p, uint64_t key) {
    BackendDropout d = {.key = key, .threshold = dropout_threshold(p),
                        .scale = 1.0f / (1.0f - (float)p)};
    return d;
}

static void test_rows(Backend *be, TestRng *r) {
    int N = 64, C = 96;
    size_t n = (size_t)N * C;
    float *x = test_floats(n), *y = test_floats(n), *g = test_floats(n), *dg = test_floats(n);
    float *z = test_floats(n);
    rng_fill(r, x, n, 0.5, 2), rng_fill(r, g, n, 0.5, 2);  // no zeros: a zero output = dropped
    double ps[] = {0.1, 0.5};
    for (int k = 0; k < 2; k++) {
        BackendDropout d = make_drop(ps[k], dropout_key(7, 3, DROPOUT_SITE_MLP_OUT, 1));
        d.row0 = 5;
        be->ops->dropout(be, y, x, &d, N, C);
        be->ops->dropout(be, dg, g, &d, N, C);  // backward: the same call on the gradient
        size_t kept = 0, bad = 0, mism = 0;
        for (size_t i = 0; i < n; i++) {
            int keep = dropout_bits(d.key, (uint64_t)5 * C + i) >= d.threshold;
            kept += keep;
            bad += y[i] != (keep ? x[i] * d.scale : 0.0f);
            mism += (y[i] == 0.0f) != (dg[i] == 0.0f);
        }
        double q = 1 - ps[k], sigma = sqrt(n * q * (1 - q));
        EXPECT(fabs((double)kept - n * q) < 5 * sigma, "p %g: kept %zu of %zu", ps[k], kept, n);
        EXPECT_EQ_INT(bad, 0);
        EXPECT_EQ_INT(mism, 0);
        memcpy(z, x, n * sizeof(float));  // in place
        be->ops->dropout(be, z, z, &d, N, C);
        EXPECT_SAME_BITS(z, y, n, "in place");
        BackendDropout h = d;  // rows 32.. as their own call with their own row0
        h.row0 = d.row0 + 32;
        be->ops->dropout(be, z, x + (size_t)32 * C, &h, N - 32, C);
        EXPECT_SAME_BITS(z, y + (size_t)32 * C, (size_t)(N - 32) * C, "row shard");
    }
    BackendDropout d0 = make_drop(0.0, 99);
    be->ops->dropout(be, y, x, &d0, N, C);
    EXPECT_SAME_BITS(y, x, n, "p = 0");
    be->ops->dropout(be, y, x, NULL, N, C);
    EXPECT_SAME_BITS(y, x, n, "NULL");
    // different keys give different masks; iteration enters the key
    EXPECT(dropout_key(7, 3, 2, 1) != dropout_key(7, 4, 2, 1), "iteration");
    EXPECT(dropout_key(7, 3, 2, 1) != dropout_key(7, 3, 3, 1), "site");
    EXPECT(dropout_key(7, 3, 2, 1) != dropout_key(7, 3, 2, 2), "layer");
    free(x), free(y), free(g), free(dg), free(z);
}

// The span kernels against the scalar reference: every length 0..150 (ragged against the
// 64-factor blocks and any vector width), mask indices near 0, 2^32 and 2^63, p from 2^-32
// to 1 - 2^-32, values of both signs (0 * negative is -0: the bits must match) and NaN.
static void test_spans(TestRng *r) {
    enum { NMAX = 150 };
    float x[NMAX], y[NMAX], f[NMAX], z[NMAX];
    rng_fill(r, x, NMAX, -2, 2);
    x[7] = NAN, x[100] = -0.0f;
    double ps[] = {0.1, 0.5, 1.0 / 4294967296.0, 0.999999999};
    uint64_t starts[] = {0, 4294967290ull, 0x7FFFFFFFFFFFFFF0ull, 123456789012345ull};
    size_t bad = 0, badf = 0, badi = 0;
    for (int k = 0; k < 4; k++)
        for (int s = 0; s < 4; s++) {
            BackendDropout d = make_drop(ps[k], dropout_key(5, k, DROPOUT_SITE_ATTN_PROBS, s));
            for (int n = 0; n <= NMAX; n++) {
                cpu_dropout_factors(f, n, &d, starts[s]);
                cpu_dropout_span(y, x, n, &d, starts[s]);
                memcpy(z, x, sizeof z);
                cpu_dropout_span(z, z, n, &d, starts[s]);  // in place
                for (int j = 0; j < n; j++) {
                    float want = dropout_factor(&d, starts[s] + (uint64_t)j);
                    float wy = x[j] * want;
                    badf += memcmp(&f[j], &want, sizeof want) != 0;
                    bad += memcmp(&y[j], &wy, sizeof wy) != 0;
                    badi += memcmp(&z[j], &wy, sizeof wy) != 0;
                }
            }
        }
    EXPECT_EQ_INT(badf, 0);
    EXPECT_EQ_INT(bad, 0);
    EXPECT_EQ_INT(badi, 0);
}

// Materialised and fused attention with dropout d against the reference; fd: the backward
// against finite differences too.
static void test_attention(Backend *be, TestRng *r, int B, int T, int NH, int hs, int fd) {
    int C = NH * hs;
    size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, natt = (size_t)B * NH * T * T;
    float *qkv = test_floats(nqkv), *g = test_floats(nout), *out = test_floats(nout);
    float *att = test_floats(natt), *scr = test_floats(natt), *dqkv = test_floats(nqkv);
    float *fout = test_floats(nout), *lse = test_floats((size_t)B * NH * T);
    float *fdqkv = test_floats(nqkv), *fscr = test_floats((size_t)B * NH * T);
    rng_fill(r, qkv, nqkv, -2, 2), rng_fill(r, g, nout, -1, 1);
    BackendDropout d = make_drop(0.25, dropout_key(11, 2, DROPOUT_SITE_ATTN_PROBS, 0));
    d.sample0 = 3, d.h0 = 1, d.NH = NH + 2;
    AttnRef c = {.B = B, .T = T, .NH = NH, .hs = hs, .qkv = to_double(qkv, nqkv),
                 .out = test_doubles(nout), .d = &d, .g = g};
    char what[128];
    be->ops->attention_forward(be, out, att, qkv, B, T, NH, hs, &d, NULL);
    be->ops->attention_backward(be, dqkv, scr, g, qkv, att, B, T, NH, hs, &d);
    be->ops->flash_attention_forward(be, fout, lse, qkv, B, T, NH, hs, &d, NULL);
    be->ops->flash_attention_backward(be, fdqkv, fscr, g, qkv, fout, lse, B, T, NH, hs, &d, NULL);
    attention_ref(&c);
    snprintf(what, sizeof what, "dropout attention out (B%d T%d NH%d hs%d)", B, T, NH, hs);
    EXPECT_CLOSE(out, c.out, nout, 1e-5, what);
    snprintf(what, sizeof what, "dropout flash out (B%d T%d NH%d hs%d)", B, T, NH, hs);
    EXPECT_CLOSE(fout, c.out, nout, 1e-5, what);
    double *want = to_double(dqkv, nqkv);
    snprintf(what, sizeof what, "dropout flash dqkv vs materialised (T%d)", T);
    EXPECT_CLOSE(fdqkv, want, nqkv, 1e-5, what);
    if (fd) {
        double *gr = test_doubles(nqkv);
        fd_grad(c.qkv, nqkv, attention_ref_loss, &c, gr);
        snprintf(what, sizeof what, "dropout attention dqkv vs finite differences (T%d)", T);
        EXPECT_CLOSE(dqkv, gr, nqkv, 1e-4, what);
        free(gr);
    }
    // per-sample calls (sample0 + b) give the same bits as the whole batch
    for (int b = 0; b < B; b++) {
        BackendDropout db = d;
        db.sample0 = d.sample0 + b;
        float *o1 = test_floats(nout / B), *l1 = test_floats((size_t)NH * T);
        be->ops->flash_attention_forward(be, o1, l1, qkv + nqkv / B * b, 1, T, NH, hs, &db, NULL);
        EXPECT_SAME_BITS(o1, fout + nout / B * b, nout / B, "flash out, one sample per call");
        be->ops->attention_forward(be, o1, att, qkv + nqkv / B * b, 1, T, NH, hs, &db, NULL);
        EXPECT_SAME_BITS(o1, out + nout / B * b, nout / B, "out, one sample per call");
        free(o1), free(l1);
    }
    // p = 0 is the plain op, bitwise
    BackendDropout d0 = make_drop(0.0, 1);
    be->ops->attention_forward(be, fout, att, qkv, B, T, NH, hs, NULL, NULL);
    be->ops->attention_forward(be, out, att, qkv, B, T, NH, hs, &d0, NULL);
    EXPECT_SAME_BITS(out, fout, nout, "attention p = 0");
    free(qkv), free(g), free(out), free(att), free(scr), free(dqkv), free(fout), free(lse);
    free(fdqkv), free(fscr), free(c.qkv), free(c.out), free(want);
}

int main(void) {
    Backend *be = backend_cpu_create(2, BACKEND_F32);
    TestRng r = {42};
    test_rows(be, &r);
    test_spans(&r);
    test_attention(be, &r, 1, 9, 2, 4, 1);
    test_attention(be, &r, 2, 70, 2, 8, 0);    // T across the 64-row tiles
    test_attention(be, &r, 2, 130, 1, 16, 0);
    backend_destroy(be);
    return test_result("cpu_dropout");
}
