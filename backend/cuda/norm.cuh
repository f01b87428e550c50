// backend/cuda/norm.cuh: kernels of cuda_norm.cu: column sums over rows (bias gradients,
// layernorm parameter gradients), layernorm forward/backward, RMSNorm (forward, input
// gradient, weight gradient), add.
//
// Reductions over rows are deterministic without atomics: a first pass sums fixed chunks of
// rows into per-chunk partials (scratch), a second pass adds the chunks in order. The chunk
// count depends only on the shape, so the bits are the same on every run. The LayerNorm and
// RMSNorm kernels here (one warp per row, the row's sums by warp_sum's fixed order) serve rows
// too long for norm_row.cuh's block-per-row 16-byte kernels, which serve the rest.
// Activation-typed buffers are of the template type T (float, __nv_bfloat16, __half: see
// load_f32 / store_from_f32); statistics, partial sums and parameter gradients are fp32.
#pragma once
#include "backend/cuda/cuda_common.cuh"  // defines: CUDA_LAUNCH, WARP, warp_sum

#define NORM_THREADS 256                    // every kernel here: 8 warps per block
#define NORM_ROWLANES (NORM_THREADS / WARP)  // colsum: rows read at once by one block
#define NORM_LN_EPS 1e-5f
#define NORM_RMS_EPS 1e-5f

// --- column sums over rows ---------------------------------------------------------------
// Block = 32 columns x 8 row lanes (threadIdx.x % 32 = column, / 32 = row lane); grid.x =
// column tiles, grid.y = chunks of `rows_per` rows. Lane y sums rows r0+y, r0+y+8, ... in
// order, then lane 0 of each column adds the 8 lane sums in order. Per column and chunk it
// writes sb = sum dy and, when sw is wanted, sw = sum dy * (x - mean) * rstd (layernorm's
// dweight). out_b/out_w: (nchunk, C) partials, or with `add` (one chunk) the gradient itself
// to += into; either may be NULL (skipped). inp/mean/rstd are only read when out_w is set.
// dy and inp (N, C) are of type T.
template <typename T>
static __global__ void colsum_partial_kernel(float *out_b, float *out_w, const T *dy,
                                             const T *inp, const float *mean,
                                             const float *rstd, int N, int C, int rows_per,
                                             int add) {
    __shared__ float sh_b[NORM_ROWLANES][WARP];
    __shared__ float sh_w[NORM_ROWLANES][WARP];
    int col = threadIdx.x % WARP, lane = threadIdx.x / WARP;
    int c = blockIdx.x * WARP + col;
    int r0 = blockIdx.y * rows_per, r1 = r0 + rows_per < N ? r0 + rows_per : N;
    float sb = 0.0f, sw = 0.0f;
    if (c < C) {
        for (int r = r0 + lane; r < r1; r += NORM_ROWLANES) {
            float g = load_f32(dy + (size_t)r * C + c);
            sb += g;
            if (out_w) sw += g * (load_f32(inp + (size_t)r * C + c) - mean[r]) * rstd[r];
        }
    }
    sh_b[lane][col] = sb;
    sh_w[lane][col] = sw;
    __syncthreads();
    if (lane != 0 || c >= C) return;
    float tb = 0.0f, tw = 0.0f;
    for (int k = 0; k < NORM_ROWLANES; k++) tb += sh_b[k][col], tw += sh_w[k][col];
    size_t at = add ? (size_t)c : (size_t)blockIdx.y * C + c;
    if (out_b) out_b[at] = add ? out_b[at] + tb : tb;
    if (out_w) out_w[at] = add ? out_w[at] + tw : tw;
}

// acc_b (C) += sum over k of part_b (nchunk, C), k in order, and the same for acc_w/part_w
// (either pair skipped when its acc is NULL); one thread per column (grid-stride). The second
// pass of every column sum here and of norm_row.cuh's backward.
static __global__ void norm_finish_kernel(float *acc_b, const float *part_b, float *acc_w,
                                          const float *part_w, int nchunk, int C) {
    for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < C; c += gridDim.x * blockDim.x) {
        float sb = 0.0f, sw = 0.0f;
        for (int k = 0; k < nchunk; k++) {
            if (acc_b) sb += part_b[(size_t)k * C + c];
            if (acc_w) sw += part_w[(size_t)k * C + c];
        }
        if (acc_b) acc_b[c] += sb;
        if (acc_w) acc_w[c] += sw;
    }
}

