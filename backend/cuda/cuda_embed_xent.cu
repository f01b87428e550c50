// backend/cuda/cuda_embed_xent.cu: launchers of the vocab-parallel embedding, the position
// embedding and the vocab-parallel cross-entropy pieces (Megatron-LM's VocabParallelEmbedding
// and vocab_parallel_cross_entropy), kernels in embed_xent.cuh. Contracts: backend/backend.h.
#include "backend/cuda/embed_xent.cuh"  // defines: the kernels, EX_THREADS

#define EX_GRID_CAP 8192    // grid-stride kernels: at most this many blocks
#define EX_EMB_RANGES 64    // embedding backward: vocabulary ranges (grid.y) at most

template <typename T>
static void embedding_forward_t(Backend *be, void *out, const int *tokens, const void *table,
                                int N, int C, int vocab_start, int V_local) {
    CUDA_LAUNCH(embedding_forward_kernel<T>, cuda_blocks((size_t)N, 1, EX_GRID_CAP), EX_THREADS,
                0, cuda_stream(be), (T *)out, tokens, (const T *)table, N, C, vocab_start, V_local);
}

// out (N, C) = table (V_local, C)[tok - vocab_start], zero rows for tokens of other shards.
void cuda_embedding_forward(Backend *be, void *out, const int *tokens, const void *table,
                            int N, int C, int vocab_start, int V_local) {
    if (N <= 0 || C <= 0) return;
    ACT_DISPATCH(be->act, embedding_forward_t, be, out, tokens, table, N, C, vocab_start, V_local);
}

template <typename T>
static void embedding_backward_t(Backend *be, float *dtable, const void *dout, const int *tokens,
                                 int N, int C, int vocab_start, int V_local) {
    int rows_per = (V_local + EX_EMB_RANGES - 1) / EX_EMB_RANGES;
    int ranges = (V_local + rows_per - 1) / rows_per;
    size_t chunks = ((size_t)C + Vec16<T>::N - 1) / Vec16<T>::N;  // a thread per 16 bytes of dout
    dim3 grid((unsigned)((chunks + EX_THREADS - 1) / EX_THREADS), (unsigned)ranges);
    CUDA_LAUNCH(embedding_backward_kernel<T>, grid, EX_THREADS, 0, cuda_stream(be), dtable,
                (const T *)dout, tokens, N, C, vocab_start, V_local, rows_per);
}

// dtable (V_local, C, fp32) += dout (N, C) rows of the tokens in the shard; deterministic
// (each element of dtable is owned by one thread, tokens added in order).
void cuda_embedding_backward(Backend *be, float *dtable, const void *dout, const int *tokens,
                             int N, int C, int vocab_start, int V_local) {
    if (N <= 0 || C <= 0 || V_local <= 0) return;
    ACT_DISPATCH(be->act, embedding_backward_t, be, dtable, dout, tokens, N, C, vocab_start,
                 V_local);
}

template <typename T>
static void position_forward_t(Backend *be, void *out, const void *wpe, size_t n, size_t tc) {
    size_t chunks = (n + Vec16<T>::N - 1) / Vec16<T>::N;
    CUDA_LAUNCH(position_forward_kernel<T>, cuda_blocks(chunks, EX_THREADS, EX_GRID_CAP), EX_THREADS,
                0, cuda_stream(be), (T *)out, (const T *)wpe, n, tc);
}

template <typename T>
static void position_rows_forward_t(Backend *be, void *out, const void *wpe, const int *pos,
                                    size_t n, int C) {
    CUDA_LAUNCH(position_rows_forward_kernel<T>, cuda_blocks(n, EX_THREADS, EX_GRID_CAP),
                EX_THREADS, 0, cuda_stream(be), (T *)out, (const T *)wpe, pos, n, C);
}

// out (B, T, C) += rows [pos0, pos0 + T) of wpe, or rows pos[r] (pos not NULL).
void cuda_position_forward(Backend *be, void *out, const void *wpe, int B, int T, int C, int pos0,
                           const int *pos) {
    size_t tc = (size_t)T * C, n = (size_t)B * tc;
    if (n == 0) return;
    if (pos) {
        ACT_DISPATCH(be->act, position_rows_forward_t, be, out, wpe, pos, n, C);
        return;
    }
    const void *rows = (const char *)wpe + (size_t)pos0 * C * backend_dtype_size(be->act);
    ACT_DISPATCH(be->act, position_forward_t, be, out, rows, n, tc);
}

template <typename T>
static void position_backward_t(Backend *be, float *dwpe, const void *dout, int B, size_t tc) {
    size_t chunks = (tc + Vec16<T>::N - 1) / Vec16<T>::N;
    CUDA_LAUNCH(position_backward_kernel<T>, cuda_blocks(chunks, EX_THREADS, EX_GRID_CAP),
                EX_THREADS, 0, cuda_stream(be), dwpe, (const T *)dout, B, tc);
}

template <typename T>
static void position_rows_backward_t(Backend *be, float *dwpe, const void *dout, const int *pos,
                                     int N, int C) {
    CUDA_LAUNCH(position_rows_backward_kernel<T>, cuda_blocks((size_t)C, EX_THREADS, EX_GRID_CAP),
                EX_THREADS, 0, cuda_stream(be), dwpe, (const T *)dout, pos, N, C);
}

