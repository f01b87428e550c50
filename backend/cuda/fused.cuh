// backend/cuda/fused.cuh: kernels of cuda_fused.cu: the residual add fused into the
// LayerNorm that follows it. (The fused linear + GELU needs no kernel: cuBLASLt's GELU
// epilogues, cuda_fused.cu.)
#pragma once
#include "backend/cuda/cuda_common.cuh"  // defines: CUDA_LAUNCH, WARP, warp_sum, load_f32

#define FUSED_THREADS 256  // 8 warps per block, a warp per row
#define FUSED_LN_EPS 1e-5f // as NORM_LN_EPS (norm.cuh) and the CPU backend

// res (N, C) = a + b rounded to T, then ln (N, C) = (res - mean) * rstd * weight + bias;
// mean (N), rstd (N) saved when not NULL. One warp per row (grid-stride over rows; the loop
// bound is warp-uniform). The first sweep writes res and sums it (as stored: the statistics
// see the rounded residual, as layernorm_forward reading res would); the variance and output
// sweeps re-read the lane's own res elements, which it just wrote (L1/L2 hits, no other
// thread's writes involved). res may alias a or b (each element is read before the same lane
// writes it). The sums have the order of norm.cuh's per-warp layernorm_forward_kernel, which
// norm_forward runs for the rows this kernel gets (C > 8192; shorter rows take norm_row.cuh's
// kernel with the add fused in): bitwise add + LN.
template <typename T>
static __global__ void residual_layernorm_forward_kernel(T *res, T *ln, float *mean, float *rstd,
                                                         const T *a, const T *b,
                                                         const T *weight, const T *bias,
                                                         int N, int C) {
    int lane = threadIdx.x % WARP, warps = blockDim.x / WARP;
    for (int row = blockIdx.x * warps + threadIdx.x / WARP; row < N; row += gridDim.x * warps) {
        size_t off = (size_t)row * C;
        T *r = res + off;
        float s = 0.0f;
        for (int j = lane; j < C; j += WARP) {
            store_from_f32(r + j, load_f32(a + off + j) + load_f32(b + off + j));
            s += load_f32(r + j);
        }
        float m = warp_sum(s) / (float)C;
        float v = 0.0f;
        for (int j = lane; j < C; j += WARP) {
            float d = load_f32(r + j) - m;
            v += d * d;
        }
        float rs = 1.0f / sqrtf(warp_sum(v) / (float)C + FUSED_LN_EPS);
        T *y = ln + off;
        for (int j = lane; j < C; j += WARP)
            store_from_f32(y + j, (load_f32(r + j) - m) * rs * load_f32(weight + j) + load_f32(bias + j));
        if (lane == 0 && mean) mean[row] = m;
        if (lane == 0 && rstd) rstd[row] = rs;
    }
}
