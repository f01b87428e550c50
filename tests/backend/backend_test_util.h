// tests/backend/backend_test_util.h: helpers for the CPU backend op tests (header only):
// a seeded RNG, float <-> double copies, central finite differences of a double-precision
// reference, and a comparison that reports the worst element.
//
// Gradient checks follow one pattern: pick a random upstream gradient g, define the scalar
// L(x) = sum(g * f(x)) with f a double-precision reference forward written in the test,
// and compare the backend's fp32 backward with dL/dx from central differences of L.
#pragma once
#include "tests/testing.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define FD_STEP 1e-5  // central differences in double: truncation + rounding ~1e-10

typedef struct { uint64_t s; } TestRng;

// Uniform in [lo, hi). splitmix64, so every test sees the same numbers on every machine.
static inline double rng_uniform(TestRng *r, double lo, double hi) {
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return lo + (hi - lo) * (double)(z >> 11) * (1.0 / 9007199254740992.0);
}

static inline void rng_fill(TestRng *r, float *x, size_t n, double lo, double hi) {
    for (size_t i = 0; i < n; i++) x[i] = (float)rng_uniform(r, lo, hi);
}

static inline float *test_floats(size_t n) {
    float *p = calloc(n ? n : 1, sizeof(float));
    if (!p) abort();
    return p;
}

static inline double *test_doubles(size_t n) {
    double *p = calloc(n ? n : 1, sizeof(double));
    if (!p) abort();
    return p;
}

static inline double *to_double(const float *x, size_t n) {
    double *d = test_doubles(n);
    for (size_t i = 0; i < n; i++) d[i] = x[i];
    return d;
}

static inline double dot_fd(const float *g, const double *y, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)g[i] * y[i];
    return s;
}

// grad (n) = dL/dx by central differences; x is perturbed in place and restored.
typedef double (*TestLossFn)(void *ctx);
static inline void fd_grad(double *x, size_t n, TestLossFn loss, void *ctx, double *grad) {
    for (size_t j = 0; j < n; j++) {
        double x0 = x[j];
        x[j] = x0 + FD_STEP;
        double lp = loss(ctx);
        x[j] = x0 - FD_STEP;
        double lm = loss(ctx);
        x[j] = x0;
        grad[j] = (lp - lm) / (2 * FD_STEP);
    }
}

// Expects |got - want| <= tol * max(1, max|want|) for every element; prints the worst one
// (and, with MEGAC_TEST_VERBOSE set, the error of every check).
#define EXPECT_CLOSE(got, want, n, tol, what) \
    expect_close_at(__FILE__, __LINE__, (got), (want), (n), (tol), (what))
static inline void expect_close_at(const char *file, int line, const float *got,
                                   const double *want, size_t n, double tol, const char *what) {
    double scale = 1.0, worst = 0.0;
    size_t wi = 0;
    for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs(want[i]));
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - want[i]);
        if (!(e <= worst)) worst = e, wi = i;  // also catches NaN
    }
    if (getenv("MEGAC_TEST_VERBOSE"))
        printf("  %-55s max |err| / scale = %.2e (tol %.0e)\n", what, worst / scale, tol);
    if (!(worst <= tol * scale)) {
        test_failures_++;
        fprintf(stderr, "FAIL %s:%d: %s: element %zu is %.9g, want %.9g (|err| %.3g > %.3g)\n",
                file, line, what, wi, n ? (double)got[wi] : 0.0, n ? want[wi] : 0.0, worst,
                tol * scale);
    }
}

// Expects two float arrays to be bitwise equal.
#define EXPECT_SAME_BITS(a, b, n, what) \
    EXPECT(memcmp((a), (b), (n) * sizeof(float)) == 0, "%s differs between runs", (what))
