// backend/cpu/cpu_dropout.c: dropout of a (rows, C) tensor, the mask a pure function of the
// element's global index (dropout.h); the backward is the same call on the gradient. Also
// the span kernels that the attention ops use for their masks.
//
// The hash is the cost (one splitmix64 finalizer per pair of elements: two 64-bit multiplies),
// so it runs vectorised: a span's factors are computed in blocks of CPU_DROP_BLOCK consecutive
// mask indices by a `omp simd` loop over their pairs in 64-bit lanes, each lane giving two
// factors (CPU_SIMD_CLONES: GCC synthesises the 64-bit multiplies from 32-bit ones on AVX2 and
// uses vpmullq on AVX-512), with the key, threshold and scale in locals (a loop that read them
// through the descriptor reloaded them at every element: a float store may alias d->scale).
// A span that starts on an odd index drops the first factor of its first pair. The keep test
// and the factor (0 or scale) are dropout_bits(...) >= threshold and dropout_factor's: the
// same bits.
#include "cpu_backend.h"
#include "cpu_math.h"  // defines: CPU_SIMD_CLONES

#include <string.h>  // defines: memmove

#define CPU_DROP_BLOCK 64  // factors per block on the stack

// f (n) = the factors (0 or scale) of mask indices idx0 .. idx0 + n - 1 under key. Pure but
// for f.
CPU_SIMD_CLONES static void drop_factors_span(float *f, int n, uint64_t key, uint32_t threshold,
                                              float scale, uint64_t idx0) {
    float g[CPU_DROP_BLOCK + 2];  // a block's whole pairs: g[0] is index (idx0 + j0) & ~1
    int odd = (int)(idx0 & 1);
    for (int j0 = 0; j0 < n; j0 += CPU_DROP_BLOCK) {
        int m = n - j0 < CPU_DROP_BLOCK ? n - j0 : CPU_DROP_BLOCK, np = (odd + m + 1) / 2;
        uint64_t p0 = (idx0 + (uint64_t)j0) >> 1;
#pragma omp simd
        for (int q = 0; q < np; q++) {
            uint64_t z = dropout_mix64(key ^ (p0 + (uint64_t)q));
            g[2 * q] = (uint32_t)(z >> 32) >= threshold ? scale : 0.0f;
            g[2 * q + 1] = (uint32_t)z >= threshold ? scale : 0.0f;
        }
        for (int j = 0; j < m; j++) f[j0 + j] = g[j + odd];
    }
}

// y (n) = x (n) * f (n); y may alias x. Pure but for y.
CPU_SIMD_CLONES static void drop_mul_span(float *y, const float *x, const float *f, int n) {
#pragma omp simd
    for (int j = 0; j < n; j++) y[j] = x[j] * f[j];
}

void cpu_dropout_factors(float *f, int n, const BackendDropout *d, uint64_t idx0) {
    drop_factors_span(f, n, d->key, d->threshold, d->scale, idx0);
}

void cpu_dropout_span(float *y, const float *x, int n, const BackendDropout *d, uint64_t idx0) {
    float f[CPU_DROP_BLOCK];
    uint64_t key = d->key;
    uint32_t threshold = d->threshold;
    float scale = d->scale;
    for (int j0 = 0; j0 < n; j0 += CPU_DROP_BLOCK) {
        int m = n - j0 < CPU_DROP_BLOCK ? n - j0 : CPU_DROP_BLOCK;
        drop_factors_span(f, m, key, threshold, scale, idx0 + (uint64_t)j0);
        drop_mul_span(y + j0, x + j0, f, m);
    }
}

// out (N, C) = inp * dropout_factor(d, dropout_row(d, r) * C + c); out may alias inp.
void cpu_dropout(Backend *be, void *out, const void *inp, const BackendDropout *d, int N, int C) {
    float *y = out;
    const float *x = inp;
    if (!d || d->threshold == 0) {  // identity (same bits)
        if (y != x) memmove(y, x, (size_t)N * C * sizeof(float));
        return;
    }
    int nt = cpu_nt(be);
#pragma omp parallel for num_threads(nt) schedule(static) if ((size_t)N * C > 16384)
    for (int r = 0; r < N; r++)
        cpu_dropout_span(y + (size_t)r * C, x + (size_t)r * C, C, d,
                         (uint64_t)dropout_row(d, r) * (uint64_t)C);
}

// --- 16-bit activations (--bf16 / --fp16): fp32 arithmetic between rounded loads and stores
// (cpu_half.c's helpers: the rules there) -------------------------------------------------

static void h_dropout(Backend *be, void *o, const void *inp, const BackendDropout *d, int N,
                      int C) {
    if (!d || !d->threshold) {
        if (o != inp) cpu_copy(be, o, inp, CPU_SZ(N) * C * 2, BACKEND_D2D);
        return;
    }
    CpuArena a = cpu_arena(be, cpu_pad(CPU_SZ(N) * C));
    float *f = cpu_in(&a, inp, CPU_SZ(N) * C);
    cpu_dropout(be, f, f, d, N, C);
    cpu_out(be, o, f, CPU_SZ(N) * C);
}

void cpu_dropout_ops(BackendOps *t, BackendDType act) {
    int f32 = act == BACKEND_F32;
    t->dropout = f32 ? cpu_dropout : h_dropout;
}
