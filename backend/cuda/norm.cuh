// backend/cuda/norm.cuh: kernels of cuda_norm.cu: column sums over rows at 16-byte width (bias
// gradients, LayerNorm and RMSNorm parameter gradients), layernorm forward/backward, RMSNorm
// (forward, input gradient), add.
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
// Block = 32 column chunks x 8 row lanes (threadIdx.x % 32 = chunk, / 32 = row lane); a chunk
// is V = Vec16<T>::N columns (8 bf16/fp16, 4 fp32: one 16-byte load per row, scalar for a
// short last chunk or rows not 16-byte aligned); grid.x = tiles of 32 chunks, grid.y = chunks
// of `rows_per` rows. Lane y sums rows r0+y, r0+y+8, ... in order, then lane 0 adds the 8 lane
// sums in order: per column the order of the scalar kernel this replaced (same bits). Per
// column and row chunk it writes sb = sum dy and, when sw is wanted, sw = sum dy * (x - mean) *
// rstd (layernorm's dweight; mean NULL: x * rstd, RMSNorm's, the same bits as dy * x * rstd).
// out_b/out_w: (nchunk, C) partials, or with `add` (one chunk) the gradient itself to += into;
// either may be NULL (skipped). inp/mean/rstd are only read when out_w is set. dy and inp
// (N, C) are of type T. Shared: 2 x 8 x 32 x V floats (16 KB for 16-bit T).
template <typename T>
static __global__ void __launch_bounds__(NORM_THREADS)
colsum_partial_kernel(float *out_b, float *out_w, const T *dy, const T *inp, const float *mean,
                      const float *rstd, int N, int C, int rows_per, int add) {
    constexpr int V = Vec16<T>::N;
    __shared__ float sh_b[NORM_ROWLANES][V * WARP];  // [lane][e * 32 + chunk]: no bank conflicts
    __shared__ float sh_w[NORM_ROWLANES][V * WARP];
    int col = threadIdx.x % WARP, lane = threadIdx.x / WARP;
    size_t kc = (size_t)blockIdx.x * WARP + col;  // this thread's chunk of columns
    int n = vec16_count((size_t)C, kc, V);
    int r0 = blockIdx.y * rows_per, r1 = r0 + rows_per < N ? r0 + rows_per : N;
    float sb[V], sw[V];
CUDA_UNROLL
    for (int e = 0; e < V; e++) sb[e] = 0.0f, sw[e] = 0.0f;
    if (n > 0) {
        for (int r = r0 + lane; r < r1; r += NORM_ROWLANES) {
            Vec16<T> g = vec16_load(dy + (size_t)r * C + kc * V, n);
            if (out_w) {
                Vec16<T> x = vec16_load(inp + (size_t)r * C + kc * V, n);
                float m = mean ? mean[r] : 0.0f, s = rstd[r];
CUDA_UNROLL
                for (int e = 0; e < V; e++)
                    sw[e] += vec16_f32(g, e) * (vec16_f32(x, e) - m) * s;
            }
CUDA_UNROLL
            for (int e = 0; e < V; e++) sb[e] += vec16_f32(g, e);
        }
    }
CUDA_UNROLL
    for (int e = 0; e < V; e++) sh_b[lane][e * WARP + col] = sb[e], sh_w[lane][e * WARP + col] = sw[e];
    __syncthreads();
    if (lane != 0 || n == 0) return;
    size_t at = (add ? 0 : (size_t)blockIdx.y * C) + kc * V;
CUDA_UNROLL
    for (int e = 0; e < V; e++) {
        if (e >= n) continue;
        float tb = 0.0f, tw = 0.0f;
        for (int k = 0; k < NORM_ROWLANES; k++) tb += sh_b[k][e * WARP + col], tw += sh_w[k][e * WARP + col];
        if (out_b) out_b[at + e] = add ? out_b[at + e] + tb : tb;
        if (out_w) out_w[at + e] = add ? out_w[at + e] + tw : tw;
    }
}

// acc_b (C) += sum over k of part_b (nchunk, C), k in order, and the same for acc_w/part_w
// (either pair skipped when its acc is NULL); a thread per chunk of 4 columns (16-byte loads
// when C % 4 == 0; grid-stride). The second pass of every column sum here and of
// norm_row.cuh's backward; per column the order of one thread per column (same bits).
static __global__ void __launch_bounds__(NORM_THREADS)
norm_finish_kernel(float *acc_b, const float *part_b, float *acc_w, const float *part_w,
                   int nchunk, int C) {
    constexpr int V = Vec16<float>::N;
    for (size_t kc = grid_first(), nk = vec16_chunks((size_t)C, V); kc < nk;
         kc += grid_stride()) {
        int n = vec16_count((size_t)C, kc, V);
        Vec16<float> sb, sw;
CUDA_UNROLL
        for (int e = 0; e < V; e++) sb.v[e] = 0.0f, sw.v[e] = 0.0f;
        for (int k = 0; k < nchunk; k++) {
            size_t at = (size_t)k * C + kc * V;
            if (acc_b) {
                Vec16<float> p = vec16_load(part_b + at, n);
CUDA_UNROLL
                for (int e = 0; e < V; e++) sb.v[e] += p.v[e];
            }
            if (acc_w) {
                Vec16<float> p = vec16_load(part_w + at, n);
CUDA_UNROLL
                for (int e = 0; e < V; e++) sw.v[e] += p.v[e];
            }
        }
        if (acc_b) {
            Vec16<float> a = vec16_load(acc_b + kc * V, n);
CUDA_UNROLL
            for (int e = 0; e < V; e++) a.v[e] += sb.v[e];
            vec16_store(acc_b + kc * V, a, n);
        }
        if (acc_w) {
            Vec16<float> a = vec16_load(acc_w + kc * V, n);
CUDA_UNROLL
            for (int e = 0; e < V; e++) a.v[e] += sw.v[e];
            vec16_store(acc_w + kc * V, a, n);
        }
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
// (RMSNorm's dweight for these rows: colsum_partial_kernel with mean NULL.)
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

// --- pointwise (grid-stride over the 16-byte chunks of n; buffers of type T) ---------------
// out (n) = a + b; out may alias a or b (each chunk is read before the same thread writes it).
template <typename T>
static __global__ void add_kernel(T *out, const T *a, const T *b, size_t n) {
    constexpr int V = Vec16<T>::N;
    for (size_t k = grid_first(), nk = vec16_chunks(n, V); k < nk; k += grid_stride()) {
        int cnt = vec16_count(n, k, V);
        Vec16<T> x = vec16_load(a + k * V, cnt), y = vec16_load(b + k * V, cnt);
        CUDA_UNROLL
        for (int e = 0; e < V; e++) vec16_set(x, e, vec16_f32(x, e) + vec16_f32(y, e));
        vec16_store(out + k * V, x, cnt);
    }
}

// x (n) *= alpha, fp32; a thread per 16-byte chunk (grid-stride).
static __global__ void scale_f32_kernel(float *x, float alpha, size_t n) {
    constexpr int V = Vec16<float>::N;
    size_t nk = (n + V - 1) / V;
    for (size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x; k < nk;
         k += (size_t)gridDim.x * blockDim.x) {
        int cnt = vec16_count(n, k, V);
        Vec16<float> v = vec16_load(x + k * V, cnt);
        CUDA_UNROLL
        for (int e = 0; e < V; e++) vec16_set(v, e, vec16_f32(v, e) * alpha);
        vec16_store(x + k * V, v, cnt);
    }
}
