// tests/backend/test_cpu_llama.c: the CPU backend's Llama-style ops: RMSNorm, SwiGLU and
// rotary positions with grouped-query heads (rope_gqa). Forwards against double-precision
// references written here from the formulas; backwards against central finite differences
// of those references; the accumulate/overwrite conventions of backend.h; the same bits on
// one and two threads; a one-row decoding step at position pos0 equals that row.
#include "backend/backend.h"
#include "tests/backend/backend_test_util.h"

#include <math.h>

// ---------------------------------------------------------------- double references ----
static void rmsnorm_ref(double *out, const double *x, const double *w, int N, int C) {
    for (int i = 0; i < N; i++) {
        double ss = 0;
        for (int c = 0; c < C; c++) ss += x[i * C + c] * x[i * C + c];
        double s = 1.0 / sqrt(ss / C + 1e-5);
        for (int c = 0; c < C; c++) out[i * C + c] = x[i * C + c] * s * w[c];
    }
}

static void swiglu_ref(double *out, const double *x, int N, int F) {
    for (int i = 0; i < N; i++)
        for (int j = 0; j < F; j++) {
            double a = x[i * 2 * F + j], b = x[i * 2 * F + F + j];
            out[i * F + j] = a / (1.0 + exp(-a)) * b;
        }
}

// The rotation of one head written as a sum over pairs: y_i = x_i cos - x_{i+h} sin,
// y_{i+h} = x_{i+h} cos + x_i sin, angle t * base^(-2i/rot).
static void rotate_ref(double *y, const double *x, int t, int hs, int rot, double base) {
    for (int i = 0; i < hs; i++) y[i] = x[i];
    for (int i = 0; i < rot / 2; i++) {
        double a = t * pow(base, -2.0 * i / rot), c = cos(a), s = sin(a);
        y[i] = x[i] * c - x[i + rot / 2] * s;
        y[i + rot / 2] = x[i + rot / 2] * c + x[i] * s;
    }
}

typedef struct {
    int B, T, NH, G, hs, rot;
    double base;
} RopeShape;

static void rope_gqa_ref(double *out, const double *x, const RopeShape *s) {
    int in = (s->NH + 2 * s->G) * s->hs, o = 3 * s->NH * s->hs;
    for (int r = 0; r < s->B * s->T; r++)
        for (int h = 0; h < s->NH; h++) {
            int g = h / (s->NH / s->G);
            const double *q = x + r * in + h * s->hs, *k = x + r * in + (s->NH + g) * s->hs;
            const double *v = x + r * in + (s->NH + s->G + g) * s->hs;
            double *oq = out + r * o + h * s->hs, *ok = oq + s->NH * s->hs, *ov = ok + s->NH * s->hs;
            rotate_ref(oq, q, r % s->T, s->hs, s->rot, s->base);
            rotate_ref(ok, k, r % s->T, s->hs, s->rot, s->base);
            for (int j = 0; j < s->hs; j++) ov[j] = v[j];
        }
}

typedef struct {
    int N, C;
    double *inp, *w, *out;
    const float *g;
    const RopeShape *rs;
} FdCtx;

static double rmsnorm_loss(void *p) {
    FdCtx *c = p;
    rmsnorm_ref(c->out, c->inp, c->w, c->N, c->C);
    return dot_fd(c->g, c->out, (size_t)c->N * c->C);
}

static double swiglu_loss(void *p) {
    FdCtx *c = p;
    swiglu_ref(c->out, c->inp, c->N, c->C);
    return dot_fd(c->g, c->out, (size_t)c->N * c->C);
}

static double rope_loss(void *p) {
    FdCtx *c = p;
    rope_gqa_ref(c->out, c->inp, c->rs);
    return dot_fd(c->g, c->out, (size_t)c->N * 3 * c->rs->NH * c->rs->hs);
}

