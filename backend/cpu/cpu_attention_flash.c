// backend/cpu/cpu_attention_flash.c: fused causal self-attention (--use-flash-attn), the
// reference for the CUDA kernels: the (T, T) probabilities are never stored.
//
// Row (b, h, t) of a head: scaled scores s_u = q_t . k_u / sqrt(hs) for keys u <= t.
//   forward:  m = max_u s_u; l = sum_u exp(s_u - m); out_t = sum_u exp(s_u - m) v_u / l;
//             lse_t = m + log(l). Two passes over the keys (the scores are recomputed in the
//             second), with out_t itself as the accumulator: no buffer of any size.
//   backward: D_t = dout_t . out_t; p_tu = exp(s_tu - lse_t); dp_tu = dout_t . v_u;
//             ds_tu = p_tu (dp_tu - D_t);
//             dq_t = scale sum_{u<=t} ds_tu k_u          (one pass per query row t)
//             dk_u = scale sum_{t>=u} ds_tu q_t,  dv_u = sum_{t>=u} p_tu dout_t
//                                                         (one pass per key row u)
// Every output element is written by one thread and summed in key (or query) order, so the
// results do not depend on the thread count. p and dp are computed twice (once per pass);
// this is a reference, simple over fast. The views into qkv are those of cpu_attention.c.
#include "cpu_backend.h"
#include "cpu_math.h"

#include <float.h>  // defines: FLT_MAX
#include <math.h>   // defines: sqrtf, logf

