// backend/cuda/cuda_moe.cu: launchers of the mixture-of-experts ops (kernels in moe.cuh):
// the router (forward, backward, losses) and the token rows (gather, combine, dot).
// Contracts: backend/backend.h; the CPU reference is backend/cpu/cpu_moe.c
// (tests/backend/cuda/test_cuda_moe.c compares them).
#include "backend/cuda/moe.cuh"  // defines: the kernels, MOE_*_THREADS

#define MOE_GRID_CAP 4096  // grid-stride kernels: at most this many blocks

// Aborts the job on a router descriptor the kernels cannot take (names the numbers).
static void check_router(const char *op, const BackendMoERouter *r) {
    if (r->E < 1 || r->E > BACKEND_MOE_MAX_EXPERTS || r->K < 1 || r->K > r->E)
        core_fatal("%s: E = %d experts, K = %d chosen: need 1 <= K <= E <= %d", op, r->E, r->K,
                   BACKEND_MOE_MAX_EXPERTS);
    if (r->score != BACKEND_MOE_SOFTMAX && r->score != BACKEND_MOE_SIGMOID)
        core_fatal("%s: unknown score function %d", op, (int)r->score);
}

// idx, probs (N, K) from logits (N, E): one warp per row.
void cuda_moe_router_forward(Backend *be, int *idx, float *probs, const float *logits, int N,
                             const BackendMoERouter *r) {
    check_router("moe_router_forward", r);
    if (N <= 0) return;
    CUDA_LAUNCH(moe_router_forward_kernel, cuda_blocks(N, 1, MOE_GRID_CAP), MOE_WARP_THREADS, 0,
                cuda_stream(be), idx, probs, logits, N, *r);
}

// dlogits (N, E) overwritten from dprobs (N, K): one warp per row.
void cuda_moe_router_backward(Backend *be, float *dlogits, const float *dprobs,
                              const float *logits, const int *idx, int N,
                              const BackendMoERouter *r) {
    check_router("moe_router_backward", r);
    if (N <= 0) return;
    CUDA_LAUNCH(moe_router_backward_kernel, cuda_blocks(N, 1, MOE_GRID_CAP), MOE_WARP_THREADS, 0,
                cuda_stream(be), dlogits, dprobs, logits, idx, N, *r);
}

// loss (2) written, dlogits += the gradient: per-block partials (contiguous rows), then one
// thread adds them in block order.
void cuda_moe_router_loss(Backend *be, float *dlogits, float *loss, const float *logits,
                          const float *coef, const int *row_group, float z_coef,
                          float grad_scale, int N, const BackendMoERouter *r) {
    check_router("moe_router_loss", r);
    CudaState *cs = cuda_state(be);
    unsigned nb = cuda_blocks(N > 0 ? N : 1, 1, MOE_GRID_CAP);  // <= CUDA_PARTIALS / 2
    int per = N > 0 ? (int)((N + nb - 1) / nb) : 0;
    if (N > 0)
        CUDA_LAUNCH(moe_router_loss_kernel, nb, MOE_WARP_THREADS, 0, cs->stream, cs->partials,
                    dlogits, logits, coef, row_group, z_coef, grad_scale, N, per, *r);
    CUDA_LAUNCH(moe_router_loss_final_kernel, 1, MOE_WARP_THREADS, 0, cs->stream, loss,
                (const double *)cs->partials, N > 0 ? (int)nb : 0, z_coef);
}

template <typename T>
static void rows_gather_t(Backend *be, void *out, const void *in, const int *idx,
                          const float *scale, int M, int C) {
    CUDA_LAUNCH(moe_rows_gather_kernel<T>, cuda_blocks((size_t)M * C, MOE_ROWS_THREADS,
                MOE_GRID_CAP), MOE_ROWS_THREADS, 0, cuda_stream(be), (T *)out, (const T *)in, idx,
                scale, M, C);
}

// out (M, C) row i = scale[i] * in[idx[i]].
void cuda_rows_gather(Backend *be, void *out, const void *in, const int *idx, const float *scale,
                      int M, int C) {
    if (M <= 0 || C <= 0) return;
    ACT_DISPATCH(be->act, rows_gather_t, be, out, in, idx, scale, M, C);
}

template <typename T>
static void rows_combine_t(Backend *be, void *out, const void *in, const int *slot,
                           const float *w, int N, int K, int C) {
    CUDA_LAUNCH(moe_rows_combine_kernel<T>, cuda_blocks((size_t)N * C, MOE_ROWS_THREADS,
                MOE_GRID_CAP), MOE_ROWS_THREADS, 0, cuda_stream(be), (T *)out, (const T *)in,
                slot, w, N, K, C);
}

// out (N, C) overwritten: the weighted sum of each token's K slots, in slot order.
void cuda_rows_combine(Backend *be, void *out, const void *in, const int *slot, const float *w,
                       int N, int K, int C) {
    if (N <= 0 || C <= 0) return;
    ACT_DISPATCH(be->act, rows_combine_t, be, out, in, slot, w, N, K, C);
}

template <typename T>
static void rows_dot_t(Backend *be, float *dw, const void *dy, const void *in, const int *slot,
                       int N, int K, int C) {
    CUDA_LAUNCH(moe_rows_dot_kernel<T>, cuda_blocks((size_t)N * K, 1, MOE_GRID_CAP),
                MOE_DOT_THREADS, 0, cuda_stream(be), dw, (const T *)dy, (const T *)in, slot, N, K,
                C);
}

// dw (N K) overwritten: each slot's row dotted with its token's dy row.
void cuda_rows_dot(Backend *be, float *dw, const void *dy, const void *in, const int *slot,
                   int N, int K, int C) {
    if (N <= 0 || K <= 0) return;
    ACT_DISPATCH(be->act, rows_dot_t, be, dw, dy, in, slot, N, K, C);
}

// This file's entries of the CUDA ops table (cuda_internal.h).
void cuda_moe_ops(BackendOps *t) {
    t->moe_router_forward = cuda_moe_router_forward;
    t->moe_router_backward = cuda_moe_router_backward;
    t->moe_router_loss = cuda_moe_router_loss;
    t->rows_gather = cuda_rows_gather;
    t->rows_combine = cuda_rows_combine;
    t->rows_dot = cuda_rows_dot;
}
