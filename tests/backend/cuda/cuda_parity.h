// tests/backend/cuda/cuda_parity.h: helpers of the CUDA-vs-CPU op-parity test (header only).
//
// Every check runs one op on both backends (be[PAR_REF] = CPU reference, be[PAR_DEV] = CUDA)
// from the same host inputs: inputs go up with the backend's alloc + copy (plain memory on
// the CPU), outputs come back to the host and are compared element-wise within PAR_TOL of
// max(1, max|ref|). Buffers are tracked per backend and released together (par_release).
//
// testing.h's failure counter is per translation unit: each part of the test (one .c file)
// returns its own count, which main adds up.
#pragma once
#include "backend/backend.h"
#include "tests/backend/backend_test_util.h"  // defines: TestRng, rng_fill, expect_close_at

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define PAR_REF 0
#define PAR_DEV 1
#define PAR_TOL 1e-5
#define PAR_MAX_BUFS 64

typedef struct {
    Backend *be[2];  // [PAR_REF] CPU, [PAR_DEV] CUDA
    TestRng rng;
    int quick;       // --quick: a smaller subset (sanitizer builds)
    void *bufs[2][PAR_MAX_BUFS];
    int nbufs[2];
} Parity;

// The test's parts (each returns its number of failed checks).
int cuda_ops_vocab(Parity *t);  // cuda_ops_vocab.c: embeddings, position, cross-entropy
int cuda_ops_optim(Parity *t);  // cuda_ops_optim.c: AdamW, reductions
int cuda_ops_flash(Parity *t);  // cuda_ops_flash.c: fused (flash) attention

// Zeroed backend memory of `bytes`, freed by par_release.
static inline void *par_alloc(Parity *t, int k, size_t bytes) {
    if (t->nbufs[k] == PAR_MAX_BUFS) abort();
    void *p = t->be[k]->ops->alloc(t->be[k], bytes);
    t->bufs[k][t->nbufs[k]++] = p;
    return p;
}

// Frees every buffer of both backends.
static inline void par_release(Parity *t) {
    for (int k = 0; k < 2; k++) {
        for (int i = 0; i < t->nbufs[k]; i++) t->be[k]->ops->free(t->be[k], t->bufs[k][i]);
        t->nbufs[k] = 0;
    }
}

// Backend copy of host bytes.
static inline void *par_up_bytes(Parity *t, int k, const void *h, size_t bytes) {
    void *d = par_alloc(t, k, bytes);
    t->be[k]->ops->copy(t->be[k], d, h, bytes, BACKEND_H2D);
    return d;
}
static inline float *par_up(Parity *t, int k, const float *h, size_t n) {
    return (float *)par_up_bytes(t, k, h, n * sizeof(float));
}
static inline int *par_up_int(Parity *t, int k, const int *h, size_t n) {
    return (int *)par_up_bytes(t, k, h, n * sizeof(int));
}

// Host copy of backend bytes (waits for the backend).
static inline void par_down_bytes(Parity *t, int k, void *h, const void *d, size_t bytes) {
    t->be[k]->ops->copy(t->be[k], h, d, bytes, BACKEND_D2H);
    t->be[k]->ops->sync(t->be[k]);
}

// Host copy of n floats of backend memory into the host array out[k] (n floats each).
static inline void par_down(Parity *t, int k, float *h, const float *d, size_t n) {
    par_down_bytes(t, k, h, d, n * sizeof(float));
}

// Fills n floats of backend memory with NaN (an op that must overwrite them shows it).
static inline void par_poison(Parity *t, int k, float *d, size_t n) {
    float *h = test_floats(n);
    for (size_t i = 0; i < n; i++) h[i] = NAN;
    t->be[k]->ops->copy(t->be[k], d, h, n * sizeof(float), BACKEND_H2D);
    t->be[k]->ops->sync(t->be[k]);
    free(h);
}

// Random host floats in [lo, hi) (caller frees).
static inline float *par_rand(Parity *t, size_t n, double lo, double hi) {
    float *h = test_floats(n);
    rng_fill(&t->rng, h, n, lo, hi);
    return h;
}

// dev (n) against ref (n): within PAR_TOL * max(1, max|ref|), the worst element reported.
#define PAR_CLOSE(dev, ref, n, what) par_close_at(__FILE__, __LINE__, (dev), (ref), (n), (what))
static inline void par_close_at(const char *file, int line, const float *dev, const float *ref,
                                size_t n, const char *what) {
    double *want = to_double(ref, n);
    expect_close_at(file, line, dev, want, n, PAR_TOL, what);
    free(want);
}

// Host outputs of both backends: out[PAR_REF], out[PAR_DEV] (n floats each).
typedef struct { float *h[2]; size_t n; } ParOut;
static inline ParOut par_out(size_t n) {
    ParOut o = {{test_floats(n), test_floats(n)}, n};
    return o;
}
static inline void par_out_free(ParOut *o) { free(o->h[0]), free(o->h[1]); }
#define PAR_CLOSE_OUT(o, what) PAR_CLOSE((o).h[PAR_DEV], (o).h[PAR_REF], (o).n, (what))
