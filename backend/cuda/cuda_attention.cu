// backend/cuda/cuda_attention.cu: causal multi-head self-attention with the probabilities
// materialised (B, NH, T, T), as the CPU backend: per batch element one strided-batched GEMM
// over the NH heads for each product, the causal softmax (attention.cuh) in between.
//
// Per (b, h), q, k, v are strided views into qkv (B, T, 3*C), C = NH*hs, row stride 3*C:
// q at column h*hs, k at C + h*hs, v at 2*C + h*hs; consecutive heads are hs elements apart.
// Every buffer but the backward's scratch is of the activation type be->act (GEMMs in that
// type with fp32 accumulation). The scratch is fp32 memory of (B, NH, T, T) floats; it holds
// d(att), then d(scores), as be->act elements (with bf16/fp16 only its first half is used).
// Dropout on the probabilities (d not NULL; cuda_dropout.cu's mask kernel): the
// forward drops att in place for the product with v, then recomputes the scores and softmax
// into att (one more QK^T GEMM: att keeps the probabilities without dropout, and no mask is
// stored); the backward writes the dropped probabilities into the scratch for dv, then masks
// d(att). --use-flash-attn needs neither the extra GEMM nor the (T, T) matrices.
#include "backend/cuda/attention.cuh"

#include <math.h>  // defines: sqrtf

template <typename T>
static void causal_softmax_t(Backend *be, void *att, long long rows, int T_, int Tq, int off,
                             const int *qstart, int NH, int k0) {
    unsigned blocks = (unsigned)((rows + ATT_WARPS - 1) / ATT_WARPS);
    CUDA_LAUNCH(causal_softmax_kernel<T>, blocks, ATT_WARPS * WARP, 0, cuda_stream(be), (T *)att,
                rows, T_, Tq, off, qstart, NH, k0);
}

template <typename T>
static void causal_softmax_backward_t(Backend *be, void *dp, const void *p, long long rows, int T_) {
    unsigned blocks = (unsigned)((rows + ATT_WARPS - 1) / ATT_WARPS);
    CUDA_LAUNCH(causal_softmax_backward_kernel<T>, blocks, ATT_WARPS * WARP, 0, cuda_stream(be),
                (T *)dp, (const T *)p, rows, T_);
}

// att (B, NH, T, Tk) = causal softmax(scale q k^T) of the queries of qkv (B, T, 3*C) and the
// keys of w.kv (B, Tk, 3*C) (the window w, BackendAttnWindow; kv not NULL).
static void attention_probs(Backend *be, void *att, const void *qkv, int B, int T, int NH, int hs,
                            BackendAttnWindow w) {
    int C = NH * hs, C3 = 3 * C, Tk = w.Tk;
    long long TT = (long long)T * Tk;
    float scale = 1.0f / sqrtf((float)hs);
    BackendDType a = be->act;
    size_t es = backend_dtype_size(a);
    for (int b = 0; b < B; b++) {  // scores[b, h] (T, Tk) = scale * q (T, hs) @ k^T
        const void *q = elem_at(qkv, (size_t)b * T * C3, es);
        const void *k = elem_at(w.kv, (size_t)b * Tk * C3 + C, es);
        cuda_gemm(be, 0, 1, T, Tk, hs, scale, q, C3, hs, k, C3, hs, 0.0f,
                  elem_at(att, (size_t)b * NH * TT, es), Tk, TT, NH, NULL, a, a);
    }
    ACT_DISPATCH(a, causal_softmax_t, be, att, (long long)B * NH * T, Tk, T, w.q0 - w.k0, w.qstart,
                 NH, w.k0);
}

