// tests/backend/test_cpu_linear.c: CPU backend matmul, layernorm, GELU and add (GELU's
// gradient through matmul_backward_dgelu: ref_gelu_backward).
// Forwards against double-precision reference loops; backwards against central finite
// differences of those references; overwrite/accumulate/NULL conventions of backend.h;
// bitwise determinism across runs and thread counts.
#include "backend/backend.h"
#include "backend/cpu/cpu_blas.h"
#include "backend/cpu/cpu_gemm.h"  // defines: CPU_GEMM_SPLIT_*
#include "tests/backend/backend_ref_ops.h"  // defines: ref_gelu_backward
#include "tests/backend/backend_test_util.h"

#include <math.h>

// ---------------------------------------------------------------- double references ----
static void matmul_ref(double *out, const double *inp, const double *w, const double *b,
                       int N, int C, int OC) {
    for (int i = 0; i < N; i++)
        for (int o = 0; o < OC; o++) {
            double s = b ? b[o] : 0.0;
            for (int c = 0; c < C; c++) s += inp[i * C + c] * w[o * C + c];
            out[i * OC + o] = s;
        }
}

static void layernorm_ref(double *out, double *mean, double *rstd, const double *x,
                          const double *w, const double *b, int N, int C) {
    for (int i = 0; i < N; i++) {
        double m = 0, v = 0;
        for (int c = 0; c < C; c++) m += x[i * C + c];
        m /= C;
        for (int c = 0; c < C; c++) v += (x[i * C + c] - m) * (x[i * C + c] - m);
        double s = 1.0 / sqrt(v / C + 1e-5);
        for (int c = 0; c < C; c++) out[i * C + c] = (x[i * C + c] - m) * s * w[c] + b[c];
        if (mean) mean[i] = m;
        if (rstd) rstd[i] = s;
    }
}

// 0.5 x (1 + tanh(u)), written as x / (1 + e^(-2u)) so that the double reference keeps its
// relative accuracy where 1 + tanh(u) cancels (large negative x).
static double gelu_ref(double x) {
    double u = sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x);
    return x / (1.0 + exp(-2.0 * u));
}

// L = sum(g * f(inputs)) for the op under test; fd_grad perturbs one input at a time.
typedef struct {
    int N, C, OC;
    double *inp, *w, *b, *out;
    const float *g;
} FdCtx;

static double matmul_loss(void *p) {
    FdCtx *c = p;
    matmul_ref(c->out, c->inp, c->w, c->b, c->N, c->C, c->OC);
    return dot_fd(c->g, c->out, (size_t)c->N * c->OC);
}

static double layernorm_loss(void *p) {
    FdCtx *c = p;
    layernorm_ref(c->out, NULL, NULL, c->inp, c->w, c->b, c->N, c->C);
    return dot_fd(c->g, c->out, (size_t)c->N * c->C);
}

