// backend/cuda/moe.cuh: kernels of cuda_moe.cu: the mixture-of-experts router (top-k choice
// and combine weights, their gradient, the aux and z losses) and the token rows (gather,
// combine, dot). The math of backend/cpu/cpu_moe.c, in the same per-row order where a row's
// work is sequential (thread 0 of the block); reductions over a row's E experts are warp
// butterflies (the same bits on every lane). Deterministic without atomics: the losses go
// through per-block partial sums added in block order.
#pragma once
#include "backend/cuda/cuda_common.cuh"  // defines: CUDA_LAUNCH, warp_sum, warp_max, block_sum

#define MOE_WARP_THREADS 32  // router kernels: one warp per block, rows grid-strided
#define MOE_ROWS_THREADS 256  // gather / combine: elementwise, grid-stride
#define MOE_DOT_THREADS 128   // rows_dot: one block per (token, slot), a block sum over C
#define MOE_SIG_EPS 1e-20f
#define MOE_NONE 0x7fffffff   // no candidate in the top-k's argmax
#define MOE_NEG_MAX -3.402823466e38f

static __device__ __forceinline__ float moe_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// Max of l (E) over the row and sum of exp(l - max), every lane gets both (lanes stride E).
static __device__ __forceinline__ void moe_row_softmax_stats(const float *l, int E, float *m,
                                                             float *z) {
    float mx = MOE_NEG_MAX, s = 0.0f;
    for (int e = threadIdx.x; e < E; e += WARP) mx = l[e] > mx ? l[e] : mx;
    mx = warp_max(mx);
    for (int e = threadIdx.x; e < E; e += WARP) s += expf(l[e] - mx);
    *m = mx, *z = warp_sum(s);
}

// idx (N, K), probs (N, K) from logits (N, E): the choice by K rounds of a warp argmax over
// the selection scores (ties to the lowest index), the weights by thread 0 as the CPU.
static __global__ void moe_router_forward_kernel(int *idx, float *probs, const float *logits,
                                                 int N, BackendMoERouter r) {
    __shared__ float val[BACKEND_MOE_MAX_EXPERTS], sel[BACKEND_MOE_MAX_EXPERTS];
    __shared__ int chosen[BACKEND_MOE_MAX_EXPERTS];
    __shared__ unsigned char taken[BACKEND_MOE_MAX_EXPERTS];
    int E = r.E, K = r.K, lane = threadIdx.x, soft = r.score == BACKEND_MOE_SOFTMAX;
    for (int t = blockIdx.x; t < N; t += gridDim.x) {
        const float *l = logits + (size_t)t * E;
        float m = 0.0f, z = 1.0f;
        if (soft && r.pre_softmax) moe_row_softmax_stats(l, E, &m, &z);
        for (int e = lane; e < E; e += WARP) {
            float v = !soft ? moe_sigmoid(l[e]) : r.pre_softmax ? expf(l[e] - m) / z : l[e];
            val[e] = v, sel[e] = r.bias ? v + r.bias[e] : v, taken[e] = 0;
        }
        __syncthreads();
        for (int k = 0; k < K; k++) {
            float bv = MOE_NEG_MAX;
            int bi = MOE_NONE;
            for (int e = lane; e < E; e += WARP)
                if (!taken[e] && (bi == MOE_NONE || sel[e] > bv)) bv = sel[e], bi = e;
            for (int o = 16; o > 0; o >>= 1) {
                float ov = __shfl_xor_sync(FULL_MASK, bv, o);
                int oi = __shfl_xor_sync(FULL_MASK, bi, o);
                if (oi != MOE_NONE && (bi == MOE_NONE || ov > bv || (ov == bv && oi < bi)))
                    bv = ov, bi = oi;
            }
            if (lane == 0) taken[bi] = 1, chosen[k] = bi, idx[(size_t)t * K + k] = bi;
            __syncthreads();
        }
        if (lane == 0) {
            float *p = probs + (size_t)t * K;
            if (soft && r.pre_softmax) {
                for (int k = 0; k < K; k++) p[k] = val[chosen[k]];
            } else if (soft) {
                float mk = l[chosen[0]], zk = 0.0f;
                for (int k = 1; k < K; k++) mk = l[chosen[k]] > mk ? l[chosen[k]] : mk;
                for (int k = 0; k < K; k++) zk += (p[k] = expf(l[chosen[k]] - mk));
                for (int k = 0; k < K; k++) p[k] /= zk;
            } else {
                float g = 0.0f;
                for (int k = 0; k < K; k++) g += (p[k] = val[chosen[k]]);
                if (K > 1)
                    for (int k = 0; k < K; k++) p[k] /= g + MOE_SIG_EPS;
            }
            if (r.scaling != 0.0f)
                for (int k = 0; k < K; k++) p[k] *= r.scaling;
        }
        __syncthreads();  // shared arrays are reused by the next row
    }
}

