// tests/backend/test_cpu_optim.c: CPU backend AdamW (adamw_multi: one segment against a hand
// computation in double, segments against one segment each), the double-precision reductions (values, NaN/Inf, thread-count independence), host
// memory ops, creation (thread count, name) and the vectorisable exp's accuracy.
#include "backend/backend.h"
#include "backend/cpu/cpu_blas.h"
#include "backend/cpu/cpu_math.h"
#include "tests/backend/backend_ref_ops.h"  // defines: ref_adamw, ref_sum_squares
#include "tests/backend/backend_test_util.h"

#include <float.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>

static void test_adamw(Backend *be, TestRng *r) {
    enum { N = 37 };
    const double lr = 1e-2, b1 = 0.9, b2 = 0.95, eps = 1e-8, wd = 0.1, gs = 0.5;
    float p[N], g[N], m[N], v[N];
    double pd[N], md[N], vd[N];
    rng_fill(r, p, N, -1, 1);
    for (int i = 0; i < N; i++) pd[i] = p[i], m[i] = v[i] = 0, md[i] = vd[i] = 0;
    for (int step = 1; step <= 3; step++) {
        rng_fill(r, g, N, -2, 2);
        ref_adamw(be, p, g, m, v, N, (float)lr, (float)b1, (float)b2, (float)eps, (float)wd,
                       (float)gs, step);
        for (int i = 0; i < N; i++) {  // backend.h's formula, in double
            double gi = g[i] * gs;
            md[i] = b1 * md[i] + (1 - b1) * gi;
            vd[i] = b2 * vd[i] + (1 - b2) * gi * gi;
            double mhat = md[i] / (1 - pow(b1, step)), vhat = vd[i] / (1 - pow(b2, step));
            pd[i] -= lr * (mhat / (sqrt(vhat) + eps) + wd * pd[i]);
        }
    }
    EXPECT_CLOSE(p, pd, N, 1e-6, "adamw params after 3 steps");
    EXPECT_CLOSE(m, md, N, 1e-6, "adamw first moment");
    EXPECT_CLOSE(v, vd, N, 1e-6, "adamw second moment");
}

static void test_reductions(Backend *be2, Backend *be1, TestRng *r) {
    const size_t n = 1000003;
    float *x = test_floats(n);
    rng_fill(r, x, n, -1, 1);
    double s = 0, s2 = 0;
    for (size_t i = 0; i < n; i++) s += x[i], s2 += (double)x[i] * x[i];
    double got_s = be2->ops->sum(be2, NULL, x, n), got_s2 = ref_sum_squares(be2, x, n);
    EXPECT(fabs(got_s - s) <= 1e-9 * n, "sum %.17g vs %.17g", got_s, s);
    EXPECT(fabs(got_s2 - s2) <= 1e-12 * s2, "sum_squares %.17g vs %.17g", got_s2, s2);
    double a = ref_sum_squares(be1, x, n), b = ref_sum_squares(be2, x, n);
    EXPECT(memcmp(&a, &b, sizeof a) == 0, "sum_squares differs between 1 and 2 threads");
    a = be1->ops->sum(be1, NULL, x, n), b = be2->ops->sum(be2, NULL, x, n);
    EXPECT(memcmp(&a, &b, sizeof a) == 0, "sum differs between 1 and 2 threads");
    EXPECT(be2->ops->sum(be2, NULL, x, 0) == 0.0, "empty sum is 0");
    float small[3] = {1, 2, 3};
    EXPECT(ref_sum_squares(be2, small, 3) == 14.0, "sum_squares of 1, 2, 3");
    x[n / 2] = NAN;
    EXPECT(isnan(ref_sum_squares(be2, x, n)), "NaN must propagate into sum_squares");
    x[n / 2] = INFINITY;
    EXPECT(isinf(ref_sum_squares(be2, x, n)), "Inf must propagate into sum_squares");
    free(x);
}

static void test_memory(Backend *be) {
    size_t sizes[3] = {0, 3, 1000001};
    for (int k = 0; k < 3; k++) {
        unsigned char *p = be->ops->alloc(be, sizes[k]);
        EXPECT(p && (uintptr_t)p % 64 == 0, "alloc(%zu) must be 64-byte aligned", sizes[k]);
        int nonzero = 0;
        for (size_t i = 0; i < sizes[k]; i++) nonzero += p[i] != 0;
        EXPECT(nonzero == 0, "alloc(%zu) must be zeroed", sizes[k]);
        be->ops->free(be, p);
    }
    float *a = be->ops->alloc(be, 100 * sizeof(float)), *b = be->ops->alloc(be, 100 * sizeof(float));
    for (int i = 0; i < 100; i++) a[i] = (float)i;
    be->ops->copy(be, b, a, 100 * sizeof(float), BACKEND_H2D);
    be->ops->sync(be);
    EXPECT(b[99] == 99.0f && b[1] == 1.0f, "copy");
    be->ops->zero(be, a, 50 * sizeof(float));
    EXPECT(a[49] == 0.0f && a[50] == 50.0f, "zero clears exactly the bytes asked for");
    be->ops->free(be, a), be->ops->free(be, b), be->ops->free(be, NULL);
}