// rows [pos0, pos0 + T) of dwpe (fp32) += sum over b of dout (B, T, C), b in order; with pos:
// rows pos[r] += dout rows r, in row order.
void cuda_position_backward(Backend *be, float *dwpe, const void *dout, int B, int T, int C,
                            int pos0, const int *pos) {
    size_t tc = (size_t)T * C;
    if (tc == 0 || B <= 0) return;
    if (pos) {
        ACT_DISPATCH(be->act, position_rows_backward_t, be, dwpe, dout, pos, B * T, C);
        return;
    }
    ACT_DISPATCH(be->act, position_backward_t, be, dwpe + (size_t)pos0 * C, dout, B, tc);
}

template <typename T>
static void xent_stats_t(Backend *be, float *rowmax, float *sumexp, float *tgt, const void *logits,
                         const int *targets, int N, int V_local, int V_valid, int vocab_start) {
    CUDA_LAUNCH(xent_stats_kernel<T>, cuda_blocks((size_t)N, 1, EX_GRID_CAP), EX_THREADS, 0,
                cuda_stream(be), rowmax, sumexp, tgt, (const T *)logits, targets, N, V_local,
                V_valid, vocab_start);
}

// rowmax, sumexp (from this shard's max), tgt (N) in one pass (online softmax).
void cuda_xent_stats(Backend *be, float *rowmax, float *sumexp, float *tgt, const void *logits,
                     const int *targets, int N, int V_local, int V_valid, int vocab_start) {
    if (N <= 0) return;
    ACT_DISPATCH(be->act, xent_stats_t, be, rowmax, sumexp, tgt, logits, targets, N, V_local,
                 V_valid, vocab_start);
}

// sumexp (N) *= exp(shard_max - rowmax).
void cuda_xent_rescale(Backend *be, float *sumexp, const float *shard_max, const float *rowmax,
                       int N) {
    if (N <= 0) return;
    CUDA_LAUNCH(xent_rescale_kernel, cuda_blocks((size_t)N, EX_THREADS, EX_GRID_CAP), EX_THREADS,
                0, cuda_stream(be), sumexp, shard_max, rowmax, N);
}

// loss (N) = log(sumexp) + rowmax - tgt (all three reduced over the TP group already).
void cuda_xent_loss(Backend *be, float *loss, const float *sumexp, const float *rowmax,
                    const float *tgt, int N) {
    if (N <= 0) return;
    CUDA_LAUNCH(xent_loss_kernel, cuda_blocks((size_t)N, EX_THREADS, EX_GRID_CAP), EX_THREADS, 0,
                cuda_stream(be), loss, sumexp, rowmax, tgt, N);
}

template <typename T>
static void xent_backward_t(Backend *be, void *dlogits, float *loss, const void *logits,
                            const float *rowmax, const float *sumexp, const float *tgt,
                            const int *targets, const float *dscale, int N, int V_local,
                            int V_valid, int vocab_start) {
    unsigned grid = cuda_blocks((size_t)N, 1, EX_GRID_CAP);
    if (!rowmax) {  // one shard: the statistics in the same pass (xent_classifier_kernel)
        CUDA_LAUNCH(xent_classifier_kernel<T>, grid, EX_THREADS, 0, cuda_stream(be),
                    (T *)dlogits, loss, (const T *)logits, targets, dscale, N, V_local, V_valid,
                    vocab_start);
        return;
    }
    CUDA_LAUNCH(xent_backward_kernel<T>, grid, EX_THREADS, 0, cuda_stream(be), (T *)dlogits, loss,
                (const T *)logits, rowmax, sumexp, tgt, targets, dscale, N, V_local, V_valid,
                vocab_start);
}

// dlogits (N, V_local) = dscale * (softmax - onehot), 0 at padding; dlogits may alias logits.
// loss non-NULL: also loss (N) as cuda_xent_loss, in the same pass (the fused classifier).
// rowmax NULL (one vocabulary shard): the row statistics too, as cuda_xent_stats (one kernel).
void cuda_xent_backward(Backend *be, void *dlogits, float *loss, const void *logits,
                        const float *rowmax, const float *sumexp, const float *tgt,
                        const int *targets, const float *dscale, int N, int V_local,
                        int V_valid, int vocab_start) {
    if (N <= 0) return;
    if (V_local <= 0 && rowmax) {  // no columns: the loss alone
        if (loss) cuda_xent_loss(be, loss, sumexp, rowmax, tgt, N);
        return;
    }
    ACT_DISPATCH(be->act, xent_backward_t, be, dlogits, loss, logits, rowmax, sumexp, tgt,
                 targets, dscale, N, V_local, V_valid, vocab_start);
}

// This file's entries of the CUDA ops table (cuda_internal.h).
void cuda_embed_xent_ops(BackendOps *t) {
    t->embedding_forward = cuda_embedding_forward;
    t->embedding_backward = cuda_embedding_backward;
    t->position_forward = cuda_position_forward;
    t->position_backward = cuda_position_backward;
    t->xent_stats = cuda_xent_stats;
    t->xent_rescale = cuda_xent_rescale;
    t->xent_loss = cuda_xent_loss;
    t->xent_backward = cuda_xent_backward;
}