// ---------------------------------------------------------------------------- tests ----
static void test_rmsnorm(Backend *be, TestRng *r) {
    const int N = 6, C = 24;
    float *x = test_floats(N * C), *w = test_floats(C), *out = test_floats(N * C);
    float *rstd = test_floats(N), *g = test_floats(N * C);
    rng_fill(r, x, N * C, -2, 2), rng_fill(r, w, C, 0.5, 1.5), rng_fill(r, g, N * C, -1, 1);
    FdCtx c = {N, C, to_double(x, N * C), to_double(w, C), test_doubles(N * C), g, NULL};
    be->ops->norm_forward(be, out, NULL, rstd, x, w, NULL, N, C, BACKEND_RMSNORM);
    rmsnorm_ref(c.out, c.inp, c.w, N, C);
    EXPECT_CLOSE(out, c.out, N * C, 1e-6, "rmsnorm forward");

    float *dinp = test_floats(N * C), *dw = test_floats(C);
    for (int i = 0; i < N * C; i++) dinp[i] = 0.25f;  // accumulates
    for (int j = 0; j < C; j++) dw[j] = 0.5f;
    be->ops->norm_backward(be, dinp, dw, NULL, g, x, w, NULL, rstd, N, C, BACKEND_RMSNORM);
    double *gx = test_doubles(N * C), *gw = test_doubles(C);
    fd_grad(c.inp, N * C, rmsnorm_loss, &c, gx);
    fd_grad(c.w, C, rmsnorm_loss, &c, gw);
    for (int i = 0; i < N * C; i++) gx[i] += 0.25;
    for (int j = 0; j < C; j++) gw[j] += 0.5;
    EXPECT_CLOSE(dinp, gx, N * C, 1e-5, "rmsnorm dinp (accumulated) vs finite differences");
    EXPECT_CLOSE(dw, gw, C, 1e-5, "rmsnorm dweight (accumulated) vs finite differences");
    be->ops->norm_backward(be, NULL, NULL, NULL, g, x, w, NULL, rstd, N, C, BACKEND_RMSNORM);  // NULL skips: no crash
    free(x), free(w), free(out), free(rstd), free(g), free(dinp), free(dw), free(gx), free(gw);
    free(c.inp), free(c.w), free(c.out);
}

static void test_swiglu(Backend *be, TestRng *r) {
    const int N = 5, F = 9;
    float *x = test_floats(N * 2 * F), *out = test_floats(N * F), *g = test_floats(N * F);
    rng_fill(r, x, N * 2 * F, -4, 4), rng_fill(r, g, N * F, -1, 1);
    FdCtx c = {N, F, to_double(x, N * 2 * F), NULL, test_doubles(N * F), g, NULL};
    be->ops->act_forward(be, out, x, N, F, BACKEND_ACT_SWIGLU);
    swiglu_ref(c.out, c.inp, N, F);
    EXPECT_CLOSE(out, c.out, N * F, 1e-6, "swiglu forward");
    float *dinp = test_floats(N * 2 * F);
    for (int i = 0; i < N * 2 * F; i++) dinp[i] = NAN;  // overwritten
    be->ops->act_backward(be, dinp, x, g, N, F, BACKEND_ACT_SWIGLU);
    double *gx = test_doubles(N * 2 * F);
    fd_grad(c.inp, N * 2 * F, swiglu_loss, &c, gx);
    EXPECT_CLOSE(dinp, gx, N * 2 * F, 1e-5, "swiglu dinp vs finite differences");
    // Gates past the sigmoid's clamp (|gate| > 80): a NaN gate gives NaN through the gate
    // factor; silu(90) = 90, silu(-90) (nearly) 0, and their gradients 1 and (nearly) 0.
    float sx[6] = {NAN, 90.0f, -90.0f, 1.0f, 1.0f, 1.0f}, so[3], sg[3] = {1, 1, 1}, sd[6];
    be->ops->act_forward(be, so, sx, 1, 3, BACKEND_ACT_SWIGLU);
    EXPECT(isnan(so[0]) && so[1] == 90.0f && fabsf(so[2]) < 1e-30f,
           "swiglu gates NaN, 90, -90: %g %g %g", so[0], so[1], so[2]);
    be->ops->act_backward(be, sd, sx, sg, 1, 3, BACKEND_ACT_SWIGLU);
    EXPECT(isnan(sd[0]) && sd[1] == 1.0f && fabsf(sd[2]) < 1e-28f && isnan(sd[3]) &&
               sd[4] == 90.0f && fabsf(sd[5]) < 1e-30f,
           "swiglu gradients at gates NaN, 90, -90: %g %g %g | %g %g %g", sd[0], sd[1], sd[2],
           sd[3], sd[4], sd[5]);
    free(x), free(out), free(g), free(dinp), free(gx), free(c.inp), free(c.out);
}

