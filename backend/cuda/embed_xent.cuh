// backend/cuda/embed_xent.cuh: kernels of cuda_embed_xent.cu: vocab-parallel embedding
// (forward, backward), position embedding (forward, backward), and the pieces of vocab-
// parallel softmax cross-entropy (row max, sum of exponentials and target logit, loss,
// dlogits). This rank holds vocabulary rows/columns [vocab_start, vocab_start + V_local), the
// first V_valid of them real; a target is in the shard when target - vocab_start lies in
// [0, V_valid) (as backend/cpu/cpu_embed_xent.c).
//
// Deterministic without atomics: every gradient element is owned by one thread, which adds
// its contributions in a fixed order (tokens in order, batch rows in order); the row
// reductions of cross-entropy use block_max / block_sum (fixed shuffle order).
// Activations, logits and the embedding tables' compute copies are of the template type T
// (float, __nv_bfloat16, __half); gradients of the tables and the cross-entropy statistics
// are fp32.
#pragma once
#include "backend/cuda/cuda_common.cuh"  // defines: CUDA_LAUNCH, block_sum, block_max

#include <float.h>  // defines: FLT_MAX

#define EX_THREADS 256  // every kernel here

// out (N, C) = table (V_local, C)[tok - vocab_start], zero rows for tokens outside the shard.
// One block per row (grid-stride over rows), threads over channels.
template <typename T>
static __global__ void embedding_forward_kernel(T *out, const int *tokens,
                                                const T *table, int N, int C,
                                                int vocab_start, int V_local) {
    for (int i = blockIdx.x; i < N; i += gridDim.x) {
        int r = tokens[i] - vocab_start;
        int in = r >= 0 && r < V_local;
        T *y = out + (size_t)i * C;
        const T *src = table + (size_t)(in ? r : 0) * C;
        for (int c = threadIdx.x; c < C; c += blockDim.x)
            store_from_f32(y + c, in ? load_f32(src + c) : 0.0f);
    }
}

// dtable (V_local, C) += dout (N, C) rows of the tokens in the shard. Thread (channel c,
// vocabulary range blockIdx.y of rows_per rows) walks all N tokens in order and adds the
// rows of tokens in its range: each dtable element has one owner, so no atomics, and a
// repeated token's rows add in token order (the CPU order). Cost: every thread reads all N
// token ids (broadcast loads, cached) for its share of the N*C adds: grid.y ranges multiply
// the parallelism (C * ranges threads) at the price of re-reading the ids; fine for
// N * ranges in the millions. A sort of the tokens would scale better; not needed yet.
template <typename T>
static __global__ void embedding_backward_kernel(float *dtable, const T *dout,
                                                 const int *tokens, int N, int C,
                                                 int vocab_start, int V_local, int rows_per) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    int lo = blockIdx.y * rows_per, hi = lo + rows_per < V_local ? lo + rows_per : V_local;
    if (c >= C) return;
    for (int i = 0; i < N; i++) {
        int r = tokens[i] - vocab_start;
        if (r >= lo && r < hi) dtable[(size_t)r * C + c] += load_f32(dout + (size_t)i * C + c);
    }
}

// out (B, T, C) += wpe (T, C); n = B*T*C, tc = T*C. Grid-stride over out.
template <typename T>
static __global__ void position_forward_kernel(T *out, const T *wpe, size_t n, size_t tc) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        store_from_f32(out + i, load_f32(out + i) + load_f32(wpe + i % tc));
}

// out (N, C) += wpe rows pos[r] (--reset-position-ids); n = N*C. Grid-stride over out.
template <typename T>
static __global__ void position_rows_forward_kernel(T *out, const T *wpe, const int *pos,
                                                    size_t n, int C) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        store_from_f32(out + i, load_f32(out + i) + load_f32(wpe + (size_t)pos[i / C] * C + i % C));
}

// dwpe rows pos[r] += dout (N, C) rows r, in row order (the CPU's order: same bits). One
// thread per channel (grid-stride over C).
template <typename T>
static __global__ void position_rows_backward_kernel(float *dwpe, const T *dout, const int *pos,
                                                     int N, int C) {
    for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < C; c += gridDim.x * blockDim.x)
        for (int r = 0; r < N; r++)
            dwpe[(size_t)pos[r] * C + c] += load_f32(dout + (size_t)r * C + c);
}

