// backend/cpu/cpu_norm.c: normalization, LayerNorm and RMSNorm (forward, backward; the fused
// residual add + LayerNorm), and add. Rows are independent, so they are split over threads;
// the norms' parameter gradients are reductions over rows, summed per chunk of rows in the
// same pass as the input gradient, then the chunks in order (CPU_ROWCHUNK), so the bits do not
// depend on the thread count.
#include "cpu_backend.h"
#include "cpu_math.h"

#include "core/check.h"  // defines: core_calloc

#include <math.h>  // defines: sqrtf
#include <stdlib.h>

#define CPU_LN_EPS 1e-5f

// One row: y (C) = (x - mean) * rstd * w + b; returns mean and rstd.
CPU_SIMD_CLONES static void cpu_layernorm_row(float *y, float *mean, float *rstd,
                                              const float *x, const float *w, const float *b,
                                              int C) {
    float m = 0.0f;
#pragma omp simd reduction(+ : m)
    for (int j = 0; j < C; j++) m += x[j];
    m /= (float)C;
    float var = 0.0f;
#pragma omp simd reduction(+ : var)
    for (int j = 0; j < C; j++) var += (x[j] - m) * (x[j] - m);
    float s = 1.0f / sqrtf(var / (float)C + CPU_LN_EPS);
#pragma omp simd
    for (int j = 0; j < C; j++) y[j] = (x[j] - m) * s * w[j] + b[j];
    *mean = m;
    *rstd = s;
}

// out (N, C) = (inp - mean) * rstd * weight + bias; mean (N), rstd (N) saved when not NULL.
static void layernorm_forward(Backend *be, float *out, float *mean, float *rstd,
                              const float *inp, const float *weight, const float *bias, int N,
                              int C) {
    int nt = cpu_nt(be);
#pragma omp parallel for num_threads(nt) schedule(static) if ((size_t)N * C > CPU_PAR_MIN)
    for (int i = 0; i < N; i++) {
        float m, s;
        cpu_layernorm_row(out + (size_t)i * C, &m, &s, inp + (size_t)i * C, weight, bias, C);
        if (mean) mean[i] = m;
        if (rstd) rstd[i] = s;
    }
}

// res (N, C) = a + b (res may alias a or b), then ln (N, C) = layernorm of res: row by row,
// the same float operations as cpu_add followed by the LayerNorm of cpu_norm_forward (the
// same bits).
void cpu_residual_layernorm_forward(Backend *be, void *res_, void *ln_, float *mean, float *rstd,
                                    const void *a_, const void *b_, const void *weight_,
                                    const void *bias_, int N, int C) {
    float *res = res_, *ln = ln_;
    const float *a = a_, *b = b_, *weight = weight_, *bias = bias_;
    int nt = cpu_nt(be);
#pragma omp parallel for num_threads(nt) schedule(static) if ((size_t)N * C > CPU_PAR_MIN)
    for (int i = 0; i < N; i++) {
        float *r = res + (size_t)i * C, m, s;
        const float *x = a + (size_t)i * C, *y = b + (size_t)i * C;
#pragma omp simd
        for (int j = 0; j < C; j++) r[j] = x[j] + y[j];
        cpu_layernorm_row(ln + (size_t)i * C, &m, &s, r, weight, bias, C);
        if (mean) mean[i] = m;
        if (rstd) rstd[i] = s;
    }
}

// One row: dx (C) += s * (dn - mean(dn) - norm * mean(dn * norm)), norm = (x - m) * s,
// dn = dy * w.
CPU_SIMD_CLONES static void cpu_layernorm_dinp_row(float *dx, const float *dy, const float *x,
                                                   const float *w, float m, float s, int C) {
    float dn_mean = 0.0f, dn_norm_mean = 0.0f;
#pragma omp simd reduction(+ : dn_mean, dn_norm_mean)
    for (int j = 0; j < C; j++) {
        float dn = dy[j] * w[j];
        dn_mean += dn;
        dn_norm_mean += dn * (x[j] - m) * s;
    }
    dn_mean /= (float)C;
    dn_norm_mean /= (float)C;
#pragma omp simd
    for (int j = 0; j < C; j++) {
        float dn = dy[j] * w[j];
        dx[j] += s * (dn - dn_mean - (x[j] - m) * s * dn_norm_mean);
    }
}

// One row's part of the parameter gradients: sw (C) += dy * norm, sb (C) += dy.
CPU_SIMD_CLONES static void cpu_layernorm_dparams_row(float *sw, float *sb, const float *dy,
                                                      const float *x, float m, float s, int C) {
#pragma omp simd
    for (int j = 0; j < C; j++) {
        sw[j] += dy[j] * (x[j] - m) * s;
        sb[j] += dy[j];
    }
}