static void test_create(void) {
    Backend *be = backend_cpu_create(3, BACKEND_F32);
    EXPECT_EQ_INT(be->u.cpu.nthreads, 3);
    EXPECT_EQ_INT(be->kind, BACKEND_CPU);
    EXPECT(strstr(be->name, "3 threads") && strstr(be->name, backend_cpu_blas_corename()),
           "name \"%s\" must give threads and the BLAS kernels", be->name);
    backend_destroy(be);
    const char *old = getenv("OMP_NUM_THREADS");
    char keep[64] = "";
    if (old) snprintf(keep, sizeof keep, "%s", old);
    setenv("OMP_NUM_THREADS", "5", 1);
    be = backend_cpu_create(0, BACKEND_F32);
    EXPECT_EQ_INT(be->u.cpu.nthreads, 5);
    backend_destroy(be);
    unsetenv("OMP_NUM_THREADS");
    be = backend_cpu_create(-1, BACKEND_F32);
    EXPECT_EQ_INT(be->u.cpu.nthreads, omp_get_num_procs());
    backend_destroy(be);
    if (old) setenv("OMP_NUM_THREADS", keep, 1);
    backend_destroy(NULL);
}

// The multi-tensor ops equal their per-segment counterparts bit for bit: adamw_multi = AdamW
// on each segment alone (ref_adamw; weight decay only where flagged, elements between
// segments untouched), sum_squares_multi = the sum of per-segment sums of squares in order,
// sum_acc accumulates.
static void test_multi_tensor(Backend *be, TestRng *r) {
    enum { N = 5000 };
    BackendSegment segs[3] = {{0, 1000, 1, 0}, {1024, 7, 0, 0}, {1040, 3900, 1, 0}};
    float *p1 = test_floats(N), *g = test_floats(N), *m1 = test_floats(N), *v1 = test_floats(N);
    float *p2 = test_floats(N), *m2 = test_floats(N), *v2 = test_floats(N);
    rng_fill(r, p1, N, -1, 1), rng_fill(r, g, N, -1, 1), rng_fill(r, m1, N, -0.1, 0.1);
    rng_fill(r, v1, N, 0, 0.1);
    memcpy(p2, p1, N * 4), memcpy(m2, m1, N * 4), memcpy(v2, v1, N * 4);
    float *copy = test_floats(N);  // the fp32 "weight copy" output: the updated params
    for (int i = 0; i < N; i++) copy[i] = p1[i];
    for (int step = 1; step <= 3; step++) {
        be->ops->adamw_multi(be, p1, step == 3 ? copy : NULL, g, m1, v1, segs, 3, 3900, 1e-2f,
                             0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, step);
        for (int s = 0; s < 3; s++) {
            size_t b = segs[s].begin;
            ref_adamw(be, p2 + b, g + b, m2 + b, v2 + b, segs[s].len, 1e-2f, 0.9f, 0.95f,
                           1e-8f, segs[s].weight_decay ? 0.1f : 0.0f, 0.5f, step);
        }
    }
    EXPECT_SAME_BITS(p1, p2, N, "adamw_multi params (gaps untouched)");
    EXPECT_SAME_BITS(m1, m2, N, "adamw_multi first moments");
    EXPECT_SAME_BITS(v1, v2, N, "adamw_multi second moments");
    EXPECT_SAME_BITS(copy, p1, N, "adamw_multi copy output (gaps untouched, as the params)");
    double want = 0.0;
    for (int s = 0; s < 3; s++) want += ref_sum_squares(be, g + segs[s].begin, segs[s].len);
    EXPECT(be->ops->sum_squares_multi(be, g, segs, 3, 3900) == want, "sum_squares_multi");
    EXPECT(be->ops->sum_squares_multi(be, g, segs, 0, 0) == 0.0, "no segments: 0");
    double acc = 1.5;
    be->ops->sum(be, &acc, g, 100);
    be->ops->sum(be, &acc, g + 100, 200);
    EXPECT(acc == 1.5 + be->ops->sum(be, NULL, g, 100) + be->ops->sum(be, NULL, g + 100, 200), "sum into acc accumulates");
    free(p1), free(g), free(m1), free(v1), free(p2), free(m2), free(v2), free(copy);
}

// cpu_expf: within 2 ulp of exp over its whole normal range; the special cases exact.
static void test_expf(void) {
    double worst = 0;
    for (float x = -86.0f; x < 88.72f; x += 0.000731f) {
        double e = exp((double)x), err = fabs(cpu_expf(x) - e) / e;
        worst = fmax(worst, err);
    }
    EXPECT(worst < 2 * FLT_EPSILON, "cpu_expf relative error %.3g", worst);
    EXPECT(cpu_expf(0.0f) == 1.0f && cpu_expf(-0.0f) == 1.0f, "exp(0) = 1");
    EXPECT(cpu_expf(-INFINITY) == 0.0f && cpu_expf(-100.0f) == 0.0f, "exp(-inf), exp(-100) = 0");
    EXPECT(isinf(cpu_expf(INFINITY)) && isinf(cpu_expf(89.0f)), "exp(inf), exp(89) = inf");
    EXPECT(isnan(cpu_expf(NAN)) && isnan(cpu_expf(-NAN)), "exp(NaN) = NaN");
    EXPECT(cpu_expf(88.7f) < INFINITY && cpu_expf(88.7f) > 3e38f, "exp(88.7) is finite");
}

int main(int argc, char **argv) {
    backend_cpu_select_blas_kernels(argc, argv);
    test_create();
    Backend *be1 = backend_cpu_create(1, BACKEND_F32), *be = backend_cpu_create(2, BACKEND_F32);
    TestRng r = {99};
    test_adamw(be, &r);
    test_reductions(be, be1, &r);
    test_memory(be);
    test_multi_tensor(be, &r);
    test_expf();
    backend_destroy(be), backend_destroy(be1);
    return test_result("test_cpu_optim");
}
