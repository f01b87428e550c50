// tests/backend/cuda/cuda_half.h: helpers of the bf16/fp16 op test (test_cuda_half.c,
// cuda_half_attn.c; header only).
//
// Every check runs one op twice from the same host values: on the CUDA backend with
// activations in h->dt (bf16 or fp16), and on the CPU backend (fp32) as the reference. With
// `--device cpu` (test cpu_half) the backend under test is the CPU's own with h->dt
// activations (cpu_half.c): then only the stores to h->dt differ. The
// inputs are rounded to h->dt first (the CPU backend's cast), so both sides see the same
// numbers and the difference is the device's own rounding: stores to h->dt (half an ulp:
// 2^-9 relative for bf16, 2^-12 for fp16), intermediate activations stored in h->dt
// (attention scores and probabilities), fp32 vs the reference's summation order. Outputs of
// the activation type come back through the CPU cast to fp32; fp32 outputs (parameter
// gradients, statistics) come back as they are. Tolerances are relative to max(1, max|ref|)
// (expect_close_at), one per op and type, in the table TOL_* below.
#pragma once
#include "backend/backend.h"
#include "tests/backend/backend_test_util.h"  // defines: TestRng, rng_fill, expect_close_at

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HALF_MAX_BUFS 64

typedef struct {
    Backend *cpu;     // the fp32 reference (its cast op also converts host buffers)
    Backend *dev[3];  // backends under test by BackendDType: [BACKEND_BF16], [BACKEND_F16]
    Backend *be;      // dev[dt]: the one under test
    BackendDType dt;
    TestRng rng;
    int quick;        // --quick: smaller sizes
    void *bufs[HALF_MAX_BUFS];
    int nbufs;
} Half;

// Tolerances (relative to max(1, max|ref|)) by what is compared; [0] bf16, [1] fp16.
//   TOL_STORE: outputs rounded once to the type (matmul, gelu, add, layernorm out and dinp,
//     position, flash attention, xent dlogits): half an ulp is at most 2^-8 (bf16) / 2^-11
//     (fp16) of max|ref|; twice that. Measured (emulator): up to 3.5e-3 / 4.3e-4.
//   TOL_ATT_FWD / TOL_ATT_BWD: materialised attention: the scores, probabilities, d(att) and
//     d(scores) are also stored in the type between the GEMMs and the softmax (|scores| ~5:
//     half an ulp there moves a probability by up to ~1 % in bf16). Measured: 4.4e-3 / 6.2e-4.
//   TOL_F32: fp32 outputs (dweight, dbias, dtable, dwpe, LN mean/rstd, lse, xent statistics)
//     computed from the same rounded inputs: only the summation order differs (measured
//     <= 2.5e-7). Copies and maxima (embedding forward, xent_stats rowmax, tgt) must be exact (0).
static const double TOL_STORE[2] = {8e-3, 1e-3};
static const double TOL_ATT_FWD[2] = {1.5e-2, 2e-3};
static const double TOL_ATT_BWD[2] = {1.5e-2, 2e-3};
#define TOL_F32 2e-5

// The tolerance of table `tab` for the type under test.
static inline double half_tol(const Half *h, const double *tab) {
    return tab[h->dt == BACKEND_BF16 ? 0 : 1];
}

// Device memory of n elements of type t, zeroed, freed by half_release.
static inline void *half_alloc(Half *h, size_t n, BackendDType t) {
    if (h->nbufs == HALF_MAX_BUFS) abort();
    void *p = h->be->ops->alloc(h->be, n * backend_dtype_size(t));
    h->bufs[h->nbufs++] = p;
    return p;
}

static inline void half_release(Half *h) {
    for (int i = 0; i < h->nbufs; i++) h->be->ops->free(h->be, h->bufs[i]);
    h->nbufs = 0;
}