// dinp (N, C) += ...; dweight (C) += sum_i dout * norm; dbias (C) += sum_i dout (each skipped
// when NULL). One pass over the rows, in chunks: each chunk's parameter sums, then theirs.
static void layernorm_backward(Backend *be, float *dinp, float *dweight, float *dbias,
                               const float *dout, const float *inp, const float *weight,
                               const float *mean, const float *rstd, int N, int C) {
    int nt = cpu_nt(be), nck = cpu_rowchunks(N);
    float *part = dweight || dbias ? core_calloc((size_t)2 * nck * C, sizeof(float)) : NULL;
    // part (2, nck, C): each chunk's sums of dout * norm, then of dout
#pragma omp parallel for num_threads(nt) schedule(static) if ((size_t)N * C > CPU_PAR_MIN)
    for (int k = 0; k < nck; k++) {
        for (int i = k * CPU_ROWCHUNK, i1 = cpu_rowchunk_end(N, k); i < i1; i++) {
            const float *dy = dout + (size_t)i * C, *x = inp + (size_t)i * C;
            if (dinp)
                cpu_layernorm_dinp_row(dinp + (size_t)i * C, dy, x, weight, mean[i], rstd[i], C);
            if (part)
                cpu_layernorm_dparams_row(part + (size_t)k * C, part + ((size_t)nck + k) * C, dy,
                                          x, mean[i], rstd[i], C);
        }
    }
    if (!part) return;
    if (dweight) cpu_chunks_acc(be, dweight, part, nck, C);
    if (dbias) cpu_chunks_acc(be, dbias, part + (size_t)nck * C, nck, C);
    free(part);
}

// --- RMSNorm (eps 1e-5, no bias, no mean) ---------------------------------------------
#define CPU_RMS_EPS 1e-5f

// out (N, C) = inp * rstd * weight; rstd (N) saved when not NULL.
static void rmsnorm_forward(Backend *be, float *out, float *rstd, const float *inp,
                            const float *w, int N, int C) {
    int nt = cpu_nt(be);
#pragma omp parallel for num_threads(nt) schedule(static) if ((size_t)N * C > CPU_PAR_MIN)
    for (int i = 0; i < N; i++) {
        const float *x = inp + (size_t)i * C;
        float *y = out + (size_t)i * C, ss = 0.0f;
#pragma omp simd reduction(+ : ss)
        for (int j = 0; j < C; j++) ss += x[j] * x[j];
        float s = 1.0f / sqrtf(ss / (float)C + CPU_RMS_EPS);
#pragma omp simd
        for (int j = 0; j < C; j++) y[j] = x[j] * s * w[j];
        if (rstd) rstd[i] = s;
    }
}

// One row of RMSNorm's backward: dx (C) += s * dn - x * s^3 * mean(dn * x), dn = dy * w
// (dx non-NULL); sw (C) += dy * x * s (sw non-NULL).
CPU_SIMD_CLONES static void cpu_rmsnorm_backward_row(float *dx, float *sw, const float *dy,
                                                     const float *x, const float *w, float s,
                                                     int C) {
    if (dx) {
        float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
        for (int j = 0; j < C; j++) dot += dy[j] * w[j] * x[j];
        float k = s * s * s * dot / (float)C;
#pragma omp simd
        for (int j = 0; j < C; j++) dx[j] += s * dy[j] * w[j] - x[j] * k;
    }
    if (sw) {
#pragma omp simd
        for (int j = 0; j < C; j++) sw[j] += dy[j] * x[j] * s;
    }
}

// dinp (N, C) += ...; dweight (C) += sum_i dout * inp * rstd (each skipped when NULL). One
// pass over the rows, in chunks, as layernorm_backward.
static void rmsnorm_backward(Backend *be, float *dinp, float *dweight, const float *dout,
                             const float *inp, const float *w, const float *rstd, int N, int C) {
    int nt = cpu_nt(be), nck = cpu_rowchunks(N);
    float *part = dweight ? core_calloc((size_t)nck * C, sizeof(float)) : NULL;  // (nck, C)
#pragma omp parallel for num_threads(nt) schedule(static) if ((size_t)N * C > CPU_PAR_MIN)
    for (int k = 0; k < nck; k++) {
        for (int i = k * CPU_ROWCHUNK, i1 = cpu_rowchunk_end(N, k); i < i1; i++)
            cpu_rmsnorm_backward_row(dinp ? dinp + (size_t)i * C : NULL,
                                     part ? part + (size_t)k * C : NULL, dout + (size_t)i * C,
                                     inp + (size_t)i * C, w, rstd[i], C);
    }
    if (!part) return;
    cpu_chunks_acc(be, dweight, part, nck, C);
    free(part);
}

// BACKEND_NORM_1P: gamma (C) = 1 + weight into a new buffer (the caller frees it); else
// weight itself and *owned NULL.
static const float *norm_gamma(const void *weight, int C, BackendNorm kind, float **owned) {
    *owned = NULL;
    if (!(kind & BACKEND_NORM_1P)) return weight;
    const float *w = weight;
    float *g = core_calloc((size_t)C, sizeof(float));
    for (int j = 0; j < C; j++) g[j] = 1.0f + w[j];
    return *owned = g;
}

// LayerNorm or RMSNorm of every row (contract: BackendOps.norm_forward).
void cpu_norm_forward(Backend *be, void *out, float *mean, float *rstd, const void *inp,
                      const void *weight_, const void *bias, int N, int C, BackendNorm kind) {
    float *owned;
    const float *weight = norm_gamma(weight_, C, kind, &owned);
    if (kind & BACKEND_RMSNORM)
        rmsnorm_forward(be, out, rstd, inp, weight, N, C);
    else
        layernorm_forward(be, out, mean, rstd, inp, weight, bias, N, C);
    free(owned);
}

