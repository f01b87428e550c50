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
// One block per row (grid-stride over rows), threads over the row's 16-byte chunks (a copy:
// the bits of the table).
template <typename T>
static __global__ void embedding_forward_kernel(T *out, const int *tokens,
                                                const T *table, int N, int C,
                                                int vocab_start, int V_local) {
    constexpr int V = Vec16<T>::N;
    size_t nk = ((size_t)C + V - 1) / V;
    for (int i = blockIdx.x; i < N; i += gridDim.x) {
        int r = tokens[i] - vocab_start;
        int in = r >= 0 && r < V_local;
        T *y = out + (size_t)i * C;
        const T *src = table + (size_t)(in ? r : 0) * C;
        for (size_t k = threadIdx.x; k < nk; k += blockDim.x) {
            int n = vec16_count((size_t)C, k, V);
            Vec16<T> v = vec16_load(src + k * V, in ? n : 0);  // n = 0: zeros
            vec16_store(y + k * V, v, n);
        }
    }
}

// dtable (V_local, C) += dout (N, C) rows of the tokens in the shard. Thread (16-byte chunk of
// V = Vec16<T>::N channels, vocabulary range blockIdx.y of rows_per rows) walks all N tokens
// in order and adds the rows of tokens in its range: each dtable element has one owner, so no
// atomics, and a repeated token's rows add in token order (the CPU order). dout is read a
// chunk at a time, dtable (fp32) V / 4 chunks of 4. Cost: every thread reads all N token ids
// (broadcast loads, cached) for its share of the N*C adds: grid.y ranges multiply the
// parallelism (C / V * ranges threads) at the price of re-reading the ids; fine for
// N * ranges in the millions. A sort of the tokens would scale better; not needed yet.
template <typename T>
static __global__ void embedding_backward_kernel(float *dtable, const T *dout,
                                                 const int *tokens, int N, int C,
                                                 int vocab_start, int V_local, int rows_per) {
    constexpr int V = Vec16<T>::N, F = Vec16<float>::N;
    size_t kc = (size_t)blockIdx.x * blockDim.x + threadIdx.x;  // this thread's chunk
    int n = vec16_count((size_t)C, kc, V);
    int lo = blockIdx.y * rows_per, hi = lo + rows_per < V_local ? lo + rows_per : V_local;
    if (n == 0) return;
    for (int i = 0; i < N; i++) {
        int r = tokens[i] - vocab_start;
        if (r < lo || r >= hi) continue;
        Vec16<T> g = vec16_load(dout + (size_t)i * C + kc * V, n);
        float *d = dtable + (size_t)r * C + kc * V;
CUDA_UNROLL
        for (int q = 0; q < V / F; q++) {  // fp32 sub-chunks of 4
            int m = n - q * F < F ? n - q * F : F;
            if (m <= 0) break;
            Vec16<float> t = vec16_load(d + q * F, m);
CUDA_UNROLL
            for (int e = 0; e < F; e++) t.v[e] += vec16_f32(g, q * F + e);
            vec16_store(d + q * F, t, m);
        }
    }
}