// ---------------------------------------------------------------------------- tests ----
static void test_matmul(Backend *be, TestRng *r) {
    const int N = 5, C = 7, OC = 6;
    float *inp = test_floats(N * C), *w = test_floats(OC * C), *b = test_floats(OC);
    float *out = test_floats(N * OC), *g = test_floats(N * OC);
    rng_fill(r, inp, N * C, -1, 1), rng_fill(r, w, OC * C, -1, 1), rng_fill(r, b, OC, -1, 1);
    rng_fill(r, g, N * OC, -1, 1);
    FdCtx c = {N, C, OC, to_double(inp, N * C), to_double(w, OC * C), to_double(b, OC),
               test_doubles(N * OC), g};

    be->ops->matmul_forward(be, out, inp, w, b, N, C, OC);
    matmul_ref(c.out, c.inp, c.w, c.b, N, C, OC);
    EXPECT_CLOSE(out, c.out, N * OC, 1e-6, "matmul forward");
    be->ops->matmul_forward(be, out, inp, w, NULL, N, C, OC);
    matmul_ref(c.out, c.inp, c.w, NULL, N, C, OC);
    EXPECT_CLOSE(out, c.out, N * OC, 1e-6, "matmul forward without bias");

    // dinp starts as NaN (must be overwritten); dweight, dbias start at 0.5 (accumulate).
    float *dinp = test_floats(N * C), *dw = test_floats(OC * C), *db = test_floats(OC);
    for (int i = 0; i < N * C; i++) dinp[i] = NAN;
    for (int i = 0; i < OC * C; i++) dw[i] = 0.5f;
    for (int i = 0; i < OC; i++) db[i] = 0.5f;
    be->ops->matmul_backward(be, dinp, dw, db, g, inp, w, N, C, OC);
    for (int i = 0; i < OC * C; i++) dw[i] -= 0.5f;
    for (int i = 0; i < OC; i++) db[i] -= 0.5f;
    double *want = test_doubles(OC * C);
    fd_grad(c.inp, N * C, matmul_loss, &c, want);
    EXPECT_CLOSE(dinp, want, N * C, 2e-6, "matmul dinp vs finite differences");
    fd_grad(c.w, OC * C, matmul_loss, &c, want);
    EXPECT_CLOSE(dw, want, OC * C, 2e-6, "matmul dweight (accumulated) vs finite differences");
    fd_grad(c.b, OC, matmul_loss, &c, want);
    EXPECT_CLOSE(db, want, OC, 2e-6, "matmul dbias (accumulated) vs finite differences");

    // NULL gradients are skipped; dbias accumulates again.
    float db1 = db[0];
    be->ops->matmul_backward(be, NULL, NULL, db, g, inp, w, N, C, OC);
    EXPECT_NEAR(db[0], 2.0 * db1, 1e-6);
    free(inp), free(w), free(b), free(out), free(g), free(dinp), free(dw), free(db), free(want);
    free(c.inp), free(c.w), free(c.b), free(c.out);
}

static void test_layernorm(Backend *be, TestRng *r) {
    const int N = 3, C = 67;  // 67 = 2 channel blocks of 32 + a tail of 3
    float *x = test_floats(N * C), *w = test_floats(C), *b = test_floats(C), *g = test_floats(N * C);
    float *out = test_floats(N * C), *mean = test_floats(N), *rstd = test_floats(N);
    rng_fill(r, x, N * C, -2, 2), rng_fill(r, w, C, 0.5, 1.5), rng_fill(r, b, C, -1, 1);
    rng_fill(r, g, N * C, -1, 1);
    FdCtx c = {N, C, 0, to_double(x, N * C), to_double(w, C), to_double(b, C),
               test_doubles(N * C), g};
    double dmean[3], drstd[3];

    be->ops->norm_forward(be, out, mean, rstd, x, w, b, N, C, BACKEND_LAYERNORM);
    layernorm_ref(c.out, dmean, drstd, c.inp, c.w, c.b, N, C);
    EXPECT_CLOSE(out, c.out, N * C, 2e-6, "layernorm forward");
    EXPECT_CLOSE(mean, dmean, N, 1e-6, "layernorm mean");
    EXPECT_CLOSE(rstd, drstd, N, 1e-6, "layernorm rstd");

    // All three gradients accumulate: start from known values and subtract them after.
    float *dx = test_floats(N * C), *dw = test_floats(C), *db = test_floats(C);
    float *dx0 = test_floats(N * C);
    rng_fill(r, dx0, N * C, -1, 1);
    memcpy(dx, dx0, N * C * sizeof(float));
    for (int i = 0; i < C; i++) dw[i] = 0.25f, db[i] = -0.25f;
    be->ops->norm_backward(be, dx, dw, db, g, x, w, mean, rstd, N, C, BACKEND_LAYERNORM);
    for (int i = 0; i < N * C; i++) dx[i] -= dx0[i];
    for (int i = 0; i < C; i++) dw[i] -= 0.25f, db[i] += 0.25f;
    double *want = test_doubles(N * C);
    fd_grad(c.inp, N * C, layernorm_loss, &c, want);
    EXPECT_CLOSE(dx, want, N * C, 5e-6, "layernorm dinp (accumulated) vs finite differences");
    fd_grad(c.w, C, layernorm_loss, &c, want);
    EXPECT_CLOSE(dw, want, C, 2e-6, "layernorm dweight (accumulated) vs finite differences");
    fd_grad(c.b, C, layernorm_loss, &c, want);
    EXPECT_CLOSE(db, want, C, 2e-6, "layernorm dbias (accumulated) vs finite differences");

    // NULL skips: only dbias changes.
    float db0 = db[5];
    be->ops->norm_backward(be, NULL, NULL, db, g, x, w, mean, rstd, N, C, BACKEND_LAYERNORM);
    double col = 0;
    for (int i = 0; i < N; i++) col += g[i * C + 5];
    EXPECT_NEAR(db[5], db0 + col, 1e-6);
    free(x), free(w), free(b), free(g), free(out), free(mean), free(rstd), free(dx), free(dw);
    free(db), free(dx0), free(want), free(c.inp), free(c.w), free(c.b), free(c.out);
}