// dlogits (N, E) overwritten from dprobs (N, K), logits, idx: the CPU's formulas; the
// pre-softmax case spreads over the row (every expert gets a term), the others touch only
// the K chosen (thread 0, in order).
static __global__ void moe_router_backward_kernel(float *dlogits, const float *dprobs,
                                                  const float *logits, const int *idx, int N,
                                                  BackendMoERouter r) {
    __shared__ float dsel[BACKEND_MOE_MAX_EXPERTS];
    __shared__ float dot_s;
    int E = r.E, K = r.K, lane = threadIdx.x;
    float sc = r.scaling != 0.0f ? r.scaling : 1.0f;
    for (int t = blockIdx.x; t < N; t += gridDim.x) {
        const float *l = logits + (size_t)t * E, *dp = dprobs + (size_t)t * K;
        const int *ix = idx + (size_t)t * K;
        float *dl = dlogits + (size_t)t * E;
        if (r.score == BACKEND_MOE_SOFTMAX && r.pre_softmax) {
            float m, z;
            moe_row_softmax_stats(l, E, &m, &z);
            for (int e = lane; e < E; e += WARP) dsel[e] = 0.0f;
            __syncthreads();
            if (lane == 0) {
                float dot = 0.0f;
                for (int k = 0; k < K; k++) dot += dp[k] * (expf(l[ix[k]] - m) / z);
                for (int k = 0; k < K; k++) dsel[ix[k]] = dp[k];
                dot_s = dot;
            }
            __syncthreads();
            for (int e = lane; e < E; e += WARP) {
                float q = expf(l[e] - m) / z, d = -sc * q * dot_s;
                dl[e] = dsel[e] != 0.0f ? d + sc * q * dsel[e] : d;
            }
        } else {
            for (int e = lane; e < E; e += WARP) dl[e] = 0.0f;
            __syncthreads();
            if (lane == 0) {
                float q[BACKEND_MOE_MAX_EXPERTS], dot = 0.0f;
                if (r.score == BACKEND_MOE_SOFTMAX) {
                    float mk = l[ix[0]], zk = 0.0f;
                    for (int k = 1; k < K; k++) mk = l[ix[k]] > mk ? l[ix[k]] : mk;
                    for (int k = 0; k < K; k++) zk += (q[k] = expf(l[ix[k]] - mk));
                    for (int k = 0; k < K; k++) q[k] /= zk, dot += q[k] * dp[k];
                    for (int k = 0; k < K; k++) dl[ix[k]] = sc * q[k] * (dp[k] - dot);
                } else {
                    float G = 0.0f;
                    for (int k = 0; k < K; k++) G += (q[k] = moe_sigmoid(l[ix[k]]));
                    float d = K > 1 ? G + MOE_SIG_EPS : 1.0f;
                    if (K > 1)
                        for (int k = 0; k < K; k++) dot += dp[k] * (q[k] / d);
                    for (int k = 0; k < K; k++)
                        dl[ix[k]] = sc * (dp[k] - dot) / d * q[k] * (1.0f - q[k]);
                }
            }
        }
        __syncthreads();
    }
}

