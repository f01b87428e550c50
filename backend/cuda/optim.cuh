// backend/cuda/optim.cuh: kernels of cuda_optim.cu: AdamW (every segment of the flat
// parameter buffer in one launch) and the double-precision reductions (sum over one range,
// sum of squares over segments).
//
// Reductions are deterministic two-pass sums: each block sums its grid-stride share in double
// (block_sum's fixed shuffle order) into partials[block]; one block then adds the partials
// in a fixed order. The grids depend only on the shape, so the bits do too.
#pragma once
#include "backend/cuda/cuda_common.cuh"  // defines: CUDA_LAUNCH, block_sum

#define OPT_THREADS 256  // every kernel here

// AdamW on element i (backend.h's formula; bc1 = 1 - beta1^step, bc2 = 1 - beta2^step).
static __device__ __forceinline__ void adamw_element(float *param, const float *grad, float *m,
                                                     float *v, size_t i, float lr, float beta1,
                                                     float beta2, float eps, float wd,
                                                     float grad_scale, float bc1, float bc2) {
    float g = grad[i] * grad_scale;
    float mi = beta1 * m[i] + (1.0f - beta1) * g;
    float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    float mhat = mi / bc1, vhat = vi / bc2;
    param[i] -= lr * (mhat / (sqrtf(vhat) + eps) + wd * param[i]);
}

// AdamW on every segment of segs (nseg): grid.y walks the segments, grid.x (grid-stride) the
// chunks of one; weight decay wd where the segment asks for it, else 0. copy (NULL or indexed
// as param): each updated parameter rounded to E, in the same pass. Chunks are W = Vec16<E>::N
// elements (8 for bf16/fp16 copies, 4 for fp32) at multiples of W of the flat index, a
// segment's first and last chunks cut to it: a thread moves param, grad, m, v 16 bytes at a
// time and its chunk of copy in one 16-byte store (scalar at a misaligned segment end).
// Per element the arithmetic of adamw_element (same bits).
template <typename E>
static __global__ void adamw_multi_kernel(float *param, E *copy, const float *grad, float *m,
                                          float *v, const BackendSegment *segs, int nseg,
                                          float lr, float beta1, float beta2, float eps, float wd,
                                          float grad_scale, float bc1, float bc2) {
    constexpr int W = Vec16<E>::N, F = Vec16<float>::N;
    for (int s = blockIdx.y; s < nseg; s += gridDim.y) {
        size_t begin = segs[s].begin, end = begin + segs[s].len;
        float w = segs[s].weight_decay ? wd : 0.0f;
        size_t first = begin / W, nk = end > begin ? (end + W - 1) / W - first : 0;
        for (size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x; k < nk;
             k += (size_t)gridDim.x * blockDim.x) {
            size_t lo = (first + k) * W, hi = lo + W;
            lo = lo < begin ? begin : lo;
            hi = hi > end ? end : hi;
            int n = (int)(hi - lo);
            Vec16<E> cv;
CUDA_UNROLL
            for (int q = 0; q < W / F; q++) {  // fp32 sub-chunks of 4
                int c = n - q * F < F ? n - q * F : F;
                if (c <= 0) break;
                size_t at = lo + (size_t)q * F;
                Vec16<float> p = vec16_load(param + at, c), g = vec16_load(grad + at, c);
                Vec16<float> mv = vec16_load(m + at, c), vv = vec16_load(v + at, c);
CUDA_UNROLL
                for (int e = 0; e < F; e++) {
                    adamw_element(p.v, g.v, mv.v, vv.v, e, lr, beta1, beta2, eps, w, grad_scale,
                                  bc1, bc2);
                    vec16_set(cv, q * F + e, p.v[e]);
                }
                vec16_store(param + at, p, c), vec16_store(m + at, mv, c);
                vec16_store(v + at, vv, c);
            }
            if (copy) vec16_store(copy + lo, cv, n);
        }
    }
}

// partials[blockIdx.x] = sum over the block's grid-stride share of x (n) of x[i], in double.
static __global__ void reduce_partial_kernel(double *partials, const float *x, size_t n) {
    __shared__ double buf[WARP];
    double s = 0.0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        s += (double)x[i];
    s = block_sum(s, buf);
    if (threadIdx.x == 0) partials[blockIdx.x] = s;
}

// partials[blockIdx.y * gridDim.x + blockIdx.x] = sum of x[i]^2 in double over the block's
// share: segments blockIdx.y, blockIdx.y + gridDim.y, ..., grid-stride over each one.
static __global__ void reduce_multi_partial_kernel(double *partials, const float *x,
                                                   const BackendSegment *segs, int nseg) {
    __shared__ double buf[WARP];
    double s = 0.0;
    for (int k = blockIdx.y; k < nseg; k += gridDim.y) {
        const float *xs = x + segs[k].begin;
        size_t len = segs[k].len;
        for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < len;
             i += (size_t)gridDim.x * blockDim.x)
            s += (double)xs[i] * (double)xs[i];
    }
    s = block_sum(s, buf);
    if (threadIdx.x == 0) partials[blockIdx.y * gridDim.x + blockIdx.x] = s;
}

// One block: out[0] = (add ? out[0] : 0) + sum of partials (count); thread t adds partials
// t, t + blockDim.x, ... in order, then block_sum.
static __global__ void reduce_finish_kernel(double *out, const double *partials, int count,
                                            int add) {
    __shared__ double buf[WARP];
    double s = 0.0;
    for (int i = threadIdx.x; i < count; i += blockDim.x) s += partials[i];
    s = block_sum(s, buf);
    if (threadIdx.x == 0) out[0] = add ? out[0] + s : s;
}