// dinp (N, C) += ...; dweight (C), dbias (C, LayerNorm) += ... (each skipped when NULL).
void cpu_norm_backward(Backend *be, void *dinp, float *dweight, float *dbias, const void *dout,
                       const void *inp, const void *weight_, const float *mean, const float *rstd,
                       int N, int C, BackendNorm kind) {
    float *owned;
    const float *weight = norm_gamma(weight_, C, kind, &owned);
    if (kind & BACKEND_RMSNORM)
        rmsnorm_backward(be, dinp, dweight, dout, inp, weight, rstd, N, C);
    else
        layernorm_backward(be, dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
    free(owned);
}

// x (n) *= alpha.
void cpu_scale(Backend *be, float *x, float alpha, size_t n) {
    int nt = cpu_nt(be);
#pragma omp parallel for simd num_threads(nt) schedule(static) if (n > CPU_PAR_MIN)
    for (size_t i = 0; i < n; i++) x[i] *= alpha;
}

// out (n) = a + b; out may alias a or b.
void cpu_add(Backend *be, float *out, const float *a, const float *b, size_t n) {
    int nt = cpu_nt(be);
#pragma omp parallel for simd num_threads(nt) schedule(static) if (n > CPU_PAR_MIN)
    for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

// add with the entry's `void *` activations: fp32 buffers (add_f32 shares its loop).
static void op_add(Backend *be, void *out, const void *a, const void *b, size_t n) {
    cpu_add(be, out, a, b, n);
}

// --- 16-bit activations (--bf16 / --fp16): fp32 arithmetic between rounded loads and stores
// (cpu_half.c's helpers: the rules there) -------------------------------------------------

static void h_norm_forward(Backend *be, void *o, float *mean, float *rstd, const void *inp,
                           const void *weight, const void *bias, int N, int C, BackendNorm kind) {
    CpuArena a = cpu_arena(be, 2 * cpu_pad(CPU_SZ(N) * C) + 2 * cpu_pad(C));
    const float *fi = cpu_in(&a, inp, CPU_SZ(N) * C), *fw = cpu_in(&a, weight, C);
    const float *fb = kind & BACKEND_RMSNORM ? NULL : cpu_in(&a, bias, C);  // LayerNorm, 1p or not
    float *fo = cpu_take(&a, CPU_SZ(N) * C);
    cpu_norm_forward(be, fo, mean, rstd, fi, fw, fb, N, C, kind);
    cpu_out(be, o, fo, CPU_SZ(N) * C);
}

static void h_norm_backward(Backend *be, void *dinp, float *dweight, float *dbias,
                            const void *dout, const void *inp, const void *weight,
                            const float *mean, const float *rstd, int N, int C, BackendNorm kind) {
    CpuArena a = cpu_arena(be, 3 * cpu_pad(CPU_SZ(N) * C) + cpu_pad(C));
    float *fdi = cpu_in(&a, dinp, CPU_SZ(N) * C);  // accumulated into
    const float *fd = cpu_in(&a, dout, CPU_SZ(N) * C), *fi = cpu_in(&a, inp, CPU_SZ(N) * C);
    const float *fw = cpu_in(&a, weight, C);
    cpu_norm_backward(be, fdi, dweight, dbias, fd, fi, fw, mean, rstd, N, C, kind);
    cpu_out(be, dinp, fdi, CPU_SZ(N) * C);
}

// out (n) = a + b on the 16-bit elements, one rounding (out may alias a or b).
static void h_add(Backend *be, void *o, const void *x, const void *y, size_t n) {
    BackendDType t = be->act;
    int nt = cpu_nt(be);
#pragma omp parallel for num_threads(nt) schedule(static) if (n >= CPU_PAR_MIN)
    for (size_t i = 0; i < n; i++) cpu_store(o, t, i, cpu_load(x, t, i) + cpu_load(y, t, i));
}

// res rounded before the statistics, as CUDA's fused kernel: add, then norm_forward.
static void h_residual_layernorm_forward(Backend *be, void *res, void *ln, float *mean,
                                         float *rstd, const void *x, const void *y,
                                         const void *weight, const void *bias, int N, int C) {
    h_add(be, res, x, y, CPU_SZ(N) * C);
    h_norm_forward(be, ln, mean, rstd, res, weight, bias, N, C, BACKEND_LAYERNORM);
}

void cpu_norm_ops(BackendOps *t, BackendDType act) {
    int f32 = act == BACKEND_F32;
    t->norm_forward = f32 ? cpu_norm_forward : h_norm_forward;
    t->norm_backward = f32 ? cpu_norm_backward : h_norm_backward;
    t->residual_layernorm_forward = f32 ? cpu_residual_layernorm_forward : h_residual_layernorm_forward;
    t->add = f32 ? op_add : h_add;
    t->add_f32 = cpu_add;
    t->scale_f32 = cpu_scale;
}