static void test_gelu(Backend *be, TestRng *r) {
    const size_t n = 50001;  // several parallel spans and an odd tail
    float *x = test_floats(n), *y = test_floats(n), *dy = test_floats(n), *dx = test_floats(n);
    rng_fill(r, x, n, -6, 6);
    x[0] = 0.0f, x[1] = -20.0f, x[2] = 20.0f, x[3] = 1e-3f;
    rng_fill(r, dy, n, -1, 1);
    be->ops->act_forward(be, y, x, 1, (int)(n), BACKEND_ACT_GELU);
    for (size_t i = 0; i < n; i++) dx[i] = NAN;
    ref_gelu_backward(be, dx, x, dy, n);
    int bad_fwd = 0, bad_bwd = 0;
    for (size_t i = 0; i < n; i++) {
        double want = gelu_ref(x[i]);
        double d = (gelu_ref((double)x[i] + FD_STEP) - gelu_ref((double)x[i] - FD_STEP)) / (2 * FD_STEP);
        // fp32 rounding of u is amplified by |2u| in e^(-2u): a relative tolerance of
        // 3e-7 (1 + |2u|) is what any fp32 GELU can promise.
        double u2 = 2.0 * sqrt(2.0 / M_PI) * fabs(x[i] + 0.044715 * x[i] * x[i] * x[i]);
        if (!(fabs(y[i] - want) <= 3e-7 * (1.0 + u2) * fabs(want) + 1e-12)) bad_fwd++;
        if (!(fabs(dx[i] - d * dy[i]) <= 1e-5)) bad_bwd++;
    }
    EXPECT(bad_fwd == 0, "%d of %zu GELU values off vs the double reference", bad_fwd, n);
    EXPECT(bad_bwd == 0, "%d of %zu GELU gradients off vs finite differences", bad_bwd, n);
    // dinp may alias dout.
    memcpy(y, dy, n * sizeof(float));
    ref_gelu_backward(be, y, x, y, n);
    EXPECT_SAME_BITS(y, dx, n, "gelu_backward in place");
    // Past the sigmoid's clamp (|2u| > 80, cpu_sigmoid_den): NaN stays NaN through the x
    // factor, +inf stays +inf, +30 gives itself and slope 1, -30 (nearly) zero and slope 0.
    float sx[4] = {NAN, INFINITY, 30.0f, -30.0f}, sy[4], sd[4] = {1, 1, 1, 1};
    be->ops->act_forward(be, sy, sx, 1, 4, BACKEND_ACT_GELU);
    EXPECT(isnan(sy[0]) && sy[1] == INFINITY && sy[2] == 30.0f && fabsf(sy[3]) < 1e-30f,
           "gelu(NaN, inf, 30, -30) = %g %g %g %g", sy[0], sy[1], sy[2], sy[3]);
    ref_gelu_backward(be, sd, sx, sd, 4);
    EXPECT(isnan(sd[0]) && sd[2] == 1.0f && fabsf(sd[3]) < 1e-28f,
           "gelu'(NaN, 30, -30) = %g %g %g", sd[0], sd[2], sd[3]);
    free(x), free(y), free(dy), free(dx);
}

