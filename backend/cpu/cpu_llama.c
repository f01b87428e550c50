// backend/cpu/cpu_llama.c: RMSNorm (forward, backward) of Llama-style blocks; SwiGLU is in
// cpu_act.c, rotary positions in cpu_rope.c.
// Contracts in backend/backend.h. Rows are independent and split over threads; the RMSNorm
// weight gradient is summed per block of channels over rows in order, so the bits do not
// depend on the thread count.
#include "cpu_backend.h"

#include <math.h>  // defines: sqrtf

#define CPU_RMS_EPS 1e-5f

// out (N, C) = inp * rstd * weight; rstd (N) saved when not NULL.
void cpu_rmsnorm_forward(Backend *be, void *out_, float *rstd, const void *inp_,
                         const void *weight_, int N, int C) {
    float *out = out_;
    const float *inp = inp_, *w = weight_;
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

// dweight (C) += sum_i dout * inp * rstd, per block of channels, rows in order.
static void rmsnorm_dweight(Backend *be, float *dweight, const float *dout, const float *inp,
                            const float *rstd, int N, int C) {
    int nblk = (C + CPU_COLBLK - 1) / CPU_COLBLK, nt = cpu_nt(be);
#pragma omp parallel for num_threads(nt) schedule(static) if ((size_t)N * C > CPU_PAR_MIN)
    for (int blk = 0; blk < nblk; blk++) {
        int c0 = blk * CPU_COLBLK, w = C - c0 < CPU_COLBLK ? C - c0 : CPU_COLBLK;
        float sw[CPU_COLBLK] = {0};
        for (int i = 0; i < N; i++) {
            const float *x = inp + (size_t)i * C + c0, *dy = dout + (size_t)i * C + c0;
            float s = rstd[i];
            for (int j = 0; j < w; j++) sw[j] += dy[j] * x[j] * s;
        }
        for (int j = 0; j < w; j++) dweight[c0 + j] += sw[j];
    }
}

// dinp (N, C) += s * dn - x * s^3 * mean(dn * x), dn = dout * weight; dweight (C) +=.
void cpu_rmsnorm_backward(Backend *be, void *dinp_, float *dweight, const void *dout_,
                          const void *inp_, const void *weight_, const float *rstd, int N, int C) {
    float *dinp = dinp_;
    const float *dout = dout_, *inp = inp_, *w = weight_;
    int nt = cpu_nt(be);
    if (dinp) {
#pragma omp parallel for num_threads(nt) schedule(static) if ((size_t)N * C > CPU_PAR_MIN)
        for (int i = 0; i < N; i++) {
            const float *x = inp + (size_t)i * C, *dy = dout + (size_t)i * C;
            float *dx = dinp + (size_t)i * C, s = rstd[i], dot = 0.0f;
#pragma omp simd reduction(+ : dot)
            for (int j = 0; j < C; j++) dot += dy[j] * w[j] * x[j];
            float k = s * s * s * dot / (float)C;
#pragma omp simd
            for (int j = 0; j < C; j++) dx[j] += s * dy[j] * w[j] - x[j] * k;
        }
    }
    if (dweight) rmsnorm_dweight(be, dweight, dout, inp, rstd, N, C);
}
