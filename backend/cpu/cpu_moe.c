// backend/cpu/cpu_moe.c: the mixture-of-experts ops: the router (top-k choice, combine
// weights, their gradient, the aux and z losses) and the token rows moved into expert order
// and back (gather, combine, the combine weights' gradient).
//
// Each router row is independent: rows are spread over the threads, a row's arithmetic is
// the same loop whatever the thread count, and the losses are per-row values summed in row
// order afterwards (in double, stored fp32), so every result has the same bits for any
// thread count. The rows ops load and store be->act themselves (cpu_load / cpu_store,
// arithmetic in fp32): the 16-bit table lists them as they are, without a conversion
// wrapper (a gather converts no more than the rows it moves); fp32 rows take vector loops
// (the same bits, but rows_dot's sum, whose order follows the vector width).
#include "core/check.h"  // defines: core_fatal
#include "cpu_backend.h"
#include "cpu_math.h"  // defines: CPU_SIMD_CLONES

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { MAXE = BACKEND_MOE_MAX_EXPERTS };
#define SIG_EPS 1e-20f  // Megatron's guard in the sigmoid normalisations

static float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }

// Aborts the job on a router descriptor the ops cannot take (names the numbers).
static void check_router(const char *op, const BackendMoERouter *r) {
    if (r->E < 1 || r->E > MAXE || r->K < 1 || r->K > r->E)
        core_fatal("%s: E = %d experts, K = %d chosen: need 1 <= K <= E <= %d", op, r->E, r->K,
                   MAXE);
    if (r->score != BACKEND_MOE_SOFTMAX && r->score != BACKEND_MOE_SIGMOID)
        core_fatal("%s: unknown score function %d", op, (int)r->score);
}

// s (E) = softmax(l (E)) over the row; returns log(sum exp(l)). Sums in expert order.
static float softmax_row(float *s, const float *l, int E) {
    float m = l[0], z = 0.0f;
    for (int e = 1; e < E; e++) m = l[e] > m ? l[e] : m;
    for (int e = 0; e < E; e++) z += (s[e] = expf(l[e] - m));
    for (int e = 0; e < E; e++) s[e] /= z;
    return m + logf(z);
}

// One token: idx (K) and p (K) from its logits l (E), as moe_router_forward.
static void route_row(int *idx, float *p, const float *l, const BackendMoERouter *r) {
    int E = r->E, K = r->K;
    float sm[MAXE], sel[MAXE];
    unsigned char taken[MAXE] = {0};
    int soft = r->score == BACKEND_MOE_SOFTMAX;
    if (soft && r->pre_softmax) softmax_row(sm, l, E);
    for (int e = 0; e < E; e++) {
        float v = !soft ? sigmoidf(l[e]) : r->pre_softmax ? sm[e] : l[e];
        sel[e] = r->bias ? v + r->bias[e] : v;
    }
    for (int k = 0; k < K; k++) {  // strict > : ties to the lowest index
        int best = -1;
        for (int e = 0; e < E; e++)
            if (!taken[e] && (best < 0 || sel[e] > sel[best])) best = e;
        taken[best] = 1, idx[k] = best;
    }
    if (soft && r->pre_softmax) {
        for (int k = 0; k < K; k++) p[k] = sm[idx[k]];
    } else if (soft) {
        float m = l[idx[0]], z = 0.0f;
        for (int k = 1; k < K; k++) m = l[idx[k]] > m ? l[idx[k]] : m;
        for (int k = 0; k < K; k++) z += (p[k] = expf(l[idx[k]] - m));
        for (int k = 0; k < K; k++) p[k] /= z;
    } else {
        float g = 0.0f;
        for (int k = 0; k < K; k++) g += (p[k] = sigmoidf(l[idx[k]]));
        if (K > 1)
            for (int k = 0; k < K; k++) p[k] /= g + SIG_EPS;
    }
    if (r->scaling != 0.0f)
        for (int k = 0; k < K; k++) p[k] *= r->scaling;
}

void cpu_moe_router_forward(Backend *be, int *idx, float *probs, const float *logits, int N,
                            const BackendMoERouter *r) {
    check_router("moe_router_forward", r);
    int nt = cpu_nt(be), E = r->E, K = r->K;
#pragma omp parallel for num_threads(nt) schedule(static) if ((size_t)N * E >= CPU_PAR_MIN)
    for (int t = 0; t < N; t++)
        route_row(idx + (size_t)t * K, probs + (size_t)t * K, logits + (size_t)t * E, r);
}

