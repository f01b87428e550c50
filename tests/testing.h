// tests/testing.h: tiny assertion helpers shared by megac's tests (header only).
// EXPECT* record a failure with file:line and go on; a test's main returns test_result().
#pragma once
#include <math.h>
#include <stdio.h>

static int test_failures_ = 0;

#define EXPECT(cond, ...)                                                     \
    do {                                                                      \
        if (!(cond)) {                                                        \
            test_failures_++;                                                 \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);   \
            fprintf(stderr, __VA_ARGS__);                                     \
            fputc('\n', stderr);                                              \
        }                                                                     \
    } while (0)

#define EXPECT_EQ_INT(a, b) \
    EXPECT((long long)(a) == (long long)(b), "%lld != %lld", (long long)(a), (long long)(b))

// |a - b| <= tol * max(1, |b|)
#define EXPECT_NEAR(a, b, tol)                                                        \
    EXPECT(fabs((double)(a) - (double)(b)) <= (tol) * fmax(1.0, fabs((double)(b))),  \
           "%.9g vs %.9g (tol %g)", (double)(a), (double)(b), (double)(tol))

static inline int test_result(const char *name) {
    if (test_failures_) fprintf(stderr, "%s: %d check(s) failed\n", name, test_failures_);
    else printf("%s: ok\n", name);
    return test_failures_ ? 1 : 0;
}
