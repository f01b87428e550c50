// backend/cuda/cuda_embed_xent.cu: launchers of the vocab-parallel embedding, the position
// embedding and the vocab-parallel cross-entropy pieces (Megatron-LM's VocabParallelEmbedding
// and vocab_parallel_cross_entropy), kernels in embed_xent.cuh. Contracts: backend/backend.h.
#include "backend/cuda/embed_xent.cuh"  // defines: the kernels, EX_THREADS

#define EX_GRID_CAP 8192    // grid-stride kernels: at most this many blocks
#define EX_EMB_RANGES 64    // embedding backward: vocabulary ranges (grid.y) at most

// out (N, C) = table (V_local, C)[tok - vocab_start], zero rows for tokens of other shards.
void cuda_embedding_forward(Backend *be, float *out, const int *tokens, const float *table,
                            int N, int C, int vocab_start, int V_local) {
    if (N <= 0 || C <= 0) return;
    CUDA_LAUNCH(embedding_forward_kernel, cuda_blocks((size_t)N, 1, EX_GRID_CAP), EX_THREADS, 0,
                cuda_stream(be), out, tokens, table, N, C, vocab_start, V_local);
}

// dtable (V_local, C) += dout (N, C) rows of the tokens in the shard; deterministic (each
// element of dtable is owned by one thread, tokens added in order).
void cuda_embedding_backward(Backend *be, float *dtable, const float *dout, const int *tokens,
                             int N, int C, int vocab_start, int V_local) {
    if (N <= 0 || C <= 0 || V_local <= 0) return;
    int rows_per = (V_local + EX_EMB_RANGES - 1) / EX_EMB_RANGES;
    int ranges = (V_local + rows_per - 1) / rows_per;
    dim3 grid((unsigned)((C + EX_THREADS - 1) / EX_THREADS), (unsigned)ranges);
    CUDA_LAUNCH(embedding_backward_kernel, grid, EX_THREADS, 0, cuda_stream(be), dtable, dout,
                tokens, N, C, vocab_start, V_local, rows_per);
}

// out (B, T, C) += wpe (T, C).
void cuda_position_forward(Backend *be, float *out, const float *wpe, int B, int T, int C) {
    size_t tc = (size_t)T * C, n = (size_t)B * tc;
    if (n == 0) return;
    CUDA_LAUNCH(position_forward_kernel, cuda_blocks(n, EX_THREADS, EX_GRID_CAP), EX_THREADS, 0,
                cuda_stream(be), out, wpe, n, tc);
}

// dwpe (T, C) += sum over b of dout (B, T, C), b in order.
void cuda_position_backward(Backend *be, float *dwpe, const float *dout, int B, int T, int C) {
    size_t tc = (size_t)T * C;
    if (tc == 0 || B <= 0) return;
    CUDA_LAUNCH(position_backward_kernel, cuda_blocks(tc, EX_THREADS, EX_GRID_CAP), EX_THREADS,
                0, cuda_stream(be), dwpe, dout, B, tc);
}

// rowmax (N) = max of logits (N, V_local) over columns [0, V_valid); -FLT_MAX when V_valid = 0.
void cuda_xent_max(Backend *be, float *rowmax, const float *logits, int N, int V_local,
                   int V_valid) {
    if (N <= 0) return;
    CUDA_LAUNCH(xent_max_kernel, cuda_blocks((size_t)N, 1, EX_GRID_CAP), EX_THREADS, 0,
                cuda_stream(be), rowmax, logits, N, V_local, V_valid);
}

// sumexp (N) = sum exp(l - rowmax) over valid columns; tgt (N) = l[target - vocab_start] if
// the target is in this shard, else 0.
void cuda_xent_sumexp(Backend *be, float *sumexp, float *tgt, const float *logits,
                      const float *rowmax, const int *targets, int N, int V_local, int V_valid,
                      int vocab_start) {
    if (N <= 0) return;
    CUDA_LAUNCH(xent_sumexp_kernel, cuda_blocks((size_t)N, 1, EX_GRID_CAP), EX_THREADS, 0,
                cuda_stream(be), sumexp, tgt, logits, rowmax, targets, N, V_local, V_valid,
                vocab_start);
}

// loss (N) = log(sumexp) + rowmax - tgt (all three reduced over the TP group already).
void cuda_xent_loss(Backend *be, float *loss, const float *sumexp, const float *rowmax,
                    const float *tgt, int N) {
    if (N <= 0) return;
    CUDA_LAUNCH(xent_loss_kernel, cuda_blocks((size_t)N, EX_THREADS, EX_GRID_CAP), EX_THREADS, 0,
                cuda_stream(be), loss, sumexp, rowmax, tgt, N);
}

// dlogits (N, V_local) = dscale * (softmax - onehot), 0 at padding; dlogits may alias logits.
void cuda_xent_backward(Backend *be, float *dlogits, const float *logits, const float *rowmax,
                        const float *sumexp, const int *targets, const float *dscale,
                        int N, int V_local, int V_valid, int vocab_start) {
    if (N <= 0 || V_local <= 0) return;
    CUDA_LAUNCH(xent_backward_kernel, cuda_blocks((size_t)N, 1, EX_GRID_CAP), EX_THREADS, 0,
                cuda_stream(be), dlogits, logits, rowmax, sumexp, targets, dscale, N, V_local,
                V_valid, vocab_start);
}
