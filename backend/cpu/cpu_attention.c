// backend/cpu/cpu_attention.c: causal multi-head self-attention, scale 1/sqrt(hs).
//
// Per (batch b, head h) the head's q, k, v are strided views into qkv (B, T, 3*C), C = NH*hs,
// row stride 3*C: q at column h*hs, k at C + h*hs, v at 2*C + h*hs. The products run as one
// sgemm per (b, h) from the calling thread (OpenBLAS threads inside each); the softmax and
// its backward run in between as one OpenMP region over all B*NH*T rows. No BLAS call is
// ever made from inside an OpenMP region.
#include "cpu_backend.h"
#include "cpu_math.h"

#include <float.h>  // defines: FLT_MAX
#include <math.h>   // defines: sqrtf

// In place over p (T): softmax of p[0..t], zeros in p[t+1..T-1].
CPU_SIMD_CLONES static void cpu_causal_softmax_row(float *p, int t, int T) {
    float m = -FLT_MAX;
#pragma omp simd reduction(max : m)
    for (int j = 0; j <= t; j++) m = p[j] > m ? p[j] : m;
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int j = 0; j <= t; j++) {
        p[j] = cpu_expf(p[j] - m);
        s += p[j];
    }
    float inv = 1.0f / s;
#pragma omp simd
    for (int j = 0; j <= t; j++) p[j] *= inv;
    for (int j = t + 1; j < T; j++) p[j] = 0.0f;
}

// out (B, T, C) from qkv (B, T, 3*C); att (B, NH, T, T) keeps the probabilities.
void cpu_attention_forward(Backend *be, float *out, float *att, const float *qkv,
                           int B, int T, int NH, int hs) {
    int C = NH * hs, C3 = 3 * C, nt = cpu_nt(be);
    float scale = 1.0f / sqrtf((float)hs);
    // 1. scores: att[b, h] (T, T) = scale * q (T, hs) @ k (T, hs)^T
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            const float *q = qkv + (size_t)b * T * C3 + h * hs, *k = q + C;
            float *a = att + ((size_t)b * NH + h) * T * T;
            cpu_sgemm(0, 1, T, T, hs, scale, q, C3, k, C3, 0.0f, a, T);
        }
    // 2. causal softmax of every row (row t of a head sees keys 0..t)
    size_t rows = (size_t)B * NH * T;
#pragma omp parallel for num_threads(nt) schedule(static) if (rows * T > CPU_PAR_MIN)
    for (size_t r = 0; r < rows; r++) cpu_causal_softmax_row(att + r * T, (int)(r % T), T);
    // 3. out[b, :, h] (T, hs) = att[b, h] (T, T) @ v (T, hs)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            const float *v = qkv + (size_t)b * T * C3 + 2 * C + h * hs;
            const float *a = att + ((size_t)b * NH + h) * T * T;
            cpu_sgemm(0, 0, T, hs, T, 1.0f, a, T, v, C3, 0.0f, out + (size_t)b * T * C + h * hs, C);
        }
}

// In place over dp (T): softmax backward of row t, ds = p * (dp - sum_j p_j dp_j) for j <= t,
// zeros above the diagonal.
CPU_SIMD_CLONES static void cpu_causal_softmax_backward_row(float *dp, const float *p, int t, int T) {
    float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
    for (int j = 0; j <= t; j++) dot += p[j] * dp[j];
#pragma omp simd
    for (int j = 0; j <= t; j++) dp[j] = p[j] * (dp[j] - dot);
    for (int j = t + 1; j < T; j++) dp[j] = 0.0f;
}

// dqkv (B, T, 3*C) overwritten; scratch (B, NH, T, T) holds d(att), then d(scores).
void cpu_attention_backward(Backend *be, float *dqkv, float *scratch, const float *dout,
                            const float *qkv, const float *att, int B, int T, int NH, int hs) {
    int C = NH * hs, C3 = 3 * C, nt = cpu_nt(be);
    float scale = 1.0f / sqrtf((float)hs);
    // 1. datt (T, T) = dout_h (T, hs) @ v^T;  dv (T, hs) = att^T (T, T) @ dout_h
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            size_t off = (size_t)b * T * C3 + h * hs;
            const float *v = qkv + off + 2 * C, *dy = dout + (size_t)b * T * C + h * hs;
            const float *a = att + ((size_t)b * NH + h) * T * T;
            float *da = scratch + ((size_t)b * NH + h) * T * T;
            cpu_sgemm(0, 1, T, T, hs, 1.0f, dy, C, v, C3, 0.0f, da, T);
            cpu_sgemm(1, 0, T, hs, T, 1.0f, a, T, dy, C, 0.0f, dqkv + off + 2 * C, C3);
        }
    // 2. dscores = softmax backward of datt, in place
    size_t rows = (size_t)B * NH * T;
#pragma omp parallel for num_threads(nt) schedule(static) if (rows * T > CPU_PAR_MIN)
    for (size_t r = 0; r < rows; r++)
        cpu_causal_softmax_backward_row(scratch + r * T, att + r * T, (int)(r % T), T);
    // 3. dq (T, hs) = scale * dscores @ k;  dk (T, hs) = scale * dscores^T @ q
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            size_t off = (size_t)b * T * C3 + h * hs;
            const float *q = qkv + off, *k = qkv + off + C;
            const float *ds = scratch + ((size_t)b * NH + h) * T * T;
            cpu_sgemm(0, 0, T, hs, T, scale, ds, T, k, C3, 0.0f, dqkv + off, C3);
            cpu_sgemm(1, 0, T, hs, T, scale, ds, T, q, C3, 0.0f, dqkv + off + C, C3);
        }
}