// --- layernorm (rows longer than norm_row.cuh's kernels take) -------------------------------
// One warp per row (grid-stride over rows; the loop bound is warp-uniform, so every lane
// reaches each shuffle). out (N, C), mean (N) and rstd (N) (each may be NULL), inp (N, C),
// weight (C), bias (C); out, inp, weight, bias of type T; the gamma is w0 + weight (w0 1 with
// BACKEND_NORM_1P, else 0; added in fp32). Two passes over the row for the variance (as the
// CPU reference).
template <typename T>
static __global__ void layernorm_forward_kernel(T *out, float *mean, float *rstd,
                                                const T *inp, const T *weight,
                                                const T *bias, int N, int C, float w0) {
    int lane = threadIdx.x % WARP, warps = blockDim.x / WARP;
    for (int row = blockIdx.x * warps + threadIdx.x / WARP; row < N; row += gridDim.x * warps) {
        const T *x = inp + (size_t)row * C;
        float s = 0.0f;
        for (int j = lane; j < C; j += WARP) s += load_f32(x + j);
        float m = warp_sum(s) / (float)C;
        float v = 0.0f;
        for (int j = lane; j < C; j += WARP) {
            float d = load_f32(x + j) - m;
            v += d * d;
        }
        float rs = 1.0f / sqrtf(warp_sum(v) / (float)C + NORM_LN_EPS);
        T *y = out + (size_t)row * C;
        for (int j = lane; j < C; j += WARP)
            store_from_f32(y + j, (load_f32(x + j) - m) * rs * (w0 + load_f32(weight + j)) + load_f32(bias + j));
        if (lane == 0 && mean) mean[row] = m;
        if (lane == 0 && rstd) rstd[row] = rs;
    }
}

// dinp (N, C) += rstd * (dn - mean(dn) - norm * mean(dn * norm)), dn = dout * weight,
// norm = (inp - mean) * rstd. One warp per row, as the forward. dinp, dout, inp, weight: T.
template <typename T>
static __global__ void layernorm_dinp_kernel(T *dinp, const T *dout, const T *inp,
                                             const T *weight, const float *mean,
                                             const float *rstd, int N, int C, float w0) {
    int lane = threadIdx.x % WARP, warps = blockDim.x / WARP;
    for (int row = blockIdx.x * warps + threadIdx.x / WARP; row < N; row += gridDim.x * warps) {
        const T *x = inp + (size_t)row * C, *dy = dout + (size_t)row * C;
        float m = mean[row], s = rstd[row];
        float a = 0.0f, b = 0.0f;
        for (int j = lane; j < C; j += WARP) {
            float dn = load_f32(dy + j) * (w0 + load_f32(weight + j));
            a += dn;
            b += dn * (load_f32(x + j) - m) * s;
        }
        float dn_mean = warp_sum(a) / (float)C, dn_norm_mean = warp_sum(b) / (float)C;
        T *dx = dinp + (size_t)row * C;
        for (int j = lane; j < C; j += WARP) {
            float dn = load_f32(dy + j) * (w0 + load_f32(weight + j));
            float g = s * (dn - dn_mean - (load_f32(x + j) - m) * s * dn_norm_mean);
            store_from_f32(dx + j, load_f32(dx + j) + g);
        }
    }
}

// --- RMSNorm: one warp per row (grid-stride; the loop bound is warp-uniform; long rows) -----
// out (N, C) = inp * rstd * weight, rstd (N) = 1 / sqrt(mean(inp^2) + eps) saved when not NULL.
template <typename T>
static __global__ void rmsnorm_forward_kernel(T *out, float *rstd, const T *inp, const T *weight,
                                              int N, int C, float w0) {
    int lane = threadIdx.x % WARP, warps = blockDim.x / WARP;
    for (int row = blockIdx.x * warps + threadIdx.x / WARP; row < N; row += gridDim.x * warps) {
        const T *x = inp + (size_t)row * C;
        float ss = 0.0f;
        for (int j = lane; j < C; j += WARP) {
            float v = load_f32(x + j);
            ss += v * v;
        }
        float s = 1.0f / sqrtf(warp_sum(ss) / (float)C + NORM_RMS_EPS);
        T *y = out + (size_t)row * C;
        for (int j = lane; j < C; j += WARP) store_from_f32(y + j, load_f32(x + j) * s * (w0 + load_f32(weight + j)));
        if (lane == 0 && rstd) rstd[row] = s;
    }
}