// Sum of a[i] * b[i], i < n. Pure.
static inline float cpu_flash_dot(const float *a, const float *b, int n) {
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

// y (n) += a * x (n).
static inline void cpu_flash_axpy(float *y, float a, const float *x, int n) {
#pragma omp simd
    for (int i = 0; i < n; i++) y[i] += a * x[i];
}

// Forward of one row: q (hs) sees keys k[u * ld], values v[u * ld], u <= t; writes o (hs)
// and returns lse.
CPU_SIMD_CLONES static float cpu_flash_row_forward(float *o, const float *q, const float *k,
                                                   const float *v, int t, int hs, size_t ld,
                                                   float scale) {
    float m = -FLT_MAX;
    for (int u = 0; u <= t; u++) {
        float s = scale * cpu_flash_dot(q, k + u * ld, hs);
        m = s > m ? s : m;
    }
    float l = 0.0f;
    for (int i = 0; i < hs; i++) o[i] = 0.0f;
    for (int u = 0; u <= t; u++) {
        float p = cpu_expf(scale * cpu_flash_dot(q, k + u * ld, hs) - m);
        l += p;
        cpu_flash_axpy(o, p, v + u * ld, hs);
    }
    float inv = 1.0f / l;
    for (int i = 0; i < hs; i++) o[i] *= inv;
    return m + logf(l);
}

// out (B, T, C) from qkv (B, T, 3*C); lse (B, NH, T). One OpenMP region over the rows.
void cpu_flash_attention_forward(Backend *be, float *out, float *lse, const float *qkv,
                                 int B, int T, int NH, int hs) {
    int C = NH * hs, nt = cpu_nt(be);
    size_t C3 = 3 * (size_t)C;
    float scale = 1.0f / sqrtf((float)hs);
    long long rows = (long long)B * NH * T;
#pragma omp parallel for num_threads(nt) schedule(dynamic, 16) if (rows * T > CPU_PAR_MIN)
    for (long long r = 0; r < rows; r++) {  // r = (b * NH + h) * T + t
        int t = (int)(r % T), h = (int)(r / T % NH), b = (int)(r / T / NH);
        const float *base = qkv + (size_t)b * T * C3 + (size_t)h * hs;  // q of token 0
        lse[r] = cpu_flash_row_forward(out + ((size_t)b * T + t) * C + (size_t)h * hs,
                                       base + t * C3, base + C, base + 2 * (size_t)C, t, hs,
                                       C3, scale);
    }
}

// Backward of query row t: dq (hs) = scale sum_{u<=t} ds_tu k_u (overwritten).
CPU_SIMD_CLONES static void cpu_flash_row_dq(float *dq, const float *q, const float *dy,
                                             const float *k, const float *v, float lse, float D,
                                             int t, int hs, size_t ld, float scale) {
    for (int i = 0; i < hs; i++) dq[i] = 0.0f;
    for (int u = 0; u <= t; u++) {
        float p = cpu_expf(scale * cpu_flash_dot(q, k + u * ld, hs) - lse);
        float dp = cpu_flash_dot(dy, v + u * ld, hs);
        cpu_flash_axpy(dq, scale * p * (dp - D), k + u * ld, hs);
    }
}

// Backward of key row u: dk (hs) = scale sum_{t>=u} ds_tu q_t, dv (hs) = sum_{t>=u} p_tu
// dy_t (overwritten). q, dy: row t at q[t * ld], dy[t * ldy]; lse, D (T) of this head.
CPU_SIMD_CLONES static void cpu_flash_row_dkv(float *dk, float *dv, const float *k,
                                              const float *v, const float *q, const float *dy,
                                              const float *lse, const float *D, int u, int T,
                                              int hs, size_t ld, size_t ldy, float scale) {
    for (int i = 0; i < hs; i++) dk[i] = 0.0f, dv[i] = 0.0f;
    for (int t = u; t < T; t++) {
        const float *qt = q + t * ld, *dyt = dy + t * ldy;
        float p = cpu_expf(scale * cpu_flash_dot(qt, k, hs) - lse[t]);
        float dp = cpu_flash_dot(dyt, v, hs);
        cpu_flash_axpy(dk, scale * p * (dp - D[t]), qt, hs);
        cpu_flash_axpy(dv, p, dyt, hs);
    }
}

// dqkv (B, T, 3*C) overwritten from dout (B, T, C), qkv, out (B, T, C), lse (B, NH, T);
// scratch (B, NH, T) gets D. Three OpenMP regions over rows: D, dq, then dk and dv.
void cpu_flash_attention_backward(Backend *be, float *dqkv, float *scratch, const float *dout,
                                  const float *qkv, const float *out, const float *lse,
                                  int B, int T, int NH, int hs) {
    int C = NH * hs, nt = cpu_nt(be);
    size_t C3 = 3 * (size_t)C;
    float scale = 1.0f / sqrtf((float)hs);
    long long rows = (long long)B * NH * T;
    float *D = scratch;  // (B, NH, T)
#pragma omp parallel for num_threads(nt) schedule(static) if (rows * hs > CPU_PAR_MIN)
    for (long long r = 0; r < rows; r++) {
        int t = (int)(r % T), h = (int)(r / T % NH), b = (int)(r / T / NH);
        size_t o = ((size_t)b * T + t) * C + (size_t)h * hs;
        D[r] = cpu_flash_dot(dout + o, out + o, hs);
    }
#pragma omp parallel for num_threads(nt) schedule(dynamic, 16) if (rows * T > CPU_PAR_MIN)
    for (long long r = 0; r < rows; r++) {  // dq of row t
        int t = (int)(r % T), h = (int)(r / T % NH), b = (int)(r / T / NH);
        size_t head = (size_t)b * T * C3 + (size_t)h * hs;  // q of token 0 of this head
        const float *q = qkv + head, *dy = dout + (size_t)b * T * C + (size_t)h * hs;
        cpu_flash_row_dq(dqkv + head + t * C3, q + t * C3, dy + (size_t)t * C, q + C,
                         q + 2 * (size_t)C, lse[r], D[r], t, hs, C3, scale);
    }
#pragma omp parallel for num_threads(nt) schedule(dynamic, 16) if (rows * T > CPU_PAR_MIN)
    for (long long r = 0; r < rows; r++) {  // dk, dv of key row u
        int u = (int)(r % T), h = (int)(r / T % NH), b = (int)(r / T / NH);
        size_t head = (size_t)b * T * C3 + (size_t)h * hs;
        const float *q = qkv + head, *dy = dout + (size_t)b * T * C + (size_t)h * hs;
        float *dk = dqkv + head + u * C3 + C;
        cpu_flash_row_dkv(dk, dk + C, q + u * C3 + C, q + u * C3 + 2 * (size_t)C, q, dy,
                          lse + (r - u), D + (r - u), u, T, hs, C3, (size_t)C, scale);
    }
}