// x (n, fp32, host) rounded in place to type t and back (the CPU backend's cast).
static inline void half_round(Half *h, float *x, size_t n, BackendDType t) {
    uint16_t *tmp = malloc(n * 2 + 2);
    h->cpu->ops->cast(h->cpu, tmp, t, x, BACKEND_F32, n);
    h->cpu->ops->cast(h->cpu, x, BACKEND_F32, tmp, t, n);
    free(tmp);
}

// Random host floats in [lo, hi), already rounded to the type under test (caller frees).
static inline float *half_rand(Half *h, size_t n, double lo, double hi) {
    float *x = test_floats(n);
    rng_fill(&h->rng, x, n, lo, hi);
    half_round(h, x, n, h->dt);
    return x;
}

// Device copy of host fp32 x (n) converted to type t (on the host, by the CPU cast).
static inline void *half_up_as(Half *h, const float *x, size_t n, BackendDType t) {
    size_t bytes = n * backend_dtype_size(t);
    void *tmp = malloc(bytes + 4), *d = half_alloc(h, n, t);
    h->cpu->ops->cast(h->cpu, tmp, t, x, BACKEND_F32, n);
    h->be->ops->copy(h->be, d, tmp, bytes, BACKEND_H2D);
    h->be->ops->sync(h->be);
    free(tmp);
    return d;
}
// ... as the activation type, and as fp32.
static inline void *half_up(Half *h, const float *x, size_t n) { return half_up_as(h, x, n, h->dt); }
static inline float *half_up_f32(Half *h, const float *x, size_t n) {
    return (float *)half_up_as(h, x, n, BACKEND_F32);
}
static inline int *half_up_int(Half *h, const int *x, size_t n) {
    int *d = (int *)half_alloc(h, n, BACKEND_F32);
    h->be->ops->copy(h->be, d, x, n * sizeof(int), BACKEND_H2D);
    return d;
}

// Host fp32 out (n) from device d (n elements of type t), converted by the CPU cast.
static inline void half_down_as(Half *h, float *out, const void *d, size_t n, BackendDType t) {
    size_t bytes = n * backend_dtype_size(t);
    void *tmp = malloc(bytes + 4);
    h->be->ops->copy(h->be, tmp, d, bytes, BACKEND_D2H);
    h->be->ops->sync(h->be);
    h->cpu->ops->cast(h->cpu, out, BACKEND_F32, tmp, t, n);
    free(tmp);
}
static inline void half_down(Half *h, float *out, const void *d, size_t n) {
    half_down_as(h, out, d, n, h->dt);
}
static inline void half_down_f32(Half *h, float *out, const float *d, size_t n) {
    half_down_as(h, out, d, n, BACKEND_F32);
}

// Device buffer of n elements of type t filled with NaN (an op that must overwrite it shows).
static inline void *half_poisoned(Half *h, size_t n, BackendDType t) {
    float *x = test_floats(n);
    for (size_t i = 0; i < n; i++) x[i] = NAN;
    void *d = half_up_as(h, x, n, t);
    free(x);
    return d;
}

// dev (n) against ref (n) within tol * max(1, max|ref|); `what` gets the type's name.
#define HALF_CLOSE(h, dev, ref, n, tol, what) \
    half_close_at(__FILE__, __LINE__, (h), (dev), (ref), (n), (tol), (what))
static inline void half_close_at(const char *file, int line, const Half *h, const float *dev,
                                 const float *ref, size_t n, double tol, const char *what) {
    char name[200];
    snprintf(name, sizeof name, "%s [%s]", what, backend_dtype_name(h->dt));
    double *want = to_double(ref, n);
    expect_close_at(file, line, dev, want, n, tol, name);
    free(want);
}

// The parts of the test (each returns its number of failed checks).
int cuda_half_attn(Half *h);  // cuda_half_attn.c: attention, flash attention, embeddings, xent
int cuda_fused_xent(Half *h);
int cuda_half_moe(Half *h);   // cuda_half_moe.c: the mixture-of-experts token rows
int cuda_half_rest(Half *h);  // cuda_half_rest.c: fused pairs, Llama ops, dropout, a flash window  // cuda_fused_xent.c (of test_cuda_fused): xent_stats, xent_rescale