// Block b takes rows [b*per, (b+1)*per): each row's aux term a = sum_e s_e c_e and lse^2,
// added in row order into partials[2b], [2b+1] (double); dlogits (N, E) += gs * gradient
// when not NULL.
static __global__ void moe_router_loss_kernel(double *partials, float *dlogits,
                                              const float *logits, const float *coef,
                                              const int *row_group, float zc, float gs, int N,
                                              int per, BackendMoERouter r) {
    int E = r.E, lane = threadIdx.x, sig = r.score == BACKEND_MOE_SIGMOID;
    double acc_a = 0.0, acc_z = 0.0;
    int b = (int)blockIdx.x, t1 = (b + 1) * per < N ? (b + 1) * per : N;
    for (int t = b * per; t < t1; t++) {
        const float *l = logits + (size_t)t * E;
        const float *c = coef + (size_t)(row_group ? row_group[t] : 0) * E;
        float m, z, G = 0.0f, a = 0.0f;
        moe_row_softmax_stats(l, E, &m, &z);
        float lse = m + logf(z);
        if (sig) {
            for (int e = lane; e < E; e += WARP) G += moe_sigmoid(l[e]);
            G = warp_sum(G);
        }
        for (int e = lane; e < E; e += WARP)
            a += (sig ? moe_sigmoid(l[e]) / (G + MOE_SIG_EPS) : expf(l[e] - m) / z) * c[e];
        a = warp_sum(a);
        acc_a += a, acc_z += (double)(lse * lse);
        if (!dlogits) continue;
        float zg = gs * zc * 2.0f * lse, *dl = dlogits + (size_t)t * E;
        for (int e = lane; e < E; e += WARP) {
            float S = expf(l[e] - m) / z, g = moe_sigmoid(l[e]);
            float da = sig ? (c[e] - a) / (G + MOE_SIG_EPS) * g * (1.0f - g) : S * (c[e] - a);
            dl[e] += gs * da + zg * S;
        }
    }
    if (lane == 0) partials[2 * b] = acc_a, partials[2 * b + 1] = acc_z;
}

// loss[0] = sum of the nb blocks' aux partials, loss[1] = zc * sum of their lse^2 partials,
// added in block order by one thread.
static __global__ void moe_router_loss_final_kernel(float *loss, const double *partials, int nb,
                                                    float zc) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    double a = 0.0, z = 0.0;
    for (int b = 0; b < nb; b++) a += partials[2 * b], z += partials[2 * b + 1];
    loss[0] = (float)a, loss[1] = (float)(zc * z);
}

// out (M, C) row i = scale[i] * in[idx[i]] (scale NULL: 1). Elementwise, grid-stride.
template <typename T>
static __global__ void moe_rows_gather_kernel(T *out, const T *in, const int *idx,
                                              const float *scale, int M, int C) {
    size_t n = (size_t)M * C;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t row = i / C, c = i % C;
        float x = load_f32(in + (size_t)idx[row] * C + c);
        store_from_f32(out + i, scale ? scale[row] * x : x);
    }
}

// out (N, C) row t = sum over k in order of w[t K + k] * in[slot[t K + k]] (slot -1: none).
template <typename T>
static __global__ void moe_rows_combine_kernel(T *out, const T *in, const int *slot,
                                               const float *w, int N, int K, int C) {
    size_t n = (size_t)N * C;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t t = i / C, c = i % C;
        float acc = 0.0f;
        for (int k = 0; k < K; k++) {
            int s = slot[t * K + k];
            if (s < 0) continue;
            float x = load_f32(in + (size_t)s * C + c);
            acc += w ? w[t * K + k] * x : x;
        }
        store_from_f32(out + i, acc);
    }
}

// dw (N K) = dot(dy[t], in[slot]) (0 where slot is -1): one block per entry, grid-stride.
template <typename T>
static __global__ void moe_rows_dot_kernel(float *dw, const T *dy, const T *in, const int *slot,
                                           int N, int K, int C) {
    __shared__ float buf[32];
    for (size_t j = blockIdx.x; j < (size_t)N * K; j += gridDim.x) {
        int s = slot[j];
        size_t t = j / K;
        float acc = 0.0f;
        for (int c = threadIdx.x; s >= 0 && c < C; c += blockDim.x)
            acc += load_f32(dy + t * C + c) * load_f32(in + (size_t)s * C + c);
        acc = block_sum(acc, buf);
        if (threadIdx.x == 0) dw[j] = acc;
    }
}
