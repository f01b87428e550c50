// backend/cuda/attention.cuh: the causal-softmax kernels of materialised attention. One warp
// per row of the (B, NH, T, T) probabilities: row r is query position t = r % T, which sees
// keys 0..t. The lanes stride over the row; the warp reductions have a fixed order.
#pragma once
#include "backend/cuda/cuda_common.cuh"

#define ATT_WARPS 8  // rows (warps) per block

// In place over att (rows, T): softmax of each row's first t+1 entries, zeros above.
static __global__ void causal_softmax_kernel(float *att, long long rows, int T) {
    long long r = (long long)blockIdx.x * ATT_WARPS + threadIdx.x / WARP;
    int lane = threadIdx.x % WARP;
    if (r >= rows) return;  // whole warps leave together
    float *p = att + r * T;
    int t = (int)(r % T);
    float m = -3.402823466e38f;
    for (int j = lane; j <= t; j += WARP) m = fmaxf(m, p[j]);
    m = warp_max(m);
    float s = 0.0f;
    for (int j = lane; j <= t; j += WARP) {
        float e = expf(p[j] - m);
        p[j] = e;
        s += e;
    }
    float inv = 1.0f / warp_sum(s);
    for (int j = lane; j < T; j += WARP) p[j] = j <= t ? p[j] * inv : 0.0f;
}

// In place over dp (rows, T): softmax backward given the probabilities p (rows, T):
// dp_j = p_j (dp_j - sum_k p_k dp_k) for j <= t, zeros above.
static __global__ void causal_softmax_backward_kernel(float *dp, const float *p, long long rows, int T) {
    long long r = (long long)blockIdx.x * ATT_WARPS + threadIdx.x / WARP;
    int lane = threadIdx.x % WARP;
    if (r >= rows) return;
    float *d = dp + r * T;
    const float *q = p + r * T;
    int t = (int)(r % T);
    float dot = 0.0f;
    for (int j = lane; j <= t; j += WARP) dot += q[j] * d[j];
    dot = warp_sum(dot);
    for (int j = lane; j < T; j += WARP) d[j] = j <= t ? q[j] * (d[j] - dot) : 0.0f;
}
