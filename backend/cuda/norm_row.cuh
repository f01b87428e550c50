// backend/cuda/norm_row.cuh: LayerNorm and RMSNorm, forward and backward, one block per row
// at 16-byte width (kernels of cuda_norm.cu; the math of norm.cuh's per-warp kernels, which
// still serve rows too long for these).
//
// Layout: a row of C elements is cut into chunks of N = Vec16<T>::N (8 bf16/fp16, 4 fp32);
// thread t of the block holds chunks t, t + blockDim.x, ..., VPT of them, in registers
// (vec16_load: one 16-byte access per chunk when the row is 16-byte aligned, scalar elements
// for the last, short chunk or a misaligned row). The row's sums: each thread adds its
// elements in order, then block_sum (fixed order): the bits depend only on (C, blockDim.x,
// VPT), which depend only on C and T. blockDim.x is a multiple of 32, at most
// NORM_ROW_MAX_THREADS. Blocks take rows blockIdx.x, + gridDim.x, ... (grid-stride).
//
// The backward is one kernel: per row, dinp from the row's two sums; per block, the
// dweight/dbias contributions of its rows summed in registers (rows in order) and written once
// to part_w/part_b (gridDim.x, C); norm_finish_kernel (norm.cuh) then adds the blocks' rows in
// order. With `add` (one block) the kernel adds straight into dweight/dbias. No atomics.
// Statistics, partials and parameter gradients are fp32; activations of type T.
#pragma once
#include "backend/cuda/norm.cuh"  // defines: NORM_LN_EPS, NORM_RMS_EPS, block_sum, Vec16

#define NORM_ROW_MAX_THREADS 512  // block size cap: at most 128 registers a thread
#define NORM_ROW_MAX_ELEMS 16     // elements per thread at most: VPT 4 fp32 / 2 bf16, fp16
                                  // (4 bf16 chunks spill at 128 registers); the other VPT is 1

// Normalised rows: out (N, C) = (x - mean) * rstd * (w0 + weight) + bias (LayerNorm; bias may
// not be NULL), or x * rstd * (w0 + weight) (RMS, mean and bias unused); mean (N) and rstd (N)
// saved when not NULL. inp, out, weight, bias of type T. Two sums per LayerNorm row (mean,
// then the variance about it, as the CPU reference), one per RMS row.
// RES (the residual add fused in): x = inp + inp2 rounded to T, stored to res (N, C), and the
// row normalised is that rounded sum: the bits of add_kernel then this kernel on res. res may
// alias inp or inp2 (a thread reads its chunks before it writes them). Else res, inp2 unused.
template <typename T, int VPT, bool RMS, bool RES>
static __global__ void __launch_bounds__(NORM_ROW_MAX_THREADS)
norm_row_forward_kernel(T *out, float *mean, float *rstd, const T *inp, const T *weight,
                        const T *bias, int N, int C, float w0, T *res, const T *inp2) {
    constexpr int V = Vec16<T>::N;
    __shared__ float buf[WARP];
    for (int row = blockIdx.x; row < N; row += gridDim.x) {
        const T *x = inp + (size_t)row * C;
        Vec16<T> xv[VPT];  // this thread's chunks of the row
        float s = 0.0f;
CUDA_UNROLL
        for (int i = 0; i < VPT; i++) {
            size_t k = threadIdx.x + (size_t)i * blockDim.x;
            int n = vec16_count((size_t)C, k, V);
            xv[i] = vec16_load(x + k * V, n);
            if (RES) {  // add_kernel's expression, rounded to T; zeros past n stay zero
                Vec16<T> bv = vec16_load(inp2 + (size_t)row * C + k * V, n);
CUDA_UNROLL
                for (int e = 0; e < V; e++)
                    vec16_set(xv[i], e, vec16_f32(xv[i], e) + vec16_f32(bv, e));
                vec16_store(res + (size_t)row * C + k * V, xv[i], n);
            }
CUDA_UNROLL
            for (int e = 0; e < V; e++) {
                float f = vec16_f32(xv[i], e);
                s += RMS ? f * f : f;  // loaded zeros past n add nothing
            }
        }
        float m = 0.0f, rs;
        if (RMS) {
            rs = 1.0f / sqrtf(block_sum(s, buf) / (float)C + NORM_RMS_EPS);
        } else {
            m = block_sum(s, buf) / (float)C;
            float v = 0.0f;
CUDA_UNROLL
            for (int i = 0; i < VPT; i++) {
                int n = vec16_count((size_t)C, threadIdx.x + (size_t)i * blockDim.x, V);
CUDA_UNROLL
                for (int e = 0; e < V; e++) {
                    float d = vec16_f32(xv[i], e) - m;
                    v += e < n ? d * d : 0.0f;
                }
            }
            rs = 1.0f / sqrtf(block_sum(v, buf) / (float)C + NORM_LN_EPS);
        }
        T *y = out + (size_t)row * C;
CUDA_UNROLL
        for (int i = 0; i < VPT; i++) {
            size_t k = threadIdx.x + (size_t)i * blockDim.x;
            int n = vec16_count((size_t)C, k, V);
            if (n == 0) continue;
            Vec16<T> wv = vec16_load(weight + k * V, n), yv;
            Vec16<T> bv = RMS ? wv : vec16_load(bias + k * V, n);
CUDA_UNROLL
            for (int e = 0; e < V; e++) {
                float g = w0 + vec16_f32(wv, e);
                float o = RMS ? vec16_f32(xv[i], e) * rs * g
                              : (vec16_f32(xv[i], e) - m) * rs * g + vec16_f32(bv, e);
                vec16_set(yv, e, o);
            }
            vec16_store(y + k * V, yv, n);
        }
        if (threadIdx.x == 0 && mean && !RMS) mean[row] = m;
        if (threadIdx.x == 0 && rstd) rstd[row] = rs;
    }
}

