// backend/cuda/llama.cuh: kernels of cuda_llama.cu: RMSNorm (forward, input gradient, weight
// gradient); SwiGLU is in act.cuh, rotary positions in rope.cuh. The math of
// backend/cpu/cpu_llama.c; activation buffers of the storage type T (load_f32 /
// store_from_f32), statistics and parameter gradients fp32. Deterministic without atomics: a
// row's sums are warp sums in a fixed order, the weight gradient sums chunks of rows in an
// order fixed by the shape.
#pragma once
#include "backend/cuda/cuda_common.cuh"  // defines: CUDA_LAUNCH, WARP, warp_sum, load_f32

#define LLAMA_THREADS 256
#define LLAMA_WARPS (LLAMA_THREADS / WARP)
#define LLAMA_RMS_EPS 1e-5f

// --- RMSNorm: one warp per row (grid-stride; the loop bound is warp-uniform) ----------------
// out (N, C) = inp * rstd * weight, rstd (N) = 1 / sqrt(mean(inp^2) + eps) saved when not NULL.
template <typename T>
static __global__ void rmsnorm_forward_kernel(T *out, float *rstd, const T *inp, const T *weight,
                                              int N, int C) {
    int lane = threadIdx.x % WARP, warps = blockDim.x / WARP;
    for (int row = blockIdx.x * warps + threadIdx.x / WARP; row < N; row += gridDim.x * warps) {
        const T *x = inp + (size_t)row * C;
        float ss = 0.0f;
        for (int j = lane; j < C; j += WARP) {
            float v = load_f32(x + j);
            ss += v * v;
        }
        float s = 1.0f / sqrtf(warp_sum(ss) / (float)C + LLAMA_RMS_EPS);
        T *y = out + (size_t)row * C;
        for (int j = lane; j < C; j += WARP) store_from_f32(y + j, load_f32(x + j) * s * load_f32(weight + j));
        if (lane == 0 && rstd) rstd[row] = s;
    }
}

// dinp (N, C) += s * dn - x * s^3 * mean(dn * x), dn = dout * weight. One warp per row.
template <typename T>
static __global__ void rmsnorm_dinp_kernel(T *dinp, const T *dout, const T *inp, const T *weight,
                                           const float *rstd, int N, int C) {
    int lane = threadIdx.x % WARP, warps = blockDim.x / WARP;
    for (int row = blockIdx.x * warps + threadIdx.x / WARP; row < N; row += gridDim.x * warps) {
        const T *x = inp + (size_t)row * C, *dy = dout + (size_t)row * C;
        float s = rstd[row], dot = 0.0f;
        for (int j = lane; j < C; j += WARP) dot += load_f32(dy + j) * load_f32(weight + j) * load_f32(x + j);
        float k = s * s * s * warp_sum(dot) / (float)C;
        T *dx = dinp + (size_t)row * C;
        for (int j = lane; j < C; j += WARP) {
            float g = s * load_f32(dy + j) * load_f32(weight + j) - load_f32(x + j) * k;
            store_from_f32(dx + j, load_f32(dx + j) + g);
        }
    }
}

// Sums over rows of dout * inp * rstd (RMSNorm's dweight), in two passes as norm.cuh's
// column sums: block = 32 columns x 8 row lanes, grid.x = column tiles, grid.y = chunks of
// rows_per rows; lane y sums rows r0+y, r0+y+8, ... in order, lane 0 adds the 8 lane sums in
// order into out (nchunk, C) partials, or with `add` (one chunk) into dweight itself.
template <typename T>
static __global__ void rmsnorm_dweight_partial_kernel(float *out, const T *dout, const T *inp,
                                                      const float *rstd, int N, int C,
                                                      int rows_per, int add) {
    __shared__ float sh[LLAMA_WARPS][WARP];
    int col = threadIdx.x % WARP, lane = threadIdx.x / WARP, c = blockIdx.x * WARP + col;
    int r0 = blockIdx.y * rows_per, r1 = r0 + rows_per < N ? r0 + rows_per : N;
    float s = 0.0f;
    if (c < C)
        for (int r = r0 + lane; r < r1; r += LLAMA_WARPS)
            s += load_f32(dout + (size_t)r * C + c) * load_f32(inp + (size_t)r * C + c) * rstd[r];
    sh[lane][col] = s;
    __syncthreads();
    if (lane != 0 || c >= C) return;
    float t = 0.0f;
    for (int k = 0; k < LLAMA_WARPS; k++) t += sh[k][col];
    size_t at = add ? (size_t)c : (size_t)blockIdx.y * C + c;
    out[at] = add ? out[at] + t : t;
}

// dweight (C) += sum over k of part (nchunk, C), k in order; one thread per column.
static __global__ void rmsnorm_dweight_finish_kernel(float *dweight, const float *part, int nchunk,
                                                     int C) {
    for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < C; c += gridDim.x * blockDim.x) {
        float s = 0.0f;
        for (int k = 0; k < nchunk; k++) s += part[(size_t)k * C + c];
        dweight[c] += s;
    }
}