// Squared ReLU (--squared-relu): act_forward against relu(x)^2 in double, act_backward
// against central differences (off the kink at 0), dinp aliasing dout; the fused linear ops
// with it bitwise the unfused pairs (matmul + act).
static void test_relu2(Backend *be, TestRng *r) {
    const size_t n = 50001;
    float *x = test_floats(n), *y = test_floats(n), *dy = test_floats(n), *dx = test_floats(n);
    rng_fill(r, x, n, -6, 6);
    x[0] = 0.0f, x[1] = -20.0f, x[2] = 20.0f, x[3] = 1e-3f;
    rng_fill(r, dy, n, -1, 1);
    be->ops->act_forward(be, y, x, 1, (int)n, BACKEND_ACT_RELU2);
    for (size_t i = 0; i < n; i++) dx[i] = NAN;
    be->ops->act_backward(be, dx, x, dy, 1, (int)n, BACKEND_ACT_RELU2);
    int bad_fwd = 0, bad_bwd = 0, checked = 0;
    for (size_t i = 0; i < n; i++) {
        double v = x[i] > 0 ? x[i] : 0.0, want = v * v;
        if (!(fabs(y[i] - want) <= 6e-8 * want)) bad_fwd++;
        if (fabs(x[i]) <= 10 * FD_STEP) continue;
        double xp = (double)x[i] + FD_STEP, xm = (double)x[i] - FD_STEP;
        double d = ((xp > 0 ? xp * xp : 0.0) - (xm > 0 ? xm * xm : 0.0)) / (2 * FD_STEP);
        if (!(fabs(dx[i] - d * dy[i]) <= 1e-5)) bad_bwd++;
        checked++;
    }
    EXPECT(y[0] == 0.0f && y[1] == 0.0f && y[2] == 400.0f, "relu2(0, -20, 20) = %g %g %g", y[0],
           y[1], y[2]);
    EXPECT(bad_fwd == 0, "%d of %zu squared-ReLU values off vs the double reference", bad_fwd, n);
    EXPECT(bad_bwd == 0 && checked > 49000, "%d of %d squared-ReLU gradients off vs finite "
           "differences", bad_bwd, checked);
    memcpy(y, dy, n * sizeof(float));
    be->ops->act_backward(be, y, x, y, 1, (int)n, BACKEND_ACT_RELU2);
    EXPECT_SAME_BITS(y, dx, n, "relu2 act_backward in place");
    free(x), free(y), free(dy), free(dx);

    const int N = 67, C = 48, OC = 80;  // fused = unfused
    float *in = test_floats((size_t)N * C), *w = test_floats((size_t)OC * C), *b = test_floats(OC);
    float *g = test_floats((size_t)N * C), *pre[2], *out[2], *din[2];
    rng_fill(r, in, (size_t)N * C, -1, 1), rng_fill(r, w, (size_t)OC * C, -0.3f, 0.3f);
    rng_fill(r, b, OC, -0.2f, 0.2f), rng_fill(r, g, (size_t)N * C, -1, 1);
    for (int k = 0; k < 2; k++) {
        pre[k] = test_floats((size_t)N * OC), out[k] = test_floats((size_t)N * OC);
        din[k] = test_floats((size_t)N * C);
    }
    be->ops->matmul_act_forward(be, out[0], pre[0], in, w, b, N, C, OC, BACKEND_ACT_RELU2);
    be->ops->matmul_forward(be, pre[1], in, w, b, N, C, OC);
    be->ops->act_forward(be, out[1], pre[1], N, OC, BACKEND_ACT_RELU2);
    EXPECT_SAME_BITS(pre[0], pre[1], (size_t)N * OC, "matmul_act_forward relu2 pre");
    EXPECT_SAME_BITS(out[0], out[1], (size_t)N * OC, "matmul_act_forward relu2 out");
    // through the projection (OC -> C here: weight w read as (OC, C)), pre (N, OC) of its input
    float *gy = test_floats((size_t)N * C), *po = test_floats((size_t)N * OC);
    rng_fill(r, gy, (size_t)N * C, -1, 1), rng_fill(r, po, (size_t)N * OC, -1, 1);
    float *d2[2] = {test_floats((size_t)N * OC), test_floats((size_t)N * OC)};
    be->ops->matmul_act_backward(be, d2[0], NULL, NULL, gy, out[0], w, po, N, OC, C,
                                 BACKEND_ACT_RELU2);
    be->ops->matmul_backward(be, d2[1], NULL, NULL, gy, out[0], w, N, OC, C);
    be->ops->act_backward(be, d2[1], po, d2[1], N, OC, BACKEND_ACT_RELU2);
    EXPECT_SAME_BITS(d2[0], d2[1], (size_t)N * OC, "matmul_act_backward relu2 dinp");
    for (int k = 0; k < 2; k++) free(pre[k]), free(out[k]), free(din[k]), free(d2[k]);
    free(in), free(w), free(b), free(g), free(gy), free(po);
}