// Backward of norm_row_forward_kernel, dn = dout * (w0 + weight):
//   LayerNorm: dinp += rstd * (dn - mean(dn) - norm * mean(dn * norm)), norm = (x - mean) * rstd;
//              part_b += dout, part_w += dout * norm;
//   RMS:       dinp += rstd * dn - x * rstd^3 * mean(dn * x); part_w += dout * x * rstd.
// dinp (N, C) skipped when NULL; part_b/part_w (gridDim.x, C) written (one row per block), or
// with `add` (gridDim.x == 1) added into; either skipped when NULL. mean (N) unused for RMS.
template <typename T, int VPT, bool RMS>
static __global__ void __launch_bounds__(NORM_ROW_MAX_THREADS)
norm_row_backward_kernel(T *dinp, float *part_b, float *part_w, const T *dout, const T *inp,
                         const T *weight, const float *mean, const float *rstd, int N, int C,
                         float w0, int add) {
    constexpr int V = Vec16<T>::N;
    __shared__ float buf[WARP];
    float acc_b[VPT][V], acc_w[VPT][V];  // this block's column sums of its chunks
CUDA_UNROLL
    for (int i = 0; i < VPT; i++)
CUDA_UNROLL
        for (int e = 0; e < V; e++) acc_b[i][e] = 0.0f, acc_w[i][e] = 0.0f;
    for (int row = blockIdx.x; row < N; row += gridDim.x) {
        size_t off = (size_t)row * C;
        float m = RMS ? 0.0f : mean[row], s = rstd[row];
        Vec16<T> dyv[VPT], xv[VPT];
        float a = 0.0f, b = 0.0f;  // LayerNorm: sum dn, sum dn * norm; RMS: -, sum dn * x
CUDA_UNROLL
        for (int i = 0; i < VPT; i++) {
            size_t k = threadIdx.x + (size_t)i * blockDim.x;
            int n = vec16_count((size_t)C, k, V);
            dyv[i] = vec16_load(dout + off + k * V, n);
            xv[i] = vec16_load(inp + off + k * V, n);
            Vec16<T> wv = vec16_load(weight + k * V, n);
CUDA_UNROLL
            for (int e = 0; e < V; e++) {  // dy loads as 0 past n: adds nothing
                float dn = vec16_f32(dyv[i], e) * (w0 + vec16_f32(wv, e));
                if (RMS) {
                    b += dn * vec16_f32(xv[i], e);
                } else {
                    a += dn;
                    b += dn * (vec16_f32(xv[i], e) - m) * s;
                }
            }
        }
        float ma = RMS ? 0.0f : block_sum(a, buf) / (float)C;
        float mb = block_sum(b, buf) / (float)C;
        float k3 = s * s * s * mb;  // RMS
CUDA_UNROLL
        for (int i = 0; i < VPT; i++) {
            size_t k = threadIdx.x + (size_t)i * blockDim.x;
            int n = vec16_count((size_t)C, k, V);
            if (n == 0) continue;
            Vec16<T> wv = vec16_load(weight + k * V, n);
            Vec16<T> dv = dinp ? vec16_load(dinp + off + k * V, n) : wv;
CUDA_UNROLL
            for (int e = 0; e < V; e++) {
                float dy = vec16_f32(dyv[i], e), x = vec16_f32(xv[i], e);
                float dn = dy * (w0 + vec16_f32(wv, e));
                float g = RMS ? s * dn - x * k3 : s * (dn - ma - (x - m) * s * mb);
                if (dinp) vec16_set(dv, e, vec16_f32(dv, e) + g);
                if (!RMS) acc_b[i][e] += dy;  // RMS has no bias: no registers for it
                acc_w[i][e] += RMS ? dy * x * s : dy * (x - m) * s;
            }
            if (dinp) vec16_store(dinp + off + k * V, dv, n);
        }
    }
CUDA_UNROLL
    for (int i = 0; i < VPT; i++) {
        size_t k = threadIdx.x + (size_t)i * blockDim.x;
        int n = vec16_count((size_t)C, k, V);
CUDA_UNROLL
        for (int e = 0; e < V; e++) {
            if (e >= n) continue;
            size_t c = k * V + e, at = add ? c : (size_t)blockIdx.x * C + c;
            if (!RMS && part_b) part_b[at] = add ? part_b[at] + acc_b[i][e] : acc_b[i][e];
            if (part_w) part_w[at] = add ? part_w[at] + acc_w[i][e] : acc_w[i][e];
        }
    }
}
