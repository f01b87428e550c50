// backend/cuda/cuda_llama.cu: launchers of the Llama-style ops (kernels in llama.cuh):
// RMSNorm (SwiGLU: cuda_act.cu; rope_gqa: cuda_rope.cu). Contracts: backend/backend.h; the CPU reference is
// backend/cpu/cpu_llama.c (tests/backend/cuda/test_cuda_llama.c compares them).
#include "backend/cuda/llama.cuh"  // defines: the kernels, LLAMA_THREADS, LLAMA_WARPS

#define LLAMA_GRID_CAP 4096  // grid-stride kernels: at most this many blocks
#define LLAMA_MIN_ROWS 64     // RMSNorm dweight: rows per chunk at least
#define LLAMA_MAX_CHUNKS 1024

// dweight (C) += sum over rows of dout * inp * rstd: chunks of rows into the backend's
// reduction scratch, then an ordered sum over chunks (one chunk: straight into dweight). The
// chunking depends only on (N, C), so the bits do too.
template <typename T>
static void rmsnorm_dweight(Backend *be, float *dweight, const void *dout, const void *inp,
                            const float *rstd, int N, int C) {
    long long k = (N + LLAMA_MIN_ROWS - 1) / LLAMA_MIN_ROWS, cap = 2LL * CUDA_PARTIALS / C;
    k = k > cap ? cap : k > LLAMA_MAX_CHUNKS ? LLAMA_MAX_CHUNKS : k;
    k = k < 1 ? 1 : k;
    int rows_per = (int)((N + k - 1) / k), nchunk = (N + rows_per - 1) / rows_per;
    dim3 grid((unsigned)((C + WARP - 1) / WARP), (unsigned)nchunk);
    cudaStream_t st = cuda_stream(be);
    float *part = nchunk == 1 ? dweight : (float *)cuda_state(be)->partials;  // (nchunk, C)
    CUDA_LAUNCH(rmsnorm_dweight_partial_kernel<T>, grid, LLAMA_THREADS, 0, st, part,
                (const T *)dout, (const T *)inp, rstd, N, C, rows_per, nchunk == 1);
    if (nchunk > 1)
        CUDA_LAUNCH(rmsnorm_dweight_finish_kernel, cuda_blocks((size_t)C, LLAMA_THREADS, LLAMA_GRID_CAP),
                    LLAMA_THREADS, 0, st, dweight, (const float *)part, nchunk, C);
}

template <typename T>
static void rmsnorm_forward_t(Backend *be, void *out, float *rstd, const void *inp,
                              const void *weight, int N, int C) {
    unsigned blocks = cuda_blocks((size_t)N, LLAMA_WARPS, LLAMA_GRID_CAP);  // warp per row
    CUDA_LAUNCH(rmsnorm_forward_kernel<T>, blocks, LLAMA_THREADS, 0, cuda_stream(be), (T *)out,
                rstd, (const T *)inp, (const T *)weight, N, C);
}

// out (N, C) = inp * rstd * weight; rstd (N) saved when not NULL.
void cuda_rmsnorm_forward(Backend *be, void *out, float *rstd, const void *inp, const void *weight,
                          int N, int C) {
    if (N <= 0 || C <= 0) return;
    ACT_DISPATCH(be->act, rmsnorm_forward_t, be, out, rstd, inp, weight, N, C);
}

template <typename T>
static void rmsnorm_backward_t(Backend *be, void *dinp, float *dweight, const void *dout,
                               const void *inp, const void *weight, const float *rstd, int N,
                               int C) {
    cudaStream_t st = cuda_stream(be);
    if (dinp) {
        unsigned blocks = cuda_blocks((size_t)N, LLAMA_WARPS, LLAMA_GRID_CAP);
        CUDA_LAUNCH(rmsnorm_dinp_kernel<T>, blocks, LLAMA_THREADS, 0, st, (T *)dinp,
                    (const T *)dout, (const T *)inp, (const T *)weight, rstd, N, C);
    }
    if (dweight) rmsnorm_dweight<T>(be, dweight, dout, inp, rstd, N, C);
}

// dinp (N, C) += ...; dweight (C) += ... (each skipped when NULL).
void cuda_rmsnorm_backward(Backend *be, void *dinp, float *dweight, const void *dout,
                           const void *inp, const void *weight, const float *rstd, int N, int C) {
    if (N <= 0 || C <= 0) return;
    ACT_DISPATCH(be->act, rmsnorm_backward_t, be, dinp, dweight, dout, inp, weight, rstd, N, C);
}
