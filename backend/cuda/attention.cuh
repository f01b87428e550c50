// backend/cuda/attention.cuh: the causal-softmax kernels of materialised attention. One warp
// per row of the (B, NH, T, T) probabilities: row r is query position t = r % T, which sees
// keys 0..t. The lanes stride over the row; the warp reductions have a fixed order. The rows
// are of the activation type T (float, __nv_bfloat16, __half); the arithmetic is fp32.
#pragma once
#include "backend/cuda/cuda_common.cuh"

#define ATT_WARPS 8  // rows (warps) per block

// In place over att (rows, n): softmax of each row's first t+1 entries, zeros above, where
// row r is query r % Tq of its head and t = r % Tq + off (a window, BackendAttnWindow: off =
// q0 - k0; t < 0: a row of zeros; whole sequence: Tq = n, off 0). Documents (qstart (B, Tq)
// global document starts, rows (B, NH, Tq)): entries before qstart[b, t] - k0 are 0 too.
// Each exponential is computed twice (sum, then store) so that it is rounded to T only once.
template <typename T>
static __global__ void causal_softmax_kernel(T *att, long long rows, int n, int Tq, int off,
                                             const int *qstart, int NH, int k0) {
    long long r = (long long)blockIdx.x * ATT_WARPS + threadIdx.x / WARP;
    int lane = threadIdx.x % WARP;
    if (r >= rows) return;  // whole warps leave together
    T *p = att + r * n;
    int t = (int)(r % Tq) + off;
    t = t < n ? t : n - 1;
    int lo = qstart ? qstart[r / ((long long)Tq * NH) * Tq + r % Tq] - k0 : 0;
    lo = lo < 0 ? 0 : lo;
    float m = -3.402823466e38f;
    for (int j = lo + lane; j <= t; j += WARP) m = fmaxf(m, load_f32(p + j));
    m = warp_max(m);
    float s = 0.0f;
    for (int j = lo + lane; j <= t; j += WARP) s += expf(load_f32(p + j) - m);
    float inv = 1.0f / warp_sum(s);
    for (int j = lane; j < n; j += WARP)
        store_from_f32(p + j, j <= t && j >= lo ? expf(load_f32(p + j) - m) * inv : 0.0f);
}

// In place over dp (rows, T): softmax backward given the probabilities p (rows, T):
// dp_j = p_j (dp_j - sum_k p_k dp_k) for j <= t, zeros above.
template <typename T>
static __global__ void causal_softmax_backward_kernel(T *dp, const T *p, long long rows, int n) {
    long long r = (long long)blockIdx.x * ATT_WARPS + threadIdx.x / WARP;
    int lane = threadIdx.x % WARP;
    if (r >= rows) return;
    T *d = dp + r * n;
    const T *q = p + r * n;
    int t = (int)(r % n);
    float dot = 0.0f;
    for (int j = lane; j <= t; j += WARP) dot += load_f32(q + j) * load_f32(d + j);
    dot = warp_sum(dot);
    for (int j = lane; j < n; j += WARP)
        store_from_f32(d + j, j <= t ? load_f32(q + j) * (load_f32(d + j) - dot) : 0.0f);
}