// out (B, T, C) from qkv (B, T, 3*C) (keys and values of w->kv with a window w); att (B, NH,
// T, Tk) keeps the probabilities (without dropout); the product with v takes them dropped by
// d (NULL or threshold 0: none).
void cuda_attention_forward(Backend *be, void *out, void *att, const void *qkv,
                            int B, int T, int NH, int hs, const BackendDropout *d,
                            const BackendAttnWindow *w) {
    if (B <= 0 || T <= 0 || NH <= 0) return;
    if (d && !d->threshold) d = NULL;
    if (w && (w->accumulate || w->kv_heads))
        core_fatal("attention_forward: a window with accumulate %d, kv_heads %d (flash only)",
                   w->accumulate, w->kv_heads);
    BackendAttnWindow win = {0, 0, T, qkv, 0, NULL, 0, NULL};
    if (w) win = *w, win.kv = w->kv ? w->kv : qkv;
    int C = NH * hs, C3 = 3 * C, Tk = win.Tk;
    long long TT = (long long)T * Tk;
    BackendDType a = be->act;
    size_t es = backend_dtype_size(a);
    attention_probs(be, att, qkv, B, T, NH, hs, win);
    if (d) cuda_attention_probs_dropout(be, att, att, d, B, NH, T, w);
    for (int b = 0; b < B; b++) {  // out[b, :, h] (T, hs) = att[b, h] (T, Tk) @ v (Tk, hs)
        const void *v = elem_at(win.kv, (size_t)b * Tk * C3 + 2 * C, es);
        cuda_gemm(be, 0, 0, T, hs, Tk, 1.0f, elem_at(att, (size_t)b * NH * TT, es), Tk, TT, v, C3,
                  hs, 0.0f, elem_at(out, (size_t)b * T * C, es), C, hs, NH, NULL, a, a);
    }
    if (d) attention_probs(be, att, qkv, B, T, NH, hs, win);  // the same bits as before the mask
}

// dqkv (B, T, 3*C) overwritten; scratch (B, NH, T, T) holds the dropped probabilities (with
// d), then d(att), then d(scores).
void cuda_attention_backward(Backend *be, void *dqkv, float *scratch, const void *dout,
                             const void *qkv, const void *att, int B, int T, int NH, int hs,
                             const BackendDropout *d) {
    if (B <= 0 || T <= 0 || NH <= 0) return;
    if (d && !d->threshold) d = NULL;
    int C = NH * hs, C3 = 3 * C;
    long long TT = (long long)T * T;
    float scale = 1.0f / sqrtf((float)hs);
    BackendDType a = be->act;
    size_t es = backend_dtype_size(a);
    void *ds_all = scratch;  // (B, NH, T, T) of type a
    if (d) cuda_attention_probs_dropout(be, ds_all, att, d, B, NH, T, NULL);  // dv reads these
    for (int b = 0; b < B; b++) {
        const void *v = elem_at(qkv, (size_t)b * T * C3 + 2 * C, es);
        const void *dy = elem_at(dout, (size_t)b * T * C, es);
        const void *p = elem_at(d ? (const void *)ds_all : att, (size_t)b * NH * TT, es);
        void *da = elem_at(ds_all, (size_t)b * NH * TT, es);
        // dv (T, hs) = att^T (T, T) @ dout_h (dropped att with d);  datt (T, T) = dout_h @ v^T
        cuda_gemm(be, 1, 0, T, hs, T, 1.0f, p, T, TT, dy, C, hs, 0.0f,
                  elem_at(dqkv, (size_t)b * T * C3 + 2 * C, es), C3, hs, NH, NULL, a, a);
        cuda_gemm(be, 0, 1, T, T, hs, 1.0f, dy, C, hs, v, C3, hs, 0.0f, da, T, TT, NH, NULL, a, a);
    }
    if (d) cuda_attention_probs_dropout(be, ds_all, ds_all, d, B, NH, T, NULL);  // d(att) through z
    ACT_DISPATCH(a, causal_softmax_backward_t, be, ds_all, att, (long long)B * NH * T, T);
    for (int b = 0; b < B; b++) {
        const void *q = elem_at(qkv, (size_t)b * T * C3, es), *k = elem_at(q, C, es);
        const void *ds = elem_at(ds_all, (size_t)b * NH * TT, es);
        void *dq = elem_at(dqkv, (size_t)b * T * C3, es);
        // dq (T, hs) = scale * dscores @ k;  dk (T, hs) = scale * dscores^T @ q
        cuda_gemm(be, 0, 0, T, hs, T, scale, ds, T, TT, k, C3, hs, 0.0f, dq, C3, hs, NH, NULL, a, a);
        cuda_gemm(be, 1, 0, T, hs, T, scale, ds, T, TT, q, C3, hs, 0.0f, elem_at(dq, C, es), C3,
                  hs, NH, NULL, a, a);
    }
}

// This file's entries of the CUDA ops table (cuda_internal.h).
void cuda_attention_ops(BackendOps *t) {
    t->attention_forward = cuda_attention_forward;
    t->attention_backward = cuda_attention_backward;
}