// dwpe (T, C) += sum over b of dout (B, T, C), b in order (the CPU's order: same bits).
// One thread per element of dwpe (grid-stride over tc = T*C).
template <typename T>
static __global__ void position_backward_kernel(float *dwpe, const T *dout, int B,
                                                size_t tc) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < tc;
         i += (size_t)gridDim.x * blockDim.x) {
        float s = dwpe[i];
        for (int b = 0; b < B; b++) s += load_f32(dout + (size_t)b * tc + i);
        dwpe[i] = s;
    }
}

// rowmax (N) = max of logits (N, V_local) over columns [0, V_valid) (-FLT_MAX when none),
// sumexp (N) = sum of exp(l - rowmax) over them, tgt (N) = l[target - vocab_start] for
// targets in the shard, else 0: one pass over the logits (online softmax). Each thread keeps
// a running max m and the sum s of exp(x - m) over its columns, rescaling s when m grows; the
// block then takes the max M of the m's and sums s * exp(m - M). Each logit is read once; the
// result equals the two-pass max-then-sum to fp32 round-off (not bitwise), in a fixed order
// for a given shape. One block per row (grid-stride over rows; the bound is block-uniform, so
// every thread reaches block_max's barriers).
template <typename T>
static __global__ void xent_stats_kernel(float *rowmax, float *sumexp, float *tgt,
                                         const T *logits, const int *targets, int N,
                                         int V_local, int V_valid, int vocab_start) {
    __shared__ float buf[WARP];
    for (int i = blockIdx.x; i < N; i += gridDim.x) {
        const T *l = logits + (size_t)i * V_local;
        float m = -FLT_MAX, s = 0.0f;
        for (int j = threadIdx.x; j < V_valid; j += blockDim.x) {
            float x = load_f32(l + j);
            if (x > m) {
                s = s * expf(m - x) + 1.0f;
                m = x;
            } else {
                s += expf(x - m);
            }
        }
        float M = block_max(m, buf);
        s = block_sum(s * expf(m - M), buf);  // a thread without columns: 0 * exp(.) = 0
        if (threadIdx.x == 0) {
            int t = targets[i] - vocab_start;
            rowmax[i] = M;
            sumexp[i] = s;
            tgt[i] = t >= 0 && t < V_valid ? load_f32(l + t) : 0.0f;
        }
    }
}

// sumexp (N) *= exp(shard_max - rowmax). Grid-stride over rows.
static __global__ void xent_rescale_kernel(float *sumexp, const float *shard_max,
                                           const float *rowmax, int N) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < N; i += gridDim.x * blockDim.x)
        sumexp[i] *= expf(shard_max[i] - rowmax[i]);
}

// loss (N) = log(sumexp) + rowmax - tgt. Grid-stride over rows.
static __global__ void xent_loss_kernel(float *loss, const float *sumexp, const float *rowmax,
                                        const float *tgt, int N) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < N; i += gridDim.x * blockDim.x)
        loss[i] = logf(sumexp[i]) + rowmax[i] - tgt[i];
}

// dlogits (N, V_local) = dscale * (softmax - onehot) over valid columns, 0 at padding. Each
// element is read and written by the same thread (the target's "- 1" included), so dlogits
// may alias logits. One block per row, threads over columns.
template <typename T>
static __global__ void xent_backward_kernel(T *dlogits, const T *logits,
                                            const float *rowmax, const float *sumexp,
                                            const int *targets, const float *dscale, int N,
                                            int V_local, int V_valid, int vocab_start) {
    for (int i = blockIdx.x; i < N; i += gridDim.x) {
        const T *l = logits + (size_t)i * V_local;
        T *dl = dlogits + (size_t)i * V_local;
        float m = rowmax[i], inv = 1.0f / sumexp[i], d = dscale[i];
        int t = targets[i] - vocab_start;  // matches a column j only when in the shard
        for (int j = threadIdx.x; j < V_local; j += blockDim.x) {
            float g = 0.0f;
            if (j < V_valid) {
                float p = expf(load_f32(l + j) - m) * inv;
                g = d * (j == t ? p - 1.0f : p);
            }
            store_from_f32(dl + j, g);
        }
    }
}