// out (B, T, C) += wpe (T, C); n = B*T*C, tc = T*C. Grid-stride over the 16-byte chunks of
// out; a chunk's wpe elements are one 16-byte load when they do not wrap around tc (always
// when tc is a multiple of Vec16<T>::N), else element by element. Same bits per element.
template <typename T>
static __global__ void position_forward_kernel(T *out, const T *wpe, size_t n, size_t tc) {
    constexpr int V = Vec16<T>::N;
    for (size_t k = grid_first(), nk = vec16_chunks(n, V); k < nk; k += grid_stride()) {
        int cnt = vec16_count(n, k, V);
        size_t j = k * V % tc;
        Vec16<T> x = vec16_load(out + k * V, cnt), w;
        if (j + cnt <= tc) {
            w = vec16_load(wpe + j, cnt);
        } else {
CUDA_UNROLL
            for (int e = 0; e < V; e++)
                vec16_set(w, e, e < cnt ? load_f32(wpe + (k * V + e) % tc) : 0.0f);
        }
CUDA_UNROLL
        for (int e = 0; e < V; e++) vec16_set(x, e, vec16_f32(x, e) + vec16_f32(w, e));
        vec16_store(out + k * V, x, cnt);
    }
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
// A thread per 16-byte chunk of dout's (T, C) block (grid-stride over the chunks of tc =
// T*C), dwpe (fp32) in chunks of 4.
template <typename T>
static __global__ void position_backward_kernel(float *dwpe, const T *dout, int B,
                                                size_t tc) {
    constexpr int V = Vec16<T>::N, F = Vec16<float>::N;
    for (size_t k = grid_first(), nk = vec16_chunks(tc, V); k < nk; k += grid_stride()) {
        int cnt = vec16_count(tc, k, V);
        float s[V];
CUDA_UNROLL
        for (int q = 0; q < V / F; q++) {
            int c = cnt - q * F;  // elements of fp32 sub-chunk q
            Vec16<float> d = vec16_load(dwpe + k * V + q * F, c < 0 ? 0 : c > F ? F : c);
CUDA_UNROLL
            for (int e = 0; e < F; e++) s[q * F + e] = d.v[e];
        }
        for (int b = 0; b < B; b++) {
            Vec16<T> g = vec16_load(dout + (size_t)b * tc + k * V, cnt);
CUDA_UNROLL
            for (int e = 0; e < V; e++) s[e] += vec16_f32(g, e);
        }
CUDA_UNROLL
        for (int q = 0; q < V / F; q++) {
            Vec16<float> d;
CUDA_UNROLL
            for (int e = 0; e < F; e++) d.v[e] = s[q * F + e];
            int c = cnt - q * F;
            vec16_store(dwpe + k * V + q * F, d, c < 0 ? 0 : c > F ? F : c);
        }
    }
}

// The statistics of one row l (V_valid columns read): its max M and the sum s of exp(l - M),
// returned to every thread of the block, by the whole block (it reaches the barriers of
// block_max and block_sum: any earlier reads of the row by the block are done when it
// returns). Thread t takes the row's 16-byte chunks t, t + blockDim.x, ... (V = Vec16<T>::N
// columns each; one 16-byte load when the row is aligned, V_local * sizeof(T) % 16 == 0) and
// keeps a running max m and the sum s of exp(x - m) over its columns in order, rescaling s
// when m grows; the block then takes the max M of the m's and sums s * exp(m - M). Each logit
// is read once; the result equals the two-pass max-then-sum to fp32 round-off (not bitwise),
// in a fixed order for a given shape.
template <typename T>
static __device__ __forceinline__ void xent_row_stats(const T *l, int V_valid, float *buf,
                                                      float *M_out, float *s_out) {
    constexpr int V = Vec16<T>::N;
    size_t nk = ((size_t)V_valid + V - 1) / V;
    float m = -FLT_MAX, s = 0.0f;
    for (size_t k = threadIdx.x; k < nk; k += blockDim.x) {
        int n = vec16_count((size_t)V_valid, k, V);
        Vec16<T> xv = vec16_load(l + k * V, n);
CUDA_UNROLL
        for (int e = 0; e < V; e++) {
            if (e >= n) break;
            float x = vec16_f32(xv, e);
            if (x > m) {
                s = s * expf(m - x) + 1.0f;
                m = x;
            } else {
                s += expf(x - m);
            }
        }
    }
    float M = block_max(m, buf);
    *s_out = block_sum(s * expf(m - M), buf);  // a thread without columns: 0 * exp(.) = 0
    *M_out = M;
}

// rowmax (N) = max of logits (N, V_local) over columns [0, V_valid) (-FLT_MAX when none),
// sumexp (N) = sum of exp(l - rowmax) over them, tgt (N) = l[target - vocab_start] for
// targets in the shard, else 0: one pass over the logits (online softmax, xent_row_stats).
// One block per row (grid-stride over rows; the bound is block-uniform, so every thread
// reaches block_max's barriers).
template <typename T>
static __global__ void xent_stats_kernel(float *rowmax, float *sumexp, float *tgt,
                                         const T *logits, const int *targets, int N,
                                         int V_local, int V_valid, int vocab_start) {
    __shared__ float buf[WARP];
    for (int i = blockIdx.x; i < N; i += gridDim.x) {
        const T *l = logits + (size_t)i * V_local;
        float M, s;
        xent_row_stats(l, V_valid, buf, &M, &s);
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

// One row of dlogits: dl (V_local) = d * (softmax - onehot) from the row l, its max m and
// inv = 1 / (sum of exponentials), over the valid columns; 0 at padding; t: the target's
// column (matches a column only when in the shard). Each element is read and written by the
// same thread (the target's "- 1" included), so dl may alias l. Threads over the row's 16-byte
// chunks (as xent_row_stats); per element the same expression as one thread per column.
template <typename T>
static __device__ __forceinline__ void xent_grad_row(T *dl, const T *l, float m, float inv,
                                                     float d, int t, int V_local, int V_valid) {
    constexpr int V = Vec16<T>::N;
    size_t nk = ((size_t)V_local + V - 1) / V;
    for (size_t k = threadIdx.x; k < nk; k += blockDim.x) {
        int n = vec16_count((size_t)V_local, k, V);
        Vec16<T> xv = vec16_load(l + k * V, n);
CUDA_UNROLL
        for (int e = 0; e < V; e++) {
            long long j = (long long)k * V + e;
            float g = 0.0f;
            if (j < V_valid) {
                float p = expf(vec16_f32(xv, e) - m) * inv;
                g = d * (j == t ? p - 1.0f : p);
            }
            vec16_set(xv, e, g);
        }
        vec16_store(dl + k * V, xv, n);
    }
}

// dlogits (N, V_local) = dscale * (softmax - onehot) over valid columns, 0 at padding, from
// the (reduced) row statistics; dlogits may alias logits. One block per row (xent_grad_row).
// loss non-NULL (the fused classifier after the statistics): thread 0 also writes loss[i] =
// xent_loss_kernel's expression (same bits), so the loss and dlogits come from one pass.
template <typename T>
static __global__ void xent_backward_kernel(T *dlogits, float *loss, const T *logits,
                                            const float *rowmax, const float *sumexp,
                                            const float *tgt, const int *targets,
                                            const float *dscale, int N, int V_local,
                                            int V_valid, int vocab_start) {
    for (int i = blockIdx.x; i < N; i += gridDim.x) {
        float m = rowmax[i], inv = 1.0f / sumexp[i], d = dscale[i];
        if (loss && threadIdx.x == 0) loss[i] = logf(sumexp[i]) + m - tgt[i];
        xent_grad_row(dlogits + (size_t)i * V_local, logits + (size_t)i * V_local, m, inv, d,
                      targets[i] - vocab_start, V_local, V_valid);
    }
}

// The whole classifier at one vocabulary shard (the statistics are final in it), one block
// per row: the row's max and sum of exponentials as xent_stats_kernel (xent_row_stats: the
// same order, the same bits), loss[i] (if loss) as xent_loss_kernel from them and the target
// logit, then the row read again (from L2 on a GPU: the block has just read it) for dlogits
// as xent_backward_kernel. The logits leave HBM once instead of twice. Thread 0 reads the
// target logit before xent_row_stats's barriers, so no thread has overwritten it (dlogits
// may alias logits); the loop bound is block-uniform.
template <typename T>
static __global__ void xent_classifier_kernel(T *dlogits, float *loss, const T *logits,
                                              const int *targets, const float *dscale, int N,
                                              int V_local, int V_valid, int vocab_start) {
    __shared__ float buf[WARP];
    for (int i = blockIdx.x; i < N; i += gridDim.x) {
        const T *l = logits + (size_t)i * V_local;
        int t = targets[i] - vocab_start;
        float lt = threadIdx.x == 0 && t >= 0 && t < V_valid ? load_f32(l + t) : 0.0f;
        float M, s;
        xent_row_stats(l, V_valid, buf, &M, &s);
        if (loss && threadIdx.x == 0) loss[i] = logf(s) + M - lt;
        xent_grad_row(dlogits + (size_t)i * V_local, l, M, 1.0f / s, dscale[i], t, V_local,
                      V_valid);
    }
}