static void test_add_scale(Backend *be, TestRng *r) {
    const size_t n = 40000;
    float *a = test_floats(n), *b = test_floats(n), *o = test_floats(n), *f = test_floats(n);
    rng_fill(r, a, n, -1, 1), rng_fill(r, b, n, -1, 1);
    be->ops->add(be, o, a, b, n);
    be->ops->add_f32(be, f, a, b, n);
    int bad = memcmp(f, o, n * sizeof(float)) != 0;  // the same op on an fp32 backend
    for (size_t i = 0; i < n; i++) bad += o[i] != a[i] + b[i];
    be->ops->add(be, a, a, b, n);  // out aliases a
    bad += memcmp(a, o, n * sizeof(float)) != 0;
    EXPECT(bad == 0, "add/add_f32: %d mismatches", bad);
    memcpy(f, o, n * sizeof(float));
    be->ops->scale_f32(be, f, 0.375f, n);  // the expert gradients' scale
    bad = 0;
    for (size_t i = 0; i < n; i++) bad += f[i] != o[i] * 0.375f;
    EXPECT(bad == 0, "scale_f32: %d mismatches", bad);
    free(a), free(b), free(o), free(f);
}

// Every op twice on one backend and once on a 1-thread backend: bitwise equal. (GEMMs are
// only required to repeat on the same thread count.)
static void test_determinism(Backend *be2, Backend *be1, TestRng *r) {
    const int N = 256, C = 96, OC = 80;
    // b is the matmul's bias (OC) and the layernorm's (C): C floats, the last C - OC zero
    float *x = test_floats(N * C), *w = test_floats(OC * C), *b = test_floats(C);
    float *g = test_floats(N * OC), *gc = test_floats(N * C);
    rng_fill(r, x, N * C, -1, 1), rng_fill(r, w, OC * C, -1, 1), rng_fill(r, b, OC, -1, 1);
    rng_fill(r, g, N * OC, -1, 1), rng_fill(r, gc, N * C, -1, 1);
    float *res[3][8];
    Backend *bes[3] = {be2, be2, be1};
    for (int k = 0; k < 3; k++) {
        Backend *be = bes[k];
        for (int j = 0; j < 8; j++) res[k][j] = test_floats((size_t)N * C);  // >= N*OC, OC*C
        float *mean = test_floats(N), *rstd = test_floats(N);
        be->ops->matmul_forward(be, res[k][0], x, w, b, N, C, OC);
        be->ops->matmul_backward(be, res[k][1], res[k][2], res[k][3], g, x, w, N, C, OC);
        be->ops->norm_forward(be, res[k][4], mean, rstd, x, w, b, N, C, BACKEND_LAYERNORM);
        be->ops->norm_backward(be, res[k][5], res[k][3], res[k][3] + C, gc, x, w, mean,
                                    rstd, N, C, BACKEND_LAYERNORM);
        ref_gelu_backward(be, res[k][4], x, res[k][4], (size_t)N * C);
        be->ops->norm_forward(be, res[k][6], NULL, rstd, x, w, NULL, N, C, BACKEND_RMSNORM);
        be->ops->norm_backward(be, res[k][6], res[k][7], NULL, gc, x, w, NULL, rstd, N, C,
                               BACKEND_RMSNORM);
        free(mean), free(rstd);
    }
    const char *names[8] = {"matmul out", "matmul dinp", "matmul dweight", "dbias, ln dweight/dbias",
                            "layernorm + gelu", "layernorm dinp", "rmsnorm dinp",
                            "rmsnorm dweight"};
    for (int j = 0; j < 8; j++) EXPECT_SAME_BITS(res[0][j], res[1][j], (size_t)N * C, names[j]);
    for (int j = 3; j < 8; j++) EXPECT_SAME_BITS(res[0][j], res[2][j], (size_t)N * C, names[j]);
    for (int k = 0; k < 3; k++)
        for (int j = 0; j < 8; j++) free(res[k][j]);
    free(x), free(w), free(b), free(g), free(gc);
}