// One token: dl (E) overwritten from dp (K), as moe_router_backward.
static void route_row_backward(float *dl, const float *dp, const float *l, const int *idx,
                               const BackendMoERouter *r) {
    int E = r->E, K = r->K;
    float sc = r->scaling != 0.0f ? r->scaling : 1.0f, q[MAXE];
    memset(dl, 0, (size_t)E * sizeof(float));
    if (r->score == BACKEND_MOE_SOFTMAX && r->pre_softmax) {
        // p_k = sc * S[idx_k]: dl_e = sc * S_e * ([e chosen] dp_e - sum_k dp_k S[idx_k])
        softmax_row(q, l, E);
        float dot = 0.0f;
        for (int k = 0; k < K; k++) dot += dp[k] * q[idx[k]];
        for (int e = 0; e < E; e++) dl[e] = -sc * q[e] * dot;
        for (int k = 0; k < K; k++) dl[idx[k]] += sc * q[idx[k]] * dp[k];
    } else if (r->score == BACKEND_MOE_SOFTMAX) {
        // p = sc * softmax(l[idx]): dl[idx_k] = sc * q_k * (dp_k - sum_j q_j dp_j)
        float m = l[idx[0]], z = 0.0f, dot = 0.0f;
        for (int k = 1; k < K; k++) m = l[idx[k]] > m ? l[idx[k]] : m;
        for (int k = 0; k < K; k++) z += (q[k] = expf(l[idx[k]] - m));
        for (int k = 0; k < K; k++) q[k] /= z, dot += q[k] * dp[k];
        for (int k = 0; k < K; k++) dl[idx[k]] = sc * q[k] * (dp[k] - dot);
    } else {
        // p_k = sc * g_k / (G + eps) (K = 1: sc * g): dg_k = sc * (dp_k - sum_j dp_j p'_j)
        // / (G + eps) with p' = g / (G + eps); dl = dg * g (1 - g)
        float G = 0.0f, dot = 0.0f;
        for (int k = 0; k < K; k++) G += (q[k] = sigmoidf(l[idx[k]]));
        float d = K > 1 ? G + SIG_EPS : 1.0f;
        if (K > 1)
            for (int k = 0; k < K; k++) dot += dp[k] * (q[k] / d);
        for (int k = 0; k < K; k++) dl[idx[k]] = sc * (dp[k] - dot) / d * q[k] * (1.0f - q[k]);
    }
}

void cpu_moe_router_backward(Backend *be, float *dlogits, const float *dprobs,
                             const float *logits, const int *idx, int N,
                             const BackendMoERouter *r) {
    check_router("moe_router_backward", r);
    int nt = cpu_nt(be), E = r->E, K = r->K;
#pragma omp parallel for num_threads(nt) schedule(static) if ((size_t)N * E >= CPU_PAR_MIN)
    for (int t = 0; t < N; t++)
        route_row_backward(dlogits + (size_t)t * E, dprobs + (size_t)t * K, logits + (size_t)t * E,
                           idx + (size_t)t * K, r);
}

// One token's losses: out[0] = sum_e s_e c_e (the aux scores s), out[1] = lse^2; with dl not
// NULL, dl (E) += gs * d(out[0] + zc * out[1]) / dl.
static void loss_row(float *out, float *dl, const float *l, const float *c, float zc, float gs,
                     const BackendMoERouter *r) {
    int E = r->E;
    float S[MAXE], g[MAXE], a = 0.0f, G = 0.0f;
    float lse = softmax_row(S, l, E);
    if (r->score == BACKEND_MOE_SOFTMAX) {
        for (int e = 0; e < E; e++) a += S[e] * c[e];
    } else {
        for (int e = 0; e < E; e++) G += (g[e] = sigmoidf(l[e]));
        for (int e = 0; e < E; e++) a += g[e] / (G + SIG_EPS) * c[e];
    }
    out[0] = a, out[1] = lse * lse;
    if (!dl) return;
    float zg = gs * zc * 2.0f * lse;
    for (int e = 0; e < E; e++) {
        float da = r->score == BACKEND_MOE_SOFTMAX
                       ? S[e] * (c[e] - a)
                       : (c[e] - a) / (G + SIG_EPS) * g[e] * (1.0f - g[e]);
        dl[e] += gs * da + zg * S[e];
    }
}

void cpu_moe_router_loss(Backend *be, float *dlogits, float *loss, const float *logits,
                         const float *coef, const int *row_group, float z_coef, float grad_scale,
                         int N, const BackendMoERouter *r) {
    check_router("moe_router_loss", r);
    int nt = cpu_nt(be), E = r->E;
    float *rows = malloc((size_t)(N > 0 ? N : 1) * 2 * sizeof(float));  // (N, 2) per-row losses
    if (!rows) core_fatal("moe_router_loss: out of memory for %d rows", N);
#pragma omp parallel for num_threads(nt) schedule(static) if ((size_t)N * E >= CPU_PAR_MIN)
    for (int t = 0; t < N; t++) {
        const float *c = coef + (size_t)(row_group ? row_group[t] : 0) * E;
        loss_row(rows + 2 * (size_t)t, dlogits ? dlogits + (size_t)t * E : NULL,
                 logits + (size_t)t * E, c, z_coef, grad_scale, r);
    }
    double a = 0.0, z = 0.0;
    for (int t = 0; t < N; t++) a += rows[2 * t], z += rows[2 * t + 1];
    loss[0] = (float)a, loss[1] = (float)(z_coef * z);
    free(rows);
}

