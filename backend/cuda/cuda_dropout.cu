// backend/cuda/cuda_dropout.cu: dropout kernels, the mask a pure function of the element's
// global index (backend/dropout.h: the same hash, so the same bits as the CPU backend).
//   dropout_rows_kernel: (rows, C) tensors (the dropout op; its backward is the same call);
//   attn_dropout_kernel: attention probabilities (B, NH, T, T) for cuda_attention.cu.
// Nothing is stored: every call regenerates the mask (compute instead of memory).
#include "backend/cuda/cuda_common.cuh"

// y (n = N*C) = x * dropout_factor(d, dropout_row(d, r) * C + c), element i = r*C + c.
template <typename E>
static __global__ void dropout_rows_kernel(E *y, const E *x, BackendDropout d, long long n, int C) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    long long r = i / C, c = i % C;
    float z = dropout_factor(&d, (uint64_t)dropout_row(&d, r) * (uint64_t)C + (uint64_t)c);
    store_from_f32(y + i, load_f32(x + i) * z);
}

// dst (B, NH, T, Tk) = src * mask; element (b, h, i, j) of this call has the mask index
// (((d.sample0 + b) * d.NH + d.h0 + h) * Tg + q0 + i) * Tg + k0 + j (w: the window's q0, k0,
// Tk and Tg the sequence's length). dst may alias src.
template <typename E>
static __global__ void attn_dropout_kernel(E *dst, const E *src, BackendDropout d, long long n,
                                           int T, int NH, BackendAttnWindow w, int Tg) {
    long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= n) return;
    long long TT = (long long)T * w.Tk, bh = e / TT, i = e % TT / w.Tk, j = e % w.Tk;
    uint64_t head = (uint64_t)(d.sample0 + bh / NH) * d.NH + (uint64_t)(d.h0 + bh % NH);
    float z = dropout_factor(&d, (head * (uint64_t)Tg + (uint64_t)(w.q0 + i)) * (uint64_t)Tg +
                                     (uint64_t)(w.k0 + j));
    store_from_f32(dst + e, load_f32(src + e) * z);
}

static unsigned dropout_blocks(long long n) { return (unsigned)((n + 255) / 256); }

template <typename E>
static void dropout_rows_t(Backend *be, void *out, const void *inp, BackendDropout d, long long n,
                           int C) {
    CUDA_LAUNCH(dropout_rows_kernel<E>, dropout_blocks(n), 256, 0, cuda_stream(be), (E *)out,
                (const E *)inp, d, n, C);
}

template <typename E>
static void attn_dropout_t(Backend *be, void *dst, const void *src, BackendDropout d, long long n,
                           int T, int NH, BackendAttnWindow w, int Tg) {
    CUDA_LAUNCH(attn_dropout_kernel<E>, dropout_blocks(n), 256, 0, cuda_stream(be), (E *)dst,
                (const E *)src, d, n, T, NH, w, Tg);
}

// out (N, C) = inp * mask (be->act elements); d NULL or threshold 0: a copy.
void cuda_dropout(Backend *be, void *out, const void *inp, const BackendDropout *d, int N, int C) {
    long long n = (long long)N * C;
    if (n <= 0) return;
    if (!d || !d->threshold) {
        if (out != inp)
            CUDA_CHECK(cudaMemcpyAsync(out, inp, (size_t)n * backend_dtype_size(be->act),
                                       cudaMemcpyDeviceToDevice, cuda_stream(be)));
        return;
    }
    if ((long long)dropout_blocks(n) > 2147483647LL) core_fatal("cuda dropout: %lld elements", n);
    ACT_DISPATCH(be->act, dropout_rows_t, be, out, inp, *d, n, C);
}

// dst (B, NH, T, Tk) = src * the attention mask of d for the window w (NULL: the whole
// sequence) (be->act elements; may alias).
void cuda_attention_probs_dropout(Backend *be, void *dst, const void *src, const BackendDropout *d,
                                  int B, int NH, int T, const BackendAttnWindow *w) {
    BackendAttnWindow win = {0, 0, T, NULL, 0, NULL, 0, NULL};
    if (w) win = *w;
    long long n = (long long)B * NH * T * win.Tk;
    if (n <= 0) return;
    if ((long long)dropout_blocks(n) > 2147483647LL) core_fatal("cuda dropout: %lld elements", n);
    ACT_DISPATCH(be->act, attn_dropout_t, be, dst, src, *d, n, T, NH, win, d->T ? d->T : T);
}

// This file's entries of the CUDA ops table (cuda_internal.h).
void cuda_dropout_ops(BackendOps *t) {
    t->dropout = cuda_dropout;
}