// dinp (N, C) += s * dn - x * s^3 * mean(dn * x), dn = dout * weight. One warp per row.
template <typename T>
static __global__ void rmsnorm_dinp_kernel(T *dinp, const T *dout, const T *inp, const T *weight,
                                           const float *rstd, int N, int C, float w0) {
    int lane = threadIdx.x % WARP, warps = blockDim.x / WARP;
    for (int row = blockIdx.x * warps + threadIdx.x / WARP; row < N; row += gridDim.x * warps) {
        const T *x = inp + (size_t)row * C, *dy = dout + (size_t)row * C;
        float s = rstd[row], dot = 0.0f;
        for (int j = lane; j < C; j += WARP) dot += load_f32(dy + j) * (w0 + load_f32(weight + j)) * load_f32(x + j);
        float k = s * s * s * warp_sum(dot) / (float)C;
        T *dx = dinp + (size_t)row * C;
        for (int j = lane; j < C; j += WARP) {
            float g = s * load_f32(dy + j) * (w0 + load_f32(weight + j)) - load_f32(x + j) * k;
            store_from_f32(dx + j, load_f32(dx + j) + g);
        }
    }
}

// Sums over rows of dout * inp * rstd (RMSNorm's dweight), in two passes as norm.cuh's
// column sums: block = 32 columns x 8 row lanes, grid.x = column tiles, grid.y = chunks of
// rows_per rows; lane y sums rows r0+y, r0+y+8, ... in order, lane 0 adds the 8 lane sums in
// order into out (nchunk, C) partials, or with `add` (one chunk) into dweight itself; the
// partials' second pass is norm_finish_kernel.
template <typename T>
static __global__ void rmsnorm_dweight_partial_kernel(float *out, const T *dout, const T *inp,
                                                      const float *rstd, int N, int C,
                                                      int rows_per, int add) {
    __shared__ float sh[NORM_ROWLANES][WARP];
    int col = threadIdx.x % WARP, lane = threadIdx.x / WARP, c = blockIdx.x * WARP + col;
    int r0 = blockIdx.y * rows_per, r1 = r0 + rows_per < N ? r0 + rows_per : N;
    float s = 0.0f;
    if (c < C)
        for (int r = r0 + lane; r < r1; r += NORM_ROWLANES)
            s += load_f32(dout + (size_t)r * C + c) * load_f32(inp + (size_t)r * C + c) * rstd[r];
    sh[lane][col] = s;
    __syncthreads();
    if (lane != 0 || c >= C) return;
    float t = 0.0f;
    for (int k = 0; k < NORM_ROWLANES; k++) t += sh[k][col];
    size_t at = add ? (size_t)c : (size_t)blockIdx.y * C + c;
    out[at] = add ? out[at] + t : t;
}

// --- pointwise (grid-stride over the 16-byte chunks of n; buffers of type T) ---------------
// out (n) = a + b; out may alias a or b (each chunk is read before the same thread writes it).
template <typename T>
static __global__ void add_kernel(T *out, const T *a, const T *b, size_t n) {
    constexpr int V = Vec16<T>::N;
    size_t nk = (n + V - 1) / V;
    for (size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x; k < nk;
         k += (size_t)gridDim.x * blockDim.x) {
        int cnt = vec16_count(n, k, V);
        Vec16<T> x = vec16_load(a + k * V, cnt), y = vec16_load(b + k * V, cnt);
        CUDA_UNROLL
        for (int e = 0; e < V; e++) vec16_set(x, e, vec16_f32(x, e) + vec16_f32(y, e));
        vec16_store(out + k * V, x, cnt);
    }
}