// The fp32 rows' loops (the 16-bit types go through cpu_load/cpu_store): o (n) = a * x (n);
// o (n) += a * x (n) (a = 1: o += x, the same bits); sum of a (n) * b (n), its order the
// vector width's (CPU_SIMD_CLONES).
CPU_SIMD_CLONES static void scale_span(float *o, float a, const float *x, int n) {
#pragma omp simd
    for (int c = 0; c < n; c++) o[c] = a * x[c];
}

CPU_SIMD_CLONES static void axpy_span(float *o, float a, const float *x, int n) {
#pragma omp simd
    for (int c = 0; c < n; c++) o[c] += a * x[c];
}

CPU_SIMD_CLONES static float dot_span(const float *a, const float *b, int n) {
    float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
    for (int c = 0; c < n; c++) acc += a[c] * b[c];
    return acc;
}

void cpu_rows_gather(Backend *be, void *out, const void *in, const int *idx, const float *scale,
                     int M, int C) {
    BackendDType t = be->act;
    size_t es = backend_dtype_size(t);
    int nt = cpu_nt(be);
#pragma omp parallel for num_threads(nt) schedule(static) if ((size_t)M * C >= CPU_PAR_MIN)
    for (int i = 0; i < M; i++) {
        size_t o = (size_t)i * C, s = (size_t)idx[i] * C;
        if (!scale) {
            memcpy((char *)out + o * es, (const char *)in + s * es, (size_t)C * es);
            continue;
        }
        if (t == BACKEND_F32)
            scale_span((float *)out + o, scale[i], (const float *)in + s, C);
        else
            for (int c = 0; c < C; c++) cpu_store(out, t, o + c, scale[i] * cpu_load(in, t, s + c));
    }
}

void cpu_rows_combine(Backend *be, void *out, const void *in, const int *slot, const float *w,
                      int N, int K, int C) {
    BackendDType t = be->act;
    int nt = cpu_nt(be);
#pragma omp parallel for num_threads(nt) schedule(static) if ((size_t)N * K * C >= CPU_PAR_MIN)
    for (int r = 0; r < N; r++) {
        const int *sl = slot + (size_t)r * K;
        if (t == BACKEND_F32) {  // each element 0 + the terms in slot order, as the loop below
            float *o = (float *)out + (size_t)r * C;
            memset(o, 0, (size_t)C * sizeof(float));
            for (int k = 0; k < K; k++)
                if (sl[k] >= 0)
                    axpy_span(o, w ? w[(size_t)r * K + k] : 1.0f, (const float *)in + (size_t)sl[k] * C, C);
            continue;
        }
        for (int c = 0; c < C; c++) {
            float acc = 0.0f;
            for (int k = 0; k < K; k++) {
                if (sl[k] < 0) continue;
                float x = cpu_load(in, t, (size_t)sl[k] * C + c);
                acc += w ? w[(size_t)r * K + k] * x : x;
            }
            cpu_store(out, t, (size_t)r * C + c, acc);
        }
    }
}

void cpu_rows_dot(Backend *be, float *dw, const void *dy, const void *in, const int *slot, int N,
                  int K, int C) {
    BackendDType t = be->act;
    int nt = cpu_nt(be);
#pragma omp parallel for num_threads(nt) schedule(static) if ((size_t)N * K * C >= CPU_PAR_MIN)
    for (int r = 0; r < N; r++) {
        for (int k = 0; k < K; k++) {
            int s = slot[(size_t)r * K + k];
            float acc = 0.0f;
            if (t == BACKEND_F32 && s >= 0)
                acc = dot_span((const float *)dy + (size_t)r * C, (const float *)in + (size_t)s * C, C);
            else
                for (int c = 0; s >= 0 && c < C; c++)
                    acc += cpu_load(dy, t, (size_t)r * C + c) * cpu_load(in, t, (size_t)s * C + c);
            dw[(size_t)r * K + k] = acc;
        }
    }
}

void cpu_moe_ops(BackendOps *t, BackendDType act) {
    (void)act;  // the same ops for every activation type
    t->moe_router_forward = cpu_moe_router_forward;
    t->moe_router_backward = cpu_moe_router_backward;
    t->moe_router_loss = cpu_moe_router_loss;
    t->rows_gather = cpu_rows_gather;
    t->rows_combine = cpu_rows_combine;
    t->rows_dot = cpu_rows_dot;
}