static void test_rope_gqa(Backend *be, Backend *be1, TestRng *r, RopeShape s, const char *what) {
    int N = s.B * s.T, in = (s.NH + 2 * s.G) * s.hs, o = 3 * s.NH * s.hs;
    float *x = test_floats(N * in), *out = test_floats(N * o), *g = test_floats(N * o);
    rng_fill(r, x, N * in, -1, 1), rng_fill(r, g, N * o, -1, 1);
    FdCtx c = {N, 0, to_double(x, N * in), NULL, test_doubles(N * o), g, &s};
    char msg[128];
    be->ops->rope_gqa_forward(be, out, x, s.B, s.T, s.NH, s.G, s.hs, s.rot, (float)s.base, 0, NULL);
    rope_gqa_ref(c.out, c.inp, &s);
    snprintf(msg, sizeof msg, "rope_gqa forward (%s)", what);
    EXPECT_CLOSE(out, c.out, N * o, 2e-6, msg);
    float *step = test_floats(o);  // one decoding step at position T-1 = the last row
    be->ops->rope_gqa_forward(be, step, x + (size_t)(N - 1) * in, 1, 1, s.NH, s.G, s.hs, s.rot,
                              (float)s.base, s.T - 1, NULL);
    EXPECT_SAME_BITS(step, out + (size_t)(N - 1) * o, (size_t)o, "rope_gqa one row at pos0 = T-1");
    free(step);
    float *dinp = test_floats(N * in), *dinp1 = test_floats(N * in);
    for (int i = 0; i < N * in; i++) dinp[i] = NAN;  // overwritten
    be->ops->rope_gqa_backward(be, dinp, g, s.B, s.T, s.NH, s.G, s.hs, s.rot, (float)s.base, 0, NULL);
    double *gx = test_doubles(N * in);
    fd_grad(c.inp, N * in, rope_loss, &c, gx);
    snprintf(msg, sizeof msg, "rope_gqa backward vs finite differences (%s)", what);
    EXPECT_CLOSE(dinp, gx, N * in, 1e-5, msg);
    be1->ops->rope_gqa_backward(be1, dinp1, g, s.B, s.T, s.NH, s.G, s.hs, s.rot, (float)s.base, 0, NULL);
    EXPECT_SAME_BITS(dinp, dinp1, (size_t)N * in, "rope_gqa backward on 1 and 2 threads");
    free(x), free(out), free(g), free(dinp), free(dinp1), free(gx), free(c.inp), free(c.out);
}

int main(void) {
    Backend *be1 = backend_cpu_create(1, BACKEND_F32);
    Backend *be = backend_cpu_create(2, BACKEND_F32);
    TestRng r = {7};
    test_rmsnorm(be, &r);
    test_swiglu(be, &r);
    test_rope_gqa(be, be1, &r, (RopeShape){2, 5, 4, 2, 8, 8, 10000.0}, "GQA 4 heads 2 groups");
    test_rope_gqa(be, be1, &r, (RopeShape){1, 7, 2, 2, 8, 4, 100.0}, "MHA, half the head rotated");
    test_rope_gqa(be, be1, &r, (RopeShape){1, 3, 3, 1, 4, 0, 10000.0}, "MQA, no rotation");
    backend_destroy(be), backend_destroy(be1);
    return test_result("test_cpu_llama");
}