// Largest |a - b| over n elements, relative to max(1, |b|).
static double max_rel_diff(const float *a, const float *b, size_t n) {
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]) / fmax(1.0, fabs((double)b[i]));
        if (d > worst) worst = d;
    }
    return worst;
}

// GEMMs big enough to be cut into panels (backend/cpu/cpu_gemm.h), under every panel
// policy: each repeats its bits exactly on the same thread count, and agrees with one
// thread to fp32 round-off (sums of up to 1024 products of values in [-1, 1]: 1e-4
// relative; a misplaced panel is off by O(1)). (Bitwise equality with one thread is not promised: OpenBLAS's
// Haswell kernels, used on AMD Zen, round a panel's edge tiles differently; SkylakeX's
// almost never do.) Shapes with ragged panels, cut along rows and along columns.
static void test_gemm_panels(Backend *be2, Backend *be1, TestRng *r) {
    const int shapes[3][3] = {{300, 72, 260}, {130, 96, 400}, {1024, 64, 192}};  // N, C, OC
    const int policies[5][2] = {{CPU_GEMM_SPLIT_RULE, 0}, {CPU_GEMM_SPLIT_M, 1},
                                {CPU_GEMM_SPLIT_M, 4}, {CPU_GEMM_SPLIT_N, 1}, {CPU_GEMM_SPLIT_N, 3}};
    for (int s = 0; s < 3; s++) {
        int N = shapes[s][0], C = shapes[s][1], OC = shapes[s][2];
        size_t n[3] = {(size_t)N * OC, (size_t)N * C, (size_t)OC * C};
        float *x = test_floats(N * C), *w = test_floats(OC * C), *b = test_floats(OC);
        float *g = test_floats(N * OC), *res[3][3];
        rng_fill(r, x, N * C, -1, 1), rng_fill(r, w, OC * C, -1, 1), rng_fill(r, b, OC, -1, 1);
        rng_fill(r, g, N * OC, -1, 1);
        for (int pol = 0; pol < 5; pol++) {
            be2->u.cpu.gemm_split = policies[pol][0], be2->u.cpu.gemm_panels = policies[pol][1];
            Backend *bes[3] = {be1, be2, be2};  // one thread; the policy twice
            for (int k = 0; k < 3; k++) {
                for (int j = 0; j < 3; j++) res[k][j] = test_floats((int)n[j]);
                memset(res[k][2], 0, n[2] * sizeof(float));
                bes[k]->ops->matmul_forward(bes[k], res[k][0], x, w, b, N, C, OC);
                bes[k]->ops->matmul_backward(bes[k], res[k][1], res[k][2], NULL, g, x, w, N, C, OC);
            }
            static const char *what[3] = {"matmul out", "matmul dinp", "matmul dweight"};
            for (int j = 0; j < 3; j++) {
                EXPECT_SAME_BITS(res[1][j], res[2][j], n[j], what[j]);
                double d = max_rel_diff(res[1][j], res[0][j], n[j]);
                EXPECT(d <= 1e-4, "%s, shape %d, policy %d: 2 vs 1 threads differ by %.3g", what[j],
                       s, pol, d);
            }
            for (int k = 0; k < 3; k++)
                for (int j = 0; j < 3; j++) free(res[k][j]);
        }
        be2->u.cpu.gemm_split = CPU_GEMM_SPLIT_RULE, be2->u.cpu.gemm_panels = 0;
        free(x), free(w), free(b), free(g);
    }
}

int main(int argc, char **argv) {
    backend_cpu_select_blas_kernels(argc, argv);
    Backend *be1 = backend_cpu_create(1, BACKEND_F32);
    Backend *be = backend_cpu_create(2, BACKEND_F32);  // the last one created sets OpenBLAS's threads
    TestRng r = {42};
    test_matmul(be, &r);
    test_layernorm(be, &r);
    test_gelu(be, &r);
    test_relu2(be, &r);
    test_add_scale(be, &r);
    test_determinism(be, be1, &r);
    test_gemm_panels(be, be1, &r);
    backend_destroy(be), backend_destroy(be1);
    return test_result("test_cpu_linear");
}
